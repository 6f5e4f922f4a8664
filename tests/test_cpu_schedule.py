"""The C target's loop schedules, checked against eager and in the dump.

The column schedule (codegen_c.c, col_body): a reduction over the outer dims
of a row-major tensor (a bias's or LayerNorm weight's gradient, summed over
the batch) reads a tile of consecutive output points per row instead of
striding down one column at a time.  It also takes the kernels whose
reduction stage stores an element-wise value beside the sums (LayerNorm's
input gradient fused with the next layer's weight gradient), and reads of
per-row statistics (a row's mean and rstd), which are one scalar for the
whole tile.
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from conftest import EAGER, assert_same, compile_fn, ember_stats, reset

pytestmark = pytest.mark.skipif(EAGER, reason="ember's C dumps")


def _kernels(ddir) -> list:
    """(header comment, body) of every kernel of every dumped graph."""
    out = []
    for p in sorted(ddir.rglob("kernels.c")):
        src = p.read_text()
        # the head comment, then the body function (or the entry point calling another kernel's)
        for m in re.finditer(r"/\* kernel \d+: (.*?) \*/\n.*?\n}\n", src, re.S):
            out.append((m.group(1), m.group(0)))
    return out


def _grads(fn, args):
    args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out = fn(*args)
    (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
    return [out.detach()] + [a.grad for a in args if a.requires_grad]


def _ln_gelu(x, w, b, y):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b) * y)


@pytest.mark.parametrize("shape", [(2, 128, 96), (3, 40, 80)])
def test_layer_norm_weight_grads_in_columns(tmp_path, shape):
    """LayerNorm's backward: the weight and bias gradients (sums over the
    rows, reading each row's mean and rstd) run in the column schedule."""
    n = shape[-1]
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(shape, generator=g, requires_grad=True), torch.randn(n, generator=g, requires_grad=True),
            torch.randn(n, generator=g, requires_grad=True), torch.randn(shape, generator=g)]
    ddir = tmp_path / "dump"
    cf = compile_fn(_ln_gelu, options={"debug": True, "debug_dir": str(ddir)})
    for got, exp in zip(_grads(cf, args), _grads(_ln_gelu, args)):
        assert_same(got, exp, atol=1e-4, rtol=1e-4)
    ks = _kernels(ddir)
    over_rows = [h for h, _ in ks if "reducing dims 0 1;" in h]
    assert over_rows, [h for h, _ in ks]
    assert all("columns" in h for h in over_rows), over_rows


def _sum_and_store(x, m, s, w):
    # a column sum of a pointwise value beside a store of another one: one
    # kernel, reading m and s (one per row) as scalars
    t = (x - m) * s
    return (t * w).sum(0), torch.tanh(t) * w


@pytest.mark.parametrize("shape", [(256, 128), (33, 70), (7, 9)])
def test_column_sum_with_elementwise_store(tmp_path, shape):
    r, c = shape
    g = torch.Generator().manual_seed(1)
    args = (torch.randn(shape, generator=g), torch.randn(r, 1, generator=g), torch.rand(r, 1, generator=g) + 0.5,
            torch.randn(shape, generator=g))
    ddir = tmp_path / "dump"
    cf = compile_fn(_sum_and_store, options={"debug": True, "debug_dir": str(ddir)})
    got = cf(*args)
    exp = _sum_and_store(*args)
    for a, b in zip(got, exp):
        assert_same(a, b, atol=1e-5, rtol=1e-5)
    ks = _kernels(ddir)
    assert len(ks) == 1, [h for h, _ in ks]
    head, body = ks[0]
    if c >= 8:   # a tile needs 8 output points at least
        assert "columns" in head, head
        # the store is inside the tile's vectorized loop, at consecutive addresses
        inner = body[body.index("#pragma omp simd"):]
        assert re.search(r"p\d+\[i1 \+ %d\*i0\] = " % c, inner) or re.search(r"p\d+\[%d\*i0 \+ i1\] = " % c, inner), body
    else:
        assert "columns" not in head, head


def test_transposed_read_keeps_rows(tmp_path):
    """A read consecutive along the reduced dim (a transposed operand) keeps
    the row schedule: a tile would stride through it."""
    def fn(x, y):
        return (x * y.t()).sum(0)
    args = (torch.randn(64, 48), torch.randn(48, 64))
    ddir = tmp_path / "dump"
    cf = compile_fn(fn, options={"debug": True, "debug_dir": str(ddir)})
    assert_same(cf(*args), fn(*args), atol=1e-5, rtol=1e-5)
    ks = _kernels(ddir)
    assert len(ks) == 1 and "columns" not in ks[0][0], [h for h, _ in ks]


def _weight_norm(v, g):
    n = v.pow(2).sum((0, 1), keepdim=True).pow(0.5)
    return v * (g / n), n


@pytest.mark.parametrize("shape", [(128, 32, 16), (9, 5, 40), (4, 3, 300)])
def test_weight_norm_in_columns(tmp_path, shape):
    """A norm over the outer dims, then the tensor scaled by it (weight
    normalization): two passes over each tile, the second reading the norm
    that the first stored."""
    g = torch.Generator().manual_seed(2)
    args = (torch.randn(shape, generator=g), torch.randn(1, 1, shape[-1], generator=g))
    ddir = tmp_path / "dump"
    cf = compile_fn(_weight_norm, options={"debug": True, "debug_dir": str(ddir)})
    for a, b in zip(cf(*args), _weight_norm(*args)):
        assert_same(a, b, atol=1e-5, rtol=1e-5)
    ks = _kernels(ddir)
    assert len(ks) == 1 and "columns" in ks[0][0], [h for h, _ in ks]


def _weight_norm_conv_against_eager(tmp_path):
    """wav2vec2's positional convolution (torch's weight_norm parametrization),
    forward and backward compiled with debug dumps, against eager; the dump folder."""
    conv = torch.nn.Conv1d(32, 32, 16, padding=8, groups=4)
    conv = torch.nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)
    x = torch.randn(2, 32, 40)

    def run(m):
        for p in m.parameters():
            p.grad = None
        out = m(x)
        (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
        return [out.detach()] + [p.grad.clone() for p in m.parameters()]

    exp = run(conv)
    ddir = tmp_path / "dump"
    got = run(compile_fn(conv, options={"debug": True, "debug_dir": str(ddir)}))
    for a, b in zip(got, exp):
        assert_same(a, b, atol=1e-4, rtol=1e-4)
    return ddir


def test_weight_norm_training(tmp_path):
    """wav2vec2's positional convolution: torch's weight_norm parametrization,
    forward and backward, against eager."""
    ddir = _weight_norm_conv_against_eager(tmp_path)
    heads = [h for h, _ in _kernels(ddir)]
    assert any("reducing dims 0 1;" in h and "columns" in h for h in heads), heads


def test_weight_norm_backward_in_columns(tmp_path):
    """weight_norm's backward (ember's decomposition): a sum over dims 0 and 1
    that scales the weight's gradient in a later stage of the same kernel.
    The sum keeps its memory (plan.c) so that the kernel runs as columns, not
    one output point at a time down a stride of 16; gradients are eager's."""
    ddir = _weight_norm_conv_against_eager(tmp_path)
    bwd = [h for p in ddir.rglob("*backward*/kernels.c")
           for h in re.findall(r"/\* kernel \d+: (.*?) \*/", p.read_text())]
    over_01 = [h for h in bwd if "reducing dims 0 1;" in h]
    assert over_01 and all("columns" in h for h in over_01), bwd


def _var_and_centered(x):
    # var's mean is a reduction read by a later stage: it keeps its memory
    # (plan.c) for the column schedule; the results must be right either way
    return x.var(0), x - x.mean(0, keepdim=True), (x - x.mean(0)).abs().amax(0)


@pytest.mark.parametrize("shape", [(64, 48), (5, 3, 70)])
def test_dependent_stages_over_outer_dims(shape):
    x = torch.randn(shape) * 2 + 1
    cf = compile_fn(_var_and_centered)
    for a, b in zip(cf(x), _var_and_centered(x)):
        assert_same(a, b, atol=1e-5, rtol=1e-5)


def _gelu_then_two_norms(x, pos, w):
    # whisper's front: gelu of a convolution's output, read transposed, plus
    # positions, then the residual stream's first two LayerNorms
    h = F.gelu(x).transpose(1, 2) + pos
    a = F.layer_norm(h, (h.shape[-1],), w)
    return a, F.layer_norm(h + a, (h.shape[-1],), w)


def test_multi_use_erf_is_computed_once(tmp_path):
    """On the CPU a value whose recomputation evaluates an erf and that is
    read more than once is stored (fuse.c): the gelu is evaluated in one
    kernel, not in every stage of both LayerNorm kernels."""
    g = torch.Generator().manual_seed(3)
    args = (torch.randn(2, 48, 40, generator=g), torch.randn(40, 48, generator=g), torch.randn(48, generator=g))
    ddir = tmp_path / "dump"
    cf = compile_fn(_gelu_then_two_norms, options={"debug": True, "debug_dir": str(ddir)})
    for a, b in zip(cf(*args), _gelu_then_two_norms(*args)):
        assert_same(a, b, atol=1e-5, rtol=1e-5)
    calls = sum(body.count("em_gelu(") for _, body in _kernels(ddir))
    assert calls == 1, [h for h, _ in _kernels(ddir)]


def test_single_use_erf_stays_fused(tmp_path):
    """A gelu read once is still computed in its consumer's kernel."""
    def fn(x, w):
        return F.layer_norm(F.gelu(x), (x.shape[-1],), w)
    args = (torch.randn(6, 50), torch.randn(50))
    ddir = tmp_path / "dump"
    cf = compile_fn(fn, options={"debug": True, "debug_dir": str(ddir)})
    assert_same(cf(*args), fn(*args), atol=1e-5, rtol=1e-5)
    ks = _kernels(ddir)
    assert len(ks) == 1 and "em_gelu(" in ks[0][1], [h for h, _ in ks]


class _Repeated(torch.nn.Module):
    """Eight equal blocks (LayerNorm, linear, GELU, residual): the middle ones' kernels are the same code."""
    def __init__(self, n=32):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.LayerNorm(n), torch.nn.Linear(n, n),
                                                              torch.nn.GELU()) for _ in range(8))

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return x


@pytest.mark.parametrize("dynamic", [False, True])
def test_kernels_of_the_same_code_share_one_body(tmp_path, dynamic):
    """A model's repeated layers make kernels of the same code, which keep one
    body function (codegen_c.c, c_share): the later ones' entry points call
    the first one's on their own tensors (and, with symbolic sizes, the
    call's sizes).  Forward and backward give eager's answers, and each
    body is compiled once: distinct_kernels counts the bodies."""
    torch.manual_seed(0)
    m = _Repeated()
    ddir = tmp_path / "dump"
    reset()
    cm = compile_fn(m, dynamic=dynamic, options={"debug": True, "debug_dir": str(ddir), "cache": False})
    for rows in ((8, 32), (12, 32)) if dynamic else ((8, 32),):
        x = torch.randn(*rows, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        got, exp = cm(x), m(x2)
        assert_same(got, exp, atol=1e-5, rtol=1e-5)
        got.sum().backward()
        g_got = [x.grad] + [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        exp.sum().backward()
        assert_same(g_got, [x2.grad] + [p.grad for p in m.parameters()], atol=1e-4, rtol=1e-4)
        m.zero_grad()
    s = ember_stats()
    assert s["distinct_kernels"] <= s["kernels"] - 8, s
    srcs = [p.read_text() for p in sorted(ddir.rglob("kernels.c"))]
    assert len(srcs) == 2, srcs
    for src in srcs:  # forward, backward: each a later kernel calling an earlier one's body, defined there
        shared = re.findall(r"/\* the code of kernel (\d+) \*/\nEM_BODY void ember_k(\d+)_body\(", src)
        assert shared and all(a == b for a, b in shared), src[-2000:]
        for j, _ in shared:
            assert f"EM_BODY void ember_k{j}_body(void *const *restrict p) {{" in src, j
