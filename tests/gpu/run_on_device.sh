#!/usr/bin/env bash
# On the lent GPU machine: build ember from source into a scratch prefix and
# run the CUDA checks (and the kernel benchmark unless --no-bench).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 setup.py -q build_ext --inplace 2>&1 | grep -E "error" ; ls ember/*.so
PYTHONPATH=$PWD python3 tests/gpu/check_cuda.py "$@"
