#!/usr/bin/env bash
# One call on the lent GPU machine (it starts bare): build ember from source,
# then, each part under its own time limit so one stuck part cannot eat the
# lease, and each part's log under $OUT:
#   1. the GPU tests (tests/test_gpu_*.py): lowered ops and fused patterns
#      against eager on the GPU, mode="reduce-overhead", the index check, the
#      CUDA prelude against the C one;
#   2. the pytest suites with EMBER_TEST_DEVICE=cuda (every check() on the GPU);
#   3. the memory probe of a compiled BERT (tools/gpu/debug_mem.py --trace);
#   4. ember's compile time with 1 and with many NVRTC threads, cold and warm
#      caches (tools/gpu/compile_time.py).
# The memory-bound kernel set is `ember bench --kernels` (tools/gpu/issue_bench.sh kernels).
# Usage (device tool): bash tools/gpu/session.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ember-gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/gpu.txt"
t0=$(date +%s)
python3 setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$PWD
timeout 150 python3 -m pytest -q -rf -p no:cacheprovider tests/test_gpu_cuda.py tests/test_gpu_prelude.py \
  > "$OUT/pytest_gpu.log" 2>&1
echo "GPU tests: rc $? after $(( $(date +%s) - t0 )) s"; grep -E "^FAILED|^ERROR|passed|failed" "$OUT/pytest_gpu.log" | tail -15
EMBER_TEST_DEVICE=cuda timeout 120 python3 -m pytest -q -rf -p no:cacheprovider --timeout 60 \
  tests/test_fusion.py tests/test_semantics.py tests/test_ops.py > "$OUT/pytest_cuda.log" 2>&1
echo "pytest (EMBER_TEST_DEVICE=cuda): rc $? after $(( $(date +%s) - t0 )) s"; tail -5 "$OUT/pytest_cuda.log"
timeout 80 python3 tools/gpu/debug_mem.py --trace > "$OUT/debug_mem.log" 2>&1
echo "debug_mem: rc $? after $(( $(date +%s) - t0 )) s"; grep -v "^   after" "$OUT/debug_mem.log" | tail -14
timeout 150 python3 tools/gpu/compile_time.py > "$OUT/compile_time.log" 2>&1
echo "compile_time: rc $? after $(( $(date +%s) - t0 )) s"; tail -9 "$OUT/compile_time.log"
