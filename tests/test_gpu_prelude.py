"""The CUDA prelude (src/prelude_cuda.h) against the C prelude (src/prelude_c.h):
tools/gpu/prelude_cuda_check.py runs one generated switch over every em_*
function on edge values through both and compares the results bit for bit
(the storage conversions and block reductions too).  Without a GPU, where
NVRTC is installed, its --compile-only half still runs: the C harness on the
CPU and the CUDA sources through NVRTC."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import have_nvrtc

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu" / "prelude_cuda_check.py"
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
# a source checkout's tool: the sdist carries the tests, not tools/gpu
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="needs the source checkout's tools/gpu")


def _run(tmp_path, *args, timeout):
    env = dict(os.environ, TMPDIR=str(tmp_path))    # its scratch folder lands under tmp_path
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), *args], capture_output=True,
                       text=True, timeout=timeout, cwd=ROOT, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "SUMMARY" in out and "FAIL" not in out, out[-4000:]
    return out


@pytest.mark.skipif(not have_nvrtc(), reason="NVRTC (nvidia-cuda-nvrtc) is not installed")
def test_prelude_cuda_compiles_and_c_harness_runs(tmp_path):
    out = _run(tmp_path, "--compile-only", timeout=300)
    assert "compile-only: ok" in out


@requires_cuda
def test_prelude_cuda_matches_c_prelude_bit_for_bit(tmp_path):
    pytest.importorskip("cupy", reason="the GPU half loads its cubins through cupy")
    _run(tmp_path, timeout=600)
