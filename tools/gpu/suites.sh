#!/usr/bin/env bash
# On the lent GPU machine: every pytest suite that goes through check() (and
# the models, tiny configs) with EMBER_TEST_DEVICE=cuda, 8 workers, then the
# models under bf16 autocast.  Logs under $OUT.  Builds ember first.
# Usage (device tool): bash tools/gpu/suites.sh [seconds per part]
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/ember-gpu-out}
LIMIT=${1:-240}
mkdir -p "$OUT"
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
SUITES="tests/test_ops.py tests/test_fusion.py tests/test_semantics.py tests/test_training.py tests/test_seeds.py
        tests/test_indexing.py tests/test_structural.py tests/test_pooling.py tests/test_models.py
        tests/test_epilogue.py tests/test_split.py tests/test_gemm_pad.py tests/test_cat_branches.py
        tests/test_layout.py tests/test_special.py tests/test_unaligned.py"
EMBER_TEST_DEVICE=cuda timeout "$LIMIT" python3 -m pytest -q -n 8 -p no:cacheprovider --timeout 200 --tb=short \
  $SUITES > "$OUT/pytest_cuda.log" 2>&1
echo "pytest on cuda: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/pytest_cuda.log" | tail -25
EMBER_TEST_DEVICE=cuda EMBER_TEST_AUTOCAST=bf16 timeout "$LIMIT" python3 -m pytest -q -n 8 -p no:cacheprovider \
  --timeout 200 --tb=short tests/test_models.py > "$OUT/pytest_models_bf16.log" 2>&1
echo "models under bf16 autocast: rc $?"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/pytest_models_bf16.log" | tail -15
