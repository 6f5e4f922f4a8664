set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.log 2>&1
python3 setup.py -q build_ext --inplace > $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
el built; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 520 python3 -m ember.tools.warm_start --device cuda --train --backends ember,aot_eager,inductor --scenarios cold,warm,save,load \
  --dtype bf16 --models bert-base --batch-size 8 --out /tmp/ws-bert > $L/ws-bert.log 2>&1
el "ws bert rc $?"; tail -14 $L/ws-bert.log
tar czf $OUT/ws.tgz -C /tmp ws-bert
