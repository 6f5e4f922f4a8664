"""float32 and float64 mm and bmm on the CPU as library steps: the C runtime
calls the BLAS torch loaded (src/blas_cpu.c, sgemm_/dgemm_) itself, with no
aten.mm/bmm fallback handed back to Python.  linear, addmm and matmul reach
it as they decompose; transposed operands go through the BLAS's transpose
flags and leading dims, a bmm's batches through their strides.  Each case
is compared with eager and ember.stats() shows the library calls and no
matmul fallback; a small training step, a graph with symbolic sizes and a
saved-and-loaded program run through the same steps.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEVICE, EAGER, assert_same, compile_fn, ember_stats, reset

pytestmark = pytest.mark.skipif(EAGER or DEVICE != "cpu", reason="ember's CPU library steps")

MM_OPS = ("aten.mm.default", "aten.bmm.default")
DTYPES = (torch.float32, torch.float64)


def _run(fn, *args, dynamic=False):
    reset()
    got = compile_fn(fn, dynamic=dynamic)(*args)
    exp = fn(*args)
    st = ember_stats()
    return got, exp, st


def _no_mm_fallback(st, calls):
    mm_fb = {k: n for k, n in st["fallbacks"].items() if k in MM_OPS}
    assert not mm_fb, f"matmuls handed back to torch: {mm_fb}"
    assert st["library_calls"] == calls, st["library_calls"]


def _tol(dtype):
    return dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_layouts(dtype):
    """A row-major, transposed or sliced (leading dim beyond its columns)
    operand each, with a pointwise op after the product."""
    torch.manual_seed(0)
    a = torch.randn(7, 5, dtype=dtype)
    bt = torch.randn(9, 5, dtype=dtype)       # b = bt.t(): stored transposed
    big = torch.randn(11, 13, dtype=dtype)    # a slice: row stride 13

    def f(a, bt, big):
        x = torch.relu(a @ bt.t()) + 1        # A row-major, B transposed
        y = a.t() @ big[2:9, 3:8]             # A transposed, B a strided slice
        z = big[:5, 1:8].t() @ a.t()          # both transposed, A strided
        return x, y, z

    got, exp, st = _run(f, a, bt, big)
    assert_same(got, exp, **_tol(dtype))
    _no_mm_fallback(st, 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bmm_strided(dtype):
    """bmm over contiguous, transposed and permuted (batch stride not the
    matrix size) operands, and attention's q k^T then p v."""
    torch.manual_seed(0)
    q = torch.randn(2, 6, 3, 4, dtype=dtype)  # [b, s, h, d] permuted to [b, h, s, d]
    k = torch.randn(2, 6, 3, 4, dtype=dtype)
    v = torch.randn(2, 6, 3, 4, dtype=dtype)

    def f(q, k, v):
        qh, kh, vh = (t.permute(0, 2, 1, 3) for t in (q, k, v))
        s = torch.matmul(qh, kh.transpose(-1, -2)) * 0.5
        return torch.matmul(torch.softmax(s, -1), vh)

    got, exp, st = _run(f, q, k, v)
    assert_same(got, exp, **_tol(dtype))
    assert not {k for k in st["fallbacks"] if k in MM_OPS}, st["fallbacks"]
    assert st["library_calls"] >= 2

    c = torch.randn(4, 3, 5, dtype=dtype)
    d = torch.randn(4, 7, 5, dtype=dtype)
    got, exp, st = _run(lambda c, d: torch.bmm(c, d.transpose(1, 2)).sin(), c, d)
    assert_same(got, exp, **_tol(dtype))
    _no_mm_fallback(st, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_addmm(dtype):
    """linear with and without a bias, and addmm with its scaling: the
    product is the library step, the bias add a kernel of ember's."""
    torch.manual_seed(0)
    x = torch.randn(3, 4, 8, dtype=dtype)
    w = torch.randn(6, 8, dtype=dtype)
    b = torch.randn(6, dtype=dtype)
    m = torch.randn(12, 8, dtype=dtype)

    def f(x, w, b, m):
        return F.linear(x, w, b), F.linear(x, w), torch.addmm(b, m, w.t(), beta=0.5, alpha=2.0)

    got, exp, st = _run(f, x, w, b, m)
    assert_same(got, exp, **_tol(dtype))
    _no_mm_fallback(st, 3)


def test_other_dtypes_fall_back():
    """Integer and bfloat16 products stay torch's, with their reason."""
    a = torch.randint(-3, 3, (4, 5))
    got, exp, st = _run(lambda a: a @ a.t(), a)
    assert torch.equal(got, exp)
    assert st["fallbacks"].get("aten.mm.default") == 1 and st["library_calls"] == 0, st


def test_dynamic_sizes():
    """A graph with symbolic sizes: the call's sizes and leading dims are
    evaluated at each call."""
    torch.manual_seed(0)
    w = torch.randn(8, 6)
    fn = compile_fn(lambda x: torch.tanh(x @ w) @ w.t(), dynamic=True)
    reset()
    for n in (3, 5, 9):
        x = torch.randn(n, 8)
        assert_same(fn(x), torch.tanh(x @ w) @ w.t(), atol=1e-5, rtol=1e-5)
    st = ember_stats()
    assert not {k for k in st["fallbacks"] if k in MM_OPS}, st["fallbacks"]
    assert st["compiles"] <= 2 and st["library_calls"] >= 2, st


def test_training_step():
    """Two SGD steps of a small MLP: forward, backward (the weight and input
    gradients are products of transposed operands) and update, against eager."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    ref = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    ref.load_state_dict(model.state_dict())
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    reset()
    step = compile_fn(lambda m, x, y: F.mse_loss(m(x), y))
    opt, ropt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        loss = step(model, x, y)
        loss.backward()
        rloss = F.mse_loss(ref(x), y)
        rloss.backward()
        assert_same(loss, rloss, atol=1e-6, rtol=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            assert_same(p.grad, q.grad, atol=1e-6, rtol=1e-5)
        opt.step(), ropt.step(), opt.zero_grad(), ropt.zero_grad()
    st = ember_stats()
    assert not {k for k in st["fallbacks"] if k in MM_OPS}, st["fallbacks"]
    # forward: 2 products; backward: the input gradient of the second layer and both weight gradients
    assert st["library_calls"] >= 5, st["library_calls"]


def test_saved_program(tmp_path):
    """A program with CPU library steps saved and loaded (program_io.c) runs
    as compiled."""
    ember = pytest.importorskip("ember")
    from ember import _precompile
    if not _precompile.has_protocol():
        pytest.skip(f"torch {torch.__version__} has no precompile protocol")
    torch.manual_seed(0)
    w = torch.randn(8, 6, dtype=torch.float64)

    def f(x, w):
        return torch.relu(x @ w).sum(1) + (x.t() @ x).mean()

    x = torch.randn(5, 8, dtype=torch.float64)
    reset()
    ember.aot_compile(f, (x, w)).save(tmp_path / "f.ember")
    st = ember_stats()
    assert st["library_calls"] == 2 and not {k for k in st["fallbacks"] if k in MM_OPS}, st
    reset()
    g = ember.load(tmp_path / "f.ember")
    x2 = torch.randn(5, 8, dtype=torch.float64)
    assert_same(g(x2, w), f(x2, w), atol=1e-12, rtol=1e-12)
    assert ember_stats()["loaded"] >= 1
