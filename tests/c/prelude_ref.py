#!/usr/bin/env python3
"""prelude_ref.py - the expected values of tests/c/test_prelude.c, from torch.

For every em_* function of src/prelude.h this runs the matching torch op
(eager, CPU) on edge values: NaN, +-Inf, +-0, tiny and huge numbers, int64
limits, negative operands, ties for rounding.  It prints the C tables that
test_prelude.c keeps between its "BEGIN GENERATED" and "END GENERATED" lines;
with --write it replaces that part of the file.  The C test does not need
Python or torch to run.

Float inputs are run through a tensor long enough (64 copies) for ATen's
vectorized loop, which is what real tensors meet, and one at a time through
its scalar loop.  The expected value is the vector loop's, except where
prelude.h follows the scalar loop on purpose (ties of zeros in max, min and
clamp; fmod and friends, where the vector loop's SLEEF fmod gives NaN for
large quotients); a row where the loops disagree says so in a comment.

Each row: op, class, arguments, expected value.  Classes:
  'e'  exact: the same bits (any NaN matches any NaN);
  'u'  within 4 ULP of the compute type (libm and torch's SLEEF differ there),
       exact when the expected value is 0, Inf or NaN;
  'c'  close: |got - want| <= atol + rtol * |want| (1e-5 and 1.3e-5 for
       float, 1e-12 and 1e-9 for double), for formulas where torch's kernel
       is a different approximation (oneDNN's gelu) or cancels.
"""
import math
import re
import sys

import torch
import torch.nn.functional as F

NAN, INF = float("nan"), float("inf")
I64MIN, I64MAX = -2**63, 2**63 - 1
REP = 64  # copies of each input: enough for ATen's vectorized loop


def run(fn, cols, dtype):
    """fn on tensors of the columns; returns (vector-loop, scalar-loop) lists."""
    n = len(cols[0])
    big = fn(*[torch.tensor(c * REP, dtype=dtype) for c in cols])[:n].tolist()
    small = [fn(*[torch.tensor([c[k]], dtype=dtype) for c in cols]).item() for k in range(n)]
    return big, small


def same(x, y):
    if isinstance(x, float) and isinstance(y, float):
        if math.isnan(x) and math.isnan(y):
            return True
        return x == y and math.copysign(1, x) == math.copysign(1, y)
    return x == y


def cfloat(v):
    if isinstance(v, bool):
        v = int(v)
    v = float(v)
    if math.isnan(v):
        return "-NAN" if math.copysign(1, v) < 0 else "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    if v == 0:
        return "-0.0" if math.copysign(1, v) < 0 else "0"
    m = re.match(r"(-?0x[01])\.([0-9a-f]*?)0*p([-+]\d+)$", v.hex())
    return "%s%sp%s" % (m.group(1), "." + m.group(2) if m.group(2) else "", m.group(3))


def cint(v):
    v = int(v)
    if v == I64MIN:
        return "I64MIN"
    if v == I64MAX:
        return "I64MAX"
    return "%dLL" % v


class Table:
    def __init__(self):
        self.f, self.d, self.i = [], [], []

    def add_float(self, ty, op, cls, fn, cols, loop="vector"):
        """Rows for an op on float (ty 'f') or double ('d') inputs; loop says
        which of ATen's loops gives the expected value when they differ."""
        dtype = torch.float32 if ty == "f" else torch.float64
        cols = [[float(torch.tensor(v, dtype=dtype)) for v in c] for c in cols]
        big, small = run(fn, cols, dtype)
        rows = self.f if ty == "f" else self.d
        for k in range(len(cols[0])):
            args = [cols[j][k] for j in range(len(cols))] + [0.0] * (4 - len(cols))
            want, other = (big[k], small[k]) if loop == "vector" else (small[k], big[k])
            note = "" if same(want, other) else "  /* torch's %s loop: %s */" % (
                "scalar" if loop == "vector" else "vector", cfloat(other))
            rows.append('{"%s", \'%s\', %s, %s},%s' % (
                op, cls, ", ".join(cfloat(a) for a in args), cfloat(want), note))

    def add_int(self, op, fn, cols):
        big, small = run(fn, cols, torch.int64)
        for k in range(len(cols[0])):
            args = [cols[j][k] for j in range(len(cols))] + [0] * (4 - len(cols))
            assert same(big[k], small[k]), (op, k)
            self.i.append('{"%s", %s, %s},' % (op, ", ".join(cint(a) for a in args), cint(big[k])))


def pairs(xs, ys=None):
    ys = xs if ys is None else ys
    return [[x for x in xs for _ in ys], [y for _ in xs for y in ys]]


def special(t, ty):
    S = torch.special
    if ty == "f":
        sv = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, -2.5, -3.0, 2.0, 3.5, 10.0, 25.0,
              1e-30, 1e-3, -1e-3, 88.0, 89.0, -89.0, 1e10, -1e10]
    else:
        sv = [NAN, INF, -INF, 0.0, -0.0, 1.0, -0.5, -3.0, 3.5, 25.0, 1e-300, 700.0, 711.0, -1e10]
    for op, fn in [("digamma", torch.digamma), ("trigamma", lambda x: torch.polygamma(1, x)),
                   ("lgamma", torch.lgamma), ("erfcx", S.erfcx), ("i0", torch.i0), ("i0e", S.i0e),
                   ("i1", S.i1), ("i1e", S.i1e), ("k0", S.modified_bessel_k0), ("k1", S.modified_bessel_k1),
                   ("k0e", S.scaled_modified_bessel_k0), ("k1e", S.scaled_modified_bessel_k1),
                   ("sph_j0", S.spherical_bessel_j0)]:
        t.add_float(ty, op, "c", fn, [sv])
    # torch.special.modified_bessel_i0 / i1 are em_i0 / em_i1 too
    t.add_float(ty, "i0", "c", S.modified_bessel_i0, [sv])
    t.add_float(ty, "i1", "c", S.modified_bessel_i1, [sv])
    # eager's float64 J and Y are off by up to 9e-7 above 5 (ember lowers
    # them for float only), its float ones lose their digits at 1e10: compare
    # below those
    bv = [x for x in sv if abs(x) < 1e5] if ty == "f" else [NAN, INF, -INF, 0.0, -0.0, 1.0, -0.5, -3.0, 3.5, 1e-300]
    for op, fn in [("bessel_j0", S.bessel_j0), ("bessel_j1", S.bessel_j1),
                   ("bessel_y0", S.bessel_y0), ("bessel_y1", S.bessel_y1)]:
        t.add_float(ty, op, "c", fn, [bv])
    # Airy Ai: its regions' edges (2.09, -9.5, 103.892); eager's float64 is off
    # just below -2.09 (ember lowers float only), so not there
    av = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.0, 2.1, 8.0, 30.0, 104.0, -9.4, -9.6, -12.0, -50.0]
    if ty == "f":
        av += [-2.2, -3.0]
    t.add_float(ty, "airy_ai", "c", S.airy_ai, [av])
    pv = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.25, 0.75, 0.999, -0.999, 1e-30, 1.5]
    t.add_float(ty, "erfinv", "c", torch.erfinv, [pv])
    t.add_float(ty, "ndtri", "c", S.ndtri, [pv])
    # from order 35 eager's float n! (expf(lgammaf)) is inf: +-inf or NaN
    for n in [2, 3, 4, 35, 40]:
        xs = [x for x in sv if abs(x) < 1e5]
        t.add_float(ty, "polygamma", "c", lambda x, k, n=n: torch.polygamma(n, x), [xs, [float(n)] * len(xs)])
    # s from 2.5e13 on: eager's correction terms overflow (NaN where q^-s underflows)
    zs = pairs([NAN, INF, 1.0, 0.5, 1.5, 2.0, 4.5, 1e13, 3e13], [NAN, INF, -INF, 0.0, 1.0, 0.5, -0.5, -2.0, -2.5, 3.0, 1e-30])
    t.add_float(ty, "zeta", "c", S.zeta, zs)
    # the edges of P and Q, each region (series, continued fraction, small a,
    # Temme's from a = 1e5), a between 10 and the Stirling form's start
    ig = pairs([NAN, INF, 0.0, 1e-8, 0.5, 1.0, 3.0, 12.0, 3e5, -1.0], [NAN, INF, 0.0, 1e-8, 0.9, 2.5, 11.0, 2.9e5, -1.0])
    t.add_float(ty, "igamma", "c", torch.igamma, ig)
    t.add_float(ty, "igammac", "c", torch.igammac, ig)
    polys = [("chebyshev_t", S.chebyshev_polynomial_t), ("chebyshev_u", S.chebyshev_polynomial_u),
             ("chebyshev_v", S.chebyshev_polynomial_v), ("chebyshev_w", S.chebyshev_polynomial_w),
             ("shifted_chebyshev_t", S.shifted_chebyshev_polynomial_t),
             ("shifted_chebyshev_u", S.shifted_chebyshev_polynomial_u),
             ("shifted_chebyshev_v", S.shifted_chebyshev_polynomial_v),
             ("shifted_chebyshev_w", S.shifted_chebyshev_polynomial_w),
             ("hermite_h", S.hermite_polynomial_h), ("hermite_he", S.hermite_polynomial_he),
             ("laguerre_l", S.laguerre_polynomial_l), ("legendre_p", S.legendre_polynomial_p)]
    # degree 600: past Hermite's limits (NaN); the other recurrences run
    # that long in the compute type, where a different rounding (an fma)
    # can move the result: they get 40
    for op, fn in polys:
        big = 600.0 if op.startswith("hermite") else 40.0
        t.add_float(ty, op, "c", fn, pairs([NAN, INF, 0.0, 1.0, -1.0, 0.3, -0.7, 2.5],
                                           [NAN, -1.0, 0.0, 1.0, 4.0, 9.0, big]))


def gen():
    t = Table()
    # ---------------------------------------------------------------- float
    UV = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 10.0, 89.0, -100.0, 1e-3, 1e-40,
          -3e38]
    UV_D = [NAN, INF, -INF, -0.0, 1.0, -2.5, -710.0, -1e-310]  # float64: the same code, fewer rows
    RV = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 0.49999997, -0.0, 0.0, 8388609.0,
          1e10, -7.3, NAN, INF, -INF]
    PV = [NAN, -NAN, INF, -INF, 0.0, -0.0, 1.0, -1e-40, 1e-40]
    BV = [NAN, INF, -INF, 0.0, -0.0, 1.0, -2.5]   # edges: every pair
    BV_D = [NAN, INF, -0.0, -2.5]
    SMALL = [NAN, INF, -0.0, 1.0, -2.5]           # plain IEEE ops: fewer pairs
    # floordiv, remainder, fmod: signs, non-integers, huge quotients
    DV = pairs([7.0, -7.0, 5.5, -5.5, 0.3, 1e38], [2.0, -2.0, 0.1, -0.75, 1e-38])
    DV = [DV[0] + [-4.0, 4.0, -0.0, 1.0, -1.0, 3.0, -3.0],
          DV[1] + [2.0, -2.0, 2.0, 3.0, 3.0, INF, -INF]]
    unary = [
        ("abs", "e", torch.abs), ("neg", "e", torch.neg),
        ("exp", "u", torch.exp), ("exp2", "u", torch.exp2), ("expm1", "u", torch.expm1),
        ("log", "u", torch.log), ("log2", "u", torch.log2), ("log10", "u", torch.log10),
        ("log1p", "u", torch.log1p), ("sqrt", "e", torch.sqrt), ("rsqrt", "e", torch.rsqrt),
        ("sin", "u", torch.sin), ("cos", "u", torch.cos), ("tan", "u", torch.tan),
        ("asin", "u", torch.asin), ("acos", "u", torch.acos), ("atan", "u", torch.atan),
        ("sinh", "u", torch.sinh), ("cosh", "u", torch.cosh), ("tanh", "u", torch.tanh),
        ("asinh", "u", torch.asinh), ("acosh", "u", torch.acosh), ("atanh", "u", torch.atanh),
        ("erf", "u", torch.erf), ("erfc", "u", torch.erfc), ("sigmoid", "u", torch.sigmoid),
        ("recip", "e", torch.reciprocal), ("sign", "e", torch.sign), ("frac", "e", torch.frac),
        ("relu", "e", torch.relu), ("silu", "u", F.silu), ("gelu", "c", F.gelu),
        ("gelu_tanh", "c", lambda x: F.gelu(x, approximate="tanh")),
        ("lnot", "e", lambda x: torch.logical_not(x).double()),
        ("to_bool", "e", lambda x: x.bool().double()),
    ]
    rounding = [("floor", torch.floor), ("ceil", torch.ceil), ("round", torch.round),
                ("trunc", torch.trunc)]
    preds = ["isnan", "isinf", "isposinf", "isneginf", "isfinite", "signbit"]
    binary = [
        ("add", "e", torch.add), ("sub", "e", torch.sub), ("mul", "e", torch.mul),
        ("div", "e", torch.div), ("trunc_div", "e", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
        ("pow", "u", torch.pow), ("max", "e", torch.maximum), ("min", "e", torch.minimum),
        ("fmax", "e", torch.fmax), ("fmin", "e", torch.fmin), ("atan2", "u", torch.atan2),
        ("hypot", "u", torch.hypot), ("copysign", "e", torch.copysign),
        ("sigmoid_bw", "u", torch.ops.aten.sigmoid_backward),
        ("tanh_bw", "u", torch.ops.aten.tanh_backward),
        ("gelu_bw", "c", torch.ops.aten.gelu_backward),
        ("gelu_tanh_bw", "c", lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh")),
    ]
    divs = [("floordiv", torch.floor_divide), ("remainder", torch.remainder), ("fmod", torch.fmod)]
    cmps = [("eq", torch.eq), ("ne", torch.ne), ("lt", torch.lt), ("le", torch.le),
            ("gt", torch.gt), ("ge", torch.ge), ("land", torch.logical_and),
            ("lor", torch.logical_or), ("lxor", torch.logical_xor)]
    plain = ("add", "sub", "mul", "div", "trunc_div", "sigmoid_bw", "tanh_bw",
             "gelu_bw", "gelu_tanh_bw")
    for ty in "fd":
        uv, bv = (UV, BV) if ty == "f" else (UV_D, BV_D)
        for op, cls, fn in unary:
            if ty == "d" and op == "gelu":
                cls = "u"  # float64 takes ATen's formula, not oneDNN's
            # gelu: ATen's formula (torch's loop over small, non-contiguous
            # inputs, and Inductor's), not oneDNN's NaN at +inf
            t.add_float(ty, op, cls, fn, [uv], loop="scalar" if op == "gelu" else "vector")
        for op, fn in rounding:
            t.add_float(ty, op, "e", fn, [RV])
        for op in preds:
            t.add_float(ty, op, "e", lambda x, op=op: getattr(torch, op)(x).double(), [PV])
        for op, cls, fn in binary:
            # em_max / em_min keep the first operand on a tie of zeros, as
            # maximum's scalar loop (and clamp_min / clamp_max) do
            t.add_float(ty, op, cls, fn, pairs(SMALL if op in plain and ty == "f" else bv),
                        "scalar" if op in ("max", "min") else "vector")
        # torch's vector fmod (SLEEF) gives NaN when a / b overflows, e.g.
        # 7 fmod 1e-38; its scalar loop is C's fmod, exact, as em_fmod is.
        for op, fn in divs:
            t.add_float(ty, op, "e", fn, pairs(bv), "scalar")
            t.add_float(ty, op, "e", fn, DV, "scalar")
        for op, fn in cmps:
            t.add_float(ty, op, "e", lambda a, b, fn=fn: fn(a, b).double(),
                        pairs(SMALL if ty == "f" else [NAN, -0.0, 1.0]))
        # ties of max/min and clamp keep the first operand (see prelude.h);
        # the rows above give torch.maximum's vector loop, so add ATen's
        # clamp_min / clamp_max, which agree with em_max / em_min.
        t.add_float(ty, "max", "e", lambda a, b: torch.clamp_min(a, b[0].item()), [[-0.0, 0.0], [0.0, 0.0]])
        t.add_float(ty, "max", "e", lambda a, b: torch.clamp_min(a, b[0].item()), [[0.0, -0.0], [-0.0, -0.0]])
        t.add_float(ty, "min", "e", lambda a, b: torch.clamp_max(a, b[0].item()), [[-0.0, 0.0], [0.0, 0.0]])
        t.add_float(ty, "min", "e", lambda a, b: torch.clamp_max(a, b[0].item()), [[0.0, -0.0], [-0.0, -0.0]])
        # pow.Tensor_Scalar's special exponents
        xs = [NAN, INF, -INF, -0.0, -3.0, 0.25] if ty == "f" else [-INF, -0.0, 0.25]
        for e in [0.0, 1.0, 0.5, -0.5, -1.0, 2.0, 3.0, -2.0, 2.5]:
            t.add_float(ty, "pow_ts", "u", lambda x, y, e=e: torch.pow(x, e), [xs, [e] * len(xs)])
        # activations with parameters
        av = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 30.0, -30.0, 1e-3]
        if ty == "d":
            av = [NAN, INF, -INF, -0.0, 1.0, -2.5, 30.0]
        for s in [0.01, -0.5, 2.0]:
            t.add_float(ty, "leaky_relu", "e", lambda x, y, s=s: F.leaky_relu(x, s), [av, [s] * len(av)])
        for al, sc, isc in [(1.0, 1.0, 1.0), (1.6732632423543772, 1.0507009873554805, 1.0), (0.5, 2.0, 3.0)]:
            t.add_float(ty, "elu", "u", lambda x, *r, p=(al, sc, isc): torch.ops.aten.elu(x, *p),
                        [av, [al] * len(av), [sc] * len(av), [isc] * len(av)])
        for beta, thr in [(1.0, 20.0), (2.0, 5.0), (0.5, 1.0)]:
            t.add_float(ty, "softplus", "c", lambda x, *r, p=(beta, thr): F.softplus(x, *p),
                        [av, [beta] * len(av), [thr] * len(av)])
        for thr, val in [(0.0, 0.0), (1.0, -7.0), (-INF, 3.0)]:
            t.add_float(ty, "threshold", "e", lambda x, *r, p=(thr, val): F.threshold(x, *p),
                        [av, [thr] * len(av), [val] * len(av)])
        fmax = float(torch.finfo(torch.float32 if ty == "f" else torch.float64).max)
        for p in [(0.0, None, None), (1.5, 2.5, -3.5)]:
            pp = (p[0], fmax if p[1] is None else p[1], -fmax if p[2] is None else p[2])
            t.add_float(ty, "nan_to_num", "e", lambda x, *r, p=p: torch.nan_to_num(x, *p),
                        [av, [pp[0]] * len(av), [pp[1]] * len(av), [pp[2]] * len(av)])
        cx = [NAN, 1.0, -1.0, 5.0, 0.5, -0.0, 0.0, 3.0, INF, 2.0, 1.5]
        clo = [0.0, NAN, 0.0, 0.0, 2.0, 0.0, -0.0, -INF, 0.0, 2.0, 1.5]
        chi = [1.0, 1.0, NAN, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 2.0, 1.0]
        # clamp.Tensor's vector loop returns lo on a tie of zeros; its scalar
        # loop and clamp with Scalar bounds (hardtanh) return x, as em_clamp.
        t.add_float(ty, "clamp", "e", torch.clamp, [cx, clo, chi], "scalar")
        la = [0.0, 1.0, -2.0, INF, 1.0, NAN, 3.0, -1e30, 0.0]
        lb = [1.0, 3.0, 2.0, 1.0, INF, 1.0, 3.0, 1e30, 10.0]
        lw = [0.25, 0.75, 0.5, 0.7, 0.3, 0.5, NAN, 0.49, -0.6]
        t.add_float(ty, "lerp", "u", torch.lerp, [la, lb, lw])
        ma = [1.0, -2.0, NAN, INF, 0.5, 1.0, -0.0]
        m1 = [2.0, 3.0, 1.0, -1.0, 0.0, INF, 0.0]
        m2 = [3.0, 0.5, 1.0, 1.0, INF, 0.0, 5.0]
        for v in [1.0, -0.5, 2.0]:
            t.add_float(ty, "addcmul", "u", lambda a, b, c, d, v=v: torch.addcmul(a, b, c, value=v),
                        [ma, m1, m2, [v] * len(ma)])
            t.add_float(ty, "addcdiv", "u", lambda a, b, c, d, v=v: torch.addcdiv(a, b, c, value=v),
                        [ma, m1, m2, [v] * len(ma)])
        tg = [1.0, 2.0, -3.0, 4.0, 5.0, NAN]
        tx = [0.0, -1.0, 0.5, NAN, 1.0, 2.0]
        for thr in [0.0, 1.0]:
            t.add_float(ty, "threshold_bw", "e",
                        lambda g, x, z, thr=thr: torch.ops.aten.threshold_backward(g, x, thr),
                        [tg, tx, [thr] * len(tg)])
        wc = [1.0, 0.0, 1.0, 0.0]
        t.add_float(ty, "where", "e", lambda c, a, b: torch.where(c != 0, a, b),
                    [wc, [NAN, NAN, -0.0, 1.0], [2.0, 3.0, 0.0, INF]])
        cv = [NAN, -NAN, INF, -INF, 1e20, -1e20, 3e9, -3e9, 300.7, -300.7, -1.9, 255.5, 65543.0,
              2.0**63, -2.0**63, 2.0**31, -2.0**31, -0.0]
        t.add_float(ty, "to_int", "e", lambda x: x.to(torch.int64).double(), [cv])
        t.add_float(ty, "to_int32", "e", lambda x: x.to(torch.int32).double(), [cv])
        t.add_float(ty, "to_int16", "e", lambda x: x.to(torch.int16).double(), [cv])
        t.add_float(ty, "to_int8", "e", lambda x: x.to(torch.int8).double(), [cv])
        t.add_float(ty, "to_uint8", "e", lambda x: x.to(torch.uint8).double(), [cv])
        # special functions (src/special.h and prelude.h's libm-based ones):
        # close ('c'), since ember's algorithms are not eager's; their edges
        # (poles, infinities, eager's own overflows) are exact
        special(t, ty)
    # bfloat16 and float16: the bits torch stores for float inputs
    sv = [NAN, -NAN, INF, -INF, 0.0, -0.0, 1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9,
          -(1.0 + 2**-8), 3.4e38, 3.3895314e38, 1e-45, 1e-40, 65504.0, 65520.0, 65519.996,
          2**-24, 3 * 2**-26, 2**-25, 1e-8, 0.1, -7.3]
    for name, dt in [("to_bf16", torch.bfloat16), ("to_f16", torch.float16)]:
        t.add_float("f", name, "e", lambda x, dt=dt: (x.to(dt).view(torch.int16).long() & 0xffff).double(), [sv])
    # -------------------------------------------------------------- integer
    IV = [I64MIN, I64MAX, -7, -1, 0, 1, 2, 7]
    SV = [I64MIN, -7, 0, 7]
    for op, fn in [("abs", torch.abs), ("neg", torch.neg), ("sign", torch.sign),
                   ("relu", torch.relu), ("bnot", torch.bitwise_not),
                   ("lnot", lambda x: torch.logical_not(x).long()), ("signbit", lambda x: torch.signbit(x).long()),
                   ("floor", torch.floor), ("round", torch.round)]:
        t.add_int(op, fn, [IV])
    for op, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)]:
        t.add_int(op, fn, pairs([I64MIN, I64MAX, -1, 0, 2, 7]))
    # Division by 0 raises in torch, and INT64_MIN / -1 kills it with SIGFPE
    # except in floor_divide: those rows are written by hand in the C test.
    nz = pairs(IV, [d for d in IV if d != 0])
    nz = [[a for a, b in zip(*nz) if (a, b) != (I64MIN, -1)],
          [b for a, b in zip(*nz) if (a, b) != (I64MIN, -1)]]
    t.add_int("floordiv", torch.floor_divide, [nz[0] + [I64MIN], nz[1] + [-1]])
    for op, fn in [("div", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
                   ("remainder", torch.remainder), ("fmod", torch.fmod)]:
        t.add_int(op, fn, nz)
    for op, fn in [("max", torch.maximum), ("min", torch.minimum), ("band", torch.bitwise_and),
                   ("bor", torch.bitwise_or), ("bxor", torch.bitwise_xor), ("eq", torch.eq),
                   ("lt", torch.lt), ("ge", torch.ge), ("land", torch.logical_and),
                   ("lor", torch.logical_or), ("lxor", torch.logical_xor)]:
        t.add_int(op, lambda a, b, fn=fn: fn(a, b).long(), pairs(SV))
    pb = [2, -1, -1, 1, 0, 2, 3, -2, 0, 5, -5, 7, 2, -3, I64MIN, 2]
    pe = [-1, -3, -4, -5, -1, 63, 40, 3, 0, 0, 2, 1, 64, I64MIN, 2, 62]
    t.add_int("pow", torch.pow, [pb, pe])
    t.add_int("clamp", torch.clamp, [[5, -5, 3, 0], [0, 0, 4, 1], [3, 3, 2, -1]])
    t.add_int("addcmul", lambda a, b, c, d: torch.addcmul(a, b, c, value=3), [[1, I64MAX, -5], [2, 1, 7], [3, 1, 7], [3, 3, 3]])
    return t


def emit(t):
    out = ["/* BEGIN GENERATED by tests/c/prelude_ref.py (torch %s): do not edit */" % torch.__version__,
           "static const FCase f32_cases[] = {"]
    out += ["  " + r for r in t.f] + ["};", "static const FCase f64_cases[] = {"]
    out += ["  " + r for r in t.d] + ["};", "static const ICase i64_cases[] = {"]
    out += ["  " + r for r in t.i] + ["};", "/* END GENERATED */"]
    return "\n".join(out) + "\n"


def main():
    text = emit(gen())
    if sys.argv[1:] == ["--write"]:
        path = __file__.rsplit("/", 1)[0] + "/test_prelude.c" if "/" in __file__ else "test_prelude.c"
        src = open(path).read()
        new, n = re.subn(r"/\* BEGIN GENERATED.*?/\* END GENERATED \*/\n", lambda m: text, src, flags=re.S)
        if n != 1:
            sys.exit("prelude_ref.py: no GENERATED block in " + path)
        open(path, "w").write(new)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
