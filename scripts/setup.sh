#!/usr/bin/env bash
# Sets up a fresh checkout: a virtual environment in .venv with torch and the
# test tools (pytest with pytest-xdist; NVRTC, so CUDA code generation is checked without a GPU, and
# build, with which tests/test_packaging.py makes the sdist), and ember built
# from source (editable).  Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch is pinned for CI and this machine (a CPU build); ember itself supports 2.11 to 2.15
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==${EMBER_TORCH_VERSION:-2.13.0}" \
  numpy scipy pytest pytest-xdist setuptools wheel build matplotlib nvidia-cuda-nvrtc "transformers==5.23.0" ${EMBER_EXTRA_PACKAGES:-}
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation -e .
.venv/bin/python -c "import ember, torch; print(f'ember {ember.__version__} ready (torch {torch.__version__})')"
