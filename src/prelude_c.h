/*
 * prelude_c.h - the C target's prelude: what every generated CPU kernel is
 * compiled with, put before the kernels by codegen_c.c.
 *
 * The functions themselves are src/prelude.h's, shared with the CUDA
 * target (src/prelude_cuda.h); this file defines the C spellings that
 * prelude.h asks for, the few functions whose C body differs from CUDA's,
 * and then includes prelude.h (tools/embed.py pastes it, and special.h, in
 * place).  It is self-contained (only <math.h> and <stdint.h>) and defines
 * nothing but static inline functions, macros, one typedef and the two
 * exported flags the runtime reads: many kernel files, and the C unit test,
 * include it.
 *
 * Dispatch: each em_* name is a C11 _Generic macro on its first value
 * operand (EM_G_FD and friends below).
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
 */
#ifndef EMBER_PRELUDE_C_H
#define EMBER_PRELUDE_C_H

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

/* ------------------------------------------------------------- spellings */
#define EM_FN static inline
#define EM_G_FD(op, a) _Generic((a), float: op##_f, double: op##_d)
#define EM_G_FDI(op, a) _Generic((a), float: op##_f, double: op##_d, int64_t: op##_i)
#define EM_G_I(op, a) _Generic((a), int64_t: op##_i)
#define EM_FMUL_RN(a, b) ((a) * (b))
#define EM_FADD_RN(a, b) ((a) + (b))
#define EM_LIKELY(c) __builtin_expect((c), 1)

/* The library's two globals are defined in its first part; a library built
   from several parts (build.c) has the others begin with EM_LATER_PART. */
#ifdef EM_LATER_PART
#define EM_EXPORTED extern
#else
#define EM_EXPORTED __attribute__((visibility("default")))
#endif

/* A kernel's body function: called by its entry point and by the entry
   points of kernels of the same code (codegen_c.c), not one of the
   library's symbols. */
#define EM_BODY __attribute__((visibility("hidden")))

/* Set (never cleared here) by an integer division by zero; exported from
   the kernel library, read and cleared by run.c after each kernel. */
EM_EXPORTED int ember_zero_division;
#define EM_NOTE_ZERO_DIVISION(b) \
  if (__builtin_expect((b) == 0, 0)) __atomic_store_n(&ember_zero_division, 1, __ATOMIC_RELAXED)

/* ---------------------------------------------------------------- storage */
__extension__ typedef _Float16 em_half;  /* float16 storage; C casts round to nearest even */

EM_FN uint32_t em_f32_bits(float x) { union { float f; uint32_t u; } v = {x}; return v.u; }
EM_FN float em_f32_from_bits(uint32_t u) { union { uint32_t u; float f; } v = {u}; return v.f; }
EM_FN uint64_t em_f64_bits(double x) { union { double f; uint64_t u; } v = {x}; return v.u; }
EM_FN double em_f64_from_bits(uint64_t u) { union { uint64_t u; double f; } v = {u}; return v.f; }

/* float16 bits to float, branch-free (prelude.h says why); the multiply
   quiets a NaN as x86 does, keeping its payload. */
EM_FN float em_f16_to_f32(uint16_t h) {
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

/* ------------------------------------------------------------- arithmetic */
/* fmod on float (prelude.h has its semantics), exact and vectorizable:
   libmvec has no fmod, so the float version is branch-free code that
   vectorizes: in double, |a| is reduced modulo |b| * 2^s, s chosen so that
   the quotient stays below 2^52 (then trunc(x / ys) is off by at most one,
   fixed by adding ys back) and every remainder, having a float's 24 bits,
   is exact in an fma.  Each step closes 51 bits of the exponent gap; six
   cover the largest float over the smallest.  The double version calls
   fmod and keeps its loop scalar. */
EM_FN float em_fmod_f(float a, float b) {
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
/* (b < 0) != (m < 0) for em_remainder_f and em_floordiv_f, as the sign
   bits, which vectorizes (prelude.h says where the two agree). */
EM_FN int em_signs_differ_f(float a, float b) { return (em_f32_bits(a) ^ em_f32_bits(b)) >> 31; }

/* ---------------------------------------------------------------- indices */
/* The record of the first out-of-range gather index (prelude.h's em_index),
   exported from the kernel library. */
EM_EXPORTED int64_t ember_index_error[2];
static __attribute__((noinline, cold, unused)) void em_index_fail(int64_t i, int64_t code) {
  int64_t none = 0;
  if (__atomic_compare_exchange_n(&ember_index_error[0], &none, code, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    __atomic_store_n(&ember_index_error[1], i, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- special */
/* lgamma: libm's reentrant lgamma_r (lgamma writes the global signgam, a
   race between OpenMP threads); the same glibc function eager calls. */
double lgamma_r(double, int *);
float lgammaf_r(float, int *);
EM_FN float em_lgamma_f(float x) { int sg; return lgammaf_r(x, &sg); }
EM_FN double em_lgamma_d(double x) { int sg; return lgamma_r(x, &sg); }

/* Floor division and modulo, min and max of indices (the divisor is not 0),
   for the code generator's index arithmetic. */
EM_FN int64_t em_ifloordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
EM_FN int64_t em_ifloormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
EM_FN int64_t em_imin(int64_t a, int64_t b) { return a < b ? a : b; }
EM_FN int64_t em_imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* special.h's spellings: a polynomial degree converts as x86's static_cast */
#define EM_SP static inline
#define EM_SP_F2I(n) em_to_int(n)
#define EM_SP_LGAMMA(x) em_lgamma_d(x)

#include "prelude.h"

/* A float rounded to bfloat16's or float16's nearest even value and read
   back (codegen's narrow() of a fused 16-bit result), by prelude.h's
   integer conversions, which vectorize. */
EM_FN float em_round_bf16(float x) { return em_bf16_to_f32(em_f32_to_bf16(x)); }
EM_FN float em_round_f16(float x) { return em_f16_to_f32(em_f32_to_f16(x)); }

/* erfcx, erfinv and ndtri: our own code, as libm has none of them (the CUDA
   target calls its math library's). */
/* erfcx(x) = exp(x^2) erfc(x).  exp(x^2) is exp(h) (1 + l) with x^2 = h + l
   split exactly by fma, so that the rounding of x^2 (relative 1e-16, times
   x^2 in the result) does not enter.  For 0 <= x < 10 that times libm's
   erfc; from 10 on the continued fraction (DLMF 7.9.2)
     erfcx(x) = pi^-1/2 / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))),
   40 levels, evaluated from the bottom up; below 0, 2 exp(x^2) - erfcx(-x).
   Eager gives inf below -26.7 (2 exp(x^2) overflows from -26.64) and NaN
   for NaN. */
EM_FN double em_sp_expsq(double x) {
  double h = x * x;
  return exp(h) * (1 + fma(x, x, -h));
}
EM_FN double em_sp_erfcx_pos(double x) {
  if (x < 10) return em_sp_expsq(x) * erfc(x);
  double f = x;
  for (int k = 40; k >= 1; k--) f = x + 0.5 * k / f;
  return 0.56418958354775628695 / f;  /* 1/sqrt(pi) */
}
EM_FN double em_erfcx_d(double x) {
  if (x != x) return x;
  if (x < 0) return x < -26.7 ? INFINITY : 2 * em_sp_expsq(x) - em_sp_erfcx_pos(-x);
  return em_sp_erfcx_pos(x);
}
EM_FN float em_erfcx_f(float x) { return (float)em_erfcx_d(x); }

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
EM_FN double em_sp_erfinv_central(double x) {
  const double pi = EM_SP_PI, z = x * x;
  double y = EM_SP_SQRTPI_2 * x * (1 + z * (pi / 12 + z * (7 * pi * pi / 480 + z * (127 * pi * pi * pi / 40320
             + z * (4369 * pi * pi * pi * pi / 5806080)))));
  for (int i = 0; i < 3; i++) {
    double u = (erf(y) - x) * EM_SP_SQRTPI_2 * exp(y * y);
    y -= u / (1 + y * u);
  }
  return y;
}
EM_FN double em_sp_erfinv_tail(double c) {
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
EM_FN double em_erfinv_d(double x) {
  double ax = fabs(x);
  if (!(ax < 1)) return ax == 1 ? copysign(INFINITY, x) : NAN;
  if (ax <= 0.5) return em_sp_erfinv_central(x);
  return copysign(em_sp_erfinv_tail(1 - ax), x);
}
EM_FN float em_erfinv_f(float x) { return (float)em_erfinv_d(x); }
/* ndtri(p) = sqrt(2) erfinv(2p - 1) = -sqrt(2) erfcinv(2p): 0 gives -inf, 1
   inf, outside [0, 1] NaN; the argument of erf or erfc is formed exactly. */
EM_FN double em_ndtri_d(double p) {
  if (!(p > 0 && p < 1)) return p == 0 ? -INFINITY : p == 1 ? INFINITY : NAN;
  if (p < 0.25) return -EM_SQRT2 * em_sp_erfinv_tail(2 * p);
  if (p > 0.75) return EM_SQRT2 * em_sp_erfinv_tail(2 * (1 - p));
  return EM_SQRT2 * em_sp_erfinv_central(2 * p - 1);
}
EM_FN float em_ndtri_f(float p) { return (float)em_ndtri_d(p); }

#endif
