#!/usr/bin/env bash
# On the lent GPU machine: build ember from source in place and run the GPU
# tests (tests/test_gpu_*.py: ops and fused patterns against eager, row groups, CUDA
# graphs, the index check, the CUDA prelude against the C one).  Extra
# arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 setup.py -q build_ext --inplace 2>&1 | grep -E "error" ; ls ember/*.so
PYTHONPATH=$PWD python3 -m pytest -q -rs -p no:cacheprovider tests/test_gpu_cuda.py tests/test_gpu_rows.py tests/test_gpu_prelude.py "$@"
