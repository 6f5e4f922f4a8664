"""Every op family of src/ops.def, compiled and compared with eager.

Each test compiles one small function (several ops batched into one graph
where that keeps failures readable: results are returned in a dict keyed by
the op, so an assertion names the op), runs it twice on fresh random inputs
and compares with eager: default tolerances for fp32/fp64, 2e-2 for bf16,
exact for ints, bools and casts; NaN equals NaN.  In ember mode the `check`
helper (conftest) also asserts that no op listed in src/ops.def ran as a
fallback and that no graph fell back whole.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEVICE, EAGER, SLOW_ON_CPU, assert_same, check, compile_fn, ember_stats

f32, f64, bf16, i64, b8 = torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool
FLOATS = [f32, f64, bf16]
ALL5 = [f32, f64, bf16, i64, b8]
DT_ID = {f32: "f32", f64: "f64", bf16: "bf16", i64: "i64", b8: "bool"}


# ------------------------------------------------------------------ inputs
def _values(shape, dtype, dom):
    """Contiguous random values of a domain ('any', 'pos', 'unit', 'ge1',
    'nonzero', 'small', 'near1', 'wide')."""
    shape = tuple(shape)
    if dtype == b8:
        if dom in ("pos", "ge1", "nonzero", "near1"):
            return torch.ones(shape, dtype=b8)
        return torch.randint(0, 2, shape).bool()
    if dtype.is_floating_point:
        r = torch.rand(shape, dtype=f64)
        n = torch.randn(shape, dtype=f64)
        v = {
            "any": n * 2,
            "pos": r * 4 + 0.05,
            "unit": r * 1.9 - 0.95,
            "ge1": 1 + r * 4,
            "nonzero": (r + 0.25) * torch.where(n < 0, -1.0, 1.0),
            "small": n * 0.5,
            "near1": 0.75 + r * 0.5,
            "wide": n * 6,
            "pow2": torch.exp2(torch.randint(-2, 3, shape).to(f64)) * torch.where(n < 0, -1.0, 1.0),
        }[dom]
        return v.to(dtype)
    lo, hi = {
        "any": (-9, 10), "pos": (1, 10), "unit": (-1, 2), "ge1": (1, 10), "nonzero": (1, 6),
        "small": (-3, 4), "near1": (-1, 2), "wide": (-300, 301), "pow2": (1, 3),
    }[dom]
    v = torch.randint(lo, hi, shape, dtype=dtype)
    if dom == "pow2":
        v = 2 ** (v - 1)
    if dom in ("nonzero", "pow2"):
        v = v * torch.where(torch.rand(shape) < 0.5, -1, 1)
    return v


def gen(shape, dtype=f32, dom="any", layout="contig"):
    """A fresh tensor of `shape` with the values of `dom`, laid out as
    'contig', 't' (last two dims transposed in memory), 'step' (every other
    element of a wider buffer), or 'offset' (a slice not at storage start)."""
    shape = tuple(shape)
    v = _values(shape, dtype, dom)
    if layout == "contig" or len(shape) == 0:
        return v
    if layout == "t":
        assert len(shape) >= 2
        return v.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "step":
        buf = torch.zeros(shape[:-1] + (2 * shape[-1] + 1,), dtype=dtype)
        out = buf[..., 1::2]
        out.copy_(v)
        return out
    if layout == "offset":
        buf = torch.zeros((shape[0] + 3,) + shape[1:], dtype=dtype)
        out = buf[2:2 + shape[0]]
        out.copy_(v)
        return out
    raise ValueError(layout)


def eager_ok(fn, *args):
    """True when eager PyTorch accepts fn(*args) (used to pick the dtypes an op allows)."""
    try:
        fn(*args)
        return True
    except Exception:
        return False


# ------------------------------------------------------------ unary pointwise
UNARY = {
    # name: (fn, domain)
    "abs": (torch.abs, "any"),
    "neg": (torch.neg, "any"),
    "exp": (torch.exp, "any"),
    "exp2": (torch.exp2, "any"),
    "expm1": (torch.expm1, "small"),
    "log": (torch.log, "pos"),
    "log2": (torch.log2, "pos"),
    "log10": (torch.log10, "pos"),
    "log1p": (torch.log1p, "pos"),
    "sqrt": (torch.sqrt, "pos"),
    "rsqrt": (torch.rsqrt, "pos"),
    "sin": (torch.sin, "any"),
    "cos": (torch.cos, "any"),
    "tan": (torch.tan, "unit"),
    "asin": (torch.asin, "unit"),
    "acos": (torch.acos, "unit"),
    "atan": (torch.atan, "any"),
    "sinh": (torch.sinh, "any"),
    "cosh": (torch.cosh, "any"),
    "tanh": (torch.tanh, "any"),
    "asinh": (torch.asinh, "any"),
    "acosh": (torch.acosh, "ge1"),
    "atanh": (torch.atanh, "unit"),
    "erf": (torch.erf, "any"),
    "erfc": (torch.erfc, "any"),
    "sigmoid": (torch.sigmoid, "wide"),
    "reciprocal": (torch.reciprocal, "nonzero"),
    "sign": (torch.sign, "any"),
    "sgn": (torch.sgn, "any"),
    "floor": (torch.floor, "wide"),
    "ceil": (torch.ceil, "wide"),
    "round": (torch.round, "wide"),
    "trunc": (torch.trunc, "wide"),
    "frac": (torch.frac, "wide"),
    "relu": (torch.relu, "any"),
    "silu": (F.silu, "wide"),
    "logical_not": (torch.logical_not, "any"),
    "bitwise_not": (torch.bitwise_not, "any"),
    "isnan": (torch.isnan, "any"),
    "isinf": (torch.isinf, "any"),
    "isposinf": (torch.isposinf, "any"),
    "isneginf": (torch.isneginf, "any"),
    "isfinite": (torch.isfinite, "any"),
    "signbit": (torch.signbit, "any"),
    "clone": (lambda x: x.clone() + 0 if x.dtype != b8 else x.clone(), "any"),
    "nan_to_num": (lambda x: torch.nan_to_num(x, nan=1.5, posinf=100.0, neginf=-100.0), "any"),
    "nan_to_num_default": (torch.nan_to_num, "any"),
    "square": (torch.square, "any"),
}


def _unary_cases():
    cases = []
    for name, (fn, dom) in UNARY.items():
        for dt in ALL5:
            if eager_ok(fn, gen((2, 3), dt, dom)):
                cases.append(pytest.param(name, dt, id=f"{name}-{DT_ID[dt]}",
                                          marks=pytest.mark.slow))
    return cases


@pytest.mark.parametrize("name,dtype", _unary_cases())
def test_unary(name, dtype):
    """One op, one dtype (--runslow); by default the ops run batched per dtype."""
    op, dom = UNARY[name]

    def fn(x, xt, xs, x0):
        return {"contig": op(x), "transposed": op(xt), "step": op(xs), "0d": op(x0)}

    check(fn, lambda: (gen((7, 13), dtype, dom), gen((7, 13), dtype, dom, "t"),
                       gen((3, 9), dtype, dom, "step"), gen((), dtype, dom)))


@pytest.mark.parametrize("dtype", ALL5, ids=DT_ID.get)
def test_unary_all_ops_per_dtype(dtype):
    """Every unary op the dtype allows, in one graph, on a contiguous, a
    transposed, a strided (step 2) and a 0-d input (test_unary, --runslow,
    runs each op alone)."""
    ops = [(n, f, d) for n, (f, d) in UNARY.items() if eager_ok(f, gen((2, 3), dtype, d))]
    doms = sorted({d for _, _, d in ops})

    def fn(xs, xts, xss, x0s):
        out = {}
        for n, f, d in ops:
            out[n] = f(xs[d])
            out[n + "_t"] = f(xts[d])
            out[n + "_step"] = f(xss[d])
            out[n + "_0d"] = f(x0s[d])
        return out

    check(fn, lambda: ({d: gen((7, 13), dtype, d) for d in doms},
                       {d: gen((7, 13), dtype, d, "t") for d in doms},
                       {d: gen((3, 9), dtype, d, "step") for d in doms},
                       {d: gen((), dtype, d) for d in doms}))


SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, -1.5,
            1.0, -1.0, 0.999, -0.999, 1e-30, -1e-30, 1e30, -1e30, 88.8, -88.8, 710.0, -7.3,
            3.0, 100.25, 2.0**-140, -(2.0**-140)]


def specials(dtype, rows=1):
    t = torch.tensor(SPECIALS, dtype=f64)
    return t.to(dtype).repeat(rows, 1)


@pytest.mark.parametrize("dtype", FLOATS, ids=DT_ID.get)
def test_unary_special_values(dtype):
    """NaN, +-Inf, +-0, exact halves (round-half-even), tiny and huge values:
    every float unary op at once, compared with eager (NaN == NaN)."""
    ops = [(n, f) for n, (f, _) in UNARY.items()
           if n not in OVERFLOW_BAND_OPS and eager_ok(f, specials(dtype))]

    def fn(x):
        return {n: f(x) for n, f in ops}

    check(fn, lambda: (specials(dtype, 2),))


# sinh/cosh of |x| between exp's overflow and the true result's: torch's
# vectorized CPU loop computes them through exp and gives inf, its scalar tail
# gives the finite libm value, so eager's answer depends on the element's
# position in the tensor (x = 88.8 in float32: inf at index 0 of 56 elements,
# 1.84e38 at index 55).  ember returns libm's value everywhere.  Outside the
# band both must agree with eager exactly as any other op; inside it, ember's
# result must be one of eager's two answers.
OVERFLOW_BAND_OPS = {"sinh": math.sinh, "cosh": math.cosh}
OVERFLOW_BAND = {f32: (88.7228394, 89.4159851), f64: (709.782712893384, 710.4758600739439)}
OVERFLOW_BAND[bf16] = OVERFLOW_BAND[f32]  # computed in float, float's range: eager's inf there
#                                           depends on the CPU's vector code (exp(x) / 2 or not)


@pytest.mark.parametrize("dtype", FLOATS, ids=DT_ID.get)
def test_sinh_cosh_special_values(dtype):
    lo, hi = OVERFLOW_BAND.get(dtype, (math.inf, math.inf))

    def fn(x):
        return {n: getattr(torch, n)(x) for n in OVERFLOW_BAND_OPS}

    x = specials(dtype, 2)
    band = (x.abs() > lo) & (x.abs() < hi)
    got = compile_fn(fn)(x)
    exp = fn(x)
    keep = ~band
    assert_same({n: v[keep] for n, v in got.items()}, {n: v[keep] for n, v in exp.items()})
    for n, ref in OVERFLOW_BAND_OPS.items():
        for xv, gv in zip(x[band].tolist(), got[n][band].tolist()):
            true = ref(xv)
            assert math.isinf(gv) or math.isclose(gv, true, rel_tol=1e-5 if dtype in (f32, f64) else 1e-2), \
                f"{n}({xv}) = {gv}: neither inf nor the true value {true}"


@pytest.mark.parametrize("dtype", [i64, b8], ids=DT_ID.get)
def test_unary_float_ops_promote_ints(dtype):
    """Float-only math on int64/bool inputs computes in the default float dtype."""
    names = ["exp", "log1p", "sqrt", "sin", "tanh", "sigmoid", "erf", "reciprocal", "rsqrt",
             "atan", "expm1", "log2"]
    ops = [(n, UNARY[n][0]) for n in names if eager_ok(UNARY[n][0], gen((2,), dtype, "pos"))]

    def fn(x):
        return {n: f(x) for n, f in ops}

    check(fn, lambda: (gen((5, 7), dtype, "pos"),))


# ------------------------------------------------------------- activations
ACTIVATIONS = {
    "relu": F.relu,
    "relu6": F.relu6,
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": F.leaky_relu,
    "leaky_relu_0.2": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu,
    "elu_0.7": lambda x: F.elu(x, alpha=0.7),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, alpha=1.3),
    "softplus": F.softplus,
    "softplus_b2_t1": lambda x: F.softplus(x, beta=2.0, threshold=1.0),
    "hardtanh": F.hardtanh,
    "hardtanh_-0.5_2": lambda x: F.hardtanh(x, -0.5, 2.0),
    "threshold": lambda x: F.threshold(x, 0.1, 20.0),
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "mish": F.mish,
}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", FLOATS, ids=DT_ID.get)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation(name, dtype):
    act = ACTIVATIONS[name]

    def fn(x, xt):
        return act(x), act(xt) * 2

    check(fn, lambda: (gen((7, 13), dtype, "wide"), gen((5, 9), dtype, "wide", "t")))


@pytest.mark.parametrize("dtype", FLOATS, ids=DT_ID.get)
def test_activations_per_dtype(dtype):
    """All activations in one graph per float dtype, contiguous and transposed."""
    def fn(x, xt):
        return {n: (a(x), a(xt)) for n, a in ACTIVATIONS.items()}

    check(fn, lambda: (gen((7, 13), dtype, "wide"), gen((7, 13), dtype, "wide", "t")))


@pytest.mark.parametrize("dtype", [f32, f64], ids=DT_ID.get)
def test_activation_special_values(dtype):
    def fn(x):
        out = {n: a(x) for n, a in ACTIVATIONS.items()}
        # eager's gelu(+inf) is NaN for a contiguous input (oneDNN's kernel) and
        # +inf for any other (ATen's formula, as ember and Inductor)
        out["gelu"] = out["gelu"].masked_fill(x == float("inf"), 0)
        return out

    check(fn, lambda: (specials(dtype, 2),))


# ----------------------------------------------------------- binary pointwise
BINARY = {
    # name: (fn, domain of a, domain of b)
    "add": (lambda a, b: a + b, "any", "any"),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=2), "any", "any"),
    "sub": (lambda a, b: a - b, "any", "any"),
    "sub_alpha": (lambda a, b: torch.sub(a, b, alpha=3), "any", "any"),
    "rsub": (lambda a, b: torch.rsub(a, b), "any", "any"),
    "mul": (lambda a, b: a * b, "any", "any"),
    "div": (lambda a, b: a / b, "any", "nonzero"),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), "wide", "nonzero"),
    "div_trunc": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), "wide", "nonzero"),
    "floor_divide": (lambda a, b: a // b, "wide", "nonzero"),
    "remainder": (lambda a, b: a % b, "wide", "nonzero"),
    "fmod": (torch.fmod, "wide", "nonzero"),
    "pow": (torch.pow, "pos", "small"),
    "maximum": (torch.maximum, "any", "any"),
    "minimum": (torch.minimum, "any", "any"),
    "fmax": (torch.fmax, "any", "any"),
    "fmin": (torch.fmin, "any", "any"),
    "atan2": (torch.atan2, "any", "any"),
    "hypot": (torch.hypot, "any", "any"),
    "copysign": (torch.copysign, "any", "any"),
    "eq": (torch.eq, "small", "small"),
    "ne": (torch.ne, "small", "small"),
    "lt": (torch.lt, "small", "small"),
    "le": (torch.le, "small", "small"),
    "gt": (torch.gt, "small", "small"),
    "ge": (torch.ge, "small", "small"),
    "logical_and": (torch.logical_and, "small", "small"),
    "logical_or": (torch.logical_or, "small", "small"),
    "logical_xor": (torch.logical_xor, "small", "small"),
    "bitwise_and": (torch.bitwise_and, "wide", "wide"),
    "bitwise_or": (torch.bitwise_or, "wide", "wide"),
    "bitwise_xor": (torch.bitwise_xor, "wide", "wide"),
}


# Eager's own bfloat16 div(..., rounding_mode="trunc") is not self-consistent:
# its vectorized path rounds the quotient to bf16 before truncating, its scalar
# path (tails, small tensors) truncates the float quotient, so e.g. 13/0.9297
# gives 14 or 13 depending on the tensor's length.  For bf16 the divisors are
# powers of two, where both agree (the quotient is exact).
BF16_DOMAINS = {"div_trunc": ("wide", "pow2")}


def _domains(name, dtype):
    _, da, db = BINARY[name]
    if dtype == bf16 and name in BF16_DOMAINS:
        return BF16_DOMAINS[name]
    return da, db


def _binary_cases():
    cases = []
    for name, (fn, da, db) in BINARY.items():
        for dt in ALL5:
            if eager_ok(fn, gen((2, 3), dt, da), gen((2, 3), dt, db)):
                cases.append(pytest.param(name, dt, id=f"{name}-{DT_ID[dt]}",
                                          marks=pytest.mark.slow))
    return cases


@pytest.mark.parametrize("name,dtype", _binary_cases())
def test_binary(name, dtype):
    """Same-dtype operands: equal shapes, row and column broadcasting, a 0-d
    operand on either side, and a transposed (non-contiguous) operand."""
    op = BINARY[name][0]
    da, db = _domains(name, dtype)

    def fn(a, b, brow, acol, a0, b0, at):
        return {"same": op(a, b), "row": op(a, brow), "col": op(acol, b), "0d_right": op(a, b0),
                "0d_left": op(a0, b), "noncontig": op(at, b)}

    check(fn, lambda: (gen((7, 13), dtype, da), gen((7, 13), dtype, db), gen((1, 13), dtype, db),
                       gen((7, 1), dtype, da), gen((), dtype, da), gen((), dtype, db),
                       gen((7, 13), dtype, da, "t")))


@pytest.mark.parametrize("dtype", [f32, f64, bf16], ids=DT_ID.get)
def test_binary_special_values(dtype):
    """Every pair of special values (NaN, Inf, -0, halves, huge, tiny) through
    the float binary ops (NaN propagation of maximum/minimum vs fmax/fmin,
    remainder/fmod/floor-division signs, pow and atan2 corner cases)."""
    ops = [(n, f) for n, (f, _, _) in BINARY.items()
           if eager_ok(f, specials(dtype), specials(dtype))]

    def fn(a, b):
        return {n: f(a, b) for n, f in ops}

    check(fn, lambda: (specials(dtype).reshape(-1, 1), specials(dtype).reshape(1, -1)))


@pytest.mark.parametrize("dtype", ALL5, ids=DT_ID.get)
def test_binary_all_ops_per_dtype(dtype):
    """Every binary op the dtype allows, in one graph: equal shapes, row and
    column broadcasting, 0-d operands on either side, a transposed operand
    (test_binary, --runslow, runs each op alone)."""
    ops = [(n, f) + _domains(n, dtype) for n, (f, da, db) in BINARY.items()
           if eager_ok(f, gen((2, 3), dtype, da), gen((2, 3), dtype, db))]
    doms = sorted({d for _, _, da, db in ops for d in (da, db)})

    def fn(a, b, at, brow, bcol, b0):
        out = {}
        for n, f, da, db in ops:
            out[n] = f(a[da], b[db])
            out[n + "_row"] = f(a[da], brow[db])
            out[n + "_col"] = f(bcol[da], b[db])
            out[n + "_t"] = f(at[da], b[db])
            out[n + "_0d_right"] = f(a[da], b0[db])
            out[n + "_0d_left"] = f(b0[da], b[db])
        return out

    check(fn, lambda: ({d: gen((6, 9), dtype, d) for d in doms},
                       {d: gen((6, 9), dtype, d) for d in doms},
                       {d: gen((6, 9), dtype, d, "t") for d in doms},
                       {d: gen((1, 9), dtype, d) for d in doms},
                       {d: gen((6, 1), dtype, d) for d in doms},
                       {d: gen((), dtype, d) for d in doms}))


def _scalar_ops():
    return {
        "add_int": lambda x: x + 2,
        "add_float": lambda x: x + 2.5,
        "radd_float": lambda x: 1.25 + x,
        "sub_int": lambda x: x - 3,
        "rsub_int": lambda x: 3 - x,
        "rsub_float": lambda x: 0.5 - x,
        "mul_int": lambda x: x * 3,
        "mul_float": lambda x: x * 0.5,
        "mul_neg": lambda x: x * -1,
        "div_int": lambda x: x / 2,
        "div_float": lambda x: x / 2.5,
        "rdiv": lambda x: 3 / x,
        "floordiv_int": lambda x: x // 2,
        "floordiv_neg": lambda x: x // -3,
        "rem_int": lambda x: x % 3,
        "rem_neg": lambda x: x % -3,
        "fmod_int": lambda x: torch.fmod(x, 3),
        "fmod_float": lambda x: torch.fmod(x, 2.5),
        "pow2": lambda x: x ** 2,
        "pow3": lambda x: x ** 3,
        "pow_half": lambda x: x.abs() ** 0.5,
        "pow_neg": lambda x: (x.abs() + 1) ** -1.5,
        "rpow": lambda x: 2 ** x,
        "rpow_float": lambda x: 1.5 ** x,
        "gt_int": lambda x: x > 1,
        "lt_float": lambda x: x < 2.5,
        "le_float": lambda x: x <= -0.5,
        "ge_int": lambda x: x >= 0,
        "eq_int": lambda x: x == 1,
        "ne_int": lambda x: x != 0,
        "eq_float": lambda x: x == 1.5,
        "and_int": lambda x: x & 6,
        "or_int": lambda x: x | 5,
        "xor_int": lambda x: x ^ 3,
        "and_bool": lambda x: x & True,
        "max_scalar": lambda x: torch.clamp_min(x, 1),
        "add_true": lambda x: x + True,
    }


@pytest.mark.parametrize("dtype", ALL5, ids=DT_ID.get)
def test_scalar_operands(dtype):
    """Python int/float/bool constants on either side, with their type
    promotion (int tensor + float -> float32, int / int -> float32, ...)."""
    x_probe = gen((2, 3), dtype, "nonzero")
    ops = [(n, f) for n, f in _scalar_ops().items() if eager_ok(f, x_probe)]
    assert ops

    def fn(x):
        return {n: f(x) for n, f in ops}

    check(fn, lambda: (gen((5, 7), dtype, "nonzero"),))


PROMOTION = {
    # name: (fn, [(shape, dtype, dom), ...])
    "i64+f32": (lambda a, b: a + b, [((4, 5), i64, "any"), ((4, 5), f32, "any")]),
    "i64*f64": (lambda a, b: a * b, [((4, 5), i64, "any"), ((4, 5), f64, "any")]),
    "bool+i64": (lambda a, b: a + b, [((4, 5), b8, "any"), ((4, 5), i64, "any")]),
    "bool+bool": (lambda a, b: a + b, [((4, 5), b8, "any"), ((4, 5), b8, "any")]),
    "bool*f32": (lambda a, b: a * b, [((4, 5), b8, "any"), ((4, 5), f32, "any")]),
    "bool+int_scalar": (lambda a: a + 3, [((4, 5), b8, "any")]),
    "bool+float_scalar": (lambda a: a + 0.5, [((4, 5), b8, "any")]),
    "i64/i64": (lambda a, b: a / b, [((4, 5), i64, "wide"), ((4, 5), i64, "nonzero")]),
    "i64/int_scalar": (lambda a: a / 4, [((4, 5), i64, "wide")]),
    "i64//i64": (lambda a, b: a // b, [((4, 5), i64, "wide"), ((4, 5), i64, "nonzero")]),
    "i64+float_scalar": (lambda a: a + 1.5, [((4, 5), i64, "any")]),
    "i64*float_scalar": (lambda a: a * 0.25, [((4, 5), i64, "any")]),
    "f32+f64": (lambda a, b: a + b, [((4, 5), f32, "any"), ((4, 5), f64, "any")]),
    "bf16+f32": (lambda a, b: a + b, [((4, 5), bf16, "any"), ((4, 5), f32, "any")]),
    "bf16*f64": (lambda a, b: a * b, [((4, 5), bf16, "any"), ((4, 5), f64, "any")]),
    "bf16+float_scalar": (lambda a: a + 0.1, [((4, 5), bf16, "any")]),
    "bf16+i64": (lambda a, b: a + b, [((4, 5), bf16, "any"), ((4, 5), i64, "any")]),
    "f32+0d_f64": (lambda a, b: a + b, [((4, 5), f32, "any"), ((), f64, "any")]),
    "i64+0d_f64": (lambda a, b: a + b, [((4, 5), i64, "any"), ((), f64, "any")]),
    "i64+0d_bf16": (lambda a, b: a * b, [((4, 5), i64, "any"), ((), bf16, "any")]),
    "bool+0d_i64": (lambda a, b: a + b, [((4, 5), b8, "any"), ((), i64, "any")]),
    "0d_f64+0d_i64": (lambda a, b: a + b, [((), f64, "any"), ((), i64, "any")]),
    "i64<f32": (lambda a, b: a < b, [((4, 5), i64, "small"), ((4, 5), f32, "small")]),
    "bool==i64": (lambda a, b: a == b, [((4, 5), b8, "any"), ((4, 5), i64, "unit")]),
    "i64<float_scalar": (lambda a: a < 0.5, [((4, 5), i64, "small")]),
    "pow_i64_float": (lambda a: a ** 0.5, [((4, 5), i64, "pos")]),
    "pow_f32_i64": (lambda a, b: a ** b, [((4, 5), f32, "pos"), ((4, 5), i64, "small")]),
    "maximum_i64_f32": (torch.maximum, [((4, 5), i64, "any"), ((4, 5), f32, "any")]),
    "where_i64_f32": (lambda c, a, b: torch.where(c, a, b),
                      [((4, 5), b8, "any"), ((4, 5), i64, "any"), ((4, 5), f32, "any")]),
    "where_bool_float": (lambda c: torch.where(c, c, 0.5), [((4, 5), b8, "any")]),
    "atan2_i64": (torch.atan2, [((4, 5), i64, "any"), ((4, 5), i64, "any")]),
    "addcmul_mixed": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5),
                      [((4, 5), f32, "any"), ((4, 5), f32, "any"), ((4, 5), f32, "any")]),
}


def test_type_promotion():
    """Every promotion case of PROMOTION in one graph (one case per test with --runslow)."""
    cases = list(PROMOTION.items())

    def fn(inputs):
        return {name: f(*args) for (name, (f, _)), args in zip(cases, inputs)}

    check(fn, lambda: ([tuple(gen(s, d, dom) for s, d, dom in specs) for _, (_, specs) in cases],))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROMOTION))
def test_type_promotion_single(name):
    fn, specs = PROMOTION[name]
    check(fn, lambda: tuple(gen(s, d, dom) for s, d, dom in specs))


def test_python_float_argument():
    """A Python float passed as an argument (Dynamo may lift it to a graph
    input): several values through one compiled function."""
    def fn(x, s):
        return x * s + s

    check(fn, lambda: (gen((3, 4)), 2.5), calls=1)
    cfn = compile_fn(fn)
    for s in (2.5, -1.25, 0.0, 1e3):
        x = gen((3, 4))
        assert_same(cfn(x, s), fn(x, s), msg=f"s={s}:")


# -------------------------------------------------------- ternary / where
@pytest.mark.parametrize("dtype", ALL5, ids=DT_ID.get)
def test_where_and_masked_fill(dtype):
    fill = True if dtype == b8 else 3
    ffill = True if dtype == b8 else -1.5

    def fn(c, x, y, crow, xcol, x0):
        return {
            "where": torch.where(c, x, y),
            "where_bcast": torch.where(crow, xcol, y),
            "where_scalar_other": torch.where(c, x, fill),
            "where_scalar_self": torch.where(c, fill, y),
            "where_0d": torch.where(c, x0, y),
            "where_from_cmp": torch.where(x > y, x, y),
            "masked_fill": x.masked_fill(c, fill),
            "masked_fill_float": (x.masked_fill(c, ffill) if dtype.is_floating_point
                                  else x.masked_fill(c, fill)),
            "masked_fill_tensor": x.masked_fill(c, x0),
            "masked_fill_bcast": x.masked_fill(crow, fill),
        }

    check(fn, lambda: (gen((6, 9), b8), gen((6, 9), dtype), gen((6, 9), dtype, layout="t"),
                       gen((1, 9), b8), gen((6, 1), dtype), gen((), dtype)))


@pytest.mark.parametrize("dtype", FLOATS, ids=DT_ID.get)
def test_ternary_float(dtype):
    def fn(a, b, c, w):
        return {
            "lerp_scalar": torch.lerp(a, b, 0.3),
            "lerp_tensor": torch.lerp(a, b, w),
            "addcmul": torch.addcmul(a, b, c, value=0.5),
            "addcdiv": torch.addcdiv(a, b, c, value=-2.0),
            "masked_fill_ninf": a.masked_fill(b > 0, -math.inf),
        }

    check(fn, lambda: (gen((5, 8), dtype), gen((5, 8), dtype, layout="t"),
                       gen((5, 8), dtype, "nonzero"), gen((1, 8), dtype, "unit")))


# ------------------------------------------------------------------- casts
def cast_source(dtype, shape=(6, 11)):
    if dtype == b8:
        return gen(shape, b8)
    if dtype == i64:
        return gen(shape, i64, "wide")     # |v| <= 300: bf16 must round ints > 256
    # floats: halves, negatives, values that round in bf16 / f32
    base = torch.tensor([-2.7, -1.0, -0.5, 0.0, -0.0, 0.3, 0.5, 1.0, 1.5, 2.5, 5.9, 100.25,
                         -100.75, 257.0, 1.0 + 2.0**-9, 3.00390625], dtype=f64)
    v = torch.cat([base, torch.randn(max(0, math.prod(shape) - base.numel()), dtype=f64) * 50])
    return v[: math.prod(shape)].reshape(shape).to(dtype)


@pytest.mark.parametrize("src", ALL5, ids=DT_ID.get)
def test_casts(src):
    """`.to(dtype)` from each of the five dtypes to each of the five, on a
    contiguous and a transposed input, compared exactly (casts are exact
    operations: f32->bf16 rounds to nearest even, float->int truncates)."""
    def fn(x, xt):
        out = {}
        for dst in ALL5:
            out[f"to_{DT_ID[dst]}"] = x.to(dst)
            out[f"t_to_{DT_ID[dst]}"] = xt.to(dst)
        out["to_f32_then_add"] = x.to(f32) + 1
        out["chain"] = x.to(f64).to(bf16).to(f32)
        return out

    def make():
        x = cast_source(src)
        xt = cast_source(src, (11, 6)).t()
        return x, xt

    check(fn, make, exact=True)


@pytest.mark.parametrize("src", [f32, f64, bf16], ids=DT_ID.get)
def test_casts_special_values(src):
    """NaN/Inf/-0 into other float dtypes and bool (never into ints: that is UB)."""
    def fn(x):
        return {DT_ID[d]: x.to(d) for d in (f32, f64, bf16, b8)}

    check(fn, lambda: (specials(src, 2),), exact=True)


# ------------------------------------------------------------------- clamp
@pytest.mark.parametrize("dtype", [f32, f64, bf16, i64], ids=DT_ID.get)
def test_clamp(dtype):
    lo, hi = (-1, 2) if dtype == i64 else (-0.5, 0.7)

    def fn(x, lo_t, hi_t, xt):
        return {
            "both": torch.clamp(x, lo, hi),
            "min_only": torch.clamp(x, min=lo),
            "max_only": torch.clamp(x, max=hi),
            "min_gt_max": torch.clamp(x, hi, lo),
            "tensor_bounds": torch.clamp(x, lo_t, hi_t),
            "tensor_min": torch.clamp(x, min=lo_t),
            "tensor_max": torch.clamp(x, max=hi_t),
            "clamp_min": torch.clamp_min(x, lo),
            "clamp_max": torch.clamp_max(x, hi),
            "noncontig": torch.clamp(xt, lo, hi),
            "method": x.clamp(lo, hi) * 2,
        }

    check(fn, lambda: (gen((7, 13), dtype, "wide"), gen((1, 13), dtype, "small"),
                       gen((7, 1), dtype, "pos"), gen((7, 13), dtype, "wide", "t")))


def test_clamp_int_with_float_bounds():
    def fn(x):
        return torch.clamp(x, -1.5, 2.5), torch.clamp(x, min=0.5)

    check(fn, lambda: (gen((5, 6), i64, "wide"),))


@pytest.mark.parametrize("dtype", [f32, f64], ids=DT_ID.get)
def test_clamp_special_values(dtype):
    def fn(x):
        return torch.clamp(x, -1.0, 1.0), torch.clamp(x, min=0.0), torch.clamp_max(x, 0.0)

    check(fn, lambda: (specials(dtype, 2),))


# ---------------------------------------------------------------- reductions
DIMS = [0, 1, -1, (0, 2), (-1, -3), (0, 1, 2), None]


def _dim_configs(single_only=False):
    out = []
    for d in DIMS:
        if single_only and not (d is None or isinstance(d, int)):
            continue
        for keep in (False, True):
            out.append((d, keep))
    return out


REDUCTIONS = {
    # name: (fn(x, dim, keepdim), domain, single-dim only)
    "sum": (lambda x, d, k: x.sum() if d is None and not k else x.sum(d, keepdim=k), "any", False),
    "mean": (lambda x, d, k: x.mean() if d is None and not k else x.mean(d, keepdim=k), "any",
             False),
    "amax": (lambda x, d, k: x.amax() if d is None and not k else x.amax(d if d is not None else (),
                                                                         keepdim=k), "any", False),
    "amin": (lambda x, d, k: x.amin() if d is None and not k else x.amin(d if d is not None else (),
                                                                         keepdim=k), "any", False),
    "prod": (lambda x, d, k: x.prod() if d is None else x.prod(d, keepdim=k), "near1", True),
    "any": (lambda x, d, k: x.any() if d is None else x.any(d, keepdim=k), "unit", False),
    "all": (lambda x, d, k: x.all() if d is None else x.all(d, keepdim=k), "near1", False),
    "argmax": (lambda x, d, k: x.argmax(d, keepdim=k), "small", True),
    "argmin": (lambda x, d, k: x.argmin(d, keepdim=k), "small", True),
    "max_all": (lambda x, d, k: x.max(), "any", True),
    "min_all": (lambda x, d, k: x.min(), "any", True),
    "var": (lambda x, d, k: x.var(d, keepdim=k), "any", False),
    "var_c0": (lambda x, d, k: torch.var(x, d, correction=0, keepdim=k), "any", False),
    "var_c2": (lambda x, d, k: torch.var(x, d, correction=2, keepdim=k), "any", False),
    "var_biased": (lambda x, d, k: torch.var(x, d, unbiased=False, keepdim=k), "any", False),
    "std": (lambda x, d, k: x.std(d, keepdim=k), "any", False),
    "std_c0": (lambda x, d, k: torch.std(x, d, correction=0, keepdim=k), "any", False),
    "std_c2": (lambda x, d, k: torch.std(x, d, correction=2, keepdim=k), "any", False),
    "var_mean": (lambda x, d, k: torch.var_mean(x, d, correction=1, keepdim=k), "any", False),
    "std_mean": (lambda x, d, k: torch.std_mean(x, d, correction=0, keepdim=k), "any", False),
}


# The correction variants share var/std's lowering (only the divisor differs):
# by default they run a subset of the dim configs; --runslow runs them all.
_VARIANTS = {"var_c0", "var_c2", "var_biased", "std_c0", "std_c2", "var_mean", "std_mean"}
_SUBSET = [(1, False), (-1, True), ((0, 2), False), ((-1, -3), True), (None, False)]
# configs also run on the transposed input
_T_SUBSET = [(0, False), (-1, True), ((0, 2), True), (None, False)]


def _reduction_configs(name, dtype, full=False):
    fn, dom, single = REDUCTIONS[name]
    probe = gen((3, 5, 7), dtype, dom)
    ok = []
    for d, k in _dim_configs(single):
        if name in ("max_all", "min_all") and (d is not None or k):
            continue
        if name in _VARIANTS and not full and (d, k) not in _SUBSET:
            continue
        if eager_ok(fn, probe, d, k):
            ok.append((d, k))
    return ok


def _reduction_cases():
    cases = []
    for name in REDUCTIONS:
        for dt in ALL5:
            if _reduction_configs(name, dt, full=True):
                cases.append(pytest.param(name, dt, id=f"{name}-{DT_ID[dt]}",
                                          marks=pytest.mark.slow))
    return cases


@pytest.mark.parametrize("name,dtype", _reduction_cases())
def test_reduction(name, dtype):
    """One reduction over single dims, several dims, all dims, negative dims,
    keepdim both ways, on a contiguous 3x5x7 tensor and a transposed one."""
    red, dom, _ = REDUCTIONS[name]
    configs = _reduction_configs(name, dtype, full=True)

    def fn(x, xt):
        out = {}
        for d, k in configs:
            out[f"dim={d},keepdim={k}"] = red(x, d, k)
            out[f"transposed dim={d},keepdim={k}"] = red(xt, d, k)
        return out

    check(fn, lambda: (gen((3, 5, 7), dtype, dom), gen((3, 5, 7), dtype, dom, "t")))


# var_c0, var_biased and std_c0 (correction 0: std_mean's) and std_c2 (var_c2's) SLOW_ON_CPU
@pytest.mark.parametrize("name", [pytest.param(n, marks=SLOW_ON_CPU if n in ("var_c0", "var_biased", "std_c0", "std_c2")
                                               else ()) for n in REDUCTIONS])
def test_reduction_all_dtypes(name):
    """One reduction, every dtype it allows, over single dims, several dims,
    all dims, negative dims, keepdim both ways, contiguous and transposed, in
    one graph (test_reduction, --runslow, splits the dtypes)."""
    red, dom, _ = REDUCTIONS[name]
    per_dtype = [(dt, _reduction_configs(name, dt)) for dt in ALL5]
    per_dtype = [(dt, c) for dt, c in per_dtype if c]

    def fn(xs, xts):
        out = {}
        for (dt, configs), x, xt in zip(per_dtype, xs, xts):
            for d, k in configs:
                out[f"{DT_ID[dt]} dim={d},keepdim={k}"] = red(x, d, k)
                if (d, k) in _T_SUBSET:
                    out[f"{DT_ID[dt]} transposed dim={d},keepdim={k}"] = red(xt, d, k)
        return out

    check(fn, lambda: ([gen((3, 5, 7), dt, dom) for dt, _ in per_dtype],
                       [gen((3, 5, 7), dt, dom, "t") for dt, _ in per_dtype]))


@pytest.mark.parametrize("dtype", [f32, f64, bf16], ids=DT_ID.get)
def test_reduction_special_values(dtype):
    """NaN propagates through sum/mean/amax/amin/prod/var; argmax/argmin pick
    the first NaN; Inf sums; -Inf maxima; ties go to the first index."""
    def fn(x):
        return {
            "sum": x.sum(-1), "mean": x.mean(-1), "amax": x.amax(-1), "amin": x.amin(-1),
            "prod": x.prod(-1), "var": x.var(-1), "argmax": x.argmax(-1), "argmin": x.argmin(-1),
            "any": x.any(-1), "all": x.all(-1), "max_all": x.max(), "min_all": x.min(),
        }

    def make():
        x = torch.tensor([
            [1.0, math.nan, 3.0, math.nan],
            [1.0, math.inf, 3.0, 2.0],
            [-math.inf, -math.inf, -math.inf, -math.inf],
            [math.inf, -math.inf, 0.0, 1.0],
            [2.0, 5.0, 5.0, -1.0],        # tie: first index of the max
            [-3.0, -3.0, 7.0, 7.0],       # ties for both
            [0.0, -0.0, 0.0, -0.0],
            [1e30, 1e30, -1e30, 1e-30],
        ], dtype=f64).to(dtype)
        return (x,)

    check(fn, make)


@pytest.mark.parametrize("dtype", [i64, b8], ids=DT_ID.get)
def test_argmax_ties_ints(dtype):
    def fn(x, xt):
        return (x.argmax(), x.argmax(0), x.argmax(-1), x.argmin(1, keepdim=True),
                xt.argmax(0), xt.argmin(-1))

    dom = "unit"
    make = (lambda: (gen((9, 17), dtype, dom), gen((9, 17), dtype, dom, "t")))
    if not eager_ok(lambda x: x.argmax(), gen((3,), dtype)):
        pytest.skip(f"eager has no argmax for {dtype}")
    check(fn, make)


@pytest.mark.parametrize("dtype", [f32, i64, b8], ids=DT_ID.get)
def test_reductions_on_empty_and_size1(dtype):
    def fn(e, one, z):
        out = {
            "sum_empty_dim0": e.sum(0), "sum_empty_dim1": e.sum(1), "sum_empty_all": e.sum(),
            "prod_empty": e.prod(0), "any_empty": e.any(0), "all_empty": e.all(0),
            "amax_nonempty_dim": e.amax(1), "sum_size1": one.sum(0), "sum_size1_keep": one.sum(1, keepdim=True),
            "amax_size1": one.amax(0), "sum_0d": z.sum(), "sum_0d_dim0": z.sum(0),
            "any_0d": z.any(),
        }
        if dtype != b8:
            out["argmax_0d"] = z.argmax()
        if dtype.is_floating_point:
            out["mean_empty"] = e.mean(0)
            out["mean_size1"] = one.mean(0)
            out["var_size1"] = one.var(1)          # correction 1 over n=1: nan / inf
        return out

    # ember falls back (on purpose, src/lower.c) for max/min over an empty input
    check(fn, lambda: (gen((0, 5), dtype), gen((1, 5), dtype), gen((), dtype)),
          allow_fallbacks=("aten.amax.default",))


@pytest.mark.parametrize("dtype", [f32, f64, bf16], ids=DT_ID.get)
def test_large_reduction(dtype):
    """Long reductions (bf16 must accumulate in float).  Over 4099 float32
    elements eager itself is off from the exact sum by more than assert_close's
    default float32 tolerance, so float32 is judged against a float64
    reference: ember's error may be at most twice eager's (plus 1e-6)."""
    def fn(x):
        return x.sum(-1), x.mean(0), x.sum(), x.var(-1), x.amax(0)

    if dtype != f32:
        check(fn, lambda: (gen((16, 4099), dtype),))
        return
    cfn = compile_fn(fn)
    for _ in range(2):
        x = gen((16, 4099), dtype)
        exp, got, ref = fn(x), cfn(x), fn(x.double())
        for i, (e, g, r) in enumerate(zip(exp, got, ref)):
            assert g.dtype == e.dtype and g.shape == e.shape, i
            err_eager = (e.double() - r).abs().max().item()
            err_ember = (g.double() - r).abs().max().item()
            assert err_ember <= 2 * err_eager + 1e-6, \
                f"output {i}: ember's error {err_ember:.3g} vs eager's {err_eager:.3g}"


# --------------------------------------------------------------------- views
VIEWS = {
    "view": lambda x: x.view(6, 35) * 2,
    "view_flat": lambda x: x.view(-1) + 1,
    "reshape": lambda x: x.reshape(5, 42).sin(),
    "reshape_split": lambda x: x.reshape(3, 2, 5, 7) - 1,
    "permute": lambda x: x.permute(2, 0, 1) * 3,
    "permute_flat": lambda x: x.permute(1, 2, 0).reshape(-1) + 1,
    "transpose": lambda x: x.transpose(0, 2).cos(),
    "transpose_neg": lambda x: x.transpose(-1, -2) + x.transpose(-1, -2),
    "expand": lambda x: x[:, :1, :].expand(6, 5, 7) + x,
    "expand_new_dim": lambda x: x[0, 0].expand(4, 7) * 2,
    "slice": lambda x: x[1:4] + 1,
    "slice_step": lambda x: x[:, ::2, 1::3] * 2,
    "slice_neg": lambda x: x[-3:, :-1, 2:] + 0.5,
    "slice_step_large": lambda x: x[::4, ::3, ::5] - 1,
    "select": lambda x: x.select(1, 2) + 1,
    "select_neg": lambda x: x[:, -1, :] * x[-1, :, :][:1, :].expand(6, 7),
    "index_int": lambda x: x[2] * 3,
    "squeeze": lambda x: x[:, :1, :].squeeze() + 1,
    "squeeze_dim": lambda x: x[:, :1, :].squeeze(1) * 2,
    "squeeze_dims": lambda x: x[:1, :1, :].squeeze((0, 1)) - 1,
    "unsqueeze": lambda x: x.unsqueeze(1) + x.unsqueeze(0).transpose(0, 1),
    "unsqueeze_neg": lambda x: x.unsqueeze(-1) * 2,
    "as_strided": lambda x: torch.as_strided(x, (3, 4), (7, 2), 5) + 1,
    "as_strided_overlap": lambda x: torch.as_strided(x, (5, 5), (1, 1), 3) * 2,
    "t": lambda x: x[0].t() + 1,
    "narrow": lambda x: x.narrow(2, 1, 4) * 2,
    "narrow_neg": lambda x: x.narrow(-1, 3, 3) + x.narrow(0, 2, 1).narrow(2, 0, 3),
    "diagonal": lambda x: torch.diagonal(x[0]) + 1,
    "diagonal_offset": lambda x: torch.diagonal(x, offset=1, dim1=1, dim2=2) * 2,
    "unfold": lambda x: x[0].unfold(1, 3, 2) + 1,
    "chain": lambda x: x.transpose(0, 1)[1:, ::2].unsqueeze(0).permute(3, 1, 2, 0).squeeze(-1) * 2,
    "flatten": lambda x: x.flatten(1) + 1,
    "unflatten": lambda x: x.reshape(6, 35).unflatten(1, (5, 7)) * 2,
    "movedim": lambda x: torch.movedim(x, 0, -1) + 1,
    "view_as": lambda x: x.view_as(x) + 1,
    "view_output_t": lambda x: x.transpose(0, 1),        # a view returned as is
    "view_output_slice": lambda x: x[1:, ::2],           # a view returned as is
}


@pytest.mark.parametrize("layout", ["contig", "permuted"])
@pytest.mark.parametrize("dtype", [f32, i64, bf16], ids=DT_ID.get)
def test_views_feeding_pointwise(dtype, layout):
    """All view ops in one graph on a 6x5x7 input (contiguous, or permuted in
    memory so the views sit on non-contiguous strides; reshape/view may then copy)."""
    def fn(x):
        out = {}
        for n, v in VIEWS.items():
            if layout == "permuted" and n in ("view", "view_flat", "as_strided", "as_strided_overlap"):
                continue  # view() needs viewable strides; as_strided is layout-dependent by definition
            out[n] = v(x)
        return out

    def make():
        if layout == "contig":
            return (gen((6, 5, 7), dtype),)
        return (gen((7, 6, 5), dtype).permute(1, 2, 0),)

    check(fn, make)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(VIEWS))
def test_view_single(name):
    check(VIEWS[name], lambda: (gen((6, 5, 7)),))


# ----------------------------------------------------------------------- cat
@pytest.mark.parametrize("dtype", ALL5, ids=DT_ID.get)
def test_cat(dtype):
    def fn(a, b, c, bt, w, e):
        return {
            "dim0_three": torch.cat([a, b, c], 0),
            "dim0_then_pointwise": torch.cat([a, b], 0) * 2 if dtype != b8 else ~torch.cat([a, b], 0),
            "dim1": torch.cat([a, w], 1),
            "dim_neg": torch.cat([w, a, w], -1),
            "noncontig_input": torch.cat([a, bt], 0),
            "pointwise_inputs": (torch.cat([a.abs(), (b * 3) if dtype != b8 else b], 0)
                                 if dtype != b8 else torch.cat([~a, b], 0)),
            "single": torch.cat([a], 0),
            "with_empty": torch.cat([a, e], 0),
            "legacy_empty_1d": torch.cat([a, torch.zeros(0, dtype=dtype)], 0),
            "stack": torch.stack([a, bt[:3]], 1),
            "3d_mid": torch.cat([a.unsqueeze(1), bt[:3].unsqueeze(1)], 1),
            "same_input_twice": torch.cat([a, a], 1),
        }

    check(fn, lambda: (gen((3, 5), dtype), gen((2, 5), dtype), gen((4, 5), dtype),
                       gen((5, 5), dtype, layout="t"), gen((3, 2), dtype), gen((0, 5), dtype)))


def test_cat_mixed_dtypes():
    def fn(a, b, c):
        return torch.cat([a, b], 0), torch.cat([a, c], 1), torch.cat([b, c[:2].repeat(1, 2)], 0)

    check(fn, lambda: (gen((3, 4), f32), gen((2, 4), i64), gen((4, 2), b8)[:3]))


def test_cat_many_and_3d():
    def fn(*xs):
        return torch.cat(xs, 1).sin(), torch.cat([x[:, :1, ::2] for x in xs], 2) + 1

    check(fn, lambda: tuple(gen((2, i + 1, 6), layout="t" if i % 2 else "contig") for i in range(9)))


# ----------------------------------------------------------------------- pad
@pytest.mark.parametrize("dtype", [f32, f64, bf16, i64, b8], ids=DT_ID.get)
def test_constant_pad(dtype):
    val = True if dtype == b8 else 3

    def fn(x, xt, v):
        out = {
            "last_pos": F.pad(x, (1, 2)),
            "last2_pos": F.pad(x, (2, 1, 0, 3)),
            "value": F.pad(x, (1, 1, 1, 1), value=val),
            "neg": F.pad(x, (-1, -2)),
            "mixed": F.pad(x, (2, -3, -1, 1)),
            "3dims": F.pad(v, (1, 0, 0, 2, 1, 1)),
            "noncontig": F.pad(xt, (3, 1, 1, 0)),
            "all_neg": torch.constant_pad_nd(x, [-1, -1, -1, -1]),
            "zero_pad": F.pad(x, (0, 0)),
        }
        if dtype != b8:
            out["then_pointwise"] = F.pad(x, (1, 1)) * 2 + 1
            out["of_pointwise"] = F.pad(x * 2, (0, 2, 2, 0), value=val)
        if dtype.is_floating_point:
            out["float_value"] = F.pad(x, (1, 1), value=-1.5)
        return out

    check(fn, lambda: (gen((5, 7), dtype), gen((5, 7), dtype, layout="t"), gen((3, 4, 5), dtype)))


# ----------------------------------------------------------------- factories
def test_factories_inside_compiled_fn():
    def fn(x, xi):
        d = x.device  # factories without a tensor argument: on the inputs' device
        return {
            "full": torch.full((7, 13), 2.5, device=d) + x,
            "full_int": torch.full((3, 2), 7, dtype=torch.int64, device=d),
            "full_bool": torch.full((2, 3), True, device=d),
            "full_bf16": torch.full((4,), 1.1, dtype=bf16, device=d),
            "zeros": torch.zeros(3, 4, device=d),
            "zeros_i64": torch.zeros(5, dtype=i64, device=d) + xi[0, :5],
            "ones": torch.ones(2, 3, dtype=f64, device=d),
            "ones_bool": torch.ones(3, dtype=b8, device=d),
            "arange": torch.arange(10, device=d),
            "arange_start_step": torch.arange(2, 11, 3, device=d),
            "arange_float": torch.arange(0.0, 1.0, 0.1, device=d),
            "arange_f64": torch.arange(5, dtype=f64, device=d) * 0.5,
            "arange_neg_step": torch.arange(10, 0, -3, device=d),
            "arange_broadcast": x + torch.arange(13, device=d),
            "zeros_like": torch.zeros_like(x),
            "ones_like_bool": torch.ones_like(x, dtype=b8),
            "full_like": torch.full_like(x, 7.0),
            "full_like_int": torch.full_like(xi, -2),
            "new_zeros": x.new_zeros(3),
            "new_ones": x.new_ones(2, 2) + 1,
            "new_full": xi.new_full((2,), 9),
            "empty_filled": torch.empty(3, 3, device=d).fill_(4.0),
            "empty_like_filled": torch.empty_like(x).fill_(-1.0) * x,
            "scalar_tensor": torch.scalar_tensor(3.5, device=d) * x,
            "linspace": torch.linspace(0, 1, 7, device=d),
            "eye": torch.eye(4, device=d) + 1,
            "tril_mask": torch.ones(5, 5, device=d).tril(),
        }

    check(fn, lambda: (gen((7, 13)), gen((7, 13), i64)))


# ---------------------------------------------------- shapes and broadcasting
SHAPES = {
    "7x13": ((7, 13), (7, 13)),
    "1x5": ((1, 5), (1, 5)),
    "3x1x9": ((3, 1, 9), (3, 1, 9)),
    "3x1x9_bcast_1x7x1": ((3, 1, 9), (1, 7, 1)),
    "5_bcast_4x1": ((5,), (4, 1)),
    "0d": ((), ()),
    "0d_with_2d": ((), (3, 4)),
    "0x5": ((0, 5), (0, 5)),
    "0x5_bcast_1x5": ((0, 5), (1, 5)),
    "5x0": ((5, 0), (5, 0)),
    "1": ((1,), (1,)),
    "1x1x1": ((1, 1, 1), (1, 1, 1)),
    "large_1d": ((100003,), (100003,)),
    "8_dims": ((2, 1, 3, 1, 2, 1, 2, 3), (2, 1, 3, 1, 2, 1, 2, 3)),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_shapes(shape):
    """Pointwise, broadcasting and reductions at odd, size-1, 0-d, empty,
    large and 8-dim shapes, float32 and int64 in one graph."""
    sa, sb = SHAPES[shape]

    def one(a, b):
        out = {"add": a + b, "mul_sin": (a * b).to(f32).sin(), "where": torch.where(a > b, a, b),
               "sum_all": (a + b).sum(), "cmp": a >= b}
        c = a + b
        if c.dim() > 0:
            out["sum_last"] = c.sum(-1)
            out["sum_first_keep"] = c.sum(0, keepdim=True)
            if c.shape[-1] > 0:
                out["amax_last"] = c.amax(-1)
        return out

    def fn(a, b, ai, bi):
        return {"f32": one(a, b), "i64": one(ai, bi)}

    empty = 0 in torch.broadcast_shapes(sa, sb)
    # ember falls back (on purpose) for max/min over an empty input
    check(fn, lambda: (gen(sa, f32), gen(sb, f32), gen(sa, i64), gen(sb, i64)),
          allow_fallbacks=("aten.amax.default",) if empty else ())


@pytest.mark.parametrize("layout", ["t", "step", "offset"])
def test_noncontiguous_inputs_mixed(layout):
    """Pointwise + reduction on inputs with unusual layouts, including an
    output that must be written densely."""
    def fn(a, b):
        c = a * 2 + b.exp()
        return c, c.sum(0), (a - b).abs().amax(-1, keepdim=True)

    check(fn, lambda: (gen((9, 11), layout=layout), gen((9, 11), layout="contig")))


def test_nine_dims_is_correct():
    """More dims than ember's EMBER_MAX_DIMS: whatever ember does (fall back),
    the result must be right."""
    def fn(a):
        return a * 2 + 1, a.sum(-1)

    check(fn, lambda: (gen((2,) * 9),), strict=False)


def test_expanded_input():
    """An input that is itself an expanded (stride-0) tensor."""
    def fn(a, b):
        return a + b, (a * b).sum(0)

    check(fn, lambda: (gen((1, 9)).expand(6, 9), gen((6, 9))))


def test_input_with_storage_offset_and_output_aliasing():
    def fn(a):
        return a[1:], a[1:] * 2, a

    check(fn, lambda: (gen((4, 5), layout="offset"),))


# ----------------------------------------------------------- extended sweeps
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["contig", "t", "step", "offset"])
@pytest.mark.parametrize("dtype", ALL5, ids=DT_ID.get)
def test_unary_all_ops_layouts(dtype, layout):
    ops = [(n, f, d) for n, (f, d) in UNARY.items() if eager_ok(f, gen((2, 3), dtype, d))]

    def fn(*xs):
        return {n: f(x) for (n, f, _), x in zip(ops, xs)}

    check(fn, lambda: tuple(gen((11, 17), dtype, d, layout) for _, _, d in ops))


@pytest.mark.slow
@pytest.mark.parametrize("db", ALL5, ids=DT_ID.get)
@pytest.mark.parametrize("da", ALL5, ids=DT_ID.get)
def test_binary_promotion_grid(da, db):
    """Every binary op over every pair of the five dtypes."""
    ops = [(n, f) for n, (f, x, y) in BINARY.items()
           if eager_ok(f, gen((2, 3), da, "nonzero"), gen((2, 3), db, "nonzero"))]
    if not ops:
        pytest.skip("no binary op accepts this pair")

    def fn(a, b):
        return {n: f(a, b) for n, f in ops}

    check(fn, lambda: (gen((5, 6), da, "nonzero"), gen((5, 6), db, "nonzero")))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ALL5, ids=DT_ID.get)
@pytest.mark.parametrize("shape", [(1,), (2, 3), (4, 1, 6), (2, 3, 4, 5), (64, 65), (3, 0, 4)])
def test_reduction_shapes_sweep(shape, dtype):
    def fn(x):
        out = {}
        for d in range(-len(shape), len(shape)):
            out[f"sum{d}"] = x.sum(d)
            out[f"any{d}"] = x.any(d)
            if x.shape[d] > 0:
                out[f"amax{d}"] = x.amax(d)
                if dtype != b8:
                    out[f"argmin{d}"] = x.argmin(d)
        out["sum_all"] = x.sum()
        return out

    # ember falls back (on purpose, src/lower.c) for max/min/argmax/argmin over an empty input
    allow = ("aten.amax.default", "aten.argmin.default") if 0 in shape else ()
    check(fn, lambda: (gen(shape, dtype, "small"),), allow_fallbacks=allow)


# ---------------------------------------------------------------- max/min with dim
@pytest.mark.parametrize("dtype", [f32, bf16, i64, b8], ids=lambda d: str(d).split(".")[-1])
def test_max_min_dim_values_and_indices(dtype):
    # torch.max(x, dim) is amax + argmax in one kernel: the first extreme, the first NaN
    def fn(x):
        v, i = torch.max(x, 1)
        w, j = torch.min(x, 0, keepdim=True)
        return v, i, w, j, torch.max(x.t(), -1).values * 1

    def make():
        x = gen((6, 9), dtype)
        if dtype.is_floating_point:
            x[1, 3] = float("nan")
            x[2, :] = 1.0  # ties: the first index
        return (x,)
    _, st = check(fn, make, exact=True)
    if not EAGER:
        assert st["kernels"] >= 1 and not st["fallbacks"], st


# ---------------------------------------------------------------- matmul
# On a GPU, mm and bmm are cuBLASLt calls inside the compiled program (row-
# major or transposed operands read in place, views with offsets, batch
# strides, a broadcast batch); on the CPU torch runs them.  Either way the
# pointwise work around them is ember's.
@pytest.mark.parametrize("dtype", [f32, bf16, torch.float16], ids=lambda d: str(d).split(".")[-1])
def test_matmul_layouts(dtype):
    def fn(a, b, c, d):
        return {
            "mm": torch.relu(a @ b) * 2,
            "mm_t_a": a.t()[:, :7].t() @ b,
            "mm_t_b": a @ c.t(),
            "mm_t_both": (b.t() @ a.t()).t() + 1,
            "mm_slice": a[1:6, 2:] @ b[2:, 3:],
            "bmm": torch.bmm(d, d.transpose(1, 2)).softmax(-1),
            "bmm_broadcast": torch.matmul(d, b[:12, :5]),
            "bmm_expand": torch.bmm(a[:3, :12].unsqueeze(0).expand(4, 3, 12), d.transpose(1, 2)),
            "linear": torch.nn.functional.linear(a, c, c[:, 0] * 0.5),
            "vec": a @ b[:, 0],
        }
    # 16-bit: torch's cuBLAS may reduce split-K partial sums in the output type
    # (allow_bf16_reduced_precision_reduction), ember's cuBLASLt call in fp32:
    # a few units in the last place of the partial sums (|sum| ~ 4 here)
    tol = {} if dtype == f32 else dict(atol=5e-2, rtol=2e-2)
    _, st = check(fn, lambda: (gen((9, 12), dtype), gen((12, 10), dtype), gen((7, 12), dtype),
                               gen((4, 3, 12), dtype)), **tol)


_BN_SHAPES = [(4, 6), (3, 6, 5), (2, 6, 5, 7), (2, 6, 3, 4, 5)]


def _bn_cases(fn):
    """dtype x affine x shape; every shape (BatchNorm1d over [N, C] and [N, C, L], 2d, 3d) in
    float32, the other dtypes at the 2d shape, the rest SLOW_ON_CPU."""
    params = [pytest.param(dt, affine, shape, id=f"{dt}-{'affine' if affine else 'plain'}-{'x'.join(map(str, shape))}",
                           marks=() if dt == torch.float32 or shape == (2, 6, 5, 7) else SLOW_ON_CPU)
              for dt in (torch.float32, torch.float64, torch.bfloat16) for affine in (True, False)
              for shape in _BN_SHAPES]
    return pytest.mark.parametrize("dtype, affine, shape", params)(fn)


def _bn_module(shape, affine, train):
    """A BatchNorm of 6 channels for inputs of `shape`, on DEVICE, with a
    weight and bias away from 1 and 0 if affine."""
    torch.manual_seed(0)
    bn = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[len(shape)]
    m = bn(6, affine=affine).to(DEVICE).train(train)
    if affine:
        with torch.no_grad():
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-1, 1)
    return m


@_bn_cases
def test_batch_norm_train(shape, affine, dtype):
    # BatchNorm in training (the functional forward and the backward, each
    # one node that src/expand.c expands): output, input and parameter
    # gradients and the running statistics after two steps, against eager
    ref_m = _bn_module(shape, affine, True)
    if dtype == torch.float64:
        ref_m = ref_m.double()
    m = copy.deepcopy(ref_m)
    cm = compile_fn(m)
    tol = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else {}
    # bfloat16: the parameters' gradients (float32 sums over bfloat16 values)
    # are checked against float64 sums of the same values, not eager's: on
    # the H100, eager's BatchNorm3d bias gradient was 0.05 off the exact sum
    # (0.55) where ember's was 2e-7 off.  Not on the
    # CPU, where torch saves the batch statistics for the backward in the
    # input's dtype (its meta says so, so the graph between forward and
    # backward carries them rounded to bfloat16, as eager does): there the
    # gradients are compared with eager's, within bfloat16's tolerance
    exact_m = copy.deepcopy(ref_m).double() if dtype == torch.bfloat16 and affine and DEVICE != "cpu" else None
    for _ in range(2):
        x = (torch.randn(shape, device=DEVICE) * 2 + 0.5).to(torch.float64 if dtype == torch.float64 else torch.float32)
        g = torch.randn(shape, device=DEVICE, dtype=x.dtype)
        if dtype == torch.bfloat16:  # bfloat16 activations, float32 parameters: as under autocast
            x, g = x.bfloat16(), g.bfloat16()
        xr, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        out_r, out_c = ref_m(xr), cm(xc)
        out_r.backward(g)
        out_c.backward(g)
        assert out_c.dtype == out_r.dtype
        assert_same(out_c, out_r, **tol)
        assert_same(xc.grad, xr.grad, **tol)
        if exact_m is not None:
            exact_m(x.double()).backward(g.double())
            assert_same(m.weight.grad, exact_m.weight.grad.float(), atol=1e-4, rtol=1e-4)
            assert_same(m.bias.grad, exact_m.bias.grad.float(), atol=1e-4, rtol=1e-4)
        elif affine:
            assert_same(m.weight.grad, ref_m.weight.grad, **tol)
            assert_same(m.bias.grad, ref_m.bias.grad, **tol)
    assert_same(m.running_mean, ref_m.running_mean, **tol)
    assert_same(m.running_var, ref_m.running_var, **tol)


@_bn_cases
def test_batch_norm_eval(shape, affine, dtype):
    # BatchNorm with running statistics (eval; src/expand.c): one scale and
    # shift per channel, in float32 for bfloat16 inputs with
    # float32 parameters as under autocast
    m = _bn_module(shape, affine, False)
    with torch.no_grad():
        m.running_mean.uniform_(-1, 1)
        m.running_var.uniform_(0.5, 2)
    if dtype == torch.float64:
        m = m.double()
    x = torch.randn(shape, device=DEVICE, dtype=dtype)
    with torch.no_grad():
        ref = m(x)
        out = compile_fn(m)(x)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    assert out.dtype == ref.dtype
    assert_same(out, ref, **tol)
    assert not ember_stats()["fallbacks"], ember_stats()["fallbacks"]


def _act_cases():
    """act x dtype: float32 and bfloat16; float64 and float16 SLOW_ON_CPU, but for gelu's float64
    (the one dtype where gelu(+inf) is compared, below)."""
    return [pytest.param(act, dt, id=f"{act}-{dt}", marks=() if dt in (torch.float32, torch.bfloat16)
                         or (act, dt) == ("gelu", torch.float64) else SLOW_ON_CPU)
            for act in ("relu", "threshold", "sigmoid", "tanh", "gelu", "gelu_tanh")
            for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16)]


@pytest.mark.parametrize("act, dtype", _act_cases())
def test_activation_backward_special_values(act, dtype):
    # the activations' backwards are ember ops of their own (not torch's
    # decompositions): their gradients at NaN, infinities and zero, against eager
    fn = {"relu": torch.relu, "threshold": lambda x: F.threshold(x, 0.5, -1.0), "sigmoid": torch.sigmoid,
          "tanh": torch.tanh, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[act]

    def f(x, g):
        y = fn(x)
        (gx,) = torch.autograd.grad(y, x, g)
        return y, gx

    torch.manual_seed(0)
    x0 = torch.randn(67) * 4
    x0[3], x0[5], x0[7], x0[9], x0[11] = float("nan"), float("inf"), -float("inf"), 0.0, 0.5
    x0, g = x0.to(DEVICE, dtype), torch.randn(67).to(DEVICE, dtype)
    xr, xc = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    ref, got = f(xr, g), compile_fn(f)(xc, g)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype in (torch.bfloat16, torch.float16) else {}
    if act == "gelu" and dtype != torch.float64:
        # eager's gelu(+inf) is NaN for a contiguous input (oneDNN's kernel) and
        # +inf for any other (ATen's formula, as ember and Inductor)
        ref, got = [t.masked_fill(x0 == float("inf"), 0) for t in ref], [t.masked_fill(x0 == float("inf"), 0) for t in got]
    for a, b in zip(got, ref):
        assert_same(a, b, **tol)
