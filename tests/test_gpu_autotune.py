"""mode="max-autotune": the GEMM tuning of src/blas.c (option tune_gemms).

Without a GPU: the modes set the option (max-autotune and
max-autotune-no-cudagraphs do, the others do not) and the log line's
wording.  With one (the rest skip without CUDA): Linear stacks (bias and
GELU folded into the cuBLASLt call where ember folds them), batched matmuls
and a plain matmul give eager's results under max-autotune in float32 and
bfloat16; stats()["gemm_tuning"] and the `log` option report each tuned
product (problem, default and chosen algorithm, both times); a second
process with the same cache folder reads every choice from the disk cache
and times nothing; and a product first met while a CUDA graph is being
captured is not tuned there (the capture runs its default), but at its
next call outside a capture.  Each test uses a fresh cache folder and
shapes of its own: the choices live per process in blas.c's plan table.
"""
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytestmark = [pytest.mark.ember_only]

ROOT = Path(__file__).resolve().parents[1]
DEV = "cuda"
f32, bf16 = torch.float32, torch.bfloat16
TOL = {f32: dict(rtol=1e-4, atol=1e-4), bf16: dict(rtol=2e-2, atol=2e-2)}


# ---------------------------------------------------------------- no GPU needed

@pytest.mark.parametrize("mode,tunes", [("max-autotune", True), ("max-autotune-no-cudagraphs", True),
                                        ("reduce-overhead", False), ("default", False), (None, False)])
def test_modes_set_tune_gemms(mode, tunes):
    from ember import backend, _options as opt
    opts = dict(opt.resolve(None), mode=opt.check_mode(mode))
    opts["_tune_gemms"] = opts["mode"] in backend._TUNING_MODES
    copts = backend._options(opts, torch.device("cuda", 0))
    assert (copts.get("tune_gemms") == "1") == tunes
    assert "tune_gemms" not in backend._options(opts, None)  # CPU graphs have no library GEMMs to tune
    assert "tune_gemms" not in opt.USER  # set by the mode, not by users


def test_log_line_wording():
    from ember.backend import _gemm_line
    c = dict(problem="bf16 m=64 n=768 k=768 batch=1", default="cuBLASLt algo 6 tile 18", default_ms=0.010,
             chosen="cuBLAS gemmEx", chosen_ms=0.008, candidates=120, from_disk=False, tune_ms=300.0, note="")
    line = _gemm_line(c)
    assert "bf16 m=64 n=768 k=768" in line and "cuBLASLt algo 6 tile 18 10.0 us" in line
    assert "cuBLAS gemmEx 8.0 us" in line and "1.25x" in line and "120 candidates" in line
    kept = _gemm_line(dict(c, chosen=c["default"], chosen_ms=c["default_ms"], from_disk=True))
    assert "kept" in kept and "disk cache" in kept
    note = _gemm_line(dict(c, chosen=c["default"], note="not tuned: this process's tuning budget (300 s) is spent"))
    assert "budget" in note


def test_binding_lists_and_budget():
    from ember import _ext
    every = _ext.gemm_choices()  # this process's tuned products (none without a GPU)
    assert isinstance(every, list) and _ext.gemm_choices(len(every)) == []
    assert _ext.gemm_choices(-3) == every
    assert _ext.gemm_budget_reset() is None


# ---------------------------------------------------------------- on a GPU

class Mlp(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh")) + x


def _attn(q, k, v):
    s = torch.bmm(q, k.transpose(1, 2)) * 0.125
    return torch.bmm(torch.softmax(s, -1), v)


def _plain(x, w):
    return torch.relu(x @ w)


def _opts(tmp_path, **kw):
    return dict(cache_dir=str(tmp_path / "cache"), **kw)


def _tuned(ember):
    return ember.stats().get("gemm_tuning", [])


@requires_cuda
@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
def test_mlp_matches_eager(ember, tmp_path, dt, mode):
    d, h = (192, 768) if mode == "max-autotune" else (160, 640)  # shapes of its own per test
    m = Mlp(d, h).to(DEV, dt).eval()
    x = torch.randn(4, 50, d, device=DEV, dtype=dt)
    cm = ember.compile(m, mode=mode, options=_opts(tmp_path))
    with torch.no_grad():
        want = m(x)
        for _ in range(3):  # the first call tunes; the second captures (max-autotune); the third replays
            got = cm(x)
            torch.testing.assert_close(got, want, **TOL[dt])
    tuned = _tuned(ember)
    assert len(tuned) >= 2, tuned  # fc1 and fc2
    for c in tuned:
        assert c["candidates"] >= 1 and not c["from_disk"] and c["default_ms"] > 0 and c["chosen_ms"] > 0, c
        assert c["chosen_ms"] <= c["default_ms"], c  # the default is kept unless beaten
        assert not c["note"] or c["note"].startswith("not cached"), c


@requires_cuda
@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
def test_bmm_and_plain_matmul_match_eager(ember, tmp_path, dt):
    q, k, v = (torch.randn(12, 77, 64, device=DEV, dtype=dt) for _ in range(3))
    x, w = torch.randn(333, 256, device=DEV, dtype=dt), torch.randn(256, 320, device=DEV, dtype=dt)
    ca = ember.compile(_attn, mode="max-autotune", options=_opts(tmp_path))
    cp = ember.compile(_plain, mode="max-autotune", options=_opts(tmp_path))
    for _ in range(3):
        torch.testing.assert_close(ca(q, k, v), _attn(q, k, v), **TOL[dt])
        torch.testing.assert_close(cp(x, w), _plain(x, w), **TOL[dt])
    problems = [c["problem"] for c in _tuned(ember)]
    assert any("batch=12" in p for p in problems), problems      # the batched products
    assert any("m=333 n=320 k=256" in p for p in problems), problems


@requires_cuda
def test_log_reports_each_choice(ember, tmp_path):
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    lg = logging.getLogger("ember")
    h, level = Keep(level=logging.INFO), lg.level
    lg.addHandler(h)
    lg.setLevel(logging.INFO)
    try:
        m = Mlp(96, 384).to(DEV, bf16).eval()
        x = torch.randn(8, 33, 96, device=DEV, dtype=bf16)
        cm = ember.compile(m, mode="max-autotune", options=_opts(tmp_path, log=True))
        with torch.no_grad():
            cm(x)
    finally:
        lg.removeHandler(h)
        lg.setLevel(level)
    tuned = [ln for ln in lines if ln.startswith("tuned GEMM")]
    assert len(tuned) >= 2, lines
    for ln in tuned:
        assert ln.startswith("tuned GEMM bf16 m=") and ("k=96" in ln or "k=384" in ln), ln
        assert (" -> " in ln or " kept" in ln) and " us" in ln, ln


_CHILD = textwrap.dedent("""
    import json, sys, torch, torch.nn as nn, torch.nn.functional as F
    import ember
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(224, 896), nn.GELU(approximate="tanh"), nn.Linear(896, 224)).cuda().bfloat16().eval()
    x = torch.randn(6, 40, 224, device="cuda", dtype=torch.bfloat16)
    cm = ember.compile(m, mode="max-autotune", options={"cache_dir": sys.argv[1]})
    with torch.no_grad():
        for _ in range(3):
            got = cm(x)
        err = (got.float() - m(x).float()).abs().max().item()
    print("RESULT " + json.dumps({"err": err, "tuned": ember.stats().get("gemm_tuning", [])}))
""")


def _child(cache):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _CHILD, str(cache)], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@requires_cuda
def test_second_process_reads_the_disk_cache(tmp_path):
    first = _child(tmp_path / "cache")
    second = _child(tmp_path / "cache")
    assert first["err"] < 0.1 and second["err"] < 0.1
    assert len(first["tuned"]) >= 2 and all(not c["from_disk"] and c["candidates"] >= 1 for c in first["tuned"])
    assert not any(c["note"] for c in first["tuned"]), first["tuned"]  # stored
    # the second process times nothing: every choice from disk, the same as the first's
    assert len(second["tuned"]) == len(first["tuned"])
    assert all(c["from_disk"] for c in second["tuned"]), second["tuned"]
    assert sorted((c["problem"], c["chosen"]) for c in second["tuned"]) == \
        sorted((c["problem"], c["chosen"]) for c in first["tuned"])
    assert sum(c["tune_ms"] for c in second["tuned"]) < 0.5 * sum(c["tune_ms"] for c in first["tuned"]) + 50


@requires_cuda
def test_not_tuned_while_capturing(ember, tmp_path):
    """A product first met inside a CUDA-graph capture runs its default there
    and is tuned at its next call outside one.  The new product: the same
    compiled function on an input 4 bytes off 16-byte alignment (the plan's
    key holds the operands' alignment)."""
    w = torch.randn(128, 96, device=DEV)
    f = ember.compile(_plain, mode="max-autotune-no-cudagraphs", options=_opts(tmp_path))
    x = torch.randn(200 * 128 + 4, device=DEV)[4:].view(200, 128)  # offset, but 16-byte aligned
    torch.testing.assert_close(f(x, w), _plain(x, w), **TOL[f32])
    base = len(_tuned(ember))
    assert base >= 1
    buf = torch.randn(200 * 128 + 1, device=DEV)
    xm = buf[1:].view(200, 128)  # 4-byte aligned
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = f(xm, w)
    assert len(_tuned(ember)) == base, _tuned(ember)  # nothing tuned during the capture
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, _plain(xm, w), **TOL[f32])
    got = f(xm, w)  # outside a capture: now it is tuned
    torch.testing.assert_close(got, _plain(xm, w), **TOL[f32])
    after = _tuned(ember)[base:]
    assert len(after) == 1 and after[0]["candidates"] >= 1 and "align=" in after[0]["problem"], after
