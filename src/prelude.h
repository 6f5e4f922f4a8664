/*
 * prelude.h - the scalar functions every generated CPU kernel calls.
 *
 * codegen_c.c pastes this text at the top of each kernel file, so it is
 * self-contained (only <math.h> and <stdint.h>) and defines nothing but
 * static inline functions, macros and one typedef: many kernel files, and the
 * C unit test, include it.  It knows nothing of tensors, loops or storage
 * dtypes; the code generator converts every operand to the node's compute
 * type before calling an em_* function.
 *
 * Compute types are exactly three: float (for float32, bfloat16 and float16
 * storage), double (float64) and int64_t (every integer dtype and bool, bool
 * as 0/1).  Each em_* name is a C11 _Generic macro that dispatches on its
 * first value operand to em_<op>_f, _d or _i; an op that takes no integers
 * has no _i, and calling it with int64_t is a compile error.  Predicates,
 * comparisons and logic ops return int64_t 0/1 for every compute type.
 *
 * Semantics are PyTorch eager's on CPU, edge cases included (NaN, +-Inf,
 * -0.0, int64 wrap-around); tests/c/test_prelude.c checks them against values
 * printed by tests/c/prelude_ref.py.  Where torch's own scalar and vectorized
 * loops disagree, the comment at the function says which one is followed.
 * Integer arithmetic wraps (it is done in uint64_t, never UB).  Integer
 * division, floor division, remainder and fmod by zero return 0 without a
 * trap and set ember_zero_division, which the runtime reads after each
 * kernel and turns into torch's error (RuntimeError: ZeroDivisionError).
 *
 * Vector math.  Kernels are compiled without -ffast-math, so glibc's <math.h>
 * does not announce the SIMD variants of its functions and gcc would call the
 * scalar ones one lane at a time.  Below, the functions that glibc's libmvec
 * implements are declared again with __attribute__((simd)): gcc then
 * vectorizes loops that call them (at -O3, or under `#pragma omp simd`),
 * calling e.g. _ZGVdN8v_sinf for eight floats.  libmvec's variants are within
 * 4 ULP and treat NaN, Inf and -0.0 like the scalar functions.  The kernel
 * .so must be linked with -lm: on glibc, libm.so is a linker script that adds
 * libmvec.so.1 as needed.  Define EM_NO_LIBMVEC to leave the declarations
 * out; then only loops without transcendental calls vectorize.
 *
 * Not vectorizable: em_fmod, em_remainder and em_floordiv on double (fmod has
 * no vector variant; the float ones have their own exact code) and every
 * integer division; a loop holding one of them runs scalar.
 *
 * Reductions (how the code generator accumulates; acc of the compute type):
 *   sum, mean:  acc = 0; acc += x; under `#pragma omp simd reduction(+:acc)`,
 *               which lets gcc reassociate the float adds.
 *   prod:       acc = 1; acc *= x; reduction(*:acc).
 *   amax/amin:  acc = -INFINITY (INFINITY; INT64_MIN/MAX on int64_t).  NaN is
 *               sticky, as in torch.amax: acc = em_max_nan(acc, x) says so in
 *               one step but does not vectorize; the vectorized form is
 *               `acc = x > acc ? x : acc` under reduction(max:acc) plus
 *               `nan |= x != x` under reduction(|:nan), and NAN at the end
 *               where nan is set.
 *   any/all:    acc = 0 (1); acc |= em_to_bool(x) (acc &= ...).
 */
#ifndef EMBER_PRELUDE_H
#define EMBER_PRELUDE_H

#include <math.h>
#include <stdint.h>

/* ---------------------------------------------------------------- libmvec */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    defined(__GLIBC__) && !defined(__FAST_MATH__) && !defined(EM_NO_LIBMVEC)
#define EM_SIMD __attribute__((__simd__("notinbranch")))
#define EM_VEC1(fn) EM_SIMD double fn(double); EM_SIMD float fn##f(float);
#define EM_VEC2(fn) EM_SIMD double fn(double, double); EM_SIMD float fn##f(float, float);
/* in libmvec since glibc 2.22 */
EM_VEC1(sin) EM_VEC1(cos) EM_VEC1(exp) EM_VEC1(log) EM_VEC2(pow)
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)
/* since glibc 2.35 */
EM_VEC1(tan) EM_VEC1(asin) EM_VEC1(acos) EM_VEC1(atan) EM_VEC1(sinh) EM_VEC1(cosh)
EM_VEC1(tanh) EM_VEC1(asinh) EM_VEC1(acosh) EM_VEC1(atanh) EM_VEC1(exp2)
EM_VEC1(expm1) EM_VEC1(log2) EM_VEC1(log10) EM_VEC1(log1p) EM_VEC1(erf)
EM_VEC1(erfc) EM_VEC2(atan2) EM_VEC2(hypot)
#endif
#undef EM_VEC1
#undef EM_VEC2
#undef EM_SIMD
#endif

/* --------------------------------------------------------------- dispatch */
#define EM_G_FD(op, a) _Generic((a), float: op##_f, double: op##_d)
#define EM_G_FDI(op, a) _Generic((a), float: op##_f, double: op##_d, int64_t: op##_i)
#define EM_G_I(op, a) _Generic((a), int64_t: op##_i)

/* <math.h>'s M_ constants need _DEFAULT_SOURCE; these do not. */
#define EM_SQRT2 1.41421356237309504880     /* sqrt(2) */
#define EM_SQRT1_2 0.70710678118654752440   /* 1/sqrt(2) */
#define EM_2_SQRTPI 1.12837916709551257390  /* 2/sqrt(pi) */

/* ---------------------------------------------------------------- storage */
__extension__ typedef _Float16 em_half;  /* float16 storage; C casts round to nearest even */

static inline uint32_t em_f32_bits(float x) { union { float f; uint32_t u; } v = {x}; return v.u; }
static inline float em_f32_from_bits(uint32_t u) { union { uint32_t u; float f; } v = {u}; return v.f; }
static inline uint64_t em_f64_bits(double x) { union { double f; uint64_t u; } v = {x}; return v.u; }
static inline double em_f64_from_bits(uint64_t u) { union { uint64_t u; double f; } v = {u}; return v.f; }

static inline float em_bf16_to_f32(uint16_t h) { return em_f32_from_bits((uint32_t)h << 16); }
/* Round to nearest even, as c10::BFloat16.  Every NaN becomes 0xffff, as
   torch's float -> bfloat16 copy gives (c10's scalar code would give 0x7fc0;
   both are NaN). */
static inline uint16_t em_f32_to_bf16(float x) {
  uint32_t u = em_f32_bits(x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return x != x ? (uint16_t)0xffff : (uint16_t)r;
}
/* float16 as raw bits, the conversions of c10::Half (Maratyszcza's FP16:
   round to nearest even, NaN -> 0x7e00 with the sign kept).  They are
   branch-free integer and float code, so loops over them vectorize; gcc 12
   does not vectorize conversions between float and _Float16 (C casts on
   em_half are correct, but they keep the loop scalar). */
static inline float em_f16_to_f32(uint16_t h) {
  uint32_t w = (uint32_t)h << 16;
  uint32_t sign = w & 0x80000000u;
  uint32_t two_w = w + w;
  /* normal and inf/NaN: move the exponent and mantissa, rescale by 2^-112 */
  float normal = em_f32_from_bits((two_w >> 4) + (0xe0u << 23)) * 0x1p-112f;
  /* subnormal: the mantissa as the low bits of 0.5f's, minus 0.5 */
  float denorm = em_f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  uint32_t bits = two_w < (1u << 27) ? em_f32_bits(denorm) : em_f32_bits(normal);
  return em_f32_from_bits(sign | bits);
}
static inline uint16_t em_f32_to_f16(float x) {
  /* scaling up then down leaves inf for what overflows float16 and rounds
     the rest at float16's precision when the bias is added */
  float base = (fabsf(x) * 0x1p112f) * 0x1p-110f;
  uint32_t w = em_f32_bits(x);
  uint32_t shl1_w = w + w;
  uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = em_f32_from_bits((bias >> 1) + 0x07800000u) + base;
  uint32_t bits = em_f32_bits(base);
  uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
  return (uint16_t)((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

/* Float to integer as torch's static_cast behaves on x86-64: truncation
   toward zero; NaN and values out of range give the "integer indefinite"
   INT64_MIN (cvttss2si).  A plain C cast is UB there and gcc may fold it to
   anything, so these test the range first.  em_to_int is for int64 storage.
   For int32, int16, int8 and uint8 storage torch converts through int32 (out
   of range gives INT32_MIN, so 1e20 -> int8 is 0, 3e9 -> int32 is INT32_MIN
   and 300.7 -> int8 is 44): use em_to_int32, then the plain C narrowing cast,
   which wraps. */
static inline int64_t em_to_int_f(float x) { return (x >= -0x1p63f && x < 0x1p63f) ? (int64_t)x : INT64_MIN; }
static inline int64_t em_to_int_d(double x) { return (x >= -0x1p63 && x < 0x1p63) ? (int64_t)x : INT64_MIN; }
static inline int64_t em_to_int_i(int64_t x) { return x; }
#define em_to_int(a) EM_G_FDI(em_to_int, a)(a)
static inline int64_t em_to_int32_f(float x) { return (x >= -0x1p31f && x < 0x1p31f) ? (int64_t)x : INT32_MIN; }
static inline int64_t em_to_int32_d(double x) { return (x > -2147483649.0 && x < 0x1p31) ? (int64_t)x : INT32_MIN; }
static inline int64_t em_to_int32_i(int64_t x) { return x; }
#define em_to_int32(a) EM_G_FDI(em_to_int32, a)(a)
/* bool storage: x != 0, so NaN is true and -0.0 false. */
static inline int64_t em_to_bool_f(float x) { return x != 0; }
static inline int64_t em_to_bool_d(double x) { return x != 0; }
static inline int64_t em_to_bool_i(int64_t x) { return x != 0; }
#define em_to_bool(a) EM_G_FDI(em_to_bool, a)(a)

/* uint64_t -> int64_t keeps the bits (gcc defines the conversion modulo 2^64). */
static inline int64_t em_wrap(uint64_t u) { return (int64_t)u; }

/* ------------------------------------------------------------------ unary */
/* The ops that are one libm call per type. */
#define EM_LIBM1(op, fn) \
  static inline float em_##op##_f(float x) { return fn##f(x); } \
  static inline double em_##op##_d(double x) { return fn(x); }
EM_LIBM1(exp, exp)     EM_LIBM1(exp2, exp2)   EM_LIBM1(expm1, expm1)
EM_LIBM1(log, log)     EM_LIBM1(log2, log2)   EM_LIBM1(log10, log10)
EM_LIBM1(log1p, log1p) EM_LIBM1(sqrt, sqrt)
EM_LIBM1(sin, sin)     EM_LIBM1(cos, cos)     EM_LIBM1(tan, tan)
EM_LIBM1(asin, asin)   EM_LIBM1(acos, acos)   EM_LIBM1(atan, atan)
EM_LIBM1(tanh, tanh)
EM_LIBM1(asinh, asinh) EM_LIBM1(acosh, acosh) EM_LIBM1(atanh, atanh)
EM_LIBM1(erf, erf)     EM_LIBM1(erfc, erfc)
#undef EM_LIBM1
#define em_exp(a) EM_G_FD(em_exp, a)(a)
#define em_exp2(a) EM_G_FD(em_exp2, a)(a)
#define em_expm1(a) EM_G_FD(em_expm1, a)(a)
#define em_log(a) EM_G_FD(em_log, a)(a)
#define em_log2(a) EM_G_FD(em_log2, a)(a)
#define em_log10(a) EM_G_FD(em_log10, a)(a)
#define em_log1p(a) EM_G_FD(em_log1p, a)(a)
#define em_sqrt(a) EM_G_FD(em_sqrt, a)(a)
#define em_sin(a) EM_G_FD(em_sin, a)(a)
#define em_cos(a) EM_G_FD(em_cos, a)(a)
#define em_tan(a) EM_G_FD(em_tan, a)(a)
#define em_asin(a) EM_G_FD(em_asin, a)(a)
#define em_acos(a) EM_G_FD(em_acos, a)(a)
#define em_atan(a) EM_G_FD(em_atan, a)(a)
#define em_sinh(a) EM_G_FD(em_sinh, a)(a)
#define em_cosh(a) EM_G_FD(em_cosh, a)(a)
#define em_tanh(a) EM_G_FD(em_tanh, a)(a)
#define em_asinh(a) EM_G_FD(em_asinh, a)(a)
#define em_acosh(a) EM_G_FD(em_acosh, a)(a)
#define em_atanh(a) EM_G_FD(em_atanh, a)(a)
#define em_erf(a) EM_G_FD(em_erf, a)(a)
#define em_erfc(a) EM_G_FD(em_erfc, a)(a)

/* sinh and cosh are libm's: finite up to where the true result overflows, as
   torch's scalar loop.  Its vectorized loop goes through exp and gives inf
   from |x| = 88.72 (709.78 for double), so eager's answer in that band
   depends on where the element sits; tests/test_ops.py accepts either. */
static inline float em_sinh_f(float x) { return sinhf(x); }
static inline double em_sinh_d(double x) { return sinh(x); }
static inline float em_cosh_f(float x) { return coshf(x); }
static inline double em_cosh_d(double x) { return cosh(x); }

/* abs and neg of INT64_MIN are INT64_MIN, as in torch. */
static inline float em_abs_f(float x) { return fabsf(x); }
static inline double em_abs_d(double x) { return fabs(x); }
static inline int64_t em_abs_i(int64_t x) { return x < 0 ? em_wrap(0 - (uint64_t)x) : x; }
#define em_abs(a) EM_G_FDI(em_abs, a)(a)
static inline float em_neg_f(float x) { return -x; }
static inline double em_neg_d(double x) { return -x; }
static inline int64_t em_neg_i(int64_t x) { return em_wrap(0 - (uint64_t)x); }
#define em_neg(a) EM_G_FDI(em_neg, a)(a)

static inline float em_rsqrt_f(float x) { return 1.0f / sqrtf(x); }
static inline double em_rsqrt_d(double x) { return 1.0 / sqrt(x); }
#define em_rsqrt(a) EM_G_FD(em_rsqrt, a)(a)
static inline float em_recip_f(float x) { return 1.0f / x; }
static inline double em_recip_d(double x) { return 1.0 / x; }
#define em_recip(a) EM_G_FD(em_recip, a)(a)
/* 1 / (1 + exp(-x)), as ATen writes it. */
static inline float em_sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double em_sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
#define em_sigmoid(a) EM_G_FD(em_sigmoid, a)(a)
/* x / (1 + exp(-x)), as ATen writes it: silu(-inf) is NaN. */
static inline float em_silu_f(float x) { return x / (1.0f + expf(-x)); }
static inline double em_silu_d(double x) { return x / (1.0 + exp(-x)); }
#define em_silu(a) EM_G_FD(em_silu, a)(a)

/* sign: -1, 0 or 1; in torch (CPU) sign(NaN) is 0 and sign(-0.0) is +0.0. */
static inline float em_sign_f(float x) { return (x > 0 ? 1.0f : 0.0f) - (x < 0 ? 1.0f : 0.0f); }
static inline double em_sign_d(double x) { return (x > 0 ? 1.0 : 0.0) - (x < 0 ? 1.0 : 0.0); }
static inline int64_t em_sign_i(int64_t x) { return (x > 0) - (x < 0); }
#define em_sign(a) EM_G_FDI(em_sign, a)(a)

/* Rounding, the identity on integers.  round is half to even: nearbyint in
   the default rounding mode, as ATen (gcc 12 vectorizes it, not roundeven). */
static inline float em_floor_f(float x) { return floorf(x); }
static inline double em_floor_d(double x) { return floor(x); }
static inline int64_t em_floor_i(int64_t x) { return x; }
#define em_floor(a) EM_G_FDI(em_floor, a)(a)
static inline float em_ceil_f(float x) { return ceilf(x); }
static inline double em_ceil_d(double x) { return ceil(x); }
static inline int64_t em_ceil_i(int64_t x) { return x; }
#define em_ceil(a) EM_G_FDI(em_ceil, a)(a)
static inline float em_round_f(float x) { return nearbyintf(x); }
static inline double em_round_d(double x) { return nearbyint(x); }
static inline int64_t em_round_i(int64_t x) { return x; }
#define em_round(a) EM_G_FDI(em_round, a)(a)
static inline float em_trunc_f(float x) { return truncf(x); }
static inline double em_trunc_d(double x) { return trunc(x); }
static inline int64_t em_trunc_i(int64_t x) { return x; }
#define em_trunc(a) EM_G_FDI(em_trunc, a)(a)
/* x - trunc(x): frac(+-inf) is NaN and frac(-0.0) is +0.0, as in torch. */
static inline float em_frac_f(float x) { return x - truncf(x); }
static inline double em_frac_d(double x) { return x - trunc(x); }
#define em_frac(a) EM_G_FD(em_frac, a)(a)

/* relu is clamp_min(x, 0) in ATen: NaN stays NaN and -0.0 stays -0.0. */
static inline float em_relu_f(float x) { return x < 0 ? 0.0f : x; }
static inline double em_relu_d(double x) { return x < 0 ? 0.0 : x; }
static inline int64_t em_relu_i(int64_t x) { return x < 0 ? 0 : x; }
#define em_relu(a) EM_G_FDI(em_relu, a)(a)

/* logical_not: 1 where x == 0 (NaN counts as true, so gives 0). */
static inline int64_t em_lnot_f(float x) { return x == 0; }
static inline int64_t em_lnot_d(double x) { return x == 0; }
static inline int64_t em_lnot_i(int64_t x) { return x == 0; }
#define em_lnot(a) EM_G_FDI(em_lnot, a)(a)
/* bitwise_not, integers only; for bool storage the caller uses em_lnot. */
static inline int64_t em_bnot_i(int64_t x) { return ~x; }
#define em_bnot(a) EM_G_I(em_bnot, a)(a)

/* Predicates.  No integer is NaN or infinite. */
static inline int64_t em_isnan_f(float x) { return x != x; }
static inline int64_t em_isnan_d(double x) { return x != x; }
static inline int64_t em_isnan_i(int64_t x) { (void)x; return 0; }
#define em_isnan(a) EM_G_FDI(em_isnan, a)(a)
static inline int64_t em_isinf_f(float x) { return fabsf(x) == INFINITY; }
static inline int64_t em_isinf_d(double x) { return fabs(x) == INFINITY; }
static inline int64_t em_isinf_i(int64_t x) { (void)x; return 0; }
#define em_isinf(a) EM_G_FDI(em_isinf, a)(a)
static inline int64_t em_isposinf_f(float x) { return x == INFINITY; }
static inline int64_t em_isposinf_d(double x) { return x == INFINITY; }
static inline int64_t em_isposinf_i(int64_t x) { (void)x; return 0; }
#define em_isposinf(a) EM_G_FDI(em_isposinf, a)(a)
static inline int64_t em_isneginf_f(float x) { return x == -INFINITY; }
static inline int64_t em_isneginf_d(double x) { return x == -INFINITY; }
static inline int64_t em_isneginf_i(int64_t x) { (void)x; return 0; }
#define em_isneginf(a) EM_G_FDI(em_isneginf, a)(a)
static inline int64_t em_isfinite_f(float x) { return fabsf(x) < INFINITY; }
static inline int64_t em_isfinite_d(double x) { return fabs(x) < INFINITY; }
static inline int64_t em_isfinite_i(int64_t x) { (void)x; return 1; }
#define em_isfinite(a) EM_G_FDI(em_isfinite, a)(a)
/* The sign bit: set for -0.0 and for NaNs that carry it. */
static inline int64_t em_signbit_f(float x) { return em_f32_bits(x) >> 31; }
static inline int64_t em_signbit_d(double x) { return (int64_t)(em_f64_bits(x) >> 63); }
static inline int64_t em_signbit_i(int64_t x) { return x < 0; }
#define em_signbit(a) EM_G_FDI(em_signbit, a)(a)

/* ------------------------------------------------------------ activations */
/* gelu, erf form: x * 0.5 * (1 + erf(x / sqrt(2))), ATen's formula, so
   gelu(+inf) is +inf.  Eager's own answer there depends on the layout: for a
   contiguous float32, bfloat16 or float16 input torch runs oneDNN's kernel,
   which gives NaN at +inf and +inf from 2^127 up, and for any other input
   (and on CUDA, and for float64) the formula; Inductor gives the formula's
   everywhere.  Copying oneDNN would make ember differ from eager, aot_eager
   and Inductor together on every non-contiguous input. */
static inline float em_gelu_f(float x) { return x * 0.5f * (1.0f + erff(x * (float)EM_SQRT1_2)); }
static inline double em_gelu_d(double x) { return x * 0.5 * (1.0 + erf(x * EM_SQRT1_2)); }
#define em_gelu(a) EM_G_FD(em_gelu, a)(a)

/* gelu, approximate='tanh', as ATen's scalar_gelu_approximated_with_tanh. */
#define EM_GELU_BETA (EM_SQRT2 * EM_2_SQRTPI * 0.5)
#define EM_GELU_KAPPA 0.044715
static inline float em_gelu_tanh_f(float x) {
  float x_cube = x * x * x;
  float inner = (float)EM_GELU_BETA * (x + (float)EM_GELU_KAPPA * x_cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}
static inline double em_gelu_tanh_d(double x) {
  double x_cube = x * x * x;
  double inner = EM_GELU_BETA * (x + EM_GELU_KAPPA * x_cube);
  return 0.5 * x * (1.0 + tanh(inner));
}
#define em_gelu_tanh(a) EM_G_FD(em_gelu_tanh, a)(a)

/* leaky_relu: x > 0 ? x : x * slope. */
static inline float em_leaky_relu_f(float x, float s) { return x > 0 ? x : x * s; }
static inline double em_leaky_relu_d(double x, double s) { return x > 0 ? x : x * s; }
#define em_leaky_relu(a, s) EM_G_FD(em_leaky_relu, a)(a, s)

/* aten.elu(x, alpha, scale, input_scale):
   x < 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale.
   Both sides are computed, so that the loop stays free of branches. */
static inline float em_elu_f(float x, float alpha, float scale, float iscale) {
  float neg = expm1f(x * iscale) * (alpha * scale);
  float pos = x * scale;
  return x < 0 ? neg : pos;
}
static inline double em_elu_d(double x, double alpha, double scale, double iscale) {
  double neg = expm1(x * iscale) * (alpha * scale);
  double pos = x * scale;
  return x < 0 ? neg : pos;
}
#define em_elu(a, al, sc, is) EM_G_FD(em_elu, a)(a, al, sc, is)

/* softplus: x * beta > threshold ? x : log1p(exp(x * beta)) / beta. */
static inline float em_softplus_f(float x, float beta, float thr) {
  float xb = x * beta;
  float soft = log1pf(expf(xb)) / beta;
  return xb > thr ? x : soft;
}
static inline double em_softplus_d(double x, double beta, double thr) {
  double xb = x * beta;
  double soft = log1p(exp(xb)) / beta;
  return xb > thr ? x : soft;
}
#define em_softplus(a, b, t) EM_G_FD(em_softplus, a)(a, b, t)

/* threshold: x <= thr ? value : x (NaN is kept). */
static inline float em_threshold_f(float x, float thr, float v) { return x <= thr ? v : x; }
static inline double em_threshold_d(double x, double thr, double v) { return x <= thr ? v : x; }
static inline int64_t em_threshold_i(int64_t x, int64_t thr, int64_t v) { return x <= thr ? v : x; }
#define em_threshold(a, t, v) EM_G_FDI(em_threshold, a)(a, t, v)

/* nan_to_num with the replacements already chosen by the caller (torch's
   defaults are 0 and the largest finite values of the storage dtype, not of
   float).  The identity on integers. */
static inline float em_nan_to_num_f(float x, float nan, float pinf, float ninf) {
  return x != x ? nan : x == INFINITY ? pinf : x == -INFINITY ? ninf : x;
}
static inline double em_nan_to_num_d(double x, double nan, double pinf, double ninf) {
  return x != x ? nan : x == INFINITY ? pinf : x == -INFINITY ? ninf : x;
}
static inline int64_t em_nan_to_num_i(int64_t x, int64_t nan, int64_t pinf, int64_t ninf) {
  (void)nan; (void)pinf; (void)ninf;
  return x;
}
#define em_nan_to_num(a, n, p, m) EM_G_FDI(em_nan_to_num, a)(a, n, p, m)

/* -------------------------------------------------------------- min / max */
/* torch.maximum / minimum, clamp_min / clamp_max: NaN in either operand
   gives NaN.  On a tie (+0.0 against -0.0) the first operand wins, as in
   ATen's clamp_min and clamp_max and in maximum's scalar loop; maximum's
   vector loop returns the second, so only the sign of a zero can differ. */
static inline float em_max_f(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
static inline double em_max_d(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
static inline int64_t em_max_i(int64_t a, int64_t b) { return a < b ? b : a; }
#define em_max(a, b) EM_G_FDI(em_max, a)(a, b)
static inline float em_min_f(float a, float b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
static inline double em_min_d(double a, double b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
static inline int64_t em_min_i(int64_t a, int64_t b) { return b < a ? b : a; }
#define em_min(a, b) EM_G_FDI(em_min, a)(a, b)

/* fmax / fmin: a NaN operand is ignored (NaN only when both are); on a tie
   the first operand wins, as torch's std::fmax / std::fmin give. */
static inline float em_fmax_f(float a, float b) { return b != b ? a : a != a ? b : (a < b ? b : a); }
static inline double em_fmax_d(double a, double b) { return b != b ? a : a != a ? b : (a < b ? b : a); }
static inline int64_t em_fmax_i(int64_t a, int64_t b) { return em_max_i(a, b); }
#define em_fmax(a, b) EM_G_FDI(em_fmax, a)(a, b)
static inline float em_fmin_f(float a, float b) { return b != b ? a : a != a ? b : (b < a ? b : a); }
static inline double em_fmin_d(double a, double b) { return b != b ? a : a != a ? b : (b < a ? b : a); }
static inline int64_t em_fmin_i(int64_t a, int64_t b) { return em_min_i(a, b); }
#define em_fmin(a, b) EM_G_FDI(em_fmin, a)(a, b)

/* clamp(x, lo, hi) = min(max(x, lo), hi): when lo > hi the result is hi;
   NaN in x, lo or hi gives NaN (torch fills with NaN for a NaN bound).  An
   absent bound is passed as -INFINITY / INFINITY (INT64_MIN / INT64_MAX). */
static inline float em_clamp_f(float x, float lo, float hi) {
  float r = x < lo ? lo : x;
  r = hi < r ? hi : r;
  return (x != x || lo != lo || hi != hi) ? x + lo + hi : r;
}
static inline double em_clamp_d(double x, double lo, double hi) {
  double r = x < lo ? lo : x;
  r = hi < r ? hi : r;
  return (x != x || lo != lo || hi != hi) ? x + lo + hi : r;
}
static inline int64_t em_clamp_i(int64_t x, int64_t lo, int64_t hi) {
  int64_t r = x < lo ? lo : x;
  return hi < r ? hi : r;
}
#define em_clamp(a, l, h) EM_G_FDI(em_clamp, a)(a, l, h)

/* One step of amax / amin: a NaN, in acc or in x, stays in acc. */
static inline float em_max_nan_f(float acc, float x) { return (x > acc || x != x) ? x : acc; }
static inline double em_max_nan_d(double acc, double x) { return (x > acc || x != x) ? x : acc; }
static inline int64_t em_max_nan_i(int64_t acc, int64_t x) { return x > acc ? x : acc; }
#define em_max_nan(acc, x) EM_G_FDI(em_max_nan, acc)(acc, x)
static inline float em_min_nan_f(float acc, float x) { return (x < acc || x != x) ? x : acc; }
static inline double em_min_nan_d(double acc, double x) { return (x < acc || x != x) ? x : acc; }
static inline int64_t em_min_nan_i(int64_t acc, int64_t x) { return x < acc ? x : acc; }
#define em_min_nan(acc, x) EM_G_FDI(em_min_nan, acc)(acc, x)

/* ------------------------------------------------------------- arithmetic */
static inline float em_add_f(float a, float b) { return a + b; }
static inline double em_add_d(double a, double b) { return a + b; }
static inline int64_t em_add_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a + (uint64_t)b); }
#define em_add(a, b) EM_G_FDI(em_add, a)(a, b)
static inline float em_sub_f(float a, float b) { return a - b; }
static inline double em_sub_d(double a, double b) { return a - b; }
static inline int64_t em_sub_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a - (uint64_t)b); }
#define em_sub(a, b) EM_G_FDI(em_sub, a)(a, b)
static inline float em_mul_f(float a, float b) { return a * b; }
static inline double em_mul_d(double a, double b) { return a * b; }
static inline int64_t em_mul_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a * (uint64_t)b); }
#define em_mul(a, b) EM_G_FDI(em_mul, a)(a, b)

/* Integer division never traps: a divisor of 0 or -1 is replaced by 1 for
   the hardware division and the result patched afterwards.  x / 0 is 0
   (torch raises ZeroDivisionError), x / -1 is -x, so INT64_MIN / -1 wraps to
   INT64_MIN as in torch, and x % -1 is 0. */
/* Set (never cleared here) by an integer division by zero; exported from
   the kernel library, read and cleared by run.c after each kernel. */
__attribute__((visibility("default"))) int ember_zero_division;
static inline int64_t em_safe_divisor(int64_t b) {
  if (__builtin_expect(b == 0, 0)) __atomic_store_n(&ember_zero_division, 1, __ATOMIC_RELAXED);
  return (b == 0 || b == -1) ? 1 : b;
}

/* div: true division on floats.  On int64_t (used only for
   rounding_mode='trunc') C's truncating division. */
static inline float em_div_f(float a, float b) { return a / b; }
static inline double em_div_d(double a, double b) { return a / b; }
static inline int64_t em_div_i(int64_t a, int64_t b) {
  int64_t q = a / em_safe_divisor(b);
  return b == 0 ? 0 : b == -1 ? em_neg_i(a) : q;
}
#define em_div(a, b) EM_G_FDI(em_div, a)(a, b)
/* div(rounding_mode='trunc'): trunc(a / b). */
static inline float em_trunc_div_f(float a, float b) { return truncf(a / b); }
static inline double em_trunc_div_d(double a, double b) { return trunc(a / b); }
static inline int64_t em_trunc_div_i(int64_t a, int64_t b) { return em_div_i(a, b); }
#define em_trunc_div(a, b) EM_G_FDI(em_trunc_div, a)(a, b)

/* fmod: C's fmod, with the sign of the dividend; fmod by 0 is NaN on floats
   and 0 on integers.  The result is exact, as torch's scalar loop (C fmod);
   torch's vectorized loop (SLEEF) gives NaN where a / b overflows, e.g.
   7 fmod 1e-38, which is not copied here (nor in em_remainder and
   em_floordiv).
   libmvec has no fmod, so the float version is branch-free code that
   vectorizes: in double, |a| is reduced modulo |b| * 2^s, s chosen so that
   the quotient stays below 2^52 (then trunc(x / ys) is off by at most one,
   fixed by adding ys back) and every remainder, having a float's 24 bits,
   is exact in an fma.  Each step closes 51 bits of the exponent gap; six
   cover the largest float over the smallest.  The double version calls
   fmod and keeps its loop scalar. */
static inline float em_fmod_f(float a, float b) {
  double x = fabs((double)a), y = fabs((double)b);
  for (int k = 0; k < 6; k++) {
    int64_t gap = (int64_t)(em_f64_bits(x) >> 52) - (int64_t)(em_f64_bits(y) >> 52);
    uint64_t s = gap > 51 ? (uint64_t)(gap - 51) : 0;
    double ys = em_f64_from_bits(em_f64_bits(y) + (s << 52));  /* y * 2^s */
    double r = fma(-trunc(x / ys), ys, x);
    x = r < 0 ? r + ys : r;
  }
  float m = copysignf((float)x, a);
  float nan = NAN;
  return (fabsf(a) < INFINITY && b != 0 && b == b) ? (fabsf(b) == INFINITY ? a : m) : nan;
}
static inline double em_fmod_d(double a, double b) { return fmod(a, b); }
static inline int64_t em_fmod_i(int64_t a, int64_t b) {
  int64_t r = a % em_safe_divisor(b);
  return (b == 0 || b == -1) ? 0 : r;
}
#define em_fmod(a, b) EM_G_FDI(em_fmod, a)(a, b)

/* remainder: Python's %, with the sign of the divisor.  On floats ATen's
   formula m = fmod(a, b); m != 0 && (b < 0) != (m < 0) ? m + b : m, so
   -4 % 2 is -0.0 and -4 % inf is inf.  The float version compares sign bits
   instead, which is the same where m != 0 (b = +-0 makes m NaN) and lets
   gcc 12 vectorize the loop. */
static inline int em_signs_differ_f(float a, float b) { return (em_f32_bits(a) ^ em_f32_bits(b)) >> 31; }
static inline float em_remainder_f(float a, float b) {
  float m = em_fmod_f(a, b);
  return (m != 0 && em_signs_differ_f(b, m)) ? m + b : m;
}
static inline double em_remainder_d(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && (b < 0) != (m < 0)) ? m + b : m;
}
static inline int64_t em_remainder_i(int64_t a, int64_t b) {
  int64_t d = em_safe_divisor(b);
  int64_t r = a % d;
  r = (r != 0 && (r < 0) != (d < 0)) ? r + d : r;
  return (b == 0 || b == -1) ? 0 : r;
}
#define em_remainder(a, b) EM_G_FDI(em_remainder, a)(a, b)

/* floor_divide and div(rounding_mode='floor').  Floats: c10's
   div_floor_floating, which is not floor(a / b) but (a - fmod(a, b)) / b
   with fix-ups, so that a == q * b + remainder(a, b) holds as in Python;
   x // 0 is a / b (+-inf or NaN).  Integers: Python's floor semantics. */
static inline float em_floordiv_f(float a, float b) {
  float mod = em_fmod_f(a, b);
  float div = (a - mod) / b;
  div = (mod != 0 && em_signs_differ_f(b, mod)) ? div - 1.0f : div;
  float fl = floorf(div);
  fl = (div - fl > 0.5f) ? fl + 1.0f : fl;
  float q = a / b;
  fl = div == 0 ? copysignf(0.0f, q) : fl;
  return b == 0 ? q : fl;
}
static inline double em_floordiv_d(double a, double b) {
  double mod = fmod(a, b);
  double div = (a - mod) / b;
  div = (mod != 0 && (b < 0) != (mod < 0)) ? div - 1.0 : div;
  double fl = floor(div);
  fl = (div - fl > 0.5) ? fl + 1.0 : fl;
  double q = a / b;
  fl = div == 0 ? copysign(0.0, q) : fl;
  return b == 0 ? q : fl;
}
static inline int64_t em_floordiv_i(int64_t a, int64_t b) {
  int64_t d = em_safe_divisor(b);
  int64_t q = a / d, r = a % d;
  q = (r != 0 && (r < 0) != (d < 0)) ? q - 1 : q;
  return b == 0 ? 0 : b == -1 ? em_neg_i(a) : q;
}
#define em_floordiv(a, b) EM_G_FDI(em_floordiv, a)(a, b)

/* pow.  Floats: C pow (pow(x, 0) and pow(1, y) are 1 even for NaN).
   Integers: ATen's powi, by squaring with wrap-around; a negative exponent
   gives 1 for base 1, +-1 for base -1 (by parity) and 0 otherwise. */
static inline float em_pow_f(float a, float b) { return powf(a, b); }
static inline double em_pow_d(double a, double b) { return pow(a, b); }
static inline int64_t em_pow_i(int64_t a, int64_t b) {
  if (b < 0)
    return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  for (; b; b >>= 1) {
    if (b & 1) r *= x;
    x *= x;
  }
  return em_wrap(r);
}
#define em_pow(a, b) EM_G_FDI(em_pow, a)(a, b)
/* pow.Tensor_Scalar for float32, bfloat16 and float64 storage: ATen replaces
   the exponents 0, 1, 0.5, -0.5, -1, 2, 3, -2 by a fill, a copy, sqrt, rsqrt,
   reciprocal and products, which differ from pow at the edges (pow(-inf, 0.5)
   is inf but sqrt(-inf) NaN; pow(-0.0, 0.5) is 0.0 but sqrt(-0.0) -0.0).
   Every candidate is computed and one selected, so that a loop over it
   vectorizes even when the exponent is not a literal; with a literal gcc
   keeps only the one needed.  float16 storage, and pow.Tensor_Tensor, use
   em_pow. */
static inline float em_pow_ts_f(float a, float e) {
  float p = powf(a, e), s = sqrtf(a), sq = a * a;
  return e == 0.0f ? 1.0f : e == 1.0f ? a : e == 0.5f ? s : e == -0.5f ? 1.0f / s
       : e == -1.0f ? 1.0f / a : e == 2.0f ? sq : e == 3.0f ? sq * a : e == -2.0f ? 1.0f / sq : p;
}
static inline double em_pow_ts_d(double a, double e) {
  double p = pow(a, e), s = sqrt(a), sq = a * a;
  return e == 0.0 ? 1.0 : e == 1.0 ? a : e == 0.5 ? s : e == -0.5 ? 1.0 / s
       : e == -1.0 ? 1.0 / a : e == 2.0 ? sq : e == 3.0 ? sq * a : e == -2.0 ? 1.0 / sq : p;
}
static inline int64_t em_pow_ts_i(int64_t a, int64_t e) { return em_pow_i(a, e); }
#define em_pow_ts(a, b) EM_G_FDI(em_pow_ts, a)(a, b)

static inline float em_atan2_f(float a, float b) { return atan2f(a, b); }
static inline double em_atan2_d(double a, double b) { return atan2(a, b); }
#define em_atan2(a, b) EM_G_FD(em_atan2, a)(a, b)
static inline float em_hypot_f(float a, float b) { return hypotf(a, b); }
static inline double em_hypot_d(double a, double b) { return hypot(a, b); }
#define em_hypot(a, b) EM_G_FD(em_hypot, a)(a, b)
static inline float em_copysign_f(float a, float b) { return copysignf(a, b); }
static inline double em_copysign_d(double a, double b) { return copysign(a, b); }
#define em_copysign(a, b) EM_G_FD(em_copysign, a)(a, b)

/* ------------------------------------------------------------ comparisons */
#define EM_CMP(op, expr) \
  static inline int64_t em_##op##_f(float a, float b) { return expr; } \
  static inline int64_t em_##op##_d(double a, double b) { return expr; } \
  static inline int64_t em_##op##_i(int64_t a, int64_t b) { return expr; }
EM_CMP(eq, a == b) EM_CMP(ne, a != b) EM_CMP(lt, a < b)
EM_CMP(le, a <= b) EM_CMP(gt, a > b)  EM_CMP(ge, a >= b)
/* Logic on values: nonzero (NaN included) is true. */
EM_CMP(land, (a != 0) & (b != 0))
EM_CMP(lor, (a != 0) | (b != 0))
EM_CMP(lxor, (a != 0) ^ (b != 0))
#undef EM_CMP
#define em_eq(a, b) EM_G_FDI(em_eq, a)(a, b)
#define em_ne(a, b) EM_G_FDI(em_ne, a)(a, b)
#define em_lt(a, b) EM_G_FDI(em_lt, a)(a, b)
#define em_le(a, b) EM_G_FDI(em_le, a)(a, b)
#define em_gt(a, b) EM_G_FDI(em_gt, a)(a, b)
#define em_ge(a, b) EM_G_FDI(em_ge, a)(a, b)
#define em_land(a, b) EM_G_FDI(em_land, a)(a, b)
#define em_lor(a, b) EM_G_FDI(em_lor, a)(a, b)
#define em_lxor(a, b) EM_G_FDI(em_lxor, a)(a, b)

static inline int64_t em_band_i(int64_t a, int64_t b) { return a & b; }
static inline int64_t em_bor_i(int64_t a, int64_t b) { return a | b; }
static inline int64_t em_bxor_i(int64_t a, int64_t b) { return a ^ b; }
#define em_band(a, b) EM_G_I(em_band, a)(a, b)
#define em_bor(a, b) EM_G_I(em_bor, a)(a, b)
#define em_bxor(a, b) EM_G_I(em_bxor, a)(a, b)

/* --------------------------------------------------------------- backward */
/* sigmoid_backward(grad, y) = grad * (1 - y) * y and tanh_backward(grad, y)
   = grad * (1 - y * y), y being the forward output. */
static inline float em_sigmoid_bw_f(float g, float y) { return g * (1.0f - y) * y; }
static inline double em_sigmoid_bw_d(double g, double y) { return g * (1.0 - y) * y; }
#define em_sigmoid_bw(g, y) EM_G_FD(em_sigmoid_bw, g)(g, y)
static inline float em_tanh_bw_f(float g, float y) { return g * (1.0f - y * y); }
static inline double em_tanh_bw_d(double g, double y) { return g * (1.0 - y * y); }
#define em_tanh_bw(g, y) EM_G_FD(em_tanh_bw, g)(g, y)
/* threshold_backward(grad, x, thr) = x <= thr ? 0 : grad. */
static inline float em_threshold_bw_f(float g, float x, float thr) { return x <= thr ? 0.0f : g; }
static inline double em_threshold_bw_d(double g, double x, double thr) { return x <= thr ? 0.0 : g; }
static inline int64_t em_threshold_bw_i(int64_t g, int64_t x, int64_t thr) { return x <= thr ? 0 : g; }
#define em_threshold_bw(g, x, t) EM_G_FDI(em_threshold_bw, g)(g, x, t)

/* gelu_backward(grad, x), erf form, as ATen: grad * (cdf + x * pdf) with
   cdf = 0.5 * (1 + erf(x / sqrt(2))) and pdf = exp(-x*x/2) / sqrt(2 pi). */
#define EM_GELU_PDF (EM_2_SQRTPI * EM_SQRT1_2 * 0.5)
static inline float em_gelu_bw_f(float g, float x) {
  float cdf = 0.5f * (1.0f + erff(x * (float)EM_SQRT1_2));
  float pdf = (float)EM_GELU_PDF * expf(x * x * -0.5f);
  return g * (cdf + x * pdf);
}
static inline double em_gelu_bw_d(double g, double x) {
  double cdf = 0.5 * (1.0 + erf(x * EM_SQRT1_2));
  double pdf = EM_GELU_PDF * exp(x * x * -0.5);
  return g * (cdf + x * pdf);
}
#define em_gelu_bw(g, x) EM_G_FD(em_gelu_bw, g)(g, x)
/* gelu_backward(grad, x, approximate='tanh'), as ATen. */
static inline float em_gelu_tanh_bw_f(float g, float x) {
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
static inline double em_gelu_tanh_bw_d(double g, double x) {
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
#define em_gelu_tanh_bw(g, x) EM_G_FD(em_gelu_tanh_bw, g)(g, x)

/* ---------------------------------------------------------------- indices */
/* A gather's index checked against the size n (> 0) of the dim it indexes:
   in range it is returned (em_index_wrap first counts a negative index from
   the end, as aten.index does); out of range, the first such failure of a
   run is recorded in ember_index_error = {code, index}, the code naming the
   node and dim (lower.c's gather_error_code), and 0 is returned, so the read
   that follows stays inside the tensor.  run.c reads and clears the record
   after each kernel and raises torch's IndexError.  The failure path is a
   call, so a loop holding a check does not vectorize. */
__attribute__((visibility("default"))) int64_t ember_index_error[2];
static __attribute__((noinline, cold, unused)) void em_index_fail(int64_t i, int64_t code) {
  int64_t none = 0;
  if (__atomic_compare_exchange_n(&ember_index_error[0], &none, code, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    __atomic_store_n(&ember_index_error[1], i, __ATOMIC_RELAXED);
}
static inline int64_t em_index(int64_t i, int64_t n, int64_t code) {
  if (__builtin_expect((uint64_t)i < (uint64_t)n, 1)) return i;
  em_index_fail(i, code);
  return 0;
}
static inline int64_t em_index_wrap(int64_t i, int64_t n, int64_t code) {
  int64_t j = i < 0 ? i + n : i;
  if (__builtin_expect((uint64_t)j < (uint64_t)n, 1)) return j;
  em_index_fail(i, code);
  return 0;
}

/* ---------------------------------------------------------------- ternary */
/* where(c, a, b), c being int64_t 0/1; dispatches on a. */
static inline float em_where_f(int64_t c, float a, float b) { return c ? a : b; }
static inline double em_where_d(int64_t c, double a, double b) { return c ? a : b; }
static inline int64_t em_where_i(int64_t c, int64_t a, int64_t b) { return c ? a : b; }
#define em_where(c, a, b) EM_G_FDI(em_where, a)(c, a, b)

/* lerp(a, b, w) as ATen's vectorized lerp: a + w * (b - a) for |w| < 0.5,
   else b + (w - 1) * (b - a), each one fused multiply-add (fma), which
   matters when the terms cancel.  With -march=native fma is one instruction
   and vectorizes; on a CPU without FMA it is a libm call. */
static inline float em_lerp_f(float a, float b, float w) {
  int small = fabsf(w) < 0.5f;
  float coeff = small ? w : w - 1.0f;
  float base = small ? a : b;
  return fmaf(coeff, b - a, base);
}
static inline double em_lerp_d(double a, double b, double w) {
  int small = fabs(w) < 0.5;
  double coeff = small ? w : w - 1.0;
  double base = small ? a : b;
  return fma(coeff, b - a, base);
}
#define em_lerp(a, b, w) EM_G_FD(em_lerp, a)(a, b, w)

/* addcmul(a, t1, t2, v) = a + v * t1 * t2 and addcdiv = a + v * t1 / t2, in
   ATen's order (torch refuses addcdiv on integers). */
static inline float em_addcmul_f(float a, float t1, float t2, float v) { return a + v * t1 * t2; }
static inline double em_addcmul_d(double a, double t1, double t2, double v) { return a + v * t1 * t2; }
static inline int64_t em_addcmul_i(int64_t a, int64_t t1, int64_t t2, int64_t v) {
  return em_wrap((uint64_t)a + (uint64_t)v * (uint64_t)t1 * (uint64_t)t2);
}
#define em_addcmul(a, t1, t2, v) EM_G_FDI(em_addcmul, a)(a, t1, t2, v)
static inline float em_addcdiv_f(float a, float t1, float t2, float v) { return a + v * t1 / t2; }
static inline double em_addcdiv_d(double a, double t1, double t2, double v) { return a + v * t1 / t2; }
#define em_addcdiv(a, t1, t2, v) EM_G_FD(em_addcdiv, a)(a, t1, t2, v)

/* ------------------------------------------- round(decimals), angle, nextafter */
/* round(x, decimals) as ATen: with p = 10^|decimals| (computed in double by
   the code generator, then converted to the compute type as ATen does),
   nearbyint(x * p) / p for decimals >= 0 and nearbyint(x / p) * p below. */
static inline float em_round_decimals_f(float x, float p) { return nearbyintf(x * p) / p; }
static inline double em_round_decimals_d(double x, double p) { return nearbyint(x * p) / p; }
#define em_round_decimals(a, p) EM_G_FD(em_round_decimals, a)(a, p)
static inline float em_round_decimals_neg_f(float x, float p) { return nearbyintf(x / p) * p; }
static inline double em_round_decimals_neg_d(double x, double p) { return nearbyint(x / p) * p; }
#define em_round_decimals_neg(a, p) EM_G_FD(em_round_decimals_neg, a)(a, p)

/* angle of a real number: pi below zero, else 0 (-0.0 gives 0); NaN is kept. */
static inline float em_angle_f(float x) { return x != x ? x : x < 0 ? 3.14159265358979323846f : 0.0f; }
static inline double em_angle_d(double x) { return x != x ? x : x < 0 ? 3.14159265358979323846 : 0.0; }
#define em_angle(a) EM_G_FD(em_angle, a)(a)

/* nextafter: libm's for float and double.  bfloat16 and float16 values (held
   exactly in float) step in their own 16-bit format, as c10's nextafter: NaN
   in either gives a NaN, equal bits give a, a zero steps to the smallest
   subnormal with b's sign, and otherwise the bits move by one toward b. */
static inline float em_nextafter_f(float a, float b) { return nextafterf(a, b); }
static inline double em_nextafter_d(double a, double b) { return nextafter(a, b); }
#define em_nextafter(a, b) EM_G_FD(em_nextafter, a)(a, b)
static inline uint16_t em_next16(uint16_t ua, uint16_t ub) {
  uint16_t aa = ua & 0x7fffu, ab = ub & 0x7fffu;
  if (aa == 0) return ab == 0 ? ub : (uint16_t)((ub & 0x8000u) | 1u);
  return (aa > ab || ((ua ^ ub) & 0x8000u)) ? (uint16_t)(ua - 1u) : (uint16_t)(ua + 1u);
}
static inline float em_nextafter_bf16(float a, float b) {
  uint16_t ua = em_f32_to_bf16(a), ub = em_f32_to_bf16(b);
  float r = ua == ub ? a : em_bf16_to_f32(em_next16(ua, ub));
  return (a != a || b != b) ? a + b : r;
}
static inline float em_nextafter_f16(float a, float b) {
  uint16_t ua = em_f32_to_f16(a), ub = em_f32_to_f16(b);
  float r = ua == ub ? a : em_f16_to_f32(em_next16(ua, ub));
  return (a != a || b != b) ? a + b : r;
}

/* ---------------------------------------------------------------- special */
/* special.h (pasted here by tools/embed.py) holds the special functions the
   CUDA prelude shares; what follows it uses libm where libm has the function
   and our own code where it does not (erfcx, erfinv, ndtri). */
/* lgamma: libm's reentrant lgamma_r (lgamma writes the global signgam, a
   race between OpenMP threads); the same glibc function eager calls. */
double lgamma_r(double, int *);
float lgammaf_r(float, int *);
static inline float em_lgamma_f(float x) { int sg; return lgammaf_r(x, &sg); }
static inline double em_lgamma_d(double x) { int sg; return lgamma_r(x, &sg); }
#define em_lgamma(a) EM_G_FD(em_lgamma, a)(a)

#define EM_SP static inline
#define EM_SP_F2I(n) em_to_int(n)
#define EM_SP_LGAMMA(x) em_lgamma_d(x)
#include "special.h"
#define em_digamma(a) EM_G_FD(em_digamma, a)(a)
#define em_trigamma(a) EM_G_FD(em_trigamma, a)(a)
#define em_polygamma(a, n) EM_G_FD(em_polygamma, a)(a, n)
#define em_zeta(a, q) EM_G_FD(em_zeta, a)(a, q)
#define em_igamma(a, x) EM_G_FD(em_igamma, a)(a, x)
#define em_igammac(a, x) EM_G_FD(em_igammac, a)(a, x)
#define em_i0(a) EM_G_FD(em_i0, a)(a)
#define em_i0e(a) EM_G_FD(em_i0e, a)(a)
#define em_i1(a) EM_G_FD(em_i1, a)(a)
#define em_i1e(a) EM_G_FD(em_i1e, a)(a)
#define em_k0(a) EM_G_FD(em_k0, a)(a)
#define em_k0e(a) EM_G_FD(em_k0e, a)(a)
#define em_k1(a) EM_G_FD(em_k1, a)(a)
#define em_k1e(a) EM_G_FD(em_k1e, a)(a)
#define em_sph_j0(a) EM_G_FD(em_sph_j0, a)(a)
#define em_airy_ai(a) EM_G_FD(em_airy_ai, a)(a)
#define em_chebyshev_t(a, n) EM_G_FD(em_chebyshev_t, a)(a, n)
#define em_chebyshev_u(a, n) EM_G_FD(em_chebyshev_u, a)(a, n)
#define em_chebyshev_v(a, n) EM_G_FD(em_chebyshev_v, a)(a, n)
#define em_chebyshev_w(a, n) EM_G_FD(em_chebyshev_w, a)(a, n)
#define em_shifted_chebyshev_t(a, n) EM_G_FD(em_shifted_chebyshev_t, a)(a, n)
#define em_shifted_chebyshev_u(a, n) EM_G_FD(em_shifted_chebyshev_u, a)(a, n)
#define em_shifted_chebyshev_v(a, n) EM_G_FD(em_shifted_chebyshev_v, a)(a, n)
#define em_shifted_chebyshev_w(a, n) EM_G_FD(em_shifted_chebyshev_w, a)(a, n)
#define em_hermite_h(a, n) EM_G_FD(em_hermite_h, a)(a, n)
#define em_hermite_he(a, n) EM_G_FD(em_hermite_he, a)(a, n)
#define em_laguerre_l(a, n) EM_G_FD(em_laguerre_l, a)(a, n)
#define em_legendre_p(a, n) EM_G_FD(em_legendre_p, a)(a, n)

/* Bessel functions of the first and second kind: glibc's j0, j1, y0, y1,
   in double for float too (eager's float code loses its digits for large
   arguments).  Eager gives NaN at +-inf, glibc 0: that is kept as eager. */
static inline double em_sp_bessel(double x, int which) {
  if (fabs(x) == INFINITY) return NAN;
  return which == 0 ? j0(x) : which == 1 ? j1(x) : which == 2 ? y0(x) : y1(x);
}
static inline float em_bessel_j0_f(float x) { return (float)em_sp_bessel(x, 0); }
static inline double em_bessel_j0_d(double x) { return em_sp_bessel(x, 0); }
static inline float em_bessel_j1_f(float x) { return (float)em_sp_bessel(x, 1); }
static inline double em_bessel_j1_d(double x) { return em_sp_bessel(x, 1); }
static inline float em_bessel_y0_f(float x) { return (float)em_sp_bessel(x, 2); }
static inline double em_bessel_y0_d(double x) { return em_sp_bessel(x, 2); }
static inline float em_bessel_y1_f(float x) { return (float)em_sp_bessel(x, 3); }
static inline double em_bessel_y1_d(double x) { return em_sp_bessel(x, 3); }
#define em_bessel_j0(a) EM_G_FD(em_bessel_j0, a)(a)
#define em_bessel_j1(a) EM_G_FD(em_bessel_j1, a)(a)
#define em_bessel_y0(a) EM_G_FD(em_bessel_y0, a)(a)
#define em_bessel_y1(a) EM_G_FD(em_bessel_y1, a)(a)

/* erfcx(x) = exp(x^2) erfc(x).  exp(x^2) is exp(h) (1 + l) with x^2 = h + l
   split exactly by fma, so that the rounding of x^2 (relative 1e-16, times
   x^2 in the result) does not enter.  For 0 <= x < 10 that times libm's
   erfc; from 10 on the continued fraction (DLMF 7.9.2)
     erfcx(x) = pi^-1/2 / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))),
   40 levels, evaluated from the bottom up; below 0, 2 exp(x^2) - erfcx(-x).
   Eager gives inf below -26.7 (2 exp(x^2) overflows from -26.64) and NaN
   for NaN. */
static inline double em_sp_expsq(double x) {
  double h = x * x;
  return exp(h) * (1 + fma(x, x, -h));
}
static inline double em_sp_erfcx_pos(double x) {
  if (x < 10) return em_sp_expsq(x) * erfc(x);
  double f = x;
  for (int k = 40; k >= 1; k--) f = x + 0.5 * k / f;
  return 0.56418958354775628695 / f;  /* 1/sqrt(pi) */
}
static inline double em_erfcx_d(double x) {
  if (x != x) return x;
  if (x < 0) return x < -26.7 ? INFINITY : 2 * em_sp_expsq(x) - em_sp_erfcx_pos(-x);
  return em_sp_erfcx_pos(x);
}
static inline float em_erfcx_f(float x) { return (float)em_erfcx_d(x); }
#define em_erfcx(a) EM_G_FD(em_erfcx, a)(a)

/* erfinv and ndtri by Halley's method on libm's erf and erfc, each step
   y -= u / (1 + y u) with u = f / f' (f'' = -2y f' for both).
   Central part, |x| <= 0.5: erf(y) = x from the Maclaurin series of erfinv
   (DLMF 7.17.2) to x^9, within 3e-5 at 0.5; three steps.
   Tail, 0 < c <= 0.5: y > 0 with erfc(y) = c, so that 1 - x (exact for
   x >= 0.5) keeps all its digits: from Winitzki's approximation
   erfinv(x) ~ sqrt(sqrt(b^2 - L/a) - b), b = 2/(pi a) + L/2, L = ln(1 - x^2)
   = ln(c (2 - c)), a = 0.147 (S. Winitzki, 2008; within 2e-3); four steps.  Below c = 1e-300
   erfc's results lose digits to underflow, so there the steps are Newton's
   on ln erfc(y) = ln(erfcx(y)) - y^2 = ln c instead. */
#define EM_SP_SQRTPI_2 0.88622692545275801365  /* sqrt(pi)/2 */
static inline double em_sp_erfinv_central(double x) {
  const double pi = EM_SP_PI, z = x * x;
  double y = EM_SP_SQRTPI_2 * x * (1 + z * (pi / 12 + z * (7 * pi * pi / 480 + z * (127 * pi * pi * pi / 40320
             + z * (4369 * pi * pi * pi * pi / 5806080)))));
  for (int i = 0; i < 3; i++) {
    double u = (erf(y) - x) * EM_SP_SQRTPI_2 * exp(y * y);
    y -= u / (1 + y * u);
  }
  return y;
}
static inline double em_sp_erfinv_tail(double c) {
  const double a = 0.147;
  double L = log(c) + log(2 - c);
  double b = 2 / (EM_SP_PI * a) + 0.5 * L;
  double y = sqrt(sqrt(b * b - L / a) - b);
  if (c >= 1e-300) {
    for (int i = 0; i < 4; i++) {
      double u = (c - erfc(y)) * EM_SP_SQRTPI_2 * exp(y * y);
      y -= u / (1 + y * u);
    }
  } else {
    double lc = log(c);
    for (int i = 0; i < 6; i++) {
      double e = em_sp_erfcx_pos(y);
      y += (log(e) - y * y - lc) * EM_SP_SQRTPI_2 * e;
    }
  }
  return y;
}
/* erfinv: +-1 gives +-inf, |x| > 1 NaN, +-0 itself. */
static inline double em_erfinv_d(double x) {
  double ax = fabs(x);
  if (!(ax < 1)) return ax == 1 ? copysign(INFINITY, x) : NAN;
  if (ax <= 0.5) return em_sp_erfinv_central(x);
  return copysign(em_sp_erfinv_tail(1 - ax), x);
}
static inline float em_erfinv_f(float x) { return (float)em_erfinv_d(x); }
#define em_erfinv(a) EM_G_FD(em_erfinv, a)(a)
/* ndtri(p) = sqrt(2) erfinv(2p - 1) = -sqrt(2) erfcinv(2p): 0 gives -inf, 1
   inf, outside [0, 1] NaN; the argument of erf or erfc is formed exactly. */
static inline double em_ndtri_d(double p) {
  if (!(p > 0 && p < 1)) return p == 0 ? -INFINITY : p == 1 ? INFINITY : NAN;
  if (p < 0.25) return -EM_SQRT2 * em_sp_erfinv_tail(2 * p);
  if (p > 0.75) return EM_SQRT2 * em_sp_erfinv_tail(2 * (1 - p));
  return EM_SQRT2 * em_sp_erfinv_central(2 * p - 1);
}
static inline float em_ndtri_f(float p) { return (float)em_ndtri_d(p); }
#define em_ndtri(a) EM_G_FD(em_ndtri, a)(a)

#endif
