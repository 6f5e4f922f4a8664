set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.log 2>&1
python3 setup.py -q build_ext --inplace > $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
EMBER_TEST_DEVICE=cuda timeout 150 python3 -m pytest -q -x tests/test_gpu_cuda.py tests/test_unaligned.py > $L/gputests.log 2>&1
echo "gpu tests rc $? at $(( $(date +%s) - t0 )) s"; tail -3 $L/gputests.log
EMBER_TEST_DEVICE=cuda timeout 100 python3 -m pytest -q -x tests/test_ops.py -k "bfloat16 or float16 or half" > $L/ops.log 2>&1
echo "ops rc $? at $(( $(date +%s) - t0 )) s"; tail -3 $L/ops.log
left=$(( 570 - ($(date +%s) - t0) ))
A=.base BUDGET_S=$left bash tools/gpu/ab_trees.sh timm:resnet50 timm:efficientnet_b0 timm:convnext_tiny 2>&1 | tail -30
