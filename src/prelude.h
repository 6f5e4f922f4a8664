/*
 * prelude.h - the scalar functions every generated kernel calls, for both
 * targets: the one source of the em_* functions.
 *
 * It is not used alone: each target's prelude, src/prelude_c.h (C11, gcc)
 * and src/prelude_cuda.h (C++17 device code, NVRTC), defines the spellings
 * that differ and then says `#include "prelude.h"`; tools/embed.py pastes
 * this text (and src/special.h, which it includes) there, so a generated
 * kernel needs no include path.  The target's prelude defines first:
 *   EM_FN        the qualifiers of a function (static inline; on CUDA
 *                static __device__ __forceinline__);
 *   EM_G_FD(op, a), EM_G_FDI(op, a), EM_G_I(op, a)
 *                the dispatch: the function em_<op>_f, _d or _i chosen by
 *                the type (float, double, int64_t) of the operand a, to be
 *                called with all operands (C11 _Generic on C, a template on
 *                CUDA); each em_<op> below is a macro built on them;
 *   EM_FMUL_RN(a, b), EM_FADD_RN(a, b)
 *                one multiply or add, rounded alone (never fused);
 *   EM_NOTE_ZERO_DIVISION(b) what an integer division by b == 0 records;
 *   EM_LIKELY(c) c, hinted to be true;
 *   EM_SP, EM_SP_F2I, EM_SP_LGAMMA the spellings special.h asks for;
 * the integer types, INT64_MIN and friends, INFINITY and NAN, and the
 * functions whose bodies differ between the targets (the bit casts
 * em_f32_bits, em_f32_from_bits, em_f64_bits, em_f64_from_bits;
 * em_f16_to_f32, em_fmod_f, em_signs_differ_f, em_index_fail, em_lgamma_*,
 * em_erfcx_*, em_erfinv_*, em_ndtri_*): each target's file says why.
 * tests/test_prelude_single.py checks that no function is defined twice.
 *
 * The functions know nothing of tensors, loops or storage dtypes; the code
 * generator converts every operand to the node's compute type before calling
 * an em_* function.  Compute types are exactly three: float (for float32,
 * bfloat16 and float16 storage), double (float64) and int64_t (every integer
 * dtype and bool, bool as 0/1).  Each em_* name dispatches on its first value
 * operand to em_<op>_f, _d or _i, the other operands converted to that type
 * as a C call converts them; an op that takes no integers has no _i, and
 * calling it with int64_t is a compile error.  Predicates, comparisons and
 * logic ops return int64_t 0/1 for every compute type.
 *
 * Semantics are PyTorch eager's on CPU, edge cases included (NaN, +-Inf,
 * -0.0, int64 wrap-around); tests/c/test_prelude.c checks them against values
 * printed by tests/c/prelude_ref.py, and tools/gpu/prelude_cuda_check.py
 * checks the CUDA target against the C one bit for bit.  Where torch's own
 * scalar and vectorized loops disagree, the comment at the function says
 * which one is followed.  Integer arithmetic wraps (it is done in uint64_t,
 * never UB).  Integer division, floor division, remainder and fmod by zero
 * return 0 without a trap (the C target also sets ember_zero_division, which
 * the runtime turns into torch's error, RuntimeError: ZeroDivisionError).
 *
 * Not vectorizable on the CPU: em_fmod, em_remainder and em_floordiv on
 * double (fmod has no vector variant; the float ones have their own exact
 * code) and every integer division; a loop holding one of them runs scalar.
 *
 * Reductions (how the code generator accumulates on the CPU; acc of the
 * compute type; the CUDA target's block and column reductions are in
 * prelude_cuda.h):
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

/* <math.h>'s M_ constants need _DEFAULT_SOURCE (and NVRTC has no <math.h>);
   these do not. */
#define EM_SQRT2 1.41421356237309504880     /* sqrt(2) */
#define EM_SQRT1_2 0.70710678118654752440   /* 1/sqrt(2) */
#define EM_2_SQRTPI 1.12837916709551257390  /* 2/sqrt(pi) */

/* ---------------------------------------------------------------- storage */
/* The bit casts em_f32_bits, em_f32_from_bits, em_f64_bits and
   em_f64_from_bits, and em_half, are each target's own (its head). */
EM_FN float em_bf16_to_f32(uint16_t h) { return em_f32_from_bits((uint32_t)h << 16); }
/* Round to nearest even, as c10::BFloat16.  Every NaN becomes 0xffff, as
   torch's float -> bfloat16 copy gives (c10's scalar code would give 0x7fc0;
   both are NaN). */
EM_FN uint16_t em_f32_to_bf16(float x) {
  uint32_t u = em_f32_bits(x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return x != x ? (uint16_t)0xffff : (uint16_t)r;
}
/* float16 as raw bits, the conversions of c10::Half (Maratyszcza's FP16:
   round to nearest even, NaN -> 0x7e00 with the sign kept).  They are
   branch-free integer and float code, so loops over them vectorize; gcc 12
   does not vectorize conversions between float and _Float16 (C casts on
   em_half are correct, but they keep the loop scalar).  em_f16_to_f32 is
   each target's own (its head); EM_FMUL_RN and EM_FADD_RN are one rounded
   multiply and add, never fused (CUDA's --fmad would fuse a * b + c). */
EM_FN uint16_t em_f32_to_f16(float x) {
  /* scaling up then down leaves inf for what overflows float16 and rounds
     the rest at float16's precision when the bias is added */
  float base = EM_FMUL_RN(EM_FMUL_RN(fabsf(x), 0x1p112f), 0x1p-110f);
  uint32_t w = em_f32_bits(x);
  uint32_t shl1_w = w + w;
  uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = EM_FADD_RN(em_f32_from_bits((bias >> 1) + 0x07800000u), base);
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
EM_FN int64_t em_to_int_f(float x) { return (x >= -0x1p63f && x < 0x1p63f) ? (int64_t)x : INT64_MIN; }
EM_FN int64_t em_to_int_d(double x) { return (x >= -0x1p63 && x < 0x1p63) ? (int64_t)x : INT64_MIN; }
EM_FN int64_t em_to_int_i(int64_t x) { return x; }
#define em_to_int(a) EM_G_FDI(em_to_int, a)(a)
EM_FN int64_t em_to_int32_f(float x) { return (x >= -0x1p31f && x < 0x1p31f) ? (int64_t)x : INT32_MIN; }
EM_FN int64_t em_to_int32_d(double x) { return (x > -2147483649.0 && x < 0x1p31) ? (int64_t)x : INT32_MIN; }
EM_FN int64_t em_to_int32_i(int64_t x) { return x; }
#define em_to_int32(a) EM_G_FDI(em_to_int32, a)(a)
/* bool storage: x != 0, so NaN is true and -0.0 false. */
EM_FN int64_t em_to_bool_f(float x) { return x != 0; }
EM_FN int64_t em_to_bool_d(double x) { return x != 0; }
EM_FN int64_t em_to_bool_i(int64_t x) { return x != 0; }
#define em_to_bool(a) EM_G_FDI(em_to_bool, a)(a)

/* uint64_t -> int64_t keeps the bits (gcc and NVRTC define the conversion
   modulo 2^64). */
EM_FN int64_t em_wrap(uint64_t u) { return (int64_t)u; }

/* ------------------------------------------------------------------ unary */
/* The ops that are one math-library call per type (libm's on the CPU,
   CUDA's precise ones on the GPU). */
#define EM_LIBM1(op, fn) \
  EM_FN float em_##op##_f(float x) { return fn##f(x); } \
  EM_FN double em_##op##_d(double x) { return fn(x); }
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

/* sinh and cosh are the math library's: finite up to where the true result
   overflows, as torch's scalar loop.  Its vectorized CPU loop goes through
   exp and gives inf from |x| = 88.72 (709.78 for double), so eager's answer
   in that band depends on where the element sits; tests/test_ops.py accepts
   either. */
EM_FN float em_sinh_f(float x) { return sinhf(x); }
EM_FN double em_sinh_d(double x) { return sinh(x); }
EM_FN float em_cosh_f(float x) { return coshf(x); }
EM_FN double em_cosh_d(double x) { return cosh(x); }

/* abs and neg of INT64_MIN are INT64_MIN, as in torch. */
EM_FN float em_abs_f(float x) { return fabsf(x); }
EM_FN double em_abs_d(double x) { return fabs(x); }
EM_FN int64_t em_abs_i(int64_t x) { return x < 0 ? em_wrap(0 - (uint64_t)x) : x; }
#define em_abs(a) EM_G_FDI(em_abs, a)(a)
EM_FN float em_neg_f(float x) { return -x; }
EM_FN double em_neg_d(double x) { return -x; }
EM_FN int64_t em_neg_i(int64_t x) { return em_wrap(0 - (uint64_t)x); }
#define em_neg(a) EM_G_FDI(em_neg, a)(a)

EM_FN float em_rsqrt_f(float x) { return 1.0f / sqrtf(x); }
EM_FN double em_rsqrt_d(double x) { return 1.0 / sqrt(x); }
#define em_rsqrt(a) EM_G_FD(em_rsqrt, a)(a)
EM_FN float em_recip_f(float x) { return 1.0f / x; }
EM_FN double em_recip_d(double x) { return 1.0 / x; }
#define em_recip(a) EM_G_FD(em_recip, a)(a)
/* 1 / (1 + exp(-x)), as ATen writes it. */
EM_FN float em_sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
EM_FN double em_sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
#define em_sigmoid(a) EM_G_FD(em_sigmoid, a)(a)
/* x / (1 + exp(-x)), as ATen writes it: silu(-inf) is NaN. */
EM_FN float em_silu_f(float x) { return x / (1.0f + expf(-x)); }
EM_FN double em_silu_d(double x) { return x / (1.0 + exp(-x)); }
#define em_silu(a) EM_G_FD(em_silu, a)(a)

/* sign: -1, 0 or 1; in torch (CPU) sign(NaN) is 0 and sign(-0.0) is +0.0. */
EM_FN float em_sign_f(float x) { return (x > 0 ? 1.0f : 0.0f) - (x < 0 ? 1.0f : 0.0f); }
EM_FN double em_sign_d(double x) { return (x > 0 ? 1.0 : 0.0) - (x < 0 ? 1.0 : 0.0); }
EM_FN int64_t em_sign_i(int64_t x) { return (x > 0) - (x < 0); }
#define em_sign(a) EM_G_FDI(em_sign, a)(a)

/* Rounding, the identity on integers.  round is half to even: nearbyint in
   the default rounding mode, as ATen (gcc 12 vectorizes it, not roundeven). */
EM_FN float em_floor_f(float x) { return floorf(x); }
EM_FN double em_floor_d(double x) { return floor(x); }
EM_FN int64_t em_floor_i(int64_t x) { return x; }
#define em_floor(a) EM_G_FDI(em_floor, a)(a)
EM_FN float em_ceil_f(float x) { return ceilf(x); }
EM_FN double em_ceil_d(double x) { return ceil(x); }
EM_FN int64_t em_ceil_i(int64_t x) { return x; }
#define em_ceil(a) EM_G_FDI(em_ceil, a)(a)
EM_FN float em_round_f(float x) { return nearbyintf(x); }
EM_FN double em_round_d(double x) { return nearbyint(x); }
EM_FN int64_t em_round_i(int64_t x) { return x; }
#define em_round(a) EM_G_FDI(em_round, a)(a)
EM_FN float em_trunc_f(float x) { return truncf(x); }
EM_FN double em_trunc_d(double x) { return trunc(x); }
EM_FN int64_t em_trunc_i(int64_t x) { return x; }
#define em_trunc(a) EM_G_FDI(em_trunc, a)(a)
/* x - trunc(x): frac(+-inf) is NaN and frac(-0.0) is +0.0, as in torch. */
EM_FN float em_frac_f(float x) { return x - truncf(x); }
EM_FN double em_frac_d(double x) { return x - trunc(x); }
#define em_frac(a) EM_G_FD(em_frac, a)(a)

/* relu is clamp_min(x, 0) in ATen: NaN stays NaN and -0.0 stays -0.0. */
EM_FN float em_relu_f(float x) { return x < 0 ? 0.0f : x; }
EM_FN double em_relu_d(double x) { return x < 0 ? 0.0 : x; }
EM_FN int64_t em_relu_i(int64_t x) { return x < 0 ? 0 : x; }
#define em_relu(a) EM_G_FDI(em_relu, a)(a)

/* logical_not: 1 where x == 0 (NaN counts as true, so gives 0). */
EM_FN int64_t em_lnot_f(float x) { return x == 0; }
EM_FN int64_t em_lnot_d(double x) { return x == 0; }
EM_FN int64_t em_lnot_i(int64_t x) { return x == 0; }
#define em_lnot(a) EM_G_FDI(em_lnot, a)(a)
/* bitwise_not, integers only; for bool storage the caller uses em_lnot. */
EM_FN int64_t em_bnot_i(int64_t x) { return ~x; }
#define em_bnot(a) EM_G_I(em_bnot, a)(a)

/* Predicates.  No integer is NaN or infinite. */
EM_FN int64_t em_isnan_f(float x) { return x != x; }
EM_FN int64_t em_isnan_d(double x) { return x != x; }
EM_FN int64_t em_isnan_i(int64_t x) { (void)x; return 0; }
#define em_isnan(a) EM_G_FDI(em_isnan, a)(a)
EM_FN int64_t em_isinf_f(float x) { return fabsf(x) == INFINITY; }
EM_FN int64_t em_isinf_d(double x) { return fabs(x) == (double)INFINITY; }
EM_FN int64_t em_isinf_i(int64_t x) { (void)x; return 0; }
#define em_isinf(a) EM_G_FDI(em_isinf, a)(a)
EM_FN int64_t em_isposinf_f(float x) { return x == INFINITY; }
EM_FN int64_t em_isposinf_d(double x) { return x == (double)INFINITY; }
EM_FN int64_t em_isposinf_i(int64_t x) { (void)x; return 0; }
#define em_isposinf(a) EM_G_FDI(em_isposinf, a)(a)
EM_FN int64_t em_isneginf_f(float x) { return x == -INFINITY; }
EM_FN int64_t em_isneginf_d(double x) { return x == -(double)INFINITY; }
EM_FN int64_t em_isneginf_i(int64_t x) { (void)x; return 0; }
#define em_isneginf(a) EM_G_FDI(em_isneginf, a)(a)
EM_FN int64_t em_isfinite_f(float x) { return fabsf(x) < INFINITY; }
EM_FN int64_t em_isfinite_d(double x) { return fabs(x) < (double)INFINITY; }
EM_FN int64_t em_isfinite_i(int64_t x) { (void)x; return 1; }
#define em_isfinite(a) EM_G_FDI(em_isfinite, a)(a)
/* The sign bit: set for -0.0 and for NaNs that carry it. */
EM_FN int64_t em_signbit_f(float x) { return em_f32_bits(x) >> 31; }
EM_FN int64_t em_signbit_d(double x) { return (int64_t)(em_f64_bits(x) >> 63); }
EM_FN int64_t em_signbit_i(int64_t x) { return x < 0; }
#define em_signbit(a) EM_G_FDI(em_signbit, a)(a)

/* ------------------------------------------------------------ activations */
/* gelu, erf form: x * 0.5 * (1 + erf(x / sqrt(2))), ATen's formula, so
   gelu(+inf) is +inf.  Eager's own answer there depends on the layout: for a
   contiguous float32, bfloat16 or float16 input torch runs oneDNN's kernel,
   which gives NaN at +inf and +inf from 2^127 up, and for any other input
   (and on CUDA, and for float64) the formula; Inductor gives the formula's
   everywhere.  Copying oneDNN would make ember differ from eager, aot_eager
   and Inductor together on every non-contiguous input. */
EM_FN float em_gelu_f(float x) { return x * 0.5f * (1.0f + erff(x * (float)EM_SQRT1_2)); }
EM_FN double em_gelu_d(double x) { return x * 0.5 * (1.0 + erf(x * EM_SQRT1_2)); }
#define em_gelu(a) EM_G_FD(em_gelu, a)(a)

/* gelu, approximate='tanh', as ATen's scalar_gelu_approximated_with_tanh. */
#define EM_GELU_BETA (EM_SQRT2 * EM_2_SQRTPI * 0.5)
#define EM_GELU_KAPPA 0.044715
EM_FN float em_gelu_tanh_f(float x) {
  float x_cube = x * x * x;
  float inner = (float)EM_GELU_BETA * (x + (float)EM_GELU_KAPPA * x_cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}
EM_FN double em_gelu_tanh_d(double x) {
  double x_cube = x * x * x;
  double inner = EM_GELU_BETA * (x + EM_GELU_KAPPA * x_cube);
  return 0.5 * x * (1.0 + tanh(inner));
}
#define em_gelu_tanh(a) EM_G_FD(em_gelu_tanh, a)(a)

/* leaky_relu: x > 0 ? x : x * slope. */
EM_FN float em_leaky_relu_f(float x, float s) { return x > 0 ? x : x * s; }
EM_FN double em_leaky_relu_d(double x, double s) { return x > 0 ? x : x * s; }
#define em_leaky_relu(a, s) EM_G_FD(em_leaky_relu, a)(a, s)

/* aten.elu(x, alpha, scale, input_scale):
   x < 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale.
   Both sides are computed, so that the loop stays free of branches. */
EM_FN float em_elu_f(float x, float alpha, float scale, float iscale) {
  float neg = expm1f(x * iscale) * (alpha * scale);
  float pos = x * scale;
  return x < 0 ? neg : pos;
}
EM_FN double em_elu_d(double x, double alpha, double scale, double iscale) {
  double neg = expm1(x * iscale) * (alpha * scale);
  double pos = x * scale;
  return x < 0 ? neg : pos;
}
#define em_elu(a, al, sc, is) EM_G_FD(em_elu, a)(a, al, sc, is)

/* softplus: x * beta > threshold ? x : log1p(exp(x * beta)) / beta. */
EM_FN float em_softplus_f(float x, float beta, float thr) {
  float xb = x * beta;
  float soft = log1pf(expf(xb)) / beta;
  return xb > thr ? x : soft;
}
EM_FN double em_softplus_d(double x, double beta, double thr) {
  double xb = x * beta;
  double soft = log1p(exp(xb)) / beta;
  return xb > thr ? x : soft;
}
#define em_softplus(a, b, t) EM_G_FD(em_softplus, a)(a, b, t)

/* threshold: x <= thr ? value : x (NaN is kept). */
EM_FN float em_threshold_f(float x, float thr, float v) { return x <= thr ? v : x; }
EM_FN double em_threshold_d(double x, double thr, double v) { return x <= thr ? v : x; }
EM_FN int64_t em_threshold_i(int64_t x, int64_t thr, int64_t v) { return x <= thr ? v : x; }
#define em_threshold(a, t, v) EM_G_FDI(em_threshold, a)(a, t, v)

/* nan_to_num with the replacements already chosen by the caller (torch's
   defaults are 0 and the largest finite values of the storage dtype, not of
   float).  The identity on integers. */
EM_FN float em_nan_to_num_f(float x, float nan, float pinf, float ninf) {
  return x != x ? nan : x == INFINITY ? pinf : x == -INFINITY ? ninf : x;
}
EM_FN double em_nan_to_num_d(double x, double nan, double pinf, double ninf) {
  return x != x ? nan : x == (double)INFINITY ? pinf : x == -(double)INFINITY ? ninf : x;
}
EM_FN int64_t em_nan_to_num_i(int64_t x, int64_t nan, int64_t pinf, int64_t ninf) {
  (void)nan; (void)pinf; (void)ninf;
  return x;
}
#define em_nan_to_num(a, n, p, m) EM_G_FDI(em_nan_to_num, a)(a, n, p, m)

/* -------------------------------------------------------------- min / max */
/* torch.maximum / minimum, clamp_min / clamp_max: NaN in either operand
   gives NaN.  On a tie (+0.0 against -0.0) the first operand wins, as in
   ATen's clamp_min and clamp_max and in maximum's scalar loop; maximum's
   vector loop returns the second, so only the sign of a zero can differ. */
EM_FN float em_max_f(float a, float b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
EM_FN double em_max_d(double a, double b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
EM_FN int64_t em_max_i(int64_t a, int64_t b) { return a < b ? b : a; }
#define em_max(a, b) EM_G_FDI(em_max, a)(a, b)
EM_FN float em_min_f(float a, float b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
EM_FN double em_min_d(double a, double b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
EM_FN int64_t em_min_i(int64_t a, int64_t b) { return b < a ? b : a; }
#define em_min(a, b) EM_G_FDI(em_min, a)(a, b)

/* fmax / fmin: a NaN operand is ignored (NaN only when both are); on a tie
   the first operand wins, as torch's std::fmax / std::fmin give. */
EM_FN float em_fmax_f(float a, float b) { return b != b ? a : a != a ? b : (a < b ? b : a); }
EM_FN double em_fmax_d(double a, double b) { return b != b ? a : a != a ? b : (a < b ? b : a); }
EM_FN int64_t em_fmax_i(int64_t a, int64_t b) { return em_max_i(a, b); }
#define em_fmax(a, b) EM_G_FDI(em_fmax, a)(a, b)
EM_FN float em_fmin_f(float a, float b) { return b != b ? a : a != a ? b : (b < a ? b : a); }
EM_FN double em_fmin_d(double a, double b) { return b != b ? a : a != a ? b : (b < a ? b : a); }
EM_FN int64_t em_fmin_i(int64_t a, int64_t b) { return em_min_i(a, b); }
#define em_fmin(a, b) EM_G_FDI(em_fmin, a)(a, b)

/* clamp(x, lo, hi) = min(max(x, lo), hi): when lo > hi the result is hi;
   NaN in x, lo or hi gives NaN (torch fills with NaN for a NaN bound).  An
   absent bound is passed as -INFINITY / INFINITY (INT64_MIN / INT64_MAX). */
EM_FN float em_clamp_f(float x, float lo, float hi) {
  float r = x < lo ? lo : x;
  r = hi < r ? hi : r;
  return (x != x || lo != lo || hi != hi) ? x + lo + hi : r;
}
EM_FN double em_clamp_d(double x, double lo, double hi) {
  double r = x < lo ? lo : x;
  r = hi < r ? hi : r;
  return (x != x || lo != lo || hi != hi) ? x + lo + hi : r;
}
EM_FN int64_t em_clamp_i(int64_t x, int64_t lo, int64_t hi) {
  int64_t r = x < lo ? lo : x;
  return hi < r ? hi : r;
}
#define em_clamp(a, l, h) EM_G_FDI(em_clamp, a)(a, l, h)

/* One step of amax / amin: a NaN, in acc or in x, stays in acc. */
EM_FN float em_max_nan_f(float acc, float x) { return (x > acc || x != x) ? x : acc; }
EM_FN double em_max_nan_d(double acc, double x) { return (x > acc || x != x) ? x : acc; }
EM_FN int64_t em_max_nan_i(int64_t acc, int64_t x) { return x > acc ? x : acc; }
#define em_max_nan(acc, x) EM_G_FDI(em_max_nan, acc)(acc, x)
EM_FN float em_min_nan_f(float acc, float x) { return (x < acc || x != x) ? x : acc; }
EM_FN double em_min_nan_d(double acc, double x) { return (x < acc || x != x) ? x : acc; }
EM_FN int64_t em_min_nan_i(int64_t acc, int64_t x) { return x < acc ? x : acc; }
#define em_min_nan(acc, x) EM_G_FDI(em_min_nan, acc)(acc, x)

/* ------------------------------------------------------------- arithmetic */
EM_FN float em_add_f(float a, float b) { return a + b; }
EM_FN double em_add_d(double a, double b) { return a + b; }
EM_FN int64_t em_add_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a + (uint64_t)b); }
#define em_add(a, b) EM_G_FDI(em_add, a)(a, b)
EM_FN float em_sub_f(float a, float b) { return a - b; }
EM_FN double em_sub_d(double a, double b) { return a - b; }
EM_FN int64_t em_sub_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a - (uint64_t)b); }
#define em_sub(a, b) EM_G_FDI(em_sub, a)(a, b)
EM_FN float em_mul_f(float a, float b) { return a * b; }
EM_FN double em_mul_d(double a, double b) { return a * b; }
EM_FN int64_t em_mul_i(int64_t a, int64_t b) { return em_wrap((uint64_t)a * (uint64_t)b); }
#define em_mul(a, b) EM_G_FDI(em_mul, a)(a, b)

/* Integer division never traps: a divisor of 0 or -1 is replaced by 1 for
   the hardware division and the result patched afterwards.  x / 0 is 0
   (torch raises ZeroDivisionError), x / -1 is -x, so INT64_MIN / -1 wraps to
   INT64_MIN as in torch, and x % -1 is 0. */
/* EM_NOTE_ZERO_DIVISION(b) records a divisor of 0 where the target reports
   it (the C target's ember_zero_division; nothing on CUDA). */
EM_FN int64_t em_safe_divisor(int64_t b) {
  EM_NOTE_ZERO_DIVISION(b);
  return (b == 0 || b == -1) ? 1 : b;
}

/* div: true division on floats.  On int64_t (used only for
   rounding_mode='trunc') C's truncating division. */
EM_FN float em_div_f(float a, float b) { return a / b; }
EM_FN double em_div_d(double a, double b) { return a / b; }
EM_FN int64_t em_div_i(int64_t a, int64_t b) {
  int64_t q = a / em_safe_divisor(b);
  return b == 0 ? 0 : b == -1 ? em_neg_i(a) : q;
}
#define em_div(a, b) EM_G_FDI(em_div, a)(a, b)
/* div(rounding_mode='trunc'): trunc(a / b). */
EM_FN float em_trunc_div_f(float a, float b) { return truncf(a / b); }
EM_FN double em_trunc_div_d(double a, double b) { return trunc(a / b); }
EM_FN int64_t em_trunc_div_i(int64_t a, int64_t b) { return em_div_i(a, b); }
#define em_trunc_div(a, b) EM_G_FDI(em_trunc_div, a)(a, b)

/* fmod: C's fmod, with the sign of the dividend; fmod by 0 is NaN on floats
   and 0 on integers.  The result is exact, as torch's scalar loop (C fmod);
   torch's vectorized loop (SLEEF) gives NaN where a / b overflows, e.g.
   7 fmod 1e-38, which is not copied here (nor in em_remainder and
   em_floordiv).  em_fmod_f is each target's own (the C target's vectorizes;
   CUDA's is fmodf); the double version calls fmod, which keeps a CPU loop
   scalar. */
EM_FN double em_fmod_d(double a, double b) { return fmod(a, b); }
EM_FN int64_t em_fmod_i(int64_t a, int64_t b) {
  int64_t r = a % em_safe_divisor(b);
  return (b == 0 || b == -1) ? 0 : r;
}
#define em_fmod(a, b) EM_G_FDI(em_fmod, a)(a, b)

/* remainder: Python's %, with the sign of the divisor.  On floats ATen's
   formula m = fmod(a, b); m != 0 && (b < 0) != (m < 0) ? m + b : m, so
   -4 % 2 is -0.0 and -4 % inf is inf.  em_signs_differ_f(b, m) is the test
   (b < 0) != (m < 0), each target's own: the C target compares sign bits,
   which is the same where m != 0 (b = +-0 makes m NaN) and lets gcc 12
   vectorize the loop. */
EM_FN float em_remainder_f(float a, float b) {
  float m = em_fmod_f(a, b);
  return (m != 0 && em_signs_differ_f(b, m)) ? m + b : m;
}
EM_FN double em_remainder_d(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && (b < 0) != (m < 0)) ? m + b : m;
}
EM_FN int64_t em_remainder_i(int64_t a, int64_t b) {
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
EM_FN float em_floordiv_f(float a, float b) {
  float mod = em_fmod_f(a, b);
  float div = (a - mod) / b;
  div = (mod != 0 && em_signs_differ_f(b, mod)) ? div - 1.0f : div;
  float fl = floorf(div);
  fl = (div - fl > 0.5f) ? fl + 1.0f : fl;
  float q = a / b;
  fl = div == 0 ? copysignf(0.0f, q) : fl;
  return b == 0 ? q : fl;
}
EM_FN double em_floordiv_d(double a, double b) {
  double mod = fmod(a, b);
  double div = (a - mod) / b;
  div = (mod != 0 && (b < 0) != (mod < 0)) ? div - 1.0 : div;
  double fl = floor(div);
  fl = (div - fl > 0.5) ? fl + 1.0 : fl;
  double q = a / b;
  fl = div == 0 ? copysign(0.0, q) : fl;
  return b == 0 ? q : fl;
}
EM_FN int64_t em_floordiv_i(int64_t a, int64_t b) {
  int64_t d = em_safe_divisor(b);
  int64_t q = a / d, r = a % d;
  q = (r != 0 && (r < 0) != (d < 0)) ? q - 1 : q;
  return b == 0 ? 0 : b == -1 ? em_neg_i(a) : q;
}
#define em_floordiv(a, b) EM_G_FDI(em_floordiv, a)(a, b)

/* pow.  Floats: C pow (pow(x, 0) and pow(1, y) are 1 even for NaN).
   Integers: ATen's powi, by squaring with wrap-around; a negative exponent
   gives 1 for base 1, +-1 for base -1 (by parity) and 0 otherwise. */
EM_FN float em_pow_f(float a, float b) { return powf(a, b); }
EM_FN double em_pow_d(double a, double b) { return pow(a, b); }
EM_FN int64_t em_pow_i(int64_t a, int64_t b) {
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
EM_FN float em_pow_ts_f(float a, float e) {
  float p = powf(a, e), s = sqrtf(a), sq = a * a;
  return e == 0.0f ? 1.0f : e == 1.0f ? a : e == 0.5f ? s : e == -0.5f ? 1.0f / s
       : e == -1.0f ? 1.0f / a : e == 2.0f ? sq : e == 3.0f ? sq * a : e == -2.0f ? 1.0f / sq : p;
}
EM_FN double em_pow_ts_d(double a, double e) {
  double p = pow(a, e), s = sqrt(a), sq = a * a;
  return e == 0.0 ? 1.0 : e == 1.0 ? a : e == 0.5 ? s : e == -0.5 ? 1.0 / s
       : e == -1.0 ? 1.0 / a : e == 2.0 ? sq : e == 3.0 ? sq * a : e == -2.0 ? 1.0 / sq : p;
}
EM_FN int64_t em_pow_ts_i(int64_t a, int64_t e) { return em_pow_i(a, e); }
#define em_pow_ts(a, b) EM_G_FDI(em_pow_ts, a)(a, b)

EM_FN float em_atan2_f(float a, float b) { return atan2f(a, b); }
EM_FN double em_atan2_d(double a, double b) { return atan2(a, b); }
#define em_atan2(a, b) EM_G_FD(em_atan2, a)(a, b)
EM_FN float em_hypot_f(float a, float b) { return hypotf(a, b); }
EM_FN double em_hypot_d(double a, double b) { return hypot(a, b); }
#define em_hypot(a, b) EM_G_FD(em_hypot, a)(a, b)
EM_FN float em_copysign_f(float a, float b) { return copysignf(a, b); }
EM_FN double em_copysign_d(double a, double b) { return copysign(a, b); }
#define em_copysign(a, b) EM_G_FD(em_copysign, a)(a, b)

/* ------------------------------------------------------------ comparisons */
#define EM_CMP(op, expr) \
  EM_FN int64_t em_##op##_f(float a, float b) { return expr; } \
  EM_FN int64_t em_##op##_d(double a, double b) { return expr; } \
  EM_FN int64_t em_##op##_i(int64_t a, int64_t b) { return expr; }
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

EM_FN int64_t em_band_i(int64_t a, int64_t b) { return a & b; }
EM_FN int64_t em_bor_i(int64_t a, int64_t b) { return a | b; }
EM_FN int64_t em_bxor_i(int64_t a, int64_t b) { return a ^ b; }
#define em_band(a, b) EM_G_I(em_band, a)(a, b)
#define em_bor(a, b) EM_G_I(em_bor, a)(a, b)
#define em_bxor(a, b) EM_G_I(em_bxor, a)(a, b)

/* --------------------------------------------------------------- backward */
/* sigmoid_backward(grad, y) = grad * (1 - y) * y and tanh_backward(grad, y)
   = grad * (1 - y * y), y being the forward output. */
EM_FN float em_sigmoid_bw_f(float g, float y) { return g * (1.0f - y) * y; }
EM_FN double em_sigmoid_bw_d(double g, double y) { return g * (1.0 - y) * y; }
#define em_sigmoid_bw(g, y) EM_G_FD(em_sigmoid_bw, g)(g, y)
EM_FN float em_tanh_bw_f(float g, float y) { return g * (1.0f - y * y); }
EM_FN double em_tanh_bw_d(double g, double y) { return g * (1.0 - y * y); }
#define em_tanh_bw(g, y) EM_G_FD(em_tanh_bw, g)(g, y)
/* threshold_backward(grad, x, thr) = x <= thr ? 0 : grad. */
EM_FN float em_threshold_bw_f(float g, float x, float thr) { return x <= thr ? 0.0f : g; }
EM_FN double em_threshold_bw_d(double g, double x, double thr) { return x <= thr ? 0.0 : g; }
EM_FN int64_t em_threshold_bw_i(int64_t g, int64_t x, int64_t thr) { return x <= thr ? 0 : g; }
#define em_threshold_bw(g, x, t) EM_G_FDI(em_threshold_bw, g)(g, x, t)

/* gelu_backward(grad, x), erf form, as ATen: grad * (cdf + x * pdf) with
   cdf = 0.5 * (1 + erf(x / sqrt(2))) and pdf = exp(-x*x/2) / sqrt(2 pi). */
#define EM_GELU_PDF (EM_2_SQRTPI * EM_SQRT1_2 * 0.5)
EM_FN float em_gelu_bw_f(float g, float x) {
  float cdf = 0.5f * (1.0f + erff(x * (float)EM_SQRT1_2));
  float pdf = (float)EM_GELU_PDF * expf(x * x * -0.5f);
  return g * (cdf + x * pdf);
}
EM_FN double em_gelu_bw_d(double g, double x) {
  double cdf = 0.5 * (1.0 + erf(x * EM_SQRT1_2));
  double pdf = EM_GELU_PDF * exp(x * x * -0.5);
  return g * (cdf + x * pdf);
}
#define em_gelu_bw(g, x) EM_G_FD(em_gelu_bw, g)(g, x)
/* gelu_backward(grad, x, approximate='tanh'), as ATen. */
EM_FN float em_gelu_tanh_bw_f(float g, float x) {
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
EM_FN double em_gelu_tanh_bw_d(double g, double x) {
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
   the end, as aten.index does); out of range, the target's em_index_fail
   records the first such failure of a run in ember_index_error = {code,
   index}, the code naming the node and dim (lower.c's gather_error_code),
   and 0 is returned, so the read that follows stays inside the tensor.
   run.c reads and clears the record after each kernel (on CUDA after the
   program's kernels) and raises torch's IndexError.  The failure path is a
   call, so a CPU loop holding a check does not vectorize. */
EM_FN int64_t em_index(int64_t i, int64_t n, int64_t code) {
  if (EM_LIKELY((uint64_t)i < (uint64_t)n)) return i;
  em_index_fail(i, code);
  return 0;
}
EM_FN int64_t em_index_wrap(int64_t i, int64_t n, int64_t code) {
  int64_t j = i < 0 ? i + n : i;
  if (EM_LIKELY((uint64_t)j < (uint64_t)n)) return j;
  em_index_fail(i, code);
  return 0;
}

/* Floor division and modulo, min and max of indices (em_ifloordiv,
   em_ifloormod, em_imin, em_imax) are the targets' own: int64_t on the CPU,
   of the indices' type on the GPU. */

/* ---------------------------------------------------------------- ternary */
/* where(c, a, b), c being int64_t 0/1; dispatches on a. */
EM_FN float em_where_f(int64_t c, float a, float b) { return c ? a : b; }
EM_FN double em_where_d(int64_t c, double a, double b) { return c ? a : b; }
EM_FN int64_t em_where_i(int64_t c, int64_t a, int64_t b) { return c ? a : b; }
#define em_where(c, a, b) EM_G_FDI(em_where, a)(c, a, b)

/* lerp(a, b, w) as ATen's vectorized lerp: a + w * (b - a) for |w| < 0.5,
   else b + (w - 1) * (b - a), each one fused multiply-add (fma), which
   matters when the terms cancel.  With -march=native fma is one instruction
   and vectorizes; on a CPU without FMA it is a libm call. */
EM_FN float em_lerp_f(float a, float b, float w) {
  int small = fabsf(w) < 0.5f;
  float coeff = small ? w : w - 1.0f;
  float base = small ? a : b;
  return fmaf(coeff, b - a, base);
}
EM_FN double em_lerp_d(double a, double b, double w) {
  int small = fabs(w) < 0.5;
  double coeff = small ? w : w - 1.0;
  double base = small ? a : b;
  return fma(coeff, b - a, base);
}
#define em_lerp(a, b, w) EM_G_FD(em_lerp, a)(a, b, w)

/* addcmul(a, t1, t2, v) = a + v * t1 * t2 and addcdiv = a + v * t1 / t2, in
   ATen's order (torch refuses addcdiv on integers). */
EM_FN float em_addcmul_f(float a, float t1, float t2, float v) { return a + v * t1 * t2; }
EM_FN double em_addcmul_d(double a, double t1, double t2, double v) { return a + v * t1 * t2; }
EM_FN int64_t em_addcmul_i(int64_t a, int64_t t1, int64_t t2, int64_t v) {
  return em_wrap((uint64_t)a + (uint64_t)v * (uint64_t)t1 * (uint64_t)t2);
}
#define em_addcmul(a, t1, t2, v) EM_G_FDI(em_addcmul, a)(a, t1, t2, v)
EM_FN float em_addcdiv_f(float a, float t1, float t2, float v) { return a + v * t1 / t2; }
EM_FN double em_addcdiv_d(double a, double t1, double t2, double v) { return a + v * t1 / t2; }
#define em_addcdiv(a, t1, t2, v) EM_G_FD(em_addcdiv, a)(a, t1, t2, v)

/* ------------------------------------------- round(decimals), angle, nextafter */
/* round(x, decimals) as ATen: with p = 10^|decimals| (computed in double by
   the code generator, then converted to the compute type as ATen does),
   nearbyint(x * p) / p for decimals >= 0 and nearbyint(x / p) * p below. */
EM_FN float em_round_decimals_f(float x, float p) { return nearbyintf(x * p) / p; }
EM_FN double em_round_decimals_d(double x, double p) { return nearbyint(x * p) / p; }
#define em_round_decimals(a, p) EM_G_FD(em_round_decimals, a)(a, p)
EM_FN float em_round_decimals_neg_f(float x, float p) { return nearbyintf(x / p) * p; }
EM_FN double em_round_decimals_neg_d(double x, double p) { return nearbyint(x / p) * p; }
#define em_round_decimals_neg(a, p) EM_G_FD(em_round_decimals_neg, a)(a, p)

/* angle of a real number: pi below zero, else 0 (-0.0 gives 0); NaN is kept. */
EM_FN float em_angle_f(float x) { return x != x ? x : x < 0 ? 3.14159265358979323846f : 0.0f; }
EM_FN double em_angle_d(double x) { return x != x ? x : x < 0 ? 3.14159265358979323846 : 0.0; }
#define em_angle(a) EM_G_FD(em_angle, a)(a)

/* nextafter: the math library's for float and double.  bfloat16 and float16 values (held
   exactly in float) step in their own 16-bit format, as c10's nextafter: NaN
   in either gives a NaN, equal bits give a, a zero steps to the smallest
   subnormal with b's sign, and otherwise the bits move by one toward b. */
EM_FN float em_nextafter_f(float a, float b) { return nextafterf(a, b); }
EM_FN double em_nextafter_d(double a, double b) { return nextafter(a, b); }
#define em_nextafter(a, b) EM_G_FD(em_nextafter, a)(a, b)
EM_FN uint16_t em_next16(uint16_t ua, uint16_t ub) {
  uint16_t aa = ua & 0x7fffu, ab = ub & 0x7fffu;
  if (aa == 0) return ab == 0 ? ub : (uint16_t)((ub & 0x8000u) | 1u);
  return (aa > ab || ((ua ^ ub) & 0x8000u)) ? (uint16_t)(ua - 1u) : (uint16_t)(ua + 1u);
}
EM_FN float em_nextafter_bf16(float a, float b) {
  uint16_t ua = em_f32_to_bf16(a), ub = em_f32_to_bf16(b);
  float r = ua == ub ? a : em_bf16_to_f32(em_next16(ua, ub));
  return (a != a || b != b) ? a + b : r;
}
EM_FN float em_nextafter_f16(float a, float b) {
  uint16_t ua = em_f32_to_f16(a), ub = em_f32_to_f16(b);
  float r = ua == ub ? a : em_f16_to_f32(em_next16(ua, ub));
  return (a != a || b != b) ? a + b : r;
}

/* ---------------------------------------------------------------- special */
/* special.h (pasted here by tools/embed.py) holds the special functions of
   our own code; lgamma, erfcx, erfinv and ndtri are each target's (libm's
   lgamma_r and our own code on the C target, the CUDA math library's on
   CUDA), defined in its prelude; their dispatch is here. */
#define em_lgamma(a) EM_G_FD(em_lgamma, a)(a)
#define em_erfcx(a) EM_G_FD(em_erfcx, a)(a)
#define em_erfinv(a) EM_G_FD(em_erfinv, a)(a)
#define em_ndtri(a) EM_G_FD(em_ndtri, a)(a)
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

/* Bessel functions of the first and second kind: the math library's j0, j1,
   y0, y1 (glibc's, CUDA's), in double for float too (eager's float code
   loses its digits for large arguments).  Eager gives NaN at +-inf, glibc 0:
   that is kept as eager. */
EM_FN double em_sp_bessel(double x, int which) {
  if (fabs(x) == INFINITY) return NAN;
  return which == 0 ? j0(x) : which == 1 ? j1(x) : which == 2 ? y0(x) : y1(x);
}
EM_FN float em_bessel_j0_f(float x) { return (float)em_sp_bessel(x, 0); }
EM_FN double em_bessel_j0_d(double x) { return em_sp_bessel(x, 0); }
EM_FN float em_bessel_j1_f(float x) { return (float)em_sp_bessel(x, 1); }
EM_FN double em_bessel_j1_d(double x) { return em_sp_bessel(x, 1); }
EM_FN float em_bessel_y0_f(float x) { return (float)em_sp_bessel(x, 2); }
EM_FN double em_bessel_y0_d(double x) { return em_sp_bessel(x, 2); }
EM_FN float em_bessel_y1_f(float x) { return (float)em_sp_bessel(x, 3); }
EM_FN double em_bessel_y1_d(double x) { return em_sp_bessel(x, 3); }
#define em_bessel_j0(a) EM_G_FD(em_bessel_j0, a)(a)
#define em_bessel_j1(a) EM_G_FD(em_bessel_j1, a)(a)
#define em_bessel_y0(a) EM_G_FD(em_bessel_y0, a)(a)
#define em_bessel_y1(a) EM_G_FD(em_bessel_y1, a)(a)

#endif
