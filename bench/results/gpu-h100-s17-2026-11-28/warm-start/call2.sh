set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L /tmp/prof
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.log 2>&1
python3 setup.py -q build_ext --inplace > $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
el built; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 90 python3 .s17/prof_first.py ember gpt2 --out /tmp/prof 2>$L/prof-ember.err | tail -1; el "prof ember"
tar czf $OUT/prof.tgz -C /tmp prof
timeout 250 python3 -m ember.tools.warm_start --device cuda --backends ember,inductor,aot_eager --scenarios cold,warm,save,load \
  --dtype bf16 --models gpt2 --batch-size 8 --out /tmp/ws-gpt2 > $L/ws-gpt2.log 2>&1
el "ws gpt2 aot rc $?"; tail -4 $L/ws-gpt2.log
tar czf $OUT/ws.tgz -C /tmp ws-gpt2
