set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.log 2>&1
python3 setup.py -q build_ext --inplace > $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
el built; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch; print(torch.__version__)"
EMBER_TEST_DEVICE=cuda timeout 120 python3 -m pytest -q tests/test_decompositions.py -p no:logging > $L/decomp.log 2>&1
el "decomp cuda rc $?"; tail -3 $L/decomp.log
timeout 200 python3 -m pytest -q tests/test_gpu_rows.py tests/test_gpu_cuda.py -p no:logging > $L/gputests.log 2>&1
el "gpu tests rc $?"; tail -3 $L/gputests.log
for b in ember aot_eager; do
  timeout 90 python3 .s17/prof_first.py $b gpt2 --out $OUT/prof 2>$L/prof-$b.err | tail -1; el "prof $b"
done
timeout 200 python3 -m ember.tools.warm_start --device cuda --backends ember,inductor,aot_eager --scenarios cold,warm,save,load \
  --dtype bf16 --models gpt2 --batch-size 8 --out $OUT/ws-gpt2 > $L/ws-gpt2.log 2>&1
el "ws gpt2 rc $?"; tail -12 $L/ws-gpt2.log
