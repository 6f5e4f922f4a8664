"""src/prelude_cuda.h against src/prelude_c.h (both with the shared
src/prelude.h), on the GPU machine.

    python3 tools/gpu/prelude_cuda_check.py [--compile-only] [--out DIR]

tests/test_gpu_prelude.py runs it (the --compile-only half wherever NVRTC is
installed).

1. Every em_* function on edge values (NaN, -NaN, +-Inf, +-0, tiny and
   subnormal, huge, int64 limits, negative operands), for float, double and
   int64_t: a CUDA kernel (NVRTC, prelude_cuda.h) and a C harness (gcc,
   prelude.h, called through ctypes) run the same generated switch; the
   results are compared bit for bit.  Both are built without contraction
   (NVRTC --fmad=false, gcc -ffp-contract=off) so that the comparison is
   exact; a NaN matches any NaN (the GPU's NaNs are canonical, x86's are not).
   The transcendental functions (and the ops built on them) may differ by a
   few ULP: their maximum ULP distance is reported, not failed, unless one
   side is NaN or infinite and the other not.  The same kernel built with
   ember's own options (fmad on) is compared too, for information.
2. The storage conversions: (float)em_half for all 65536 bit patterns,
   (em_half) from float, double and int64_t on sweeps and on every rounding
   tie, the bfloat16 and raw float16 helpers; bit for bit against gcc's
   _Float16 and prelude.h.
3. The block reductions (em_block_sum/prod/max/min/or/and/argmax/argmin) for
   several block sizes and row lengths against numpy: every thread must get
   the same result, and it must be numpy's.

--compile-only (any machine with gcc and libnvrtc, no GPU): builds the C
harness, runs its CPU half, and compiles the CUDA sources with NVRTC.
"""
import argparse
import ctypes
import glob
import json
import shutil
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRELUDE = os.path.join(ROOT, "src", "prelude_c.h")
PRELUDE_CUDA = os.path.join(ROOT, "src", "prelude_cuda.h")

# ------------------------------------------------------------------ the ops
# name -> arity; which compute types; the result type ('v': the compute type,
# 'i': int64_t)
UN = ("abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh "
      "tanh asinh acosh atanh erf erfc sigmoid recip sign floor ceil round trunc frac relu silu gelu "
      "gelu_tanh lnot isnan isinf isposinf isneginf isfinite signbit to_bool to_int to_int32").split()
BIN = ("add sub mul div trunc_div floordiv remainder fmod pow pow_ts max min fmax fmin atan2 hypot "
       "copysign eq ne lt le gt ge land lor lxor sigmoid_bw tanh_bw gelu_bw gelu_tanh_bw leaky_relu "
       "max_nan min_nan").split()
TER = "softplus threshold clamp lerp threshold_bw where".split()
QUA = "elu nan_to_num addcmul addcdiv".split()
NARROW = ["to_int16", "to_int8", "to_uint8"]
I_UN = ("abs neg sign relu bnot lnot signbit floor ceil round trunc isnan isinf isposinf isneginf "
        "isfinite to_bool to_int to_int32").split()
I_BIN = ("add sub mul div trunc_div floordiv remainder fmod pow pow_ts max min fmax fmin eq ne lt le "
         "gt ge land lor lxor band bor bxor max_nan min_nan").split()
I_TER = "clamp threshold threshold_bw where".split()
I_QUA = "addcmul nan_to_num".split()
INT_RESULT = set("lnot isnan isinf isposinf isneginf isfinite signbit to_bool to_int to_int32 eq ne lt "
                 "le gt ge land lor lxor".split()) | set(NARROW)
# the ops that call exp, log, sin, erf, pow ... (libm on the CPU, libdevice on the GPU)
TRANSC = set("exp exp2 expm1 log log2 log10 log1p sin cos tan asin acos atan sinh cosh tanh asinh acosh "
             "atanh erf erfc sigmoid silu gelu gelu_tanh elu softplus gelu_bw gelu_tanh_bw pow pow_ts "
             "atan2 hypot".split())


def call(op, n):
    if op == "where":
        return "em_where((int64_t)(a != 0), b, c)" if n == "fp" else "em_where(a, b, c)"
    if op in NARROW:
        t = {"to_int16": "int16_t", "to_int8": "int8_t", "to_uint8": "uint8_t"}[op]
        return "(int64_t)(%s)em_to_int32(a)" % t
    ar = 1 if op in UN + I_UN else 2 if op in BIN + I_BIN else 3 if op in TER + I_TER else 4
    return "em_%s(%s)" % (op, ", ".join("abcd"[:ar]))


def arity(op):
    if op in UN or op in I_UN or op in NARROW:
        return 1
    if op in BIN or op in I_BIN:
        return 2
    if op in TER or op in I_TER:
        return 3
    return 4


F_OPS = UN + NARROW + BIN + TER + QUA
I_OPS = I_UN + I_BIN + I_TER + I_QUA
TYPES = [("f", "float", F_OPS), ("d", "double", F_OPS), ("i", "int64_t", I_OPS)]


def gen_body():
    """The switch shared by the C and the CUDA harness (DEV, BITS, HB, HBITS
    are defined per side)."""
    s = []
    for suf, T, ops in TYPES:
        s.append("DEV uint64_t eval_%s(int op, %s a, %s b, %s c, %s d) {" % (suf, T, T, T, T))
        s.append("  (void)b; (void)c; (void)d;\n  switch (op) {")
        for k, op in enumerate(ops):
            s.append("  case %d: return BITS(%s);" % (k, call(op, "fp" if suf != "i" else "i")))
        s.append("  }\n  return 0;\n}")
    # storage conversions: the input is raw bits (u16, f32, f64 or i64 by kind)
    s.append("""DEV uint64_t conv(int kind, uint64_t u) {
  float f = em_f32_from_bits((uint32_t)u);
  double d = F64(u);
  switch (kind) {
  case 0: return BITS((float)HB((uint16_t)u));        /* (float)em_half */
  case 1: return HBITS((em_half)(f));                  /* (em_half)float */
  case 2: return HBITS((em_half)(d));                  /* (em_half)double */
  case 3: return HBITS((em_half)((int64_t)u));         /* (em_half)int64_t */
  case 4: return BITS(em_f16_to_f32((uint16_t)u));
  case 5: return (uint64_t)em_f32_to_f16(f);
  case 6: return BITS(em_bf16_to_f32((uint16_t)u));
  case 7: return (uint64_t)em_f32_to_bf16(f);
  case 8: return BITS((float)(em_half)(d));            /* codegen's conv(F64 -> F16) */
  }
  return 0;
}""")
    return "\n".join(s) + "\n"


C_HEAD = r"""
#include <string.h>
#include "%s"
#define DEV static
#define BITS(x) _Generic((x), float: (uint64_t)em_f32_bits(x), double: em_f64_bits(x), \
                         default: (uint64_t)(int64_t)(x))
static double F64(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static em_half HB(uint16_t u) { em_half h; memcpy(&h, &u, 2); return h; }
static uint64_t HBITS(em_half h) { uint16_t u; memcpy(&u, &h, 2); return u; }
"""
C_TAIL = r"""
#define RUN(s, T) \
  void run_##s(int op, long n, const T *a, const T *b, const T *c, const T *d, uint64_t *o) { \
    for (long i = 0; i < n; i++) o[i] = eval_##s(op, a[i], b[i], c[i], d[i]); \
  }
RUN(f, float) RUN(d, double) RUN(i, int64_t)
void run_conv(int kind, long n, const uint64_t *in, uint64_t *o) {
  for (long i = 0; i < n; i++) o[i] = conv(kind, in[i]);
}
"""

CU_HEAD = r"""
#define DEV static __device__
__device__ uint64_t BITS(float x) { return em_f32_bits(x); }
__device__ uint64_t BITS(double x) { return em_f64_bits(x); }
__device__ uint64_t BITS(int64_t x) { return (uint64_t)x; }
__device__ double F64(uint64_t u) { return __longlong_as_double((long long)u); }
__device__ em_half HB(uint16_t u) { em_half h; h.bits = u; return h; }
__device__ uint64_t HBITS(em_half h) { return h.bits; }
"""
CU_TAIL = r"""
#define RUN(s, T) \
  extern "C" __global__ void run_##s(const int *ops, long long n, const T *a, const T *b, const T *c, \
                                     const T *d, uint64_t *o) { \
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; \
    if (i < n) o[blockIdx.y * n + i] = eval_##s(ops[blockIdx.y], a[i], b[i], c[i], d[i]); \
  }
RUN(f, float) RUN(d, double) RUN(i, int64_t)
extern "C" __global__ void run_conv(int kind, long long n, const uint64_t *in, uint64_t *o) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = conv(kind, in[i]);
}

/* compile-time checks of the dispatch: result types as prelude.h's _Generic
   gives them, mixed operand types, what must not compile */
template <class A, class B> struct em_same { static const bool v = false; };
template <class A> struct em_same<A, A> { static const bool v = true; };
template <class T, class = void> struct em_has_sin { static const bool v = false; };
template <class T> struct em_has_sin<T, decltype((void)em_sin(T()))> { static const bool v = true; };
template <class T, class = void> struct em_has_bnot { static const bool v = false; };
template <class T> struct em_has_bnot<T, decltype((void)em_bnot(T()))> { static const bool v = true; };
extern "C" __global__ void types(float f, double d, int64_t i, float *of, int64_t *oi) {
  static_assert(em_same<decltype(em_add(f, f)), float>::v, "");
  static_assert(em_same<decltype(em_add(d, d)), double>::v, "");
  static_assert(em_same<decltype(em_add(i, i)), int64_t>::v, "");
  static_assert(em_same<decltype(em_add(f, 1.0)), float>::v, "dispatch on the first operand");
  static_assert(em_same<decltype(em_add(d, f)), double>::v, "");
  static_assert(em_same<decltype(em_add(i, 1)), int64_t>::v, "");
  static_assert(em_same<decltype(em_sin(f)), float>::v, "");
  static_assert(em_same<decltype(em_gelu(d)), double>::v, "");
  static_assert(em_same<decltype(em_eq(f, f)), int64_t>::v, "");
  static_assert(em_same<decltype(em_isnan(d)), int64_t>::v, "");
  static_assert(em_same<decltype(em_where(i, f, f)), float>::v, "");
  static_assert(em_same<decltype(em_where(i, d, d)), double>::v, "");
  static_assert(em_same<decltype(em_where(i, i, i)), int64_t>::v, "");
  static_assert(em_same<decltype(em_where(1, d, 2.0f)), double>::v, "");
  static_assert(em_same<decltype(em_lerp(f, f, f)), float>::v, "");
  static_assert(em_same<decltype(em_clamp(i, i, i)), int64_t>::v, "");
  static_assert(em_same<decltype(em_to_int(f)), int64_t>::v, "");
  static_assert(em_same<decltype(em_f32_to_bf16(f)), uint16_t>::v, "");
  static_assert(em_same<decltype(em_max_nan(f, f)), float>::v, "");
  static_assert(em_same<decltype(em_block_sum(f)), float>::v, "");
  static_assert(em_same<decltype(em_block_or(i)), int64_t>::v, "");
  static_assert(em_has_sin<float>::v && em_has_sin<double>::v && !em_has_sin<int64_t>::v, "no em_sin on int64_t");
  static_assert(em_has_bnot<int64_t>::v && !em_has_bnot<float>::v, "em_bnot on int64_t only");
  static_assert(sizeof(em_half) == 2 && __is_trivially_copyable(em_half), "em_half is 2 trivial bytes");
  static_assert(sizeof(int64_t) == 8 && sizeof(int32_t) == 4 && sizeof(int16_t) == 2 && sizeof(int8_t) == 1, "");
  em_half h = (em_half)(f), hd = (em_half)(d), hi = (em_half)(i);
  em_half arr[2] = {h, hd};
  arr[1] = hi;
  of[0] = (float)h + (float)arr[1] + (float)(double)hd + ((float)NAN) + -INFINITY + em_lerp(f, 1.0, 0.5);
  oi[0] = INT64_MIN + INT64_MAX + INT32_MIN + INT32_MAX + em_ifloordiv(i, 3) + em_ifloormod(i, 3) +
          em_imin(i, 2) + em_imax(i, 2) + em_to_int32(d) + (int64_t)(int8_t)em_to_int32(f);
}
"""

# the block reductions: each row's partials as codegen_cuda.c makes them,
# combined by the helpers (several in a row), every thread's results stored
RED_CU = r"""
template <class T> __device__ T lo_val();
template <> __device__ float lo_val<float>() { return -INFINITY; }
template <> __device__ double lo_val<double>() { return -(double)INFINITY; }
template <> __device__ int64_t lo_val<int64_t>() { return INT64_MIN; }
template <class T> __device__ T hi_val();
template <> __device__ float hi_val<float>() { return INFINITY; }
template <> __device__ double hi_val<double>() { return (double)INFINITY; }
template <> __device__ int64_t hi_val<int64_t>() { return INT64_MAX; }

template <class T>
__device__ void red(const T *x, const long long *len, long long lmax, T *vo, long long *io) {
  const long long row = blockIdx.x, L = len[row], B = blockDim.x, t = threadIdx.x;
  const T *xr = x + row * lmax;
  T s = 0, p = 1, mx = lo_val<T>(), mn = hi_val<T>(), am = lo_val<T>(), an = hi_val<T>();
  int64_t nmx = 0, nmn = 0, jm = 0, jn = 0, o = 0, a = 1;
  for (long long r = t; r < L; r += B) {
    T v = xr[r];
    s = em_add(s, v);
    p = em_mul(p, v);
    mx = v > mx ? v : mx;
    nmx |= v != v;
    mn = v < mn ? v : mn;
    nmn |= v != v;
    if (am == am && (v != v || v > am)) { am = v; jm = r; }
    if (an == an && (v != v || v < an)) { an = v; jn = r; }
    o |= v != 0;
    a &= v != 0;
  }
  s = em_block_sum(s);
  p = em_block_prod(p);
  mx = em_block_max(mx);
  nmx = em_block_or(nmx);
  mn = em_block_min(mn);
  nmn = em_block_or(nmn);
  em_block_argmax(am, jm);
  em_block_argmin(an, jn);
  o = em_block_or(o);
  a = em_block_and(a);
  int64_t k1 = em_block_sum((int64_t)t), k2 = em_block_max((int64_t)(t * 7 % 61));
  T k3 = em_block_sum((T)(t & 3));
  T *vr = vo + (row * B + t) * 5;
  long long *ir = io + (row * B + t) * 8;
  vr[0] = s, vr[1] = p, vr[2] = nmx ? (T)NAN : mx, vr[3] = nmn ? (T)NAN : mn, vr[4] = k3;
  ir[0] = jm, ir[1] = jn, ir[2] = o, ir[3] = a, ir[4] = k1, ir[5] = k2, ir[6] = nmx, ir[7] = nmn;
}
extern "C" __global__ void red_f(const float *x, const long long *len, long long lmax, float *vo, long long *io) { red(x, len, lmax, vo, io); }
extern "C" __global__ void red_d(const double *x, const long long *len, long long lmax, double *vo, long long *io) { red(x, len, lmax, vo, io); }
extern "C" __global__ void red_i(const int64_t *x, const long long *len, long long lmax, int64_t *vo, long long *io) { red(x, len, lmax, vo, io); }
"""


# --------------------------------------------------------------- the inputs
def f_edge():
    v = [0.0, -0.0, 1e-30, -1e-30, 1e-40, -1e-40, 1e-310, 0.1, -0.1, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5,
         2.0, -2.0, 2.5, -2.5, 3.0, -3.0, 0.7, -0.3, 5.5, -7.25, 10.0, 88.5, 89.2, -89.2, 100.0, -104.0,
         710.0, -745.5, 1e10, -1e10, 2.0 ** 31, -(2.0 ** 31) - 1, 2.0 ** 63, -(2.0 ** 63), 3e38, -3e38,
         2.0 ** 127, 1e300, -1e300, 0.9999, 1.0001, -0.9999, 1e-8, 4.0, -4.0]
    bits = [0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000000, 0xfff0000000000000]
    return [struct.unpack("<d", struct.pack("<Q", b))[0] for b in bits] + v


F_SMALL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-40, 0.5, -0.5, 1.0, -1.0, 2.0, -3.0,
           1e10, 3e38]
F_TINY = [float("nan"), float("inf"), 0.0, -0.0, 0.5, -1.0, 2.0, -3.0]
I_EDGE = [-2 ** 63, -2 ** 63 + 1, -2 ** 40, -1000, -64, -7, -3, -2, -1, 0, 1, 2, 3, 7, 63, 64, 1000,
          2 ** 31, 2 ** 40, 2 ** 63 - 2, 2 ** 63 - 1]
I_SMALL = [-2 ** 63, -7, -2, -1, 0, 1, 2, 3, 64, 2 ** 63 - 1]


def f32_array(vals):
    """float32 with the NaN signs kept (astype might not)."""
    with np.errstate(over="ignore"):
        a = np.array(vals, dtype=np.float64).astype(np.float32)
    u = a.view(np.uint32)
    for k, x in enumerate(vals):
        if x != x:
            u[k] = 0xffc00000 if math.copysign(1.0, x) < 0 else 0x7fc00000
    return a


def cases(suf, ar):
    if suf == "i":
        base = I_EDGE if ar <= 2 else I_SMALL
        grid = np.array(np.meshgrid(*([np.array(base, dtype=np.int64)] * ar), indexing="ij")).reshape(ar, -1)
        cols = [grid[k] for k in range(ar)] + [np.zeros(grid.shape[1], np.int64)] * (4 - ar)
        return [np.ascontiguousarray(c) for c in cols]
    base = f_edge() if ar <= 2 else F_SMALL if ar == 3 else F_TINY
    idx = np.array(np.meshgrid(*([np.arange(len(base))] * ar), indexing="ij")).reshape(ar, -1)
    arr = f32_array(base) if suf == "f" else np.array(base, dtype=np.float64)
    if suf == "d":  # keep -NaN's sign
        arr.view(np.uint64)[1] = 0xfff8000000000000
    zero = np.zeros(idx.shape[1], arr.dtype)
    cols = [arr[idx[k]] for k in range(ar)] + [zero] * (4 - ar)
    return [np.ascontiguousarray(c) for c in cols]


def sweep_cases(suf, op, n=200000):
    """Random operands for the ULP sweep of a transcendental op."""
    rng = np.random.default_rng(zlib.crc32((suf + op).encode()))
    ft = np.float32 if suf == "f" else np.float64
    emax = 38 if suf == "f" else 307

    def mix(m):
        k = m // 4
        wide = np.sign(rng.standard_normal(k)) * 10.0 ** rng.uniform(-emax - 6 if suf == "f" else -emax, emax, k)
        return np.concatenate([rng.uniform(-10, 10, m - 3 * k), rng.uniform(-1, 1, k), wide,
                               rng.uniform(-100, 100, k)])
    ar = arity(op)
    with np.errstate(over="ignore"):
        cols = [mix(n).astype(ft) for _ in range(ar)]
    if op in ("pow", "pow_ts"):
        cols[0] = np.abs(cols[0]) * np.where(rng.random(n) < 0.1, -1, 1).astype(ft)
        cols[1] = rng.uniform(-30, 30, n).astype(ft)
        cols[1][: n // 4] = np.round(cols[1][: n // 4])
    if op in ("elu",):
        cols[1:] = [np.ones(n, ft), np.ones(n, ft), np.ones(n, ft)]
    if op == "softplus":
        cols[1:] = [np.ones(n, ft), np.full(n, 20, ft)]
    cols += [np.zeros(n, ft)] * (4 - ar)
    return [np.ascontiguousarray(c) for c in cols]


def conv_inputs():
    """kind -> uint64 array of raw input bits."""
    rng = np.random.default_rng(1)
    u16 = np.arange(65536, dtype=np.uint64)
    # float sweep, every float16 rounding tie (and one float ulp either side), overflow edges
    sweep = np.arange(0, 1 << 32, 65521, dtype=np.uint64)
    h = np.arange(0, 0x7c00, dtype=np.uint32)                       # finite positive halves
    f16 = np.array([struct.unpack("<e", struct.pack("<H", int(x)))[0] for x in h], dtype=np.float64)
    nxt = np.append(f16[1:], 65536.0)                                # next half (65536: the overflow tie)
    mid = (f16 + nxt) / 2                                            # exact in float and double
    midf = mid.astype(np.float32)
    mb = midf.view(np.uint32).astype(np.uint64)
    fl = np.concatenate([sweep, mb, mb + 1, mb - 1, mb | 0x80000000, (mb + 1) | 0x80000000,
                         np.array([0x7f800001, 0xff800001, 0x7fc00000, 0xffc00000, 0x7fbfffff, 0x7fc02000,
                                   0x477fe000, 0x477fefff, 0x477ff000, 0x33000000, 0x33000001, 0x32ffffff,
                                   0x33800000, 0x33c00000], dtype=np.uint64)])
    # doubles: the same ties, one double ulp either side (a double rounding through float would
    # get these wrong), random doubles, NaNs with payloads
    md = mid.view(np.uint64)
    rnd = rng.uniform(-70000, 70000, 20000).view(np.uint64)
    tiny = (rng.uniform(-1, 1, 5000) * 2.0 ** -20).view(np.uint64)
    db = np.concatenate([md, md + 1, md - 1, md | (1 << 63), (md + 1) | (1 << 63), rnd, tiny,
                         np.array([0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001,
                                   0x7ff4000000000000, 0xfff0000000000000, 0x7ff0000000000000,
                                   0x40effc0000000000, 0x40effc0000000001, 0x40effbffffffffff], dtype=np.uint64)])
    ints = np.concatenate([np.arange(-70000, 70000, dtype=np.int64),
                           np.array([-2 ** 63, 2 ** 63 - 1, 2 ** 40 + 1, -2 ** 40 - 1, 65519, 65520, 65535,
                                     2049, 2051, 4097, 4099, -2049, -4099], dtype=np.int64),
                           rng.integers(-2 ** 63, 2 ** 63 - 1, 5000, dtype=np.int64)]).view(np.uint64)
    bf_sweep = np.concatenate([fl, (np.arange(65536, dtype=np.uint64) << 16) | 0x8000,
                               (np.arange(65536, dtype=np.uint64) << 16) | 0x7fff])
    return {0: u16, 1: fl, 2: db, 3: ints, 4: u16, 5: fl, 6: u16, 7: bf_sweep, 8: db}


CONV_NAMES = {0: "(float)em_half", 1: "(em_half)float", 2: "(em_half)double", 3: "(em_half)int64_t",
              4: "em_f16_to_f32", 5: "em_f32_to_f16", 6: "em_bf16_to_f32", 7: "em_f32_to_bf16",
              8: "(float)(em_half)double"}


# ---------------------------------------------------------------- comparing
def ordered(bits, is32):
    if is32:
        i = (bits & 0xffffffff).astype(np.uint32).view(np.int32).astype(np.int64)
        return np.where(i < 0, np.int64(-2 ** 31) - i, i)
    i = bits.view(np.int64)
    with np.errstate(over="ignore"):
        return np.where(i < 0, np.int64(-2 ** 63) - i, i)


def compare(suf, op, got, want, ins):
    """(mismatches, max ulp, worst input) for one op."""
    if suf == "i" or op in INT_RESULT:
        bad = np.nonzero(got != want)[0]
        return bad, 0, None
    is32 = suf == "f"
    if is32:
        g = got.astype(np.uint32).view(np.float32)
        w = want.astype(np.uint32).view(np.float32)
    else:
        g, w = got.view(np.float64), want.view(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    same = (got == want) | (gn & wn)
    if op not in TRANSC:
        return np.nonzero(~same)[0], 0, None
    # transcendental: ULP distance where both are finite; NaN / inf must agree
    fin = np.isfinite(g) & np.isfinite(w)
    hard = ~same & ~fin
    with np.errstate(over="ignore"):
        d = np.abs(ordered(got, is32) - ordered(want, is32))
    d = np.where(fin, d, 0)
    k = int(np.argmax(d)) if len(d) else 0
    worst = None
    if len(d) and d[k] > 0:
        worst = [float(c[k]) for c in ins[:arity(op)]] + [float(g[k]), float(w[k])]
    return np.nonzero(hard)[0], int(d.max()) if len(d) else 0, worst


# -------------------------------------------------------------- compilation
def build_c(tmp):
    src = C_HEAD % PRELUDE + gen_body() + C_TAIL
    path = os.path.join(tmp, "ref.c")
    with open(path, "w") as fh:
        fh.write(src)
    so = os.path.join(tmp, "ref.so")
    cc = os.environ.get("CC") or next((c for c in ("gcc", "cc") if shutil.which(c)), "gcc")
    cmd = [cc, "-std=gnu11", "-O2", "-fno-tree-vectorize", "-march=native", "-ffp-contract=off",
           "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-shared", "-w", "-o", so, path, "-lm"]
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(so)


def find_nvrtc():
    names = [os.environ.get("EM_NVRTC", "")]
    for p in sys.path:
        names += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib", "libnvrtc.so*")))
        names += sorted(glob.glob(os.path.join(p, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")))
    names += ["libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"]
    for n in names:
        if not n or "builtins" in n:
            continue
        try:
            return ctypes.CDLL(n), n
        except OSError:
            pass
    raise RuntimeError("no libnvrtc found (set EM_NVRTC)")


def nvrtc_compile(lib, src, opts):
    """-> (cubin bytes or None, log)."""
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"check.cu", 0, None, None) == 0
    o = [x.encode() for x in opts]
    r = lib.nvrtcCompileProgram(prog, len(o), (ctypes.c_char_p * len(o))(*o))
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, log)
    cubin = None
    if r == 0:
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetCUBIN(prog, buf)
        cubin = buf.raw
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return cubin, log.value.decode(errors="replace")


# ember's options (src/cuda.c), and the exact variant
EMBER_OPTS = ["--gpu-architecture=sm_90", "-default-device", "--std=c++17", "-ftz=false", "-prec-div=true",
              "-prec-sqrt=true", "--include-path=" + os.path.join(ROOT, "src")]
EXACT_OPTS = EMBER_OPTS + ["--fmad=false"]


def cuda_sources():
    prelude = open(PRELUDE_CUDA).read()
    ops = prelude + CU_HEAD + gen_body() + CU_TAIL
    red = prelude + RED_CU
    return ops, red


# -------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile-only", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT"))
    args = ap.parse_args()
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="prelude_cuda_")
    summary = {"fail": []}

    def fail(msg):
        summary["fail"].append(msg)
        if len(summary["fail"]) <= 60:
            print("FAIL", msg)

    lib = build_c(tmp)
    nvrtc, nvname = find_nvrtc()
    ops_src, red_src = cuda_sources()
    with open(os.path.join(tmp, "ops.cu"), "w") as fh:
        fh.write(ops_src)
    cubins = {}
    for name, src, opts in [("ops_exact", ops_src, EXACT_OPTS), ("ops_ember", ops_src, EMBER_OPTS),
                            ("red", red_src, EMBER_OPTS)]:
        t = time.time()
        cubin, log = nvrtc_compile(nvrtc, src, opts)
        if cubin is None:
            print(log)
            fail("NVRTC could not compile %s" % name)
            break
        if log.strip():
            print("NVRTC log for %s:\n%s" % (name, log))
        cubins[name] = cubin
        print("compiled %s with %s in %.1f s (%d bytes)" % (name, os.path.basename(nvname), time.time() - t,
                                                              len(cubin)))

    # CPU reference
    cpu = {}
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
    for suf, T, ops in TYPES:
        for k, op in enumerate(ops):
            ins = cases(suf, arity(op))
            out = np.zeros(len(ins[0]), np.uint64)
            getattr(lib, "run_" + suf)(ctypes.c_int(k), ctypes.c_long(len(out)), *[ptr(c) for c in ins], ptr(out))
            cpu[(suf, op)] = (out, ins)
    cin = conv_inputs()
    cconv = {}
    for kind, inp in cin.items():
        out = np.zeros(len(inp), np.uint64)
        lib.run_conv(ctypes.c_int(kind), ctypes.c_long(len(inp)), ptr(inp), ptr(out))
        cconv[kind] = out
    ncases = sum(len(v[0]) for v in cpu.values())
    print("CPU reference: %d op cases, %d conversions" % (ncases, sum(len(v) for v in cin.values())))

    if args.compile_only or summary["fail"]:
        print("SUMMARY: compile-only: %s; %.1f s" % ("FAILED" if summary["fail"] else "ok", time.time() - t0))
        return 1 if summary["fail"] else 0

    import cupy as cp
    mods = {}
    for name, cubin in cubins.items():
        p = os.path.join(tmp, name + ".cubin")
        with open(p, "wb") as fh:
            fh.write(cubin)
        mods[name] = cp.RawModule(path=p)

    # 1. the ops
    def gpu_ops(mod):
        res = {}
        for suf, T, ops in TYPES:
            fn = mod.get_function("run_" + suf)
            for ar in (1, 2, 3, 4):
                sel = [k for k, op in enumerate(ops) if arity(op) == ar]
                if not sel:
                    continue
                ins = [cp.asarray(c) for c in cases(suf, ar)]
                n = len(ins[0])
                out = cp.zeros(len(sel) * n, cp.uint64)
                opa = cp.asarray(np.array(sel, np.int32))
                fn(((n + 255) // 256, len(sel)), (256,), (opa, np.int64(n), *ins, out))
                o = cp.asnumpy(out).reshape(len(sel), n)
                for r, k in enumerate(sel):
                    res[(suf, ops[k])] = o[r]
        cp.cuda.runtime.deviceSynchronize()
        return res

    exact = gpu_ops(mods["ops_exact"])

    # 1b. a random sweep of the transcendental ops, for their ULP statistics
    sweep = {}
    for suf, T, ops in TYPES[:2]:
        fn = mods["ops_exact"].get_function("run_" + suf)
        for k, op in enumerate(ops):
            if op not in TRANSC:
                continue
            ins = sweep_cases(suf, op)
            n = len(ins[0])
            want = np.zeros(n, np.uint64)
            getattr(lib, "run_" + suf)(ctypes.c_int(k), ctypes.c_long(n), *[ptr(c) for c in ins], ptr(want))
            out = cp.zeros(n, cp.uint64)
            fn(((n + 255) // 256, 1), (256,), (cp.asarray(np.array([k], np.int32)), np.int64(n),
                                               *[cp.asarray(c) for c in ins], out))
            got = cp.asnumpy(out)
            bad, ulp, worst = compare(suf, op, got, want, ins)
            sweep.setdefault(op, {})[suf] = (ulp, worst, int(len(bad)))
            if len(bad):
                j = bad[0]
                fail("sweep %s em_%s: %d NaN/inf disagreements, e.g. args %s: gpu %#x cpu %#x" % (
                    suf, op, len(bad), [c[j] for c in ins[:arity(op)]], int(got[j]), int(want[j])))
    ulps = {}
    nexact = 0
    for (suf, op), (want, ins) in cpu.items():
        got = exact[(suf, op)]
        bad, ulp, worst = compare(suf, op, got, want, ins)
        if op in TRANSC and suf != "i":
            ulps.setdefault(op, {})[suf] = (ulp, worst)
        else:
            nexact += 1
        if len(bad):
            k = bad[0]
            fail("%s em_%s: %d of %d differ, e.g. args %s: gpu %#x cpu %#x" % (
                {"f": "float", "d": "double", "i": "int64"}[suf], op, len(bad), len(got),
                [c[k] for c in ins[:arity(op)]], int(got[k]), int(want[k])))
    ember = gpu_ops(mods["ops_ember"])
    fmad_diff = {}
    for (suf, op), (want, ins) in cpu.items():
        if op in TRANSC:
            continue
        got = ember[(suf, op)]
        bad, _, _ = compare(suf, op, got, want, ins)
        if len(bad):
            fmad_diff["%s:%s" % (suf, op)] = int(len(bad))

    # 2. conversions
    fn = mods["ops_exact"].get_function("run_conv")
    conv_bad = {}
    for kind, inp in cin.items():
        d_in = cp.asarray(inp)
        out = cp.zeros(len(inp), cp.uint64)
        fn(((len(inp) + 255) // 256,), (256,), (np.int32(kind), np.int64(len(inp)), d_in, out))
        got = cp.asnumpy(out)
        bad = np.nonzero(got != cconv[kind])[0]
        conv_bad[CONV_NAMES[kind]] = (int(len(bad)), len(inp))
        if len(bad):
            k = bad[0]
            fail("%s: %d of %d differ, e.g. input %#x: gpu %#x cpu %#x" % (
                CONV_NAMES[kind], len(bad), len(inp), int(inp[k]), int(got[k]), int(cconv[kind][k])))

    # 3. block reductions
    red_stats = reductions(cp, mods["red"], fail)

    # report
    print("\nmax ULP, GPU (libdevice) against CPU (glibc): edge values float, double | random sweep "
          "(200k) float, double:")
    for op in sorted(ulps):
        f, d = ulps[op].get("f", (0, None)), ulps[op].get("d", (0, None))
        sf, sd = sweep[op].get("f", (0, None, 0)), sweep[op].get("d", (0, None, 0))
        note = []
        for lbl, r in (("edge f", f), ("edge d", d), ("sweep f", sf), ("sweep d", sd)):
            if r[0] > 4:
                note.append("%s worst at %s" % (lbl, r[1]))
        print("  %-13s %6d %6d | %6d %6d   %s" % (op, f[0], d[0], sf[0], sd[0], "; ".join(note)))
    print("\nconversions (mismatches / cases):", {k: "%d/%d" % v for k, v in conv_bad.items()})
    print("block reductions:", red_stats)
    print("with ember's options (fmad on), non-transcendental ops that differ from the CPU (cases):",
          fmad_diff or "none")
    summary.update(ulps={k: {s: v[0] for s, v in d.items()} for k, d in ulps.items()},
                   sweep_ulps={k: {s: v[0] for s, v in d.items()} for k, d in sweep.items()},
                   worst={k: {s: v[1] for s, v in d.items()} for k, d in sweep.items()},
                   conversions=conv_bad, reductions=red_stats, fmad_diff=fmad_diff,
                   exact_ops=nexact, cases=ncases, seconds=round(time.time() - t0, 1))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "prelude_cuda_check.json"), "w") as fh:
            json.dump(summary, fh, indent=1, default=str)
    print("\nSUMMARY: %s; %d op cases (%d exact op/type pairs bit-identical, %d transcendental within %d ULP "
          "float / %d ULP double), %d conversion cases, %d reduction rows x block sizes; %.1f s" % (
              "FAILED: %d problems" % len(summary["fail"]) if summary["fail"] else "ok", ncases, nexact,
              len(ulps), max(v.get("f", (0,))[0] for v in ulps.values()),
              max(v.get("d", (0,))[0] for v in ulps.values()), sum(v for _, v in conv_bad.values()),
              red_stats["rows"], time.time() - t0))
    return 1 if summary["fail"] else 0


def red_rows(suf, rng):
    """[(name, values, check prod)]"""
    ft = np.float32 if suf == "f" else np.float64
    rows = []
    for L in (1, 5, 31, 33, 100, 777, 1000, 4099):
        if suf == "i":
            rows.append(("small", rng.integers(-8, 9, L).astype(np.int64), True))
            rows.append(("wide", rng.integers(-2 ** 63, 2 ** 63 - 1, L, dtype=np.int64), True))
            rows.append(("ones", rng.choice(np.array([1, -1, 1, 1, 2], np.int64), L), True))
            continue
        ints = rng.integers(-8, 9, L).astype(ft)
        rows.append(("ints", ints, False))
        nan = ints.copy()
        nan[rng.integers(0, L, 1 + L // 500)] = np.nan
        rows.append(("nan", nan, False))
        rows.append(("pow2", rng.choice(np.array([1, -1, 1, -1, 1, -1, 1, -1, 2, 0.5], ft), L), True))
        rows.append(("-inf", np.full(L, -np.inf, ft), True))
        rows.append(("zeros", rng.choice(np.array([0.0, -0.0], ft), L), True))
        rows.append(("randn", rng.standard_normal(L).astype(ft), False))
        mix = rng.standard_normal(L).astype(ft)
        mix[rng.integers(0, L, 1 + L // 300)] = np.inf
        mix[rng.integers(0, L, 1 + L // 300)] = -np.inf
        rows.append(("inf", mix, False))
    return rows


def expect(suf, name, x):
    """(sum, prod, max, min, argmax, argmin, any, all) as numpy / Python see them."""
    if suf == "i":
        s = int(sum(int(v) for v in x)) % 2 ** 64
        p = 1
        for v in x:
            p = p * int(v) % 2 ** 64
        w = lambda u: u - 2 ** 64 if u >= 2 ** 63 else u
        return (w(s), w(p), int(x.max()), int(x.min()), int(np.argmax(x)), int(np.argmin(x)),
                int(np.any(x != 0)), int(np.all(x != 0)))
    with np.errstate(all="ignore"):
        s = np.sum(x.astype(np.float64))
        p = np.prod(x.astype(np.float64))
    nan = bool(np.isnan(x).any())
    return (s, p, np.nan if nan else x.max(), np.nan if nan else x.min(), int(np.argmax(x)),
            int(np.argmin(x)), int(np.any(x != 0)), int(np.all(x != 0)))


def reductions(cp, mod, fail):
    rng = np.random.default_rng(7)
    nrows = 0
    worst_sum = 0.0
    for suf in ("f", "d", "i"):
        rows = red_rows(suf, rng)
        dt = {"f": np.float32, "d": np.float64, "i": np.int64}[suf]
        lmax = max(len(r[1]) for r in rows)
        X = np.zeros((len(rows), lmax), dt)
        lens = np.array([len(r[1]) for r in rows], np.int64)
        for k, r in enumerate(rows):
            X[k, :len(r[1])] = r[1]
        fn = mod.get_function("red_" + suf)
        want_all = [expect(suf, r[0], r[1]) for r in rows]
        for B in (32, 64, 96, 160, 256, 512, 1024):
            vo = cp.zeros(len(rows) * B * 5, dt)
            io = cp.zeros(len(rows) * B * 8, cp.int64)
            fn((len(rows),), (B,), (cp.asarray(X), cp.asarray(lens), np.int64(lmax), vo, io))
            V = cp.asnumpy(vo).reshape(len(rows), B, 5)
            I = cp.asnumpy(io).reshape(len(rows), B, 8)
            for k, (name, x, chk_prod) in enumerate(rows):
                nrows += 1
                tag = "%s B=%d row %s L=%d" % (suf, B, name, len(x))
                # every thread the same (bitwise)
                vb = V[k].view(np.uint32 if suf == "f" else np.uint64)
                if not ((vb == vb[0]).all() and (I[k] == I[k][0]).all()):
                    fail("%s: threads disagree" % tag)
                    continue
                v, i = V[k][0], I[k][0]
                s, p, mx, mn, am, an, o, a = want_all[k]
                if suf == "i":
                    gotv = [int(v[0]), int(v[1]), int(v[2]), int(v[3])]
                    want = [s, p, mx, mn]
                    if gotv != want:
                        fail("%s: sum/prod/max/min %s, want %s" % (tag, gotv, want))
                else:
                    nan = np.isnan(x).any()
                    exact_sum = name in ("ints", "pow2", "-inf", "zeros", "nan", "inf")
                    if np.isnan(s) or np.isinf(s) or exact_sum:
                        ok = (np.isnan(v[0]) and np.isnan(s)) or v[0] == s
                    else:
                        err = abs(float(v[0]) - s) / max(np.abs(x.astype(np.float64)).sum(), 1e-30)
                        worst_sum = max(worst_sum, err)
                        ok = err < (1e-6 if suf == "f" else 1e-14)
                    if not ok:
                        fail("%s: sum %r, want %r" % (tag, v[0], s))
                    if chk_prod and not ((np.isnan(v[1]) and np.isnan(p)) or v[1] == p):
                        fail("%s: prod %r, want %r" % (tag, v[1], p))
                    for what, g, w in (("max", v[2], mx), ("min", v[3], mn)):
                        if not ((np.isnan(g) and np.isnan(w)) or g == w):
                            fail("%s: %s %r, want %r" % (tag, what, g, w))
                    if name == "zeros" and (bool(np.signbit(v[2])) != bool(np.signbit(x).all()) or
                                            bool(np.signbit(v[3])) != bool(np.signbit(x).any())):
                        fail("%s: max should be +0.0 and min -0.0 where the row has one" % tag)
                    if bool(i[6]) != nan or bool(i[7]) != nan:
                        fail("%s: NaN flags %d %d" % (tag, i[6], i[7]))
                if (int(i[0]), int(i[1])) != (am, an):
                    fail("%s: argmax/argmin %d %d, want %d %d" % (tag, i[0], i[1], am, an))
                if (int(i[2]), int(i[3])) != (o, a):
                    fail("%s: or/and %d %d, want %d %d" % (tag, i[2], i[3], o, a))
                k3 = sum(t & 3 for t in range(B))
                if (int(i[4]), int(i[5]), float(v[4])) != (B * (B - 1) // 2, max(t * 7 % 61 for t in range(B)), k3):
                    fail("%s: repeated calls %d %d %r" % (tag, i[4], i[5], v[4]))
    return {"rows": nrows, "block_sizes": [32, 64, 96, 160, 256, 512, 1024],
            "worst_rel_sum_err_randn": worst_sum}


if __name__ == "__main__":
    sys.exit(main())
