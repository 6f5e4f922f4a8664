"""PyTorch's special functions as ember pointwise ops (src/special.h and the
preludes): digamma, polygamma, lgamma, erfcx, erfinv, ndtri, i0, i0e, i1,
i1e, the modified Bessel functions I0, I1, K0, K1 (plain and scaled), the
Bessel functions J0, J1, Y0, Y1, the spherical j0, Airy's Ai, the Hurwitz zeta function,
the regularized incomplete gamma functions igamma and igammac, and the
orthogonal polynomials (Chebyshev T U V W and shifted, Hermite H He,
Laguerre L, Legendre P).

Each test compiles a function and compares it with eager (`check` in conftest
also asserts that no op of src/ops.def fell back).  Every op runs in one
graph per dtype (float32, float64, bfloat16 where eager takes it, int64
promoted to float32) on random values and edge values: NaN, +-inf, +-0,
poles and negative integers, arguments where eager's float arithmetic
overflows, huge arguments.  Then non-contiguous inputs, broadcasting and the
Python-number overloads of the binary ops, fusion (a chain of special
functions is one kernel), gradients through the backward graphs (polygamma,
i1, i1e, ...), and float64 Bessel J/Y and Airy Ai, which stay with torch.

Tolerances are the OpInfo checker's (ember/tools/check.py): ember computes the
float functions in double and rounds, so it may differ from eager's float
code by eager's own error.
"""
from __future__ import annotations

import math

import pytest
import torch

from conftest import DEVICE, EAGER, check, compile_fn, ember_stats

S = torch.special
f32, f64, bf16, i64 = torch.float32, torch.float64, torch.bfloat16, torch.int64
DT_ID = {f32: "f32", f64: "f64", bf16: "bf16", i64: "i64"}
TOL = {f32: dict(rtol=1.3e-5, atol=1.5e-5), f64: dict(rtol=1e-7, atol=1e-7),
       bf16: dict(rtol=1.6e-2, atol=1.6e-2), i64: dict(rtol=1.3e-5, atol=1.5e-5)}
NAN, INF = math.nan, math.inf
EDGES = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.25, 0.75, 0.999, 2.0, -2.5, -3.0, 1e-30,
         1e-3, 7.5, 30.0, 89.0, 100.0, 700.0, 1e10, -1e10]
BESSEL_JY = ("bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai")
UNARY = {
    "digamma": torch.digamma, "lgamma": torch.lgamma, "erfcx": S.erfcx, "erfinv": torch.erfinv,
    "ndtri": S.ndtri, "i0": torch.i0, "i0e": S.i0e, "i1": S.i1, "i1e": S.i1e,
    "modified_bessel_i0": S.modified_bessel_i0, "modified_bessel_i1": S.modified_bessel_i1,
    "modified_bessel_k0": S.modified_bessel_k0, "modified_bessel_k1": S.modified_bessel_k1,
    "scaled_modified_bessel_k0": S.scaled_modified_bessel_k0,
    "scaled_modified_bessel_k1": S.scaled_modified_bessel_k1,
    "bessel_j0": S.bessel_j0, "bessel_j1": S.bessel_j1, "bessel_y0": S.bessel_y0, "bessel_y1": S.bessel_y1,
    "spherical_bessel_j0": S.spherical_bessel_j0, "airy_ai": S.airy_ai,
    **{f"polygamma{n}": (lambda x, n=n: torch.polygamma(n, x)) for n in range(5)},
}
POLYS = {
    "chebyshev_t": S.chebyshev_polynomial_t, "chebyshev_u": S.chebyshev_polynomial_u,
    "chebyshev_v": S.chebyshev_polynomial_v, "chebyshev_w": S.chebyshev_polynomial_w,
    "shifted_chebyshev_t": S.shifted_chebyshev_polynomial_t,
    "shifted_chebyshev_u": S.shifted_chebyshev_polynomial_u,
    "shifted_chebyshev_v": S.shifted_chebyshev_polynomial_v,
    "shifted_chebyshev_w": S.shifted_chebyshev_polynomial_w,
    "hermite_h": S.hermite_polynomial_h, "hermite_he": S.hermite_polynomial_he,
    "laguerre_l": S.laguerre_polynomial_l, "legendre_p": S.legendre_polynomial_p,
}
JY_F64 = {f"aten.special_{n}.default" for n in BESSEL_JY}  # float64: eager's are off


def supported(fn, dtype, *extra):
    """Whether eager runs fn on this dtype on the CPU (bfloat16 is refused by some)."""
    try:
        fn(torch.ones(2, dtype=dtype), *extra)
        return True
    except (RuntimeError, NotImplementedError):
        return False


def values(dtype, n=40):
    """Random values (float: normal times 4, int64: -9..9), then the edges
    that the dtype holds (integers: 0, +-1, +-3, 100, 10^10)."""
    if dtype == i64:
        return torch.cat([torch.randint(-9, 10, (n,)), torch.tensor([0, 1, -1, 3, -3, 100, 10**10])])
    return torch.cat([torch.randn(n, dtype=f64) * 4, torch.tensor(EDGES, dtype=f64)]).to(dtype)


def cuda_float_cancels(dtype):
    """On CUDA eager's float polygamma (order 2 and up) sums its zeta series in
    float: at negative x, where the terms cancel, it keeps few digits (5e-4 off
    at -2.5 for order 4); ember sums in double, as eager's CPU code.  Those
    inputs are compared on the CPU only."""
    return DEVICE != "cpu" and dtype != f64


def tame_jy(x):
    """eager's float J, Y and Airy Ai lose their digits at 1e10 (ember's do
    not): those inputs become inf for them, whose value (NaN) both give."""
    return torch.where(x.abs() < 1e5, x, torch.full_like(x, INF)) if x.is_floating_point() else x


# ------------------------------------------------------------------ unary
@pytest.mark.parametrize("dtype", [f32, f64, bf16, i64], ids=DT_ID.get)
def test_unary_values_and_edges(dtype):
    ops = {k: f for k, f in UNARY.items() if supported(f, dtype)}
    assert len(ops) >= (10 if dtype == bf16 else len(UNARY))

    pos = ("polygamma2", "polygamma3", "polygamma4") if cuda_float_cancels(dtype) else ()

    def f(x, xjy):
        return {k: fn(xjy if k in BESSEL_JY else x.abs() if k in pos else x) for k, fn in ops.items()}

    def make():
        x = values(dtype)
        return x, tame_jy(x)

    _, st = check(f, make, allow_fallbacks=JY_F64 if dtype == f64 else (), **TOL[dtype])
    if not EAGER:
        fell = set(st["fallbacks"])
        assert fell == (JY_F64 if dtype == f64 else set()), st["fallbacks"]


@pytest.mark.parametrize("layout", ["t", "step", "offset"])
def test_unary_layouts(layout):
    base = torch.randn(13, 9, dtype=f64) * 3
    if layout == "t":
        x = base.t()
    elif layout == "step":
        x = base[:, ::2]
    else:
        x = base[2:]

    def f(x):
        return (torch.digamma(x), torch.polygamma(2, x), S.i0e(x), torch.erfinv(x / 10), S.ndtri(x.abs() / 10),
                S.modified_bessel_k1(x.abs()), S.erfcx(x), torch.lgamma(x))
    check(f, (x,), **TOL[f64])


def test_polygamma_orders():
    # every order is its own spelling: 0 digamma, 1 trigamma, 2.. the zeta form;
    # at negative integers eager gives NaN, a large finite value (the rounding
    # of sin(pi x)) and +-inf: ember gives the same
    # (order 12 at -2.5 is float64 only: its terms cancel to 1e-11 of their
    # size, and eager's float code, which rounds 12! through expf(lgammaf),
    # lands 2e-5 away from the float64 value, which ember gives)
    x = torch.tensor([-4.0, -3.0, -1.0, -0.0, 0.0, -2.5, 1e-8, 0.5, 3.0, 40.0, 1e6, INF, -INF, NAN])
    for dtype, orders in ((f32, (0, 1, 2, 3, 4, 7)), (f64, (0, 1, 2, 3, 4, 7, 12))):
        pos = cuda_float_cancels(dtype)
        check(lambda x: [torch.polygamma(n, x.abs() if pos and n > 1 else x) for n in orders], (x.to(dtype),),
              **TOL[dtype])
    # eager's float n! is expf(lgammaf(n + 1)), inf from n = 35: +-inf, or NaN
    # where zeta rounds to 0 in float; float64 keeps going to n = 170
    y = torch.tensor([2.0, 30.0, 0.5, -2.5, 1e-30, 3.0])
    for dtype in (f32, f64):
        check(lambda x: [torch.polygamma(n, x) for n in (33, 34, 35, 40)], (y.to(dtype),), **TOL[dtype])


def test_polygamma_negative_order_raises():
    # torch refuses n < 0 while tracing; the compiled function raises as eager does
    x = torch.randn(5)
    with pytest.raises(Exception):
        torch.polygamma(-1, x)
    with pytest.raises(Exception):
        compile_fn(lambda x: torch.polygamma(-1, x))(x)


def test_float64_bessel_jy_airy_fall_back():
    # eager's float64 J0, J1, Y0, Y1 are off by up to 9e-7 just above x = 5,
    # its Airy Ai by up to 3e-6 just below -2.09; ember's are the true values,
    # so float64 runs through torch
    x = torch.linspace(-3, 12, 60, dtype=f64)
    _, st = check(lambda x: (S.bessel_j0(x), S.bessel_j1(x), S.bessel_y0(x), S.bessel_y1(x), S.airy_ai(x)),
                  (x,), allow_fallbacks=JY_F64)
    if not EAGER:
        assert set(st["fallbacks"]) == JY_F64
        # float32 is ember's, with the true value closer than eager's own float
        _, st = check(lambda x: (S.bessel_j0(x), S.bessel_y1(x), S.airy_ai(x)), (x.float(),), **TOL[f32])
        assert not st["fallbacks"]


# ------------------------------------------------------------------ binary
@pytest.mark.parametrize("dtype", [f32, f64, i64], ids=DT_ID.get)
def test_zeta_broadcast_and_scalars(dtype):
    def f(s, q):
        return S.zeta(s, q), S.zeta(s, 2.5), S.zeta(3.0, q), S.zeta(s.t().contiguous().t(), q)

    def make():
        if dtype == i64:
            return torch.randint(0, 9, (6, 1)), torch.randint(-4, 9, (1, 7))
        s = torch.tensor([NAN, INF, 1.0, 0.5, 1.5, 2.0, 4.5, 3.0, 12.0], dtype=f64).reshape(9, 1)
        q = torch.tensor([NAN, INF, -INF, 0.0, 1.0, 0.5, -0.5, -2.0, -2.5, 3.0, 1e-30, 30.0, -40.5],
                         dtype=f64).reshape(1, 13)
        return (torch.cat([s, torch.rand(5, 1, dtype=f64) * 10 + 1]).to(dtype),
                torch.cat([q, torch.randn(1, 6, dtype=f64) * 5], 1).to(dtype))
    check(f, make, **TOL[dtype])


@pytest.mark.parametrize("dtype", [f32, f64, i64], ids=DT_ID.get)
def test_polynomials(dtype):
    # x against degrees n (broadcast), n as a Python number (n_scalar) and x
    # as one (x_scalar); edges: NaN and inf degrees, negative degrees (0),
    # x = +-1 and 0 and 1 (the closed forms), degrees above the trigonometric
    # thresholds, past Hermite's limits (NaN)
    def f(x, n):
        out = {}
        for k, p in POLYS.items():
            out[k] = p(x, n)
            out[k + "_ns"] = p(x, 5)
            out[k + "_xs"] = p(0.3, n)
        return out

    def make():
        if dtype == i64:
            return torch.randint(-9, 10, (8, 1)), torch.randint(-2, 12, (1, 9))
        x = torch.tensor([INF, 0.0, 1.0, -1.0, 0.5, 0.3, -0.7, 0.999, 2.5, -9.0], dtype=f64)
        # (on CUDA a degree of +inf converts to INT64_MAX, and eager's
        # Laguerre and Legendre recurrences at |x| <= 1 never reach NaN to stop:
        # its kernel runs for ever, and so would ember's; the CPU makes it 0)
        n = torch.tensor([NAN, INF if DEVICE == "cpu" else -INF, -1.0, 0.0, 1.0, 2.0, 3.0, 7.0, 9.0, 12.0, 40.0,
                          2.5, 600.0], dtype=f64)
        return (torch.cat([x, torch.rand(4, dtype=f64) * 2 - 1]).reshape(-1, 1).to(dtype),
                n.reshape(1, -1).to(dtype))
    check(f, make, **TOL[dtype])


def test_polynomials_of_nan():
    # x = NaN: eager's U, W, L and P return an uninitialized value from degree
    # 2 on (their loop stops at once and never sets the result); ember's
    # recurrences give NaN, as eager's T, V and Hermite's do
    x = torch.full((4,), NAN)
    n = torch.tensor([0.0, 1.0, 2.0, 5.0])
    got = compile_fn(lambda x, n: [p(x, n) for p in POLYS.values()])(x, n)
    for k, r in zip(POLYS, got):
        torch.testing.assert_close(r, torch.tensor([1.0, NAN, NAN, NAN]), equal_nan=True, msg=k)


@pytest.mark.parametrize("dtype", [f32, f64, bf16], ids=DT_ID.get)
def test_igamma_igammac(dtype):
    # P(a, x) and Q(a, x): eager's edges (negative a or x NaN, a = 0, x = 0,
    # infinities), the series, continued-fraction and small-a regions, and
    # large a (Temme's expansion from 1e5); broadcasting
    if dtype == bf16 and DEVICE != "cpu":
        pytest.skip("eager has no bfloat16 igamma on CUDA to compare with (NotImplementedError)")
    ev = [NAN, INF, 0.0, 1e-30, 1e-8, 0.5, 1.0, 1.1, 2.0, 10.0, 50.0, 250.0, 1e4, 2e5, -1.0]

    def f(a, x, a2, x2):
        return torch.igamma(a, x), torch.igammac(a, x), torch.igamma(a2, x2), torch.igammac(a2, x2)

    def make():
        a = torch.tensor(ev, dtype=f64).reshape(-1, 1)
        x = torch.tensor(ev, dtype=f64).reshape(1, -1)
        a2 = torch.cat([torch.rand(200, dtype=f64) * 30, 10 ** (torch.rand(100, dtype=f64) * 11 - 6)])
        x2 = torch.cat([torch.rand(200, dtype=f64) * 40, a2[200:] * (torch.rand(100, dtype=f64) + 0.5)])
        return tuple(t.to(dtype) for t in (a, x, a2, x2))
    check(f, make, **TOL[dtype])


def test_igamma_large_a_true_values():
    # For a above ~1e6 and x a few sqrt(a) below a, eager's series stops at
    # 2000 terms and falls short (P(1e10, 1e10 - 5e5) = 2.83e-8 for 2.87e-7);
    # ember's Temme expansion gives the true values (50-digit evaluations)
    a = torch.tensor([1e10, 1e10, 4e6], dtype=f64)
    x = torch.tensor([1e10 - 5e5, 1e10 + 5.5e5, 4e6 - 9800], dtype=f64)
    p, q = compile_fn(lambda a, x: (torch.igamma(a, x), torch.igammac(a, x)))(a, x)
    torch.testing.assert_close(p, torch.tensor([2.8653265451088906e-7, 0.99999998099993455, 4.6990358874991672e-7],
                                               dtype=f64), rtol=1e-12, atol=0)
    torch.testing.assert_close(q, torch.tensor([0.99999971346734549, 1.9000065450930215e-8, 0.99999953009641125],
                                               dtype=f64), rtol=1e-12, atol=0)


# ------------------------------------------------------------------ fusion
def test_chain_is_one_kernel():
    def f(x):
        return torch.digamma(x).exp() + 1, torch.lgamma(x) + S.i0e(x) * S.erfcx(x) - torch.polygamma(2, x)
    _, st = check(f, lambda: (torch.randn(37, 5) * 3,), **TOL[f32])
    if not EAGER:
        assert st["kernels"] == 1 and not st["fallbacks"], st


def test_mvlgamma_and_log_ndtr_run_in_ember():
    # their decompositions reach lgamma and special_erfcx
    def f(x):
        return torch.mvlgamma(x.abs() + 3, 4), S.log_ndtr(x), S.multigammaln(x.abs() + 2, 2)
    _, st = check(f, lambda: (torch.randn(29, dtype=f64) * 5,), **TOL[f64])
    if not EAGER:
        assert not st["fallbacks"], st


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("dtype", [f32, f64], ids=DT_ID.get)
def test_gradients(dtype):
    # digamma' = polygamma(1), lgamma' = digamma, polygamma(n)' = polygamma(n+1),
    # i0' = i1, i1' = i0 - i1/x, i0e' and i1e' through each other, erfinv',
    # ndtri', erfcx', zeta's in q, igamma's and igammac's in x (torch has none in a)
    def fn(x, w):
        y = (torch.digamma(x) + torch.lgamma(x) + torch.polygamma(2, x) + torch.i0(x) + S.i1(x)
             + S.i0e(x) + S.i1e(x) + torch.erfinv(x / 20) + S.ndtri(x / 20 + 0.5) + S.erfcx(x)
             + S.zeta(3.0, x) + torch.igamma(torch.full_like(x, 2.5), x) + torch.igammac(x.detach() * 0.5 + 1, x))
        return (y * w).sum()

    x = (torch.rand(23, dtype=f64) * 9 + 0.2).to(dtype).requires_grad_()
    w = torch.randn(23, dtype=dtype)
    x2 = x.detach().clone().requires_grad_()
    cfn = compile_fn(fn)
    fn(x, w).backward()
    cfn(x2, w).backward()
    torch.testing.assert_close(x2.grad, x.grad, **TOL[dtype])
    if not EAGER:
        st = ember_stats()
        from conftest import LOWERED_OPS
        assert not [op for op in st["fallbacks"] if op in LOWERED_OPS], st
