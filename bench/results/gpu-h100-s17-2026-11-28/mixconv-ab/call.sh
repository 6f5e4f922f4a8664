set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
python3 -m pip install -q --no-deps --no-build-isolation -e . > $L/pip.log 2>&1
python3 setup.py -q build_ext --inplace > $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
timeout 100 python3 -m pytest -q tests/test_gpu_cuda.py -k "mixconv or tile or walk" -p no:logging > $L/gputests.log 2>&1
echo "gpu tests rc $? at $(( $(date +%s) - t0 )) s"; tail -3 $L/gputests.log
left=$(( 510 - ($(date +%s) - t0) ))
A=.base BUDGET_S=$left bash tools/gpu/ab_trees.sh "$@" 2>&1 | tail -30
