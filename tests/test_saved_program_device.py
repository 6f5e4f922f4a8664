"""A compiled graph's saved program on its device (ember/_precompile.py's
pack_graph and load_graph; src/program_io.c), without torch's precompile
protocol, so that it runs on every supported torch: one child process
traces a training step (forward, loss and the parameters' gradients, by
make_fx), compiles it with the backend and saves the blob; another loads it
with an empty cache folder, no C compiler and (CUDA) no NVRTC folder, builds
nothing (no pass, no compiler, no NVRTC chunk) and gives eager's results.
On CUDA the program carries NVRTC's images, loaded as they are.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import EAGER, ember_import_root

pytestmark = pytest.mark.skipif(EAGER, reason="ember's own artifacts")

STEP = '''
import sys, torch
sys.path.insert(0, sys.argv[1])
dev = sys.argv[3]

def step(x, w1, b1, w2, b2, target):
    h = torch.nn.functional.gelu(x @ w1.t() + b1)
    y = torch.nn.functional.layer_norm(h @ w2.t() + b2, (4,))
    loss = ((y - target) ** 2).mean()
    return (loss, *torch.autograd.grad(loss, (w1, b1, w2, b2)))

def inputs():
    g = torch.Generator().manual_seed(0)
    a = [torch.randn(8, 16, generator=g), torch.randn(32, 16, generator=g), torch.randn(32, generator=g),
         torch.randn(4, 32, generator=g), torch.randn(4, generator=g), torch.randn(8, 4, generator=g)]
    return [t.to(dev).requires_grad_(i in (1, 2, 3, 4)) for i, t in enumerate(a)]
'''

SAVE = STEP + '''
import json
from torch.fx.experimental.proxy_tensor import make_fx
from ember import _precompile, backend
gm = make_fx(step)(*inputs())
opts = dict(_precompile.loading_options(), _kind="inference")
cg = backend.compile_graph(gm, None, opts)
program = _precompile.program_bytes(cg)
assert program is not None
with open(sys.argv[2] + "/step.blob", "wb") as f:
    f.write(_precompile.pack_graph(gm, opts, None if dev == "cpu" else torch.device(dev), program))
print(json.dumps(backend.get_stats().get("nvrtc", {})))
'''

LOAD = STEP + '''
import json
from ember import _precompile, backend
with open(sys.argv[2] + "/step.blob", "rb") as f:
    blob = f.read()
backend.reset_stats()
fn = _precompile.load_graph(blob)
args = inputs()
want = step(*args)
diff = 0.0
for _ in range(2):
    got = fn([a.detach() for a in args])
    diff = max([diff] + [(a - b).abs().max().item() for a, b in zip(got, want)])
st = backend.get_stats()
print(json.dumps({"diff": diff, "n": len(got), "phases": st["phases_ms"], "nvrtc": st.get("nvrtc", {}),
                  "graphs": st["graphs"]}))
'''


def _run(script: str, tmp, dev: str, **env) -> dict:
    p = subprocess.run([sys.executable, "-c", script, ember_import_root(), str(tmp), dev], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, **env))
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dev", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_a_saved_training_step_loads_and_builds_nothing(tmp_path, dev):
    saved = _run(SAVE, tmp_path, dev, EMBER_CACHE_DIR=str(tmp_path / "cache"))
    if dev == "cuda":
        assert saved.get("chunks", 0) > 0, saved  # NVRTC compiled the kernels in the saving process
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _run(LOAD, tmp_path, dev, EMBER_CACHE_DIR=str(tmp_path / "empty_cache"), EMBER_CC="/nonexistent/cc",
               EMBER_CUDA_LIB_DIRS=str(empty))
    assert res["n"] == 5 and res["diff"] < 1e-4, res
    ph = res["phases"]
    assert ph["load"] > 0 and res["graphs"] == 1, res
    assert all(ph[p] == 0 for p in ("lower", "fuse", "plan", "codegen", "build", "cache_load")), ph
    assert res["nvrtc"].get("chunks", 0) == 0, res
