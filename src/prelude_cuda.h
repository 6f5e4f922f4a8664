/*
 * prelude_cuda.h - the scalar functions every generated CUDA kernel calls:
 * the CUDA C++ counterpart of src/prelude.h, for NVRTC.
 *
 * codegen_cuda.c pastes this text at the top of each CUDA source, which NVRTC
 * compiles as C++17 (--std=c++17, sm_90 or any other sm_XX, no fast math).
 * NVRTC offers no headers here: no <stdint.h>, <math.h> or cuda_fp16.h.  What
 * it has built in is the CUDA math API (sinf, expf, erff, fmodf, nearbyintf,
 * copysignf, fmaf and their double versions), the intrinsics (__int_as_float,
 * __shfl_xor_sync, __syncthreads) and inline PTX; this file defines the rest:
 * the fixed-width integer typedefs, INT64_MIN and friends, INFINITY and NAN,
 * float16 storage (em_half) and bfloat16 conversions.
 *
 * Every em_* function of src/prelude.h is here under the same name with the
 * same semantics, edge cases included (NaN, +-Inf, -0.0, int64 wrap-around,
 * integer division by 0 giving 0 without a trap): the bodies are prelude.h's,
 * with CUDA's math functions in place of libm's.  Dispatch: where prelude.h
 * has a C11 _Generic macro that picks em_<op>_f, _d or _i by the type of its
 * first value operand, this file has C++ overloads of em_<op> on the type of
 * that operand (float, double, int64_t), the other operands converted to it
 * as a C call would (they are templates, so mixed operand types are not
 * ambiguous).  An op that takes no integers has no int64_t overload, so
 * calling it with int64_t is a compile error, as on the CPU.  em_where
 * dispatches on its second operand (the first is the int64_t condition).
 * The suffixed em_<op>_f/_d/_i functions exist too, as in prelude.h.
 *
 * Results are prelude.h's bit for bit, except
 *  - transcendental functions (exp, log, sin, erf, pow, ... and what is built
 *    on them: sigmoid, silu, gelu, softplus, elu, ...): CUDA's libdevice is
 *    within 1-4 ULP of the true value (CUDA programming guide, appendix
 *    "Mathematical functions"), glibc's libm and libmvec likewise, so the two
 *    may differ by a few ULP; composite formulas that cancel (gelu, erfc-like
 *    tails) can magnify that;
 *  - the payload and sign of a NaN that an operation produces (the GPU makes
 *    the canonical 0x7fffffff, x86 a negative "default NaN"); NaN inputs that
 *    are passed through unchanged keep their bits;
 *  - contraction: NVRTC contracts a * b + c into one fma by default
 *    (--fmad=true, as torch's own CUDA kernels are built), gcc on the CPU
 *    likewise with -march=native (-ffp-contract=fast); with --fmad=false here
 *    and -ffp-contract=off there, the non-transcendental ops agree bit for bit
 *    (tools/gpu/prelude_cuda_check.py checks this).
 *
 * Float to integer: a C++ cast of NaN or of an out-of-range float to int64_t
 * saturates on the GPU (NaN gives 0) where x86 gives INT64_MIN; em_to_int and
 * em_to_int32 give x86's answers on both targets, plain casts do not.
 *
 * Index helpers: em_ifloordiv, em_ifloormod, em_imin and em_imax, which
 * codegen_c.c appends to prelude.h's text, are defined here at the end, so
 * the CUDA code generator must not add its own.
 *
 * Block reductions: em_block_sum / _prod / _max / _min / _or / _and (float,
 * double, int64_t; or / and on int64_t) and em_block_argmax / _argmin (value
 * and index, by reference) combine one partial per thread over a 1-D block
 * (blockDim.x a multiple of 32, at most 1024; blockDim.y = blockDim.z = 1)
 * and give every thread the result.  Every thread of the block must call
 * them (they hold __syncthreads), in uniform control flow; calling several in
 * a row is safe.  See the section at the end for the combine rules.
 */
#ifndef EMBER_PRELUDE_CUDA_H
#define EMBER_PRELUDE_CUDA_H

/* ------------------------------------------------------------------ types */
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef unsigned long long uintptr_t;

#define INT64_MAX 0x7fffffffffffffffLL
#define INT64_MIN (-INT64_MAX - 1)
#define INT32_MAX 0x7fffffff
#define INT32_MIN (-INT32_MAX - 1)
/* NVRTC has no __builtin_huge_valf: the constants are bit casts, usable in
   device code (not in constant expressions).  NAN is x86's +quiet NaN. */
#define INFINITY (__int_as_float(0x7f800000))
#define NAN (__int_as_float(0x7fc00000))

#define EM_DEV static __device__ __forceinline__
/* a kernel source uses a few of these functions: no warning for the rest */
#pragma nv_diag_suppress 177

/* Dispatch on the first operand's type (the _Generic of prelude.h); the
   other operands are converted to it.  op##_##s is em_<op>_f, _d or _i. */
#define EM_G1(op, T, s) EM_DEV auto op(T a) { return op##_##s(a); }
#define EM_G2(op, T, s) \
  template <class B_> EM_DEV auto op(T a, B_ b) { return op##_##s(a, (T)b); }
#define EM_G3(op, T, s) \
  template <class B_, class C_> EM_DEV auto op(T a, B_ b, C_ c) { return op##_##s(a, (T)b, (T)c); }
#define EM_G4(op, T, s) \
  template <class B_, class C_, class D_> \
  EM_DEV auto op(T a, B_ b, C_ c, D_ d) { return op##_##s(a, (T)b, (T)c, (T)d); }
#define EM_FD(n, op) EM_G##n(op, float, f) EM_G##n(op, double, d)
#define EM_FDI(n, op) EM_FD(n, op) EM_G##n(op, int64_t, i)
/* integers only: float and double are refused, not converted */
#define EM_DEL1(op, T) EM_DEV void op(T) = delete;
#define EM_DEL2(op, T) template <class B_> EM_DEV void op(T, B_) = delete;
#define EM_I(n, op) EM_G##n(op, int64_t, i) EM_DEL##n(op, float) EM_DEL##n(op, double)

/* <math.h>'s M_ constants are not there; these are prelude.h's. */
#define EM_SQRT2 1.41421356237309504880     /* sqrt(2) */
#define EM_SQRT1_2 0.70710678118654752440   /* 1/sqrt(2) */
#define EM_2_SQRTPI 1.12837916709551257390  /* 2/sqrt(pi) */

/* ---------------------------------------------------------------- storage */
EM_DEV uint32_t em_f32_bits(float x) { return __float_as_uint(x); }
EM_DEV float em_f32_from_bits(uint32_t u) { return __uint_as_float(u); }
EM_DEV uint64_t em_f64_bits(double x) { return (uint64_t)__double_as_longlong(x); }

EM_DEV float em_bf16_to_f32(uint16_t h) { return em_f32_from_bits((uint32_t)h << 16); }
/* Round to nearest even, as c10::BFloat16; every NaN becomes 0xffff, as on
   the CPU. */
EM_DEV uint16_t em_f32_to_bf16(float x) {
  uint32_t u = em_f32_bits(x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return x != x ? (uint16_t)0xffff : (uint16_t)r;
}

/* float16 as raw bits, prelude.h's branch-free code (c10::Half's): NaN ->
   0x7e00 with the sign kept.  The products are __fmul_rn so that --fmad
   cannot fuse them with the add.  A NaN is quieted here as x86's multiply
   does it (payload kept), not made canonical as the GPU's multiply would. */
EM_DEV float em_f16_to_f32(uint16_t h) {
  uint32_t w = (uint32_t)h << 16;
  uint32_t sign = w & 0x80000000u;
  uint32_t two_w = w + w;
  uint32_t nb = (two_w >> 4) + (0xe0u << 23);
  float normal = nb > 0x7f800000u ? em_f32_from_bits(nb | 0x00400000u)
                                  : __fmul_rn(em_f32_from_bits(nb), 0x1p-112f);
  float denorm = em_f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  uint32_t bits = two_w < (1u << 27) ? em_f32_bits(denorm) : em_f32_bits(normal);
  return em_f32_from_bits(sign | bits);
}
EM_DEV uint16_t em_f32_to_f16(float x) {
  float base = __fmul_rn(__fmul_rn(fabsf(x), 0x1p112f), 0x1p-110f);
  uint32_t w = em_f32_bits(x);
  uint32_t shl1_w = w + w;
  uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = __fadd_rn(em_f32_from_bits((bias >> 1) + 0x07800000u), base);
  uint32_t bits = em_f32_bits(base);
  uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
  return (uint16_t)((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

/* The conversions of gcc's _Float16 on x86-64, which prelude.h's em_half is:
   one rounding to nearest even from float, double and int64_t (PTX cvt.rn),
   and a NaN keeps its sign and the top of its payload, made quiet (F16C's
   vcvtps2ph and libgcc's soft float do this; PTX gives a canonical NaN). */
EM_DEV uint16_t em_half_nan16(uint32_t sign, uint32_t top10) {
  return (uint16_t)(sign | 0x7e00u | (top10 & 0x3ffu));
}
EM_DEV uint16_t em_half_bits_f32(float x) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  uint32_t u = em_f32_bits(x);
  return (u & 0x7fffffffu) > 0x7f800000u ? em_half_nan16((u >> 16) & 0x8000u, u >> 13) : h;
}
EM_DEV uint16_t em_half_bits_f64(double x) {
  uint16_t h;
  asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(x));
  uint64_t u = em_f64_bits(x);
  return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull
             ? em_half_nan16((uint32_t)(u >> 48) & 0x8000u, (uint32_t)(u >> 42))
             : h;
}
EM_DEV uint16_t em_half_bits_i64(int64_t x) {
  uint16_t h;
  asm("cvt.rn.f16.s64 %0, %1;" : "=h"(h) : "l"(x));
  return h;
}
EM_DEV float em_half_to_f32(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  uint32_t u = h;
  return (u & 0x7c00u) == 0x7c00u && (u & 0x3ffu)
             ? em_f32_from_bits(((u & 0x8000u) << 16) | 0x7fc00000u | ((u & 0x3ffu) << 13))
             : f;
}

/* float16 storage: 2 bytes, trivially copyable.  (em_half)(x) rounds x
   (float, double, int64_t or int) to nearest even; (float)h is exact. */
struct em_half {
  uint16_t bits;
  em_half() = default;
  __device__ __forceinline__ em_half(float x) : bits(em_half_bits_f32(x)) {}
  __device__ __forceinline__ em_half(double x) : bits(em_half_bits_f64(x)) {}
  __device__ __forceinline__ em_half(int64_t x) : bits(em_half_bits_i64(x)) {}
  __device__ __forceinline__ em_half(int x) : bits(em_half_bits_i64(x)) {}
  __device__ __forceinline__ operator float() const { return em_half_to_f32(bits); }
};
static_assert(sizeof(em_half) == 2 && alignof(em_half) == 2, "em_half is 2 bytes");

/* Float to integer as torch's static_cast behaves on x86-64 (see prelude.h):
   truncation; NaN and out-of-range give INT64_MIN (INT32_MIN for
   em_to_int32, which int32, int16, int8 and uint8 storage narrow further). */
EM_DEV int64_t em_to_int_f(float x) { return (x >= -0x1p63f && x < 0x1p63f) ? (int64_t)x : INT64_MIN; }
EM_DEV int64_t em_to_int_d(double x) { return (x >= -0x1p63 && x < 0x1p63) ? (int64_t)x : INT64_MIN; }
EM_DEV int64_t em_to_int_i(int64_t x) { return x; }
EM_FDI(1, em_to_int)
EM_DEV int64_t em_to_int32_f(float x) { return (x >= -0x1p31f && x < 0x1p31f) ? (int64_t)x : INT32_MIN; }
EM_DEV int64_t em_to_int32_d(double x) { return (x > -2147483649.0 && x < 0x1p31) ? (int64_t)x : INT32_MIN; }
EM_DEV int64_t em_to_int32_i(int64_t x) { return x; }
EM_FDI(1, em_to_int32)
/* bool storage: x != 0, so NaN is true and -0.0 false. */
EM_DEV int64_t em_to_bool_f(float x) { return x != 0; }
EM_DEV int64_t em_to_bool_d(double x) { return x != 0; }
EM_DEV int64_t em_to_bool_i(int64_t x) { return x != 0; }
EM_FDI(1, em_to_bool)

/* uint64_t -> int64_t keeps the bits. */
EM_DEV int64_t em_wrap(uint64_t u) { return (int64_t)u; }

/* ------------------------------------------------------------------ unary */
/* The ops that are one math-library call per type (CUDA's precise ones). */
#define EM_LIBM1(op, fn) \
  EM_DEV float em_##op##_f(float x) { return fn##f(x); } \
  EM_DEV double em_##op##_d(double x) { return fn(x); } \
  EM_FD(1, em_##op)
EM_LIBM1(exp, exp)     EM_LIBM1(exp2, exp2)   EM_LIBM1(expm1, expm1)
EM_LIBM1(log, log)     EM_LIBM1(log2, log2)   EM_LIBM1(log10, log10)
EM_LIBM1(log1p, log1p) EM_LIBM1(sqrt, sqrt)
EM_LIBM1(sin, sin)     EM_LIBM1(cos, cos)     EM_LIBM1(tan, tan)
EM_LIBM1(asin, asin)   EM_LIBM1(acos, acos)   EM_LIBM1(atan, atan)
EM_LIBM1(tanh, tanh)
EM_LIBM1(asinh, asinh) EM_LIBM1(acosh, acosh) EM_LIBM1(atanh, atanh)
EM_LIBM1(erf, erf)     EM_LIBM1(erfc, erfc)
#undef EM_LIBM1

/* sinh and cosh are the math library's: finite up to where the true result
   overflows, as the CPU prelude and torch's scalar loop. */
EM_DEV float em_sinh_f(float x) { return sinhf(x); }
EM_DEV double em_sinh_d(double x) { return sinh(x); }
EM_DEV float em_cosh_f(float x) { return coshf(x); }
EM_DEV double em_cosh_d(double x) { return cosh(x); }
EM_FD(1, em_sinh)
EM_FD(1, em_cosh)

/* abs and neg of INT64_MIN are INT64_MIN, as in torch. */
EM_DEV float em_abs_f(float x) { return fabsf(x); }
EM_DEV double em_abs_d(double x) { return fabs(x); }
EM_DEV int64_t em_abs_i(int64_t x) { return x < 0 ? em_wrap(0 - (uint64_t)x) : x; }
EM_FDI(1, em_abs)
EM_DEV float em_neg_f(float x) { return -x; }
EM_DEV double em_neg_d(double x) { return -x; }
EM_DEV int64_t em_neg_i(int64_t x) { return em_wrap(0 - (uint64_t)x); }
EM_FDI(1, em_neg)

/* 1 / sqrt(x), both IEEE-rounded (not CUDA's rsqrtf, which is not). */
EM_DEV float em_rsqrt_f(float x) { return 1.0f / sqrtf(x); }
EM_DEV double em_rsqrt_d(double x) { return 1.0 / sqrt(x); }
EM_FD(1, em_rsqrt)
EM_DEV float em_recip_f(float x) { return 1.0f / x; }
EM_DEV double em_recip_d(double x) { return 1.0 / x; }
EM_FD(1, em_recip)
/* 1 / (1 + exp(-x)), as ATen writes it. */
EM_DEV float em_sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
EM_DEV double em_sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
EM_FD(1, em_sigmoid)
/* x / (1 + exp(-x)): silu(-inf) is NaN. */
EM_DEV float em_silu_f(float x) { return x / (1.0f + expf(-x)); }
EM_DEV double em_silu_d(double x) { return x / (1.0 + exp(-x)); }
EM_FD(1, em_silu)

/* sign: -1, 0 or 1; sign(NaN) is 0 and sign(-0.0) is +0.0. */
EM_DEV float em_sign_f(float x) { return (x > 0 ? 1.0f : 0.0f) - (x < 0 ? 1.0f : 0.0f); }
EM_DEV double em_sign_d(double x) { return (x > 0 ? 1.0 : 0.0) - (x < 0 ? 1.0 : 0.0); }
EM_DEV int64_t em_sign_i(int64_t x) { return (x > 0) - (x < 0); }
EM_FDI(1, em_sign)

/* Rounding, the identity on integers; round is half to even (the GPU has
   only the default rounding mode, so nearbyint is rint). */
EM_DEV float em_floor_f(float x) { return floorf(x); }
EM_DEV double em_floor_d(double x) { return floor(x); }
EM_DEV int64_t em_floor_i(int64_t x) { return x; }
EM_FDI(1, em_floor)
EM_DEV float em_ceil_f(float x) { return ceilf(x); }
EM_DEV double em_ceil_d(double x) { return ceil(x); }
EM_DEV int64_t em_ceil_i(int64_t x) { return x; }
EM_FDI(1, em_ceil)
EM_DEV float em_round_f(float x) { return nearbyintf(x); }
EM_DEV double em_round_d(double x) { return nearbyint(x); }
EM_DEV int64_t em_round_i(int64_t x) { return x; }
EM_FDI(1, em_round)
EM_DEV float em_trunc_f(float x) { return truncf(x); }
EM_DEV double em_trunc_d(double x) { return trunc(x); }
EM_DEV int64_t em_trunc_i(int64_t x) { return x; }
EM_FDI(1, em_trunc)
/* x - trunc(x): frac(+-inf) is NaN and frac(-0.0) is +0.0. */
EM_DEV float em_frac_f(float x) { return x - truncf(x); }
EM_DEV double em_frac_d(double x) { return x - trunc(x); }
EM_FD(1, em_frac)

/* relu is clamp_min(x, 0): NaN stays NaN and -0.0 stays -0.0. */
EM_DEV float em_relu_f(float x) { return x < 0 ? 0.0f : x; }
EM_DEV double em_relu_d(double x) { return x < 0 ? 0.0 : x; }
EM_DEV int64_t em_relu_i(int64_t x) { return x < 0 ? 0 : x; }
EM_FDI(1, em_relu)

/* logical_not: 1 where x == 0 (NaN counts as true, so gives 0). */
EM_DEV int64_t em_lnot_f(float x) { return x == 0; }
EM_DEV int64_t em_lnot_d(double x) { return x == 0; }
EM_DEV int64_t em_lnot_i(int64_t x) { return x == 0; }
EM_FDI(1, em_lnot)
/* bitwise_not, integers only. */
EM_DEV int64_t em_bnot_i(int64_t x) { return ~x; }
EM_I(1, em_bnot)

/* Predicates.  No integer is NaN or infinite. */
EM_DEV int64_t em_isnan_f(float x) { return x != x; }
EM_DEV int64_t em_isnan_d(double x) { return x != x; }
EM_DEV int64_t em_isnan_i(int64_t x) { (void)x; return 0; }
EM_FDI(1, em_isnan)
EM_DEV int64_t em_isinf_f(float x) { return fabsf(x) == INFINITY; }
EM_DEV int64_t em_isinf_d(double x) { return fabs(x) == (double)INFINITY; }
EM_DEV int64_t em_isinf_i(int64_t x) { (void)x; return 0; }
EM_FDI(1, em_isinf)
EM_DEV int64_t em_isposinf_f(float x) { return x == INFINITY; }
EM_DEV int64_t em_isposinf_d(double x) { return x == (double)INFINITY; }
EM_DEV int64_t em_isposinf_i(int64_t x) { (void)x; return 0; }
EM_FDI(1, em_isposinf)
EM_DEV int64_t em_isneginf_f(float x) { return x == -INFINITY; }
EM_DEV int64_t em_isneginf_d(double x) { return x == -(double)INFINITY; }
EM_DEV int64_t em_isneginf_i(int64_t x) { (void)x; return 0; }
EM_FDI(1, em_isneginf)
EM_DEV int64_t em_isfinite_f(float x) { return fabsf(x) < INFINITY; }
EM_DEV int64_t em_isfinite_d(double x) { return fabs(x) < (double)INFINITY; }
EM_DEV int64_t em_isfinite_i(int64_t x) { (void)x; return 1; }
EM_FDI(1, em_isfinite)
/* The sign bit: set for -0.0 and for NaNs that carry it. */
EM_DEV int64_t em_signbit_f(float x) { return em_f32_bits(x) >> 31; }
EM_DEV int64_t em_signbit_d(double x) { return (int64_t)(em_f64_bits(x) >> 63); }
EM_DEV int64_t em_signbit_i(int64_t x) { return x < 0; }
EM_FDI(1, em_signbit)

/* ------------------------------------------------------------ activations */
/* gelu, erf form: x * 0.5 * (1 + erf(x / sqrt(2))), as torch's CUDA kernel
   computes it (gelu(-inf) is NaN there; the CPU's oneDNN differs). */
EM_DEV float em_gelu_f(float x) { return x * 0.5f * (1.0f + erff(x * (float)EM_SQRT1_2)); }
EM_DEV double em_gelu_d(double x) { return x * 0.5 * (1.0 + erf(x * EM_SQRT1_2)); }
EM_FD(1, em_gelu)

/* gelu, approximate='tanh', as ATen's scalar_gelu_approximated_with_tanh. */
#define EM_GELU_BETA (EM_SQRT2 * EM_2_SQRTPI * 0.5)
#define EM_GELU_KAPPA 0.044715
EM_DEV float em_gelu_tanh_f(float x) {
  float x_cube = x * x * x;
  float inner = (float)EM_GELU_BETA * (x + (float)EM_GELU_KAPPA * x_cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}
EM_DEV double em_gelu_tanh_d(double x) {
  double x_cube = x * x * x;
  double inner = EM_GELU_BETA * (x + EM_GELU_KAPPA * x_cube);
  return 0.5 * x * (1.0 + tanh(inner));
}
EM_FD(1, em_gelu_tanh)

/* leaky_relu: x > 0 ? x : x * slope. */
EM_DEV float em_leaky_relu_f(float x, float s) { return x > 0 ? x : x * s; }
EM_DEV double em_leaky_relu_d(double x, double s) { return x > 0 ? x : x * s; }
EM_FD(2, em_leaky_relu)

/* aten.elu(x, alpha, scale, input_scale). */
EM_DEV float em_elu_f(float x, float alpha, float scale, float iscale) {
  float neg = expm1f(x * iscale) * (alpha * scale);
  float pos = x * scale;
  return x < 0 ? neg : pos;
}
EM_DEV double em_elu_d(double x, double alpha, double scale, double iscale) {
  double neg = expm1(x * iscale) * (alpha * scale);
  double pos = x * scale;
  return x < 0 ? neg : pos;
}
EM_FD(4, em_elu)

/* softplus: x * beta > threshold ? x : log1p(exp(x * beta)) / beta. */
EM_DEV float em_softplus_f(float x, float beta, float thr) {
  float xb = x * beta;
  float soft = log1pf(expf(xb)) / beta;
  return xb > thr ? x : soft;
}
EM_DEV double em_softplus_d(double x, double beta, double thr) {
  double xb = x * beta;
  double soft = log1p(exp(xb)) / beta;
  return xb > thr ? x : soft;
}
EM_FD(3, em_softplus)

/* threshold: x <= thr ? value : x (NaN is kept). */
EM_DEV float em_threshold_f(float x, float thr, float v) { return x <= thr ? v : x; }
EM_DEV double em_threshold_d(double x, double thr, double v) { return x <= thr ? v : x; }
EM_DEV int64_t em_threshold_i(int64_t x, int64_t thr, int64_t v) { return x <= thr ? v : x; }
EM_FDI(3, em_threshold)

/* nan_to_num with the replacements chosen by the caller; the identity on
   integers. */
EM_DEV float em_nan_to_num_f(float x, float nan, float pinf, float ninf) {
  return x != x ? nan : x == INFINITY ? pinf : x == -INFINITY ? ninf : x;
}
EM_DEV double em_nan_to_num_d(double x, double nan, double pinf, double ninf) {
  return x != x ? nan : x == (double)INFINITY ? pinf : x == -(double)INFINITY ? ninf : x;
}
EM_DEV int64_t em_nan_to_num_i(int64_t x, int64_t nan, int64_t pinf, int64_t ninf) {
  (void)nan; (void)pinf; (void)ninf;
  return x;
}
EM_FDI(4, em_nan_to_num)

/* -------------------------------------------------------------- min / max */
/* maximum / minimum, clamp_min / clamp_max: NaN in either operand gives NaN;
   on a tie (+0.0 against -0.0) the first operand wins. */
EM_DEV float em_max_f(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
EM_DEV double em_max_d(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
EM_DEV int64_t em_max_i(int64_t a, int64_t b) { return a < b ? b : a; }
EM_FDI(2, em_max)
EM_DEV float em_min_f(float a, float b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
EM_DEV double em_min_d(double a, double b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
EM_DEV int64_t em_min_i(int64_t a, int64_t b) { return b < a ? b : a; }
EM_FDI(2, em_min)

/* fmax / fmin: a NaN operand is ignored (NaN only when both are); on a tie
   the first operand wins. */
EM_DEV float em_fmax_f(float a, float b) { return b != b ? a : a != a ? b : (a < b ? b : a); }
EM_DEV double em_fmax_d(double a, double b) { return b != b ? a : a != a ? b : (a < b ? b : a); }
EM_DEV int64_t em_fmax_i(int64_t a, int64_t b) { return em_max_i(a, b); }
EM_FDI(2, em_fmax)
EM_DEV float em_fmin_f(float a, float b) { return b != b ? a : a != a ? b : (b < a ? b : a); }
EM_DEV double em_fmin_d(double a, double b) { return b != b ? a : a != a ? b : (b < a ? b : a); }
EM_DEV int64_t em_fmin_i(int64_t a, int64_t b) { return em_min_i(a, b); }
EM_FDI(2, em_fmin)

/* clamp(x, lo, hi) = min(max(x, lo), hi); NaN in x, lo or hi gives NaN. */
EM_DEV float em_clamp_f(float x, float lo, float hi) {
  float r = x < lo ? lo : x;
  r = hi < r ? hi : r;
  return (x != x || lo != lo || hi != hi) ? x + lo + hi : r;
}
EM_DEV double em_clamp_d(double x, double lo, double hi) {
  double r = x < lo ? lo : x;
  r = hi < r ? hi : r;
  return (x != x || lo != lo || hi != hi) ? x + lo + hi : r;
}
EM_DEV int64_t em_clamp_i(int64_t x, int64_t lo, int64_t hi) {
  int64_t r = x < lo ? lo : x;
  return hi < r ? hi : r;
}
EM_FDI(3, em_clamp)

/* One step of amax / amin: a NaN, in acc or in x, stays in acc. */
EM_DEV float em_max_nan_f(float acc, float x) { return (x > acc || x != x) ? x : acc; }
EM_DEV double em_max_nan_d(double acc, double x) { return (x > acc || x != x) ? x : acc; }
EM_DEV int64_t em_max_nan_i(int64_t acc, int64_t x) { return x > acc ? x : acc; }
EM_FDI(2, em_max_nan)
EM_DEV float em_min_nan_f(float acc, float x) { return (x < acc || x != x) ? x : acc; }
EM_DEV double em_min_nan_d(double acc, double x) { return (x < acc || x != x) ? x : acc; }
EM_DEV int64_t em_min_nan_i(int64_t acc, int64_t x) { return x < acc ? x : acc; }
EM_FDI(2, em_min_nan)

/* ------------------------------------------------------------- arithmetic */
EM_DEV float em_add_f(float a, float b) { return a + b; }
EM_DEV double em_add_d(double a, double b) { return a + b; }
EM_DEV int64_t em_add_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a + (uint64_t)b); }
EM_FDI(2, em_add)
EM_DEV float em_sub_f(float a, float b) { return a - b; }
EM_DEV double em_sub_d(double a, double b) { return a - b; }
EM_DEV int64_t em_sub_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a - (uint64_t)b); }
EM_FDI(2, em_sub)
EM_DEV float em_mul_f(float a, float b) { return a * b; }
EM_DEV double em_mul_d(double a, double b) { return a * b; }
EM_DEV int64_t em_mul_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a * (uint64_t)b); }
EM_FDI(2, em_mul)

/* Integer division never traps: x / 0 is 0, x / -1 is -x (INT64_MIN / -1
   wraps to INT64_MIN) and x % -1 is 0. */
EM_DEV int64_t em_safe_divisor(int64_t b) { return (b == 0 || b == -1) ? 1 : b; }

/* div: true division on floats; on int64_t C's truncating division. */
EM_DEV float em_div_f(float a, float b) { return a / b; }
EM_DEV double em_div_d(double a, double b) { return a / b; }
EM_DEV int64_t em_div_i(int64_t a, int64_t b) {
  int64_t q = a / em_safe_divisor(b);
  return b == 0 ? 0 : b == -1 ? em_neg_i(a) : q;
}
EM_FDI(2, em_div)
/* div(rounding_mode='trunc'): trunc(a / b). */
EM_DEV float em_trunc_div_f(float a, float b) { return truncf(a / b); }
EM_DEV double em_trunc_div_d(double a, double b) { return trunc(a / b); }
EM_DEV int64_t em_trunc_div_i(int64_t a, int64_t b) { return em_div_i(a, b); }
EM_FDI(2, em_trunc_div)

/* fmod: C's (exact) fmod, with the sign of the dividend; fmod by 0 is NaN on
   floats and 0 on integers. */
EM_DEV float em_fmod_f(float a, float b) { return fmodf(a, b); }
EM_DEV double em_fmod_d(double a, double b) { return fmod(a, b); }
EM_DEV int64_t em_fmod_i(int64_t a, int64_t b) {
  int64_t r = a % em_safe_divisor(b);
  return (b == 0 || b == -1) ? 0 : r;
}
EM_FDI(2, em_fmod)

/* remainder: Python's %, with the sign of the divisor (ATen's formula). */
EM_DEV float em_remainder_f(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && (b < 0) != (m < 0)) ? m + b : m;
}
EM_DEV double em_remainder_d(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && (b < 0) != (m < 0)) ? m + b : m;
}
EM_DEV int64_t em_remainder_i(int64_t a, int64_t b) {
  int64_t d = em_safe_divisor(b);
  int64_t r = a % d;
  r = (r != 0 && (r < 0) != (d < 0)) ? r + d : r;
  return (b == 0 || b == -1) ? 0 : r;
}
EM_FDI(2, em_remainder)

/* floor_divide and div(rounding_mode='floor'): c10's div_floor_floating on
   floats, Python's floor semantics on integers. */
EM_DEV float em_floordiv_f(float a, float b) {
  float mod = fmodf(a, b);
  float div = (a - mod) / b;
  div = (mod != 0 && (b < 0) != (mod < 0)) ? div - 1.0f : div;
  float fl = floorf(div);
  fl = (div - fl > 0.5f) ? fl + 1.0f : fl;
  float q = a / b;
  fl = div == 0 ? copysignf(0.0f, q) : fl;
  return b == 0 ? q : fl;
}
EM_DEV double em_floordiv_d(double a, double b) {
  double mod = fmod(a, b);
  double div = (a - mod) / b;
  div = (mod != 0 && (b < 0) != (mod < 0)) ? div - 1.0 : div;
  double fl = floor(div);
  fl = (div - fl > 0.5) ? fl + 1.0 : fl;
  double q = a / b;
  fl = div == 0 ? copysign(0.0, q) : fl;
  return b == 0 ? q : fl;
}
EM_DEV int64_t em_floordiv_i(int64_t a, int64_t b) {
  int64_t d = em_safe_divisor(b);
  int64_t q = a / d, r = a % d;
  q = (r != 0 && (r < 0) != (d < 0)) ? q - 1 : q;
  return b == 0 ? 0 : b == -1 ? em_neg_i(a) : q;
}
EM_FDI(2, em_floordiv)

/* pow.  Floats: C pow (pow(x, 0) and pow(1, y) are 1 even for NaN).
   Integers: ATen's powi, by squaring with wrap-around. */
EM_DEV float em_pow_f(float a, float b) { return powf(a, b); }
EM_DEV double em_pow_d(double a, double b) { return pow(a, b); }
EM_DEV int64_t em_pow_i(int64_t a, int64_t b) {
  if (b < 0)
    return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  for (; b; b >>= 1) {
    if (b & 1) r *= x;
    x *= x;
  }
  return em_wrap(r);
}
EM_FDI(2, em_pow)
/* pow.Tensor_Scalar: ATen's special exponents (see prelude.h). */
EM_DEV float em_pow_ts_f(float a, float e) {
  float p = powf(a, e), s = sqrtf(a), sq = a * a;
  return e == 0.0f ? 1.0f : e == 1.0f ? a : e == 0.5f ? s : e == -0.5f ? 1.0f / s
       : e == -1.0f ? 1.0f / a : e == 2.0f ? sq : e == 3.0f ? sq * a : e == -2.0f ? 1.0f / sq : p;
}
EM_DEV double em_pow_ts_d(double a, double e) {
  double p = pow(a, e), s = sqrt(a), sq = a * a;
  return e == 0.0 ? 1.0 : e == 1.0 ? a : e == 0.5 ? s : e == -0.5 ? 1.0 / s
       : e == -1.0 ? 1.0 / a : e == 2.0 ? sq : e == 3.0 ? sq * a : e == -2.0 ? 1.0 / sq : p;
}
EM_DEV int64_t em_pow_ts_i(int64_t a, int64_t e) { return em_pow_i(a, e); }
EM_FDI(2, em_pow_ts)

EM_DEV float em_atan2_f(float a, float b) { return atan2f(a, b); }
EM_DEV double em_atan2_d(double a, double b) { return atan2(a, b); }
EM_FD(2, em_atan2)
EM_DEV float em_hypot_f(float a, float b) { return hypotf(a, b); }
EM_DEV double em_hypot_d(double a, double b) { return hypot(a, b); }
EM_FD(2, em_hypot)
EM_DEV float em_copysign_f(float a, float b) { return copysignf(a, b); }
EM_DEV double em_copysign_d(double a, double b) { return copysign(a, b); }
EM_FD(2, em_copysign)

/* ------------------------------------------------------------ comparisons */
#define EM_CMP(op, expr) \
  EM_DEV int64_t em_##op##_f(float a, float b) { return expr; } \
  EM_DEV int64_t em_##op##_d(double a, double b) { return expr; } \
  EM_DEV int64_t em_##op##_i(int64_t a, int64_t b) { return expr; } \
  EM_FDI(2, em_##op)
EM_CMP(eq, a == b) EM_CMP(ne, a != b) EM_CMP(lt, a < b)
EM_CMP(le, a <= b) EM_CMP(gt, a > b)  EM_CMP(ge, a >= b)
/* Logic on values: nonzero (NaN included) is true. */
EM_CMP(land, (a != 0) & (b != 0))
EM_CMP(lor, (a != 0) | (b != 0))
EM_CMP(lxor, (a != 0) ^ (b != 0))
#undef EM_CMP

EM_DEV int64_t em_band_i(int64_t a, int64_t b) { return a & b; }
EM_DEV int64_t em_bor_i(int64_t a, int64_t b) { return a | b; }
EM_DEV int64_t em_bxor_i(int64_t a, int64_t b) { return a ^ b; }
EM_I(2, em_band)
EM_I(2, em_bor)
EM_I(2, em_bxor)

/* --------------------------------------------------------------- backward */
EM_DEV float em_sigmoid_bw_f(float g, float y) { return g * (1.0f - y) * y; }
EM_DEV double em_sigmoid_bw_d(double g, double y) { return g * (1.0 - y) * y; }
EM_FD(2, em_sigmoid_bw)
EM_DEV float em_tanh_bw_f(float g, float y) { return g * (1.0f - y * y); }
EM_DEV double em_tanh_bw_d(double g, double y) { return g * (1.0 - y * y); }
EM_FD(2, em_tanh_bw)
EM_DEV float em_threshold_bw_f(float g, float x, float thr) { return x <= thr ? 0.0f : g; }
EM_DEV double em_threshold_bw_d(double g, double x, double thr) { return x <= thr ? 0.0 : g; }
EM_DEV int64_t em_threshold_bw_i(int64_t g, int64_t x, int64_t thr) { return x <= thr ? 0 : g; }
EM_FDI(3, em_threshold_bw)

/* gelu_backward, erf form, as ATen. */
#define EM_GELU_PDF (EM_2_SQRTPI * EM_SQRT1_2 * 0.5)
EM_DEV float em_gelu_bw_f(float g, float x) {
  float cdf = 0.5f * (1.0f + erff(x * (float)EM_SQRT1_2));
  float pdf = (float)EM_GELU_PDF * expf(x * x * -0.5f);
  return g * (cdf + x * pdf);
}
EM_DEV double em_gelu_bw_d(double g, double x) {
  double cdf = 0.5 * (1.0 + erf(x * EM_SQRT1_2));
  double pdf = EM_GELU_PDF * exp(x * x * -0.5);
  return g * (cdf + x * pdf);
}
EM_FD(2, em_gelu_bw)
/* gelu_backward, approximate='tanh', as ATen. */
EM_DEV float em_gelu_tanh_bw_f(float g, float x) {
  const float beta = (float)EM_GELU_BETA, kappa = (float)EM_GELU_KAPPA;
  float x_sq = x * x;
  float inner = beta * (x + kappa * (x_sq * x));
  float t = tanhf(inner);
  float left = 0.5f * x, right = 1.0f + t;
  float left_d = 0.5f * right;
  float tanh_d = 1.0f - t * t;
  float inner_d = beta * (1.0f + 3.0f * kappa * x_sq);
  return g * (left_d + left * tanh_d * inner_d);
}
EM_DEV double em_gelu_tanh_bw_d(double g, double x) {
  const double beta = EM_GELU_BETA, kappa = EM_GELU_KAPPA;
  double x_sq = x * x;
  double inner = beta * (x + kappa * (x_sq * x));
  double t = tanh(inner);
  double left = 0.5 * x, right = 1.0 + t;
  double left_d = 0.5 * right;
  double tanh_d = 1.0 - t * t;
  double inner_d = beta * (1.0 + 3.0 * kappa * x_sq);
  return g * (left_d + left * tanh_d * inner_d);
}
EM_FD(2, em_gelu_tanh_bw)

/* ---------------------------------------------------------------- ternary */
/* where(c, a, b): c is the condition (nonzero is true); dispatches on a. */
EM_DEV float em_where_f(int64_t c, float a, float b) { return c ? a : b; }
EM_DEV double em_where_d(int64_t c, double a, double b) { return c ? a : b; }
EM_DEV int64_t em_where_i(int64_t c, int64_t a, int64_t b) { return c ? a : b; }
#define EM_GW(T, s) \
  template <class C_, class B_> EM_DEV auto em_where(C_ c, T a, B_ b) { return em_where_##s((int64_t)c, a, (T)b); }
EM_GW(float, f) EM_GW(double, d) EM_GW(int64_t, i)
#undef EM_GW

/* lerp(a, b, w) as ATen's vectorized lerp, one fma each side. */
EM_DEV float em_lerp_f(float a, float b, float w) {
  int small = fabsf(w) < 0.5f;
  float coeff = small ? w : w - 1.0f;
  float base = small ? a : b;
  return fmaf(coeff, b - a, base);
}
EM_DEV double em_lerp_d(double a, double b, double w) {
  int small = fabs(w) < 0.5;
  double coeff = small ? w : w - 1.0;
  double base = small ? a : b;
  return fma(coeff, b - a, base);
}
EM_FD(3, em_lerp)

/* addcmul = a + v * t1 * t2 and addcdiv = a + v * t1 / t2, in ATen's order. */
EM_DEV float em_addcmul_f(float a, float t1, float t2, float v) { return a + v * t1 * t2; }
EM_DEV double em_addcmul_d(double a, double t1, double t2, double v) { return a + v * t1 * t2; }
EM_DEV int64_t em_addcmul_i(int64_t a, int64_t t1, int64_t t2, int64_t v) {
  return em_wrap((uint64_t)a + (uint64_t)v * (uint64_t)t1 * (uint64_t)t2);
}
EM_FDI(4, em_addcmul)
EM_DEV float em_addcdiv_f(float a, float t1, float t2, float v) { return a + v * t1 / t2; }
EM_DEV double em_addcdiv_d(double a, double t1, double t2, double v) { return a + v * t1 / t2; }
EM_FD(4, em_addcdiv)

/* ----------------------------------------------------------- index helpers */
/* Floor division and modulo, min and max of int64_t indices (the divisor is
   a nonzero constant); the CPU target appends the same four to prelude.h. */
EM_DEV int64_t em_ifloordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
EM_DEV int64_t em_ifloormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
EM_DEV int64_t em_imin(int64_t a, int64_t b) { return a < b ? a : b; }
EM_DEV int64_t em_imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---------------------------------------------------------------- indices */
/* A gather's index checked against its dim's size n, as in prelude.h: out of
   range, the first failure is recorded in the module's ember_index_error =
   {code, index} and 0 is returned.  run.c copies the record to the host after
   the program's kernels (run_check_index) and clears it.  In the asynchronous
   mode (run.c) ember_index_host points at a host-mapped copy of the record:
   the failure is written there too and the kernel traps, stopping the CUDA
   context as torch's device-side assert does (and as its CUDA_DSA, which
   also writes the assertion to host memory first). */
extern "C" {
__device__ int64_t ember_index_error[2];
__device__ int64_t *ember_index_host;
}
static __device__ __noinline__ void em_index_fail(int64_t i, int64_t code) {
  if (atomicCAS((unsigned long long *)&ember_index_error[0], 0ULL, (unsigned long long)code) == 0ULL)
    ember_index_error[1] = i;
  int64_t *h = ember_index_host;
  if (h) {
    if (atomicCAS((unsigned long long *)&h[0], 0ULL, (unsigned long long)code) == 0ULL) h[1] = i;
    __threadfence_system();
    __trap();
  }
}
EM_DEV int64_t em_index(int64_t i, int64_t n, int64_t code) {
  if ((uint64_t)i < (uint64_t)n) return i;
  em_index_fail(i, code);
  return 0;
}
EM_DEV int64_t em_index_wrap(int64_t i, int64_t n, int64_t code) {
  int64_t j = i < 0 ? i + n : i;
  if ((uint64_t)j < (uint64_t)n) return j;
  em_index_fail(i, code);
  return 0;
}

/* ------------------------------------------------------- block reductions */
/* Each thread of a 1-D block (blockDim.x a multiple of 32, at most 1024)
   holds a partial; em_block_* combine them, a butterfly of warp shuffles
   (__shfl_xor_sync) in each warp, then the warps' results through a 32-slot
   __shared__ array and a second butterfly that every warp runs, so that
   every thread returns the same result (the combines are commutative, so
   the two lanes of a butterfly pair agree bit for bit).  Every thread of the
   block must call them, as __syncthreads does; the helper's closing
   __syncthreads makes a following call (of any helper) safe.

   sum, prod:  + and *; int64_t wraps.  The order of float additions is the
               butterfly's, not the CPU's serial order.
   max, min:   the larger (smaller) value; +0.0 beats -0.0 in max, -0.0 wins
               in min (the CPU keeps the first of the two); a NaN partial
               gives NaN (the code generator's partials are never NaN: it
               tracks NaN apart, in an int64_t flag combined by em_block_or).
   or, and:    bitwise | and & on int64_t.
   argmax, argmin (value v and index j, both updated in place): the larger
               (smaller) value, a tie going to the smaller index; a NaN value
               beats every number, and among NaNs the smaller index wins. */
EM_DEV float em_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
EM_DEV double em_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
EM_DEV int64_t em_shfl_xor(int64_t v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }

/* The combine functions, one struct each; `pad` is the identity, read by
   the lanes past the last warp in the second butterfly. */
struct em_rsum {
  EM_DEV float pad(float) { return -0.0f; }
  EM_DEV double pad(double) { return -0.0; }
  EM_DEV int64_t pad(int64_t) { return 0; }
  EM_DEV float f(float a, float b) { return a + b; }
  EM_DEV double f(double a, double b) { return a + b; }
  EM_DEV int64_t f(int64_t a, int64_t b) { return em_add_i(a, b); }
};
struct em_rprod {
  template <class T> EM_DEV T pad(T) { return (T)1; }
  EM_DEV float f(float a, float b) { return a * b; }
  EM_DEV double f(double a, double b) { return a * b; }
  EM_DEV int64_t f(int64_t a, int64_t b) { return em_mul_i(a, b); }
};
struct em_rmax {
  EM_DEV float pad(float) { return -INFINITY; }
  EM_DEV double pad(double) { return -(double)INFINITY; }
  EM_DEV int64_t pad(int64_t) { return INT64_MIN; }
  EM_DEV float f(float a, float b) {
    float r = a < b ? b : a;
    r = a == b ? em_f32_from_bits(em_f32_bits(a) & em_f32_bits(b)) : r;  /* +0.0 over -0.0 */
    return (a != a || b != b) ? a + b : r;
  }
  EM_DEV double f(double a, double b) {
    double r = a < b ? b : a;
    r = a == b ? __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b)) : r;
    return (a != a || b != b) ? a + b : r;
  }
  EM_DEV int64_t f(int64_t a, int64_t b) { return a < b ? b : a; }
};
struct em_rmin {
  EM_DEV float pad(float) { return INFINITY; }
  EM_DEV double pad(double) { return (double)INFINITY; }
  EM_DEV int64_t pad(int64_t) { return INT64_MAX; }
  EM_DEV float f(float a, float b) {
    float r = b < a ? b : a;
    r = a == b ? em_f32_from_bits(em_f32_bits(a) | em_f32_bits(b)) : r;  /* -0.0 over +0.0 */
    return (a != a || b != b) ? a + b : r;
  }
  EM_DEV double f(double a, double b) {
    double r = b < a ? b : a;
    r = a == b ? __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b)) : r;
    return (a != a || b != b) ? a + b : r;
  }
  EM_DEV int64_t f(int64_t a, int64_t b) { return b < a ? b : a; }
};
struct em_ror {
  EM_DEV int64_t pad(int64_t) { return 0; }
  EM_DEV int64_t f(int64_t a, int64_t b) { return a | b; }
};
struct em_rand {
  EM_DEV int64_t pad(int64_t) { return ~(int64_t)0; }
  EM_DEV int64_t f(int64_t a, int64_t b) { return a & b; }
};

/* Four consecutive elements, aligned to their size: pointwise kernels read
   and write these in one access (16 bytes for float) where the pointer is
   aligned (the kernel checks at run time). */
template <class T> struct alignas(4 * sizeof(T)) em_vec4 { T v[4]; };

template <class R, class T>
EM_DEV T em_block_reduce(T v) {
  __shared__ T em_red_buf[32];
#pragma unroll
  for (int m = 16; m; m >>= 1) v = R::f(v, em_shfl_xor(v, m));
  const unsigned nw = blockDim.x >> 5;
  if (nw <= 1) return v;  /* one warp: every lane has it already */
  const unsigned lane = threadIdx.x & 31u;
  if (lane == 0) em_red_buf[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < nw ? em_red_buf[lane] : R::pad(v);
#pragma unroll
  for (int m = 16; m; m >>= 1) v = R::f(v, em_shfl_xor(v, m));
  __syncthreads();  /* the buffer is free again for the next call */
  return v;
}

#define EM_BLOCK(name, R, T) EM_DEV T name(T v) { return em_block_reduce<R, T>(v); }
EM_BLOCK(em_block_sum, em_rsum, float) EM_BLOCK(em_block_sum, em_rsum, double) EM_BLOCK(em_block_sum, em_rsum, int64_t)
EM_BLOCK(em_block_prod, em_rprod, float) EM_BLOCK(em_block_prod, em_rprod, double) EM_BLOCK(em_block_prod, em_rprod, int64_t)
EM_BLOCK(em_block_max, em_rmax, float) EM_BLOCK(em_block_max, em_rmax, double) EM_BLOCK(em_block_max, em_rmax, int64_t)
EM_BLOCK(em_block_min, em_rmin, float) EM_BLOCK(em_block_min, em_rmin, double) EM_BLOCK(em_block_min, em_rmin, int64_t)
EM_BLOCK(em_block_or, em_ror, int64_t)
EM_BLOCK(em_block_and, em_rand, int64_t)
#undef EM_BLOCK

/* argmax / argmin: does (v2, j2) beat (v, j)?  A strict order on (value,
   index), so the combine is commutative. */
template <int Max, class T>
EM_DEV bool em_arg_beats(T v2, int64_t j2, T v, int64_t j) {
  bool n1 = v != v, n2 = v2 != v2;  /* always false on int64_t */
  bool better = Max ? v2 > v : v2 < v;
  return n2 ? (!n1 || j2 < j) : (!n1 && (better || (v2 == v && j2 < j)));
}
template <int Max, class T>
EM_DEV void em_block_arg(T &v, int64_t &j) {
  __shared__ T em_arg_v[32];
  __shared__ int64_t em_arg_j[32];
#pragma unroll
  for (int m = 16; m; m >>= 1) {
    T v2 = em_shfl_xor(v, m);
    int64_t j2 = em_shfl_xor(j, m);
    if (em_arg_beats<Max>(v2, j2, v, j)) v = v2, j = j2;
  }
  const unsigned nw = blockDim.x >> 5;
  if (nw <= 1) return;
  const unsigned lane = threadIdx.x & 31u;
  if (lane == 0) em_arg_v[threadIdx.x >> 5] = v, em_arg_j[threadIdx.x >> 5] = j;
  __syncthreads();
  const unsigned k = lane < nw ? lane : 0;  /* past the last warp: warp 0 again (idempotent) */
  v = em_arg_v[k], j = em_arg_j[k];
#pragma unroll
  for (int m = 16; m; m >>= 1) {
    T v2 = em_shfl_xor(v, m);
    int64_t j2 = em_shfl_xor(j, m);
    if (em_arg_beats<Max>(v2, j2, v, j)) v = v2, j = j2;
  }
  __syncthreads();
}
EM_DEV void em_block_argmax(float &v, int64_t &j) { em_block_arg<1>(v, j); }
EM_DEV void em_block_argmax(double &v, int64_t &j) { em_block_arg<1>(v, j); }
EM_DEV void em_block_argmax(int64_t &v, int64_t &j) { em_block_arg<1>(v, j); }
EM_DEV void em_block_argmin(float &v, int64_t &j) { em_block_arg<0>(v, j); }
EM_DEV void em_block_argmin(double &v, int64_t &j) { em_block_arg<0>(v, j); }
EM_DEV void em_block_argmin(int64_t &v, int64_t &j) { em_block_arg<0>(v, j); }

/* Column reductions: an (X x Y) block where threadIdx.x picks an output
   point and threadIdx.y strides over the reduced elements; these combine the
   Y partials of each column through shared memory (rows of X + 1) and give
   the result to every thread of the column.  X * Y <= 1024 and Y <= 32, so
   Y * (X + 1) <= 32 * 33. */
/* One buffer for every column helper of a kernel (a __shared__ array in a
   template is one array per instantiation: six of them passed the 48 KB of
   static shared memory); each helper ends with __syncthreads, so the next
   may reuse it. */
EM_DEV unsigned char *em_col_shm() {
  __shared__ __align__(8) unsigned char em_col_raw[2 * 32 * 33 * 8];
  return em_col_raw;
}
template <class T, class F> EM_DEV T em_col_reduce(T v, F f) {
  T *s = (T *)em_col_shm();
  const unsigned w = blockDim.x + 1;
  s[threadIdx.y * w + threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0) {
    T a = s[threadIdx.x];
    for (unsigned i = 1; i < blockDim.y; i++) a = f(a, s[i * w + threadIdx.x]);
    s[threadIdx.x] = a;
  }
  __syncthreads();
  T r = s[threadIdx.x];
  __syncthreads();
  return r;
}
struct em_op_add { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct em_op_mul { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };
struct em_op_max { template <class T> __device__ T operator()(T a, T b) const { return b > a ? b : a; } };
struct em_op_min { template <class T> __device__ T operator()(T a, T b) const { return b < a ? b : a; } };
struct em_op_or { __device__ int64_t operator()(int64_t a, int64_t b) const { return a | b; } };
struct em_op_and { __device__ int64_t operator()(int64_t a, int64_t b) const { return a & b; } };
template <class T> EM_DEV T em_col_sum(T v) { return em_col_reduce(v, em_op_add()); }
template <class T> EM_DEV T em_col_prod(T v) { return em_col_reduce(v, em_op_mul()); }
template <class T> EM_DEV T em_col_max(T v) { return em_col_reduce(v, em_op_max()); }
template <class T> EM_DEV T em_col_min(T v) { return em_col_reduce(v, em_op_min()); }
EM_DEV int64_t em_col_or(int64_t v) { return em_col_reduce(v, em_op_or()); }
EM_DEV int64_t em_col_and(int64_t v) { return em_col_reduce(v, em_op_and()); }
template <int Max, class T> EM_DEV void em_col_arg(T &v, int64_t &j) {
  T *s = (T *)em_col_shm();
  int64_t *em_colj = (int64_t *)(em_col_shm() + 32 * 33 * 8);
  const unsigned w = blockDim.x + 1;
  s[threadIdx.y * w + threadIdx.x] = v, em_colj[threadIdx.y * w + threadIdx.x] = j;
  __syncthreads();
  if (threadIdx.y == 0)
    for (unsigned i = 1; i < blockDim.y; i++) {
      T v2 = s[i * w + threadIdx.x];
      int64_t j2 = em_colj[i * w + threadIdx.x];
      if (em_arg_beats<Max>(v2, j2, v, j)) v = v2, j = j2;
    }
  if (threadIdx.y == 0) s[threadIdx.x] = v, em_colj[threadIdx.x] = j;
  __syncthreads();
  v = s[threadIdx.x], j = em_colj[threadIdx.x];
  __syncthreads();
}
template <class T> EM_DEV void em_col_argmax(T &v, int64_t &j) { em_col_arg<1>(v, j); }
template <class T> EM_DEV void em_col_argmin(T &v, int64_t &j) { em_col_arg<0>(v, j); }

/* ------------------------------------------- round(decimals), angle, nextafter */
/* prelude.h's, with CUDA's nearbyint (the default rounding mode) and nextafter. */
EM_DEV float em_round_decimals_f(float x, float p) { return nearbyintf(x * p) / p; }
EM_DEV double em_round_decimals_d(double x, double p) { return nearbyint(x * p) / p; }
EM_FD(2, em_round_decimals)
EM_DEV float em_round_decimals_neg_f(float x, float p) { return nearbyintf(x / p) * p; }
EM_DEV double em_round_decimals_neg_d(double x, double p) { return nearbyint(x / p) * p; }
EM_FD(2, em_round_decimals_neg)

EM_DEV float em_angle_f(float x) { return x != x ? x : x < 0 ? 3.14159265358979323846f : 0.0f; }
EM_DEV double em_angle_d(double x) { return x != x ? x : x < 0 ? 3.14159265358979323846 : 0.0; }
EM_FD(1, em_angle)

EM_DEV float em_nextafter_f(float a, float b) { return nextafterf(a, b); }
EM_DEV double em_nextafter_d(double a, double b) { return nextafter(a, b); }
EM_FD(2, em_nextafter)
EM_DEV uint16_t em_next16(uint16_t ua, uint16_t ub) {
  uint16_t aa = ua & 0x7fffu, ab = ub & 0x7fffu;
  if (aa == 0) return ab == 0 ? ub : (uint16_t)((ub & 0x8000u) | 1u);
  return (aa > ab || ((ua ^ ub) & 0x8000u)) ? (uint16_t)(ua - 1u) : (uint16_t)(ua + 1u);
}
EM_DEV float em_nextafter_bf16(float a, float b) {
  uint16_t ua = em_f32_to_bf16(a), ub = em_f32_to_bf16(b);
  float r = ua == ub ? a : em_bf16_to_f32(em_next16(ua, ub));
  return (a != a || b != b) ? a + b : r;
}
EM_DEV float em_nextafter_f16(float a, float b) {
  uint16_t ua = em_f32_to_f16(a), ub = em_f32_to_f16(b);
  float r = ua == ub ? a : em_f16_to_f32(em_next16(ua, ub));
  return (a != a || b != b) ? a + b : r;
}

/* ---------------------------------------------------------------- special */
/* special.h (pasted here by tools/embed.py): the special functions shared
   with prelude.h, as device functions.  A polynomial degree converts to an
   integer as eager's static_cast does on the GPU: NaN gives 0 (degree 0,
   value 1, where the CPU's INT64_MIN is a negative degree, value 0) and
   out-of-range values saturate (+inf: INT64_MAX, a loop as long as eager's). */
#define EM_SP static __device__ __noinline__
#define EM_SP_F2I(n) ((int64_t)(n))
#define EM_SP_FLOAT_ZETA  /* eager's CUDA float zeta sums in float */
#define EM_SP_LGAMMA(x) lgamma((double)(x))
#include "special.h"
EM_FD(1, em_digamma)
EM_FD(1, em_trigamma)
EM_FD(2, em_polygamma)
EM_FD(2, em_zeta)
EM_FD(2, em_igamma)
EM_FD(2, em_igammac)
EM_FD(1, em_i0)
EM_FD(1, em_i0e)
EM_FD(1, em_i1)
EM_FD(1, em_i1e)
EM_FD(1, em_k0)
EM_FD(1, em_k0e)
EM_FD(1, em_k1)
EM_FD(1, em_k1e)
EM_FD(1, em_sph_j0)
EM_FD(1, em_airy_ai)
EM_FD(2, em_chebyshev_t)
EM_FD(2, em_chebyshev_u)
EM_FD(2, em_chebyshev_v)
EM_FD(2, em_chebyshev_w)
EM_FD(2, em_shifted_chebyshev_t)
EM_FD(2, em_shifted_chebyshev_u)
EM_FD(2, em_shifted_chebyshev_v)
EM_FD(2, em_shifted_chebyshev_w)
EM_FD(2, em_hermite_h)
EM_FD(2, em_hermite_he)
EM_FD(2, em_laguerre_l)
EM_FD(2, em_legendre_p)

/* Where the CUDA math library has the function, it is used, as eager's
   CUDA kernels use it for lgamma and erfinv: lgamma, erfinv, erfcx
   (prelude.h's own code on the CPU) and normcdfinv for ndtri, in the
   compute type.  ndtri's edges are eager's: 0 gives -inf, 1 inf, outside
   [0, 1] NaN. */
EM_DEV float em_lgamma_f(float x) { return lgammaf(x); }
EM_DEV double em_lgamma_d(double x) { return lgamma(x); }
EM_FD(1, em_lgamma)
EM_DEV float em_erfinv_f(float x) { return erfinvf(x); }
EM_DEV double em_erfinv_d(double x) { return erfinv(x); }
EM_FD(1, em_erfinv)
EM_DEV float em_erfcx_f(float x) { return erfcxf(x); }
EM_DEV double em_erfcx_d(double x) { return erfcx(x); }
EM_FD(1, em_erfcx)
EM_DEV float em_ndtri_f(float p) {
  return (p > 0 && p < 1) ? normcdfinvf(p) : p == 0 ? -INFINITY : p == 1 ? INFINITY : NAN;
}
EM_DEV double em_ndtri_d(double p) {
  return (p > 0 && p < 1) ? normcdfinv(p) : p == 0 ? -INFINITY : p == 1 ? INFINITY : NAN;
}
EM_FD(1, em_ndtri)
/* Bessel functions of the first and second kind: CUDA's double j0, j1, y0,
   y1 for both types (its float ones lose digits for large arguments, as
   eager's do); NaN at +-inf, as eager. */
EM_DEV double em_sp_bessel(double x, int which) {
  if (fabs(x) == INFINITY) return NAN;
  return which == 0 ? j0(x) : which == 1 ? j1(x) : which == 2 ? y0(x) : y1(x);
}
EM_DEV float em_bessel_j0_f(float x) { return (float)em_sp_bessel(x, 0); }
EM_DEV double em_bessel_j0_d(double x) { return em_sp_bessel(x, 0); }
EM_DEV float em_bessel_j1_f(float x) { return (float)em_sp_bessel(x, 1); }
EM_DEV double em_bessel_j1_d(double x) { return em_sp_bessel(x, 1); }
EM_DEV float em_bessel_y0_f(float x) { return (float)em_sp_bessel(x, 2); }
EM_DEV double em_bessel_y0_d(double x) { return em_sp_bessel(x, 2); }
EM_DEV float em_bessel_y1_f(float x) { return (float)em_sp_bessel(x, 3); }
EM_DEV double em_bessel_y1_d(double x) { return em_sp_bessel(x, 3); }
EM_FD(1, em_bessel_j0)
EM_FD(1, em_bessel_j1)
EM_FD(1, em_bessel_y0)
EM_FD(1, em_bessel_y1)

#endif
