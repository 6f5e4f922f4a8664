#!/bin/bash
# call 1: GPU tests of the transposed matmul results, then ember B (this tree) vs A (.base = main) on the models whose graphs change
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
python3 setup.py -q build_ext --inplace > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
mkdir -p $OUT
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_cuda.py > $OUT/gpu_tests.log 2>&1
tail -3 $OUT/gpu_tests.log
echo "tests done at $(( $(date +%s) - T0 )) s"
A=.base BUDGET_S=$(( 575 - ($(date +%s) - T0) )) OUT=$OUT bash tools/gpu/ab_trees.sh "$@"
