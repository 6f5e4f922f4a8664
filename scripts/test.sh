#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every test: the C unit tests under
# AddressSanitizer (make check) and the pytest suites.  Extra arguments go to pytest.
# The suites test the installed ember (here the editable install of setup.sh):
# .venv/bin/pytest, unlike `python -m pytest`, does not put the current
# directory on sys.path, so it never imports the source tree as such.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# NVRTC from the nvidia wheel (where pip installed one) for the C tests' CUDA
# builds; on the loader's path too: under AddressSanitizer NVRTC does not find
# its builtins library beside itself
nv=$(.venv/bin/python -c "from ember.backend import _cuda_dirs; print(_cuda_dirs()[0])" 2>/dev/null || true)
# TEST_JOBS at once (2 on a machine of 2 cores or more, at most 4): make's builds of the C tests,
# and the pytest suites' processes (pytest-xdist), each test file in one of them (--dist
# loadfile: a file's module fixtures are made once); TEST_JOBS=0 runs the suites in pytest's own
# process
jobs=$(nproc); jobs=${TEST_JOBS:-$(( jobs < 2 ? 1 : jobs > 4 ? 4 : jobs ))}
EMBER_CUDA_LIB_DIRS=${EMBER_CUDA_LIB_DIRS:-$nv} LD_LIBRARY_PATH=$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
  make -s -j"$(( jobs > 0 ? jobs : 1 ))" check
.venv/bin/pytest -q -n "$jobs" --dist loadfile "$@"
