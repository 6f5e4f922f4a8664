"""The ops that move elements by index arithmetic (src/remap.c): flip,
slice_scatter, select_scatter, diagonal_scatter, as_strided_scatter; the
factory empty_permuted; and the small pointwise ops of the same branch:
round(decimals), angle, copysign.Scalar, nextafter; plus amax/amin with an
empty result.

Each test compiles a function, runs it on fresh random inputs and compares
with eager (`check` in conftest also asserts that no op of src/ops.def fell
back).  The inputs cover every dtype the op takes (the moves, DTYPES: one of
each element size on the CPU, the others with --runslow), transposed, strided and
offset layouts, odd sizes, size-1 and empty dims, start/end/offset arguments
as torch normalizes them, fusion with producers and consumers (kernel
counts), and training through the ops (their backward graphs hold flips and
scatters of the gradients).  Structural ops copy values, so results are
compared exactly.
"""
from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, EAGER, SLOW_ON_CPU, assert_same, check, compile_fn, ember_stats

f32, f64, bf16, f16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
i64, i32, b8, u8 = torch.int64, torch.int32, torch.bool, torch.uint8
ALL = [f32, f64, bf16, f16, i64, i32, b8]
DT_ID = {f32: "f32", f64: "f64", bf16: "bf16", f16: "f16", i64: "i64", i32: "i32", b8: "bool", u8: "u8"}
LAYOUTS = ["contig", "t", "step", "offset"]
# the dtypes of the ops that only move elements: every one, those of an element size another has
# (float64, float16 and int32 beside int64, bfloat16 and float32) SLOW_ON_CPU
DTYPES = [pytest.param(d, id=DT_ID[d], marks=SLOW_ON_CPU if d in (f64, f16, i32) else ()) for d in ALL]


def rand(shape, dtype=f32):
    shape = tuple(shape)
    if dtype == b8:
        return torch.rand(shape) < 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, dtype=f64) * 3).to(dtype)
    return torch.randint(-50, 50, shape).to(dtype)


def laid(shape, dtype=f32, layout="contig"):
    """A fresh tensor laid out as 'contig', 't' (the last two dims swapped in
    memory), 'step' (every other element of a wider buffer) or 'offset' (a
    slice that does not start at its storage's start)."""
    v = rand(shape, dtype)
    if layout == "contig" or len(shape) < 2:
        return v
    if layout == "t":
        return v.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "step":
        buf = torch.zeros(tuple(shape[:-1]) + (2 * shape[-1] + 1,), dtype=dtype)
        buf[..., 1::2] = v
        return buf[..., 1::2]
    buf = torch.zeros((shape[0] + 3,) + tuple(shape[1:]), dtype=dtype)
    buf[2:2 + shape[0]] = v
    return buf[2:2 + shape[0]]


# ------------------------------------------------------------------ flip
@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_dims_and_dtypes(dtype):
    def f(x):
        return {"0": torch.flip(x, [0]), "last": torch.flip(x, [-1]), "02": torch.flip(x, [0, 2]),
                "all": torch.flip(x, [2, 1, 0]), "none": torch.flip(x, []), "lr": torch.fliplr(x),
                "ud": torch.flipud(x[0])}
    check(f, lambda: (rand((5, 1, 7), dtype),), exact=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_flip_layouts_and_odd_sizes(layout):
    check(lambda x: (torch.flip(x, [1, 2]), torch.flip(x.transpose(0, 2), [0])),
          lambda: (laid((3, 13, 9), f32, layout),), exact=True)


def test_flip_empty_size1_and_zero_dim():
    def f(e, one, s):
        return torch.flip(e, [0, 1]), torch.flip(one, [0, 1, 2]), torch.flip(s, []), torch.flip(e.t(), [1]) + 1
    check(f, lambda: (torch.randn(0, 4), torch.randn(1, 1, 5), torch.tensor(2.5)), exact=True)


def test_flip_fuses_with_producer_and_consumer():
    _, st = check(lambda x, y: torch.flip(torch.sin(x) * y, [0, 1]) + 1,
                  lambda: (torch.randn(17, 31), torch.randn(31)))
    if not EAGER:
        assert st["kernels"] == 1, st


def test_flip_of_reduction_and_of_flip():
    # a flip reading a reduction's result, and two flips that cancel
    check(lambda x: (torch.flip(x.sum(1, keepdim=True) * x, [0]), torch.flip(torch.flip(x, [0]) * 2, [0])),
          lambda: (torch.randn(9, 10),))


def test_flip_training():
    w = torch.randn(7, 5, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    x = torch.randn(3, 7, 5)
    fn = lambda x, w: (torch.flip(x * w, [0, 2]).cumsum(1) * torch.flip(w, [1])).square().sum()
    cfn = compile_fn(fn)
    fn(x, w).backward()
    cfn(x, w2).backward()
    torch.testing.assert_close(w2.grad, w.grad)


# ---------------------------------------------------------- slice_scatter
SLICES = [  # (dim, start, end, step) as the user writes them
    (0, None, None, 1), (1, 1, 5, 2), (1, -4, None, 3), (2, 0, 1, 1), (2, 3, 100, 1),
    (-1, -100, -2, 2), (1, 2, 2, 1), (1, 6, 3, 1), (0, 1, None, 1), (1, None, None, 7),
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_scatter_arguments(dtype):
    shape = (3, 7, 6)

    def f(x, *srcs):
        return {f"{a}": torch.slice_scatter(x, s, *a) for a, s in zip(SLICES, srcs)}

    def make():
        x = rand(shape, dtype)
        return (x,) + tuple(rand(x[(slice(None),) * (a[0] % 3) + (slice(a[1], a[2], a[3]),)].shape, dtype)
                            for a in SLICES)
    check(f, make, exact=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_slice_scatter_layouts(layout):
    check(lambda x, s: (torch.slice_scatter(x, s, 1, 2, None, 3), torch.slice_scatter(x.t(), s.t(), 0, 2, None, 3)),
          lambda: (laid((5, 11), f32, layout), laid((5, 3), f32, layout)), exact=True)


def test_slice_scatter_empty_and_size1():
    def f(x, e, s1, one, src1):
        return (torch.slice_scatter(x, e, 1, 3, 3), torch.slice_scatter(e, e, 0),  # nothing written; empty result
                torch.slice_scatter(x, s1, 0, -1), torch.slice_scatter(one, src1, 1, 0, None, 2))
    check(f, lambda: (torch.randn(4, 6), torch.randn(4, 0), torch.randn(1, 6), torch.randn(1, 5), torch.randn(1, 3)),
          exact=True)


def test_slice_scatter_fuses():
    # the src and the input are computed in the kernel that writes the result
    _, st = check(lambda x, s: torch.slice_scatter(x * 2, s.exp(), 1, 1, None, 2).sum(1),
                  lambda: (torch.randn(8, 9), torch.randn(8, 4)))
    if not EAGER:
        assert st["kernels"] == 1, st


def test_slice_scatter_training():
    # slice's backward is a slice_scatter into zeros; slice_scatter's is a slice
    x = torch.randn(6, 10, requires_grad=True)
    s = torch.randn(6, 3, requires_grad=True)
    x2, s2 = (t.detach().clone().requires_grad_() for t in (x, s))
    fn = lambda x, s: (torch.slice_scatter(x.sin(), s * s, 1, 1, 8, 3)[:, ::2].cos() * x[:, 2:7].sum()).sum()
    cfn = compile_fn(fn)
    fn(x, s).backward()
    cfn(x2, s2).backward()
    torch.testing.assert_close(x2.grad, x.grad)
    torch.testing.assert_close(s2.grad, s.grad)


# ---------------------------------------------------------- select_scatter
@pytest.mark.parametrize("dtype", DTYPES)
def test_select_scatter(dtype):
    def f(x, a, b, c):
        return torch.select_scatter(x, a, 0, 2), torch.select_scatter(x, b, 1, -1), torch.select_scatter(x, c, 2, 0)
    check(f, lambda: (rand((4, 5, 3), dtype), rand((5, 3), dtype), rand((4, 3), dtype), rand((4, 5), dtype)),
          exact=True)


def test_select_scatter_training():
    x = torch.randn(6, 6, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    fn = lambda x: (x[:, 2].sin() * x[3]).sum() + torch.select_scatter(x, x[1] * 2, 0, 4).square().sum()
    cfn = compile_fn(fn)
    fn(x).backward()
    cfn(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad)


# -------------------------------------------------------- diagonal_scatter
DIAGS = [(0, 0, 1), (1, 0, 1), (-2, 0, 1), (2, 1, 0), (0, -1, 0), (-1, 2, 1), (9, 0, 1), (-9, 1, 2)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_diagonal_scatter_arguments(dtype):
    shape = (4, 6, 5)

    def f(x, *srcs):
        return {f"{a}": torch.diagonal_scatter(x, s, *a) for a, s in zip(DIAGS, srcs)}

    def make():
        x = rand(shape, dtype)
        return (x,) + tuple(rand(x.diagonal(*a).shape, dtype) for a in DIAGS)
    check(f, make, exact=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_diagonal_scatter_layouts_and_fusion(layout):
    _, st = check(lambda x, d: torch.diagonal_scatter(x + 1, d * 2, 1) * 3,
                  lambda: (laid((7, 8), f32, layout), torch.randn(7)))
    if not EAGER:
        assert st["kernels"] == 1, st


def test_diagonal_scatter_training():
    x = torch.randn(3, 6, 6, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    fn = lambda x: (torch.diagonal(x, 1, 1, 2).exp().sum()
                    + torch.diagonal_scatter(x, x[:, 0, :5], -1, 1, 2).sin().sum())
    cfn = compile_fn(fn)
    fn(x).backward()
    cfn(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad)


# ------------------------------------------------------ as_strided_scatter
@pytest.mark.parametrize("dtype", [f32, f64, bf16, i64, b8], ids=DT_ID.get)
def test_as_strided_scatter(dtype):
    def f(x, a, b, c, d):
        return {"holes": torch.as_strided_scatter(x, a, (3, 2), (16, 3), 5),
                "perm": torch.as_strided_scatter(x, b, (4, 5), (1, 6)),
                "one": torch.as_strided_scatter(x, c, (1, 1), (9, 9), 29),
                "3d": torch.as_strided_scatter(x, d, (2, 2, 2), (12, 1, 3), 2)}
    check(f, lambda: (rand((6, 8), dtype), rand((3, 2), dtype), rand((4, 5), dtype), rand((1, 1), dtype),
                      rand((2, 2, 2), dtype)), exact=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_as_strided_scatter_layouts(layout):
    # the result keeps the input's layout (and storage offset): the view is
    # taken in that storage, which the default storage_offset starts at
    def f(x, s):
        return (torch.as_strided_scatter(x, s, (2, 3), (4, 1)), torch.as_strided_scatter(x, s, (2, 3), (1, 2), 0),
                torch.as_strided_scatter(x, s, (2, 3), (3, 7), 1))
    check(f, lambda: (laid((4, 7), f32, layout), torch.randn(2, 3)), exact=True)


def test_as_strided_scatter_overlapping_view_falls_back():
    _, st = check(lambda x, s: torch.as_strided_scatter(x, s, (3, 3), (1, 1), 2),
                  lambda: (torch.randn(4, 4), torch.randn(3, 3)), strict=False)
    if not EAGER:
        assert st["fallbacks"] == {"aten.as_strided_scatter.default": 1}, st


def test_as_strided_scatter_training():
    x = torch.randn(4, 5, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    fn = lambda x: torch.as_strided_scatter(x.sin(), x[0, :3].exp().view(3, 1), (3, 1), (5, 1), 2).square().sum()
    cfn = compile_fn(fn)
    fn(x).backward()
    cfn(x2).backward()
    torch.testing.assert_close(x2.grad, x.grad)


# --------------------------------------------------------- empty_permuted
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_permuted(dtype):
    # uninitialized: compare the layout, and values once written
    def f(x):
        e = torch.empty_permuted((3, 4, 5), (2, 0, 1), dtype=dtype)
        return e.copy_(x), e.stride(), torch.empty_permuted((2, 0, 3), (1, 0, 2), dtype=dtype).shape
    got, exp = None, None
    x = rand((3, 4, 5), dtype)
    got = compile_fn(f)(x)
    exp = f(x)
    assert got[1] == exp[1] and got[0].stride() == exp[0].stride() and got[2] == exp[2]
    assert_same(got[0], exp[0], exact=True)
    if not EAGER:
        assert not ember_stats()["fallbacks"], ember_stats()


# ------------------------------------------------------------- pointwise
EDGE = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.125, 0.0049999, 0.005, 1234.5678, -98765.4321, 12345678.9,
        1e-30, 1e30, 3e38, 1e-45, -1e-45, float("inf"), -float("inf"), float("nan")]


def signs(out):
    """The results and the sign bits of their non-NaN floats: exact comparisons
    treat -0.0 and 0.0 as equal, these do not."""
    outs = out.values() if isinstance(out, dict) else out
    return list(outs) + [torch.signbit(o) & ~torch.isnan(o) for o in outs if o.is_floating_point()]


def edge(dtype, n=200):
    return torch.cat([torch.tensor(EDGE, dtype=f64), torch.randn(n, dtype=f64) * 1000,
                      torch.randn(n, dtype=f64)]).to(dtype)


@pytest.mark.parametrize("dtype", [f32, f64, bf16, f16], ids=DT_ID.get)
def test_round_decimals(dtype):
    decs = [0, 1, 2, 3, 5, -1, -2, -3, 10, 40, -40, 310, -310, 400]
    half = dtype in (bf16, f16) and DEVICE != "cpu"  # falls back there (lower.c says why)
    check(lambda x: signs({d: torch.round(x, decimals=d) for d in decs}), lambda: (edge(dtype),), exact=True,
          strict=not half)


@pytest.mark.parametrize("dtype", [f32, f64, bf16, f16, i64, i32, u8, b8], ids=DT_ID.get)
def test_angle_real(dtype):
    if dtype in (bf16, f16) and DEVICE != "cpu":
        pytest.skip("eager has no bfloat16/float16 angle on CUDA")
    make = (lambda: (edge(dtype),)) if dtype.is_floating_point else (lambda: (rand((300,), dtype),))
    check(lambda x: signs((torch.angle(x), torch.angle(x.flip(0)) * 2)), make, exact=True)


@pytest.mark.parametrize("dtype", [f32, f64, bf16, f16, i64, b8], ids=DT_ID.get)
def test_copysign_scalar(dtype):
    make = (lambda: (edge(dtype),)) if dtype.is_floating_point else (lambda: (rand((300,), dtype),))
    check(lambda x: signs((torch.copysign(x, -1.5), torch.copysign(x, 0.0), torch.copysign(x, -0.0),
                           torch.copysign(x, 2), torch.copysign(x, float("nan")))), make, exact=True)


@pytest.mark.parametrize("dtype", [f32, f64, bf16, f16], ids=DT_ID.get)
def test_nextafter(dtype):
    z = [0.0, -0.0, 0.0, -0.0, 1e-45, -1e-45, 1.0, 1.0, -1.0, float("inf"), -float("inf"), 65504.0, 3.3e38, 2.0,
         float("nan"), 1.0]
    w = [-0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 1.0, float("inf"), 5.0, 0.0, 0.0, float("inf"), float("inf"), -3.0,
         1.0, float("nan")]

    def make():
        a = edge(dtype)
        return (a, a.flip(0) * 0.5, torch.tensor(z, dtype=dtype), torch.tensor(w, dtype=dtype))
    check(lambda a, b, z, w: signs((torch.nextafter(a, b), torch.nextafter(z, w), torch.nextafter(a, a))), make,
          exact=True)


# --------------------------------------------------------- amax/amin empty
def test_amax_amin_with_empty_result():
    def f(x):
        return torch.amax(x, 0), torch.amin(x, 2, keepdim=True), torch.aminmax(x, dim=0), torch.argmax(x, 2)
    check(f, lambda: (torch.randn(5, 0, 4),), exact=True)


def test_negative_zero_scalars():
    # a -0.0 scalar stays -0.0 in the generated code (C reads "-0" as the integer 0)
    def f(x):
        return signs((x * -0.0, torch.full_like(x, -0.0), torch.nn.functional.pad(x, (1, 1), value=-0.0),
                      torch.copysign(x, -0.0)))
    check(f, lambda: (edge(f32),), exact=True)


@pytest.mark.parametrize("dtype", [f32, bf16, i64, b8], ids=DT_ID.get)
def test_narrow_copy(dtype):
    # torch's decomposition: narrow (a view) and a contiguous clone
    check(lambda x: (torch.narrow_copy(x, 1, 2, 3), torch.narrow_copy(x.t(), 0, -4, 2) * 1),
          lambda: (laid((4, 7), dtype, "t"),), exact=True)


def test_scatter_extreme_arguments():
    # steps and offsets far beyond the sizes (no overflow in the normalization)
    def f(x, s, e):
        return (torch.slice_scatter(x, s, 1, 1, None, 2**62), torch.slice_scatter(x, x[:, -2**62:] * 2, 1, -2**62),
                torch.diagonal_scatter(x, e, 2**40), torch.diagonal_scatter(x, e, -2**40))
    check(f, lambda: (torch.randn(4, 6), torch.randn(4, 1), torch.randn(0)), exact=True)
