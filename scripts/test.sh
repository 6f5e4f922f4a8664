#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs every test: the C unit tests under
# AddressSanitizer (make check) and the pytest suites.  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make -s check
.venv/bin/python -m pytest -q "$@"
