/*
 * prelude_cuda.h - the CUDA target's prelude: what every generated CUDA
 * kernel is compiled with, put before the kernels by codegen_cuda.c.
 *
 * The functions themselves are src/prelude.h's, shared with the C target
 * (src/prelude_c.h); this file defines the CUDA spellings that prelude.h
 * asks for, the few functions whose CUDA body differs from C's, and what
 * only CUDA has (float16 storage as a struct, block and column reductions,
 * vector loads), and includes prelude.h (tools/embed.py pastes it, and
 * special.h, in place).  NVRTC compiles the result as C++17 (--std=c++17,
 * sm_90 or any other sm_XX, no fast math).  NVRTC offers no headers here:
 * no <stdint.h>, <math.h> or cuda_fp16.h.  What it has built in is the CUDA
 * math API (sinf, expf, erff, fmodf, nearbyintf, copysignf, fmaf and their
 * double versions), the intrinsics (__int_as_float, __shfl_xor_sync,
 * __syncthreads) and inline PTX; this file defines the rest: the fixed-width
 * integer typedefs, INT64_MIN and friends, INFINITY and NAN, float16
 * storage (em_half).
 *
 * Dispatch: prelude.h's em_<op> macros expand to EM_G_FD(em_<op>, a)(...),
 * which here picks em_<op>_f, _d or _i by the type of a at compile time (a
 * template taking the three functions), then calls it with every operand,
 * converted to its parameter types as C converts them.  A type without a
 * function (int64_t for an op that takes no integers, float for one that
 * takes only integers) has no `call`, a compile error (and a substitution
 * failure, so a template can test for it).
 *
 * Results are the C target's bit for bit, except
 *  - transcendental functions (exp, log, sin, erf, pow, ... and what is built
 *    on them: sigmoid, silu, gelu, softplus, elu, ...): CUDA's libdevice is
 *    within 1-4 ULP of the true value (CUDA programming guide, appendix
 *    "Mathematical functions"), glibc's libm and libmvec likewise, so the two
 *    may differ by a few ULP; composite formulas that cancel (gelu, erfc-like
 *    tails) can magnify that;
 *  - lgamma, erfinv, erfcx and ndtri, the CUDA math library's (as eager's
 *    CUDA kernels use it) where the C target has glibc's lgamma_r and its
 *    own code;
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
 * Block reductions: em_block_sum / _prod / _max / _min / _or / _and (float,
 * double, int64_t; or / and on int64_t) and em_block_argmax / _argmin (value
 * and index, by reference) combine one partial per thread over a 1-D block
 * (blockDim.x a multiple of 32, at most 1024; blockDim.y = blockDim.z = 1)
 * and give every thread the result.  Every thread of the block must call
 * them (they hold __syncthreads), in uniform control flow; calling several in
 * a row is safe.  See the section at the end for the combine rules.
 * em_group4_ / em_group8_ / em_group16_ / em_group32_ sum ... argmin combine the same
 * way over the W lanes of a row group, by shuffles alone (no __syncthreads).
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

/* ------------------------------------------------------------- spellings */
#define EM_FN static __device__ __forceinline__
/* a kernel source uses a few of these functions: no warning for the rest */
#pragma nv_diag_suppress 177

/* Dispatch (prelude.h's EM_G_FD, EM_G_FDI, EM_G_I): em_pick<T, F, D, I>
   derives from em_call<P>, P the function of the compute type T (F for
   float, D for double, I for int64_t; nullptr where the op has none), whose
   call(...) calls P, a template argument, so the call is direct. */
template <auto P> struct em_call {
  template <class... A> static __device__ __forceinline__ auto call(A... a) { return P(a...); }
};
template <> struct em_call<nullptr> {};
template <class T, auto F, auto D, auto I> struct em_pick {};
template <auto F, auto D, auto I> struct em_pick<float, F, D, I> : em_call<F> {};
template <auto F, auto D, auto I> struct em_pick<double, F, D, I> : em_call<D> {};
template <auto F, auto D, auto I> struct em_pick<int64_t, F, D, I> : em_call<I> {};
/* +(a): the operand's type as a value (em_half reads as float) */
#define EM_G_FD(op, a) em_pick<decltype(+(a)), op##_f, op##_d, nullptr>::call
#define EM_G_FDI(op, a) em_pick<decltype(+(a)), op##_f, op##_d, op##_i>::call
#define EM_G_I(op, a) em_pick<decltype(+(a)), nullptr, nullptr, op##_i>::call

#define EM_FMUL_RN(a, b) __fmul_rn((a), (b))
#define EM_FADD_RN(a, b) __fadd_rn((a), (b))
#define EM_LIKELY(c) (c)
/* integer division by zero gives 0 here without a record (the C target's
   ember_zero_division) */
#define EM_NOTE_ZERO_DIVISION(b) ((void)(b))

/* ---------------------------------------------------------------- storage */
EM_FN uint32_t em_f32_bits(float x) { return __float_as_uint(x); }
EM_FN float em_f32_from_bits(uint32_t u) { return __uint_as_float(u); }
EM_FN uint64_t em_f64_bits(double x) { return (uint64_t)__double_as_longlong(x); }
EM_FN double em_f64_from_bits(uint64_t u) { return __longlong_as_double((long long)u); }

/* float16 bits to float, prelude_c.h's branch-free code (c10::Half's).  The
   product is __fmul_rn so that --fmad cannot fuse it with an add.  A NaN is
   quieted here as x86's multiply does it (payload kept), not made canonical
   as the GPU's multiply would. */
EM_FN float em_f16_to_f32(uint16_t h) {
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

/* A float rounded to bfloat16's or float16's nearest even value and read
   back (codegen's narrow() of a fused 16-bit result): one cvt each way,
   the same values as prelude.h's integer code (a NaN stays a NaN, its
   payload canonical). */
EM_FN float em_round_bf16(float x) {
#if __CUDA_ARCH__ >= 800
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return __uint_as_float((uint32_t)h << 16);
#else
  uint32_t u = __float_as_uint(x);
  return x != x ? x : __uint_as_float(((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16);
#endif
}
EM_FN float em_round_f16(float x) {
  uint16_t h;
  float f;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

/* ------------------------------------------------------------- arithmetic */
/* fmod on float: CUDA's fmodf, exact as C's fmod. */
EM_FN float em_fmod_f(float a, float b) { return fmodf(a, b); }
/* (b < 0) != (m < 0) for em_remainder_f and em_floordiv_f, ATen's test. */
EM_FN int em_signs_differ_f(float a, float b) { return (a < 0) != (b < 0); }

/* ---------------------------------------------------------------- indices */
/* The record of the first out-of-range gather index (prelude.h's em_index)
   is the module's ember_index_error; run.c copies it to the host after the
   program's kernels (run_check_index) and clears it.  In the asynchronous
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

/* ---------------------------------------------------------------- indices */
/* Floor division and modulo, min and max of indices (the divisor is not 0)
   for the code generator's index arithmetic, in the operands' common type
   (C's usual conversions): a kernel's 32-bit indices stay 32-bit, where
   64-bit division is several times the instructions. */
template <class A, class B> EM_FN auto em_ifloordiv(A a, B b) -> decltype(a + b) {
  decltype(a + b) q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <class A, class B> EM_FN auto em_ifloormod(A a, B b) -> decltype(a + b) {
  decltype(a + b) r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <class A, class B> EM_FN auto em_imin(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B> EM_FN auto em_imax(A a, B b) -> decltype(a + b) { return a > b ? a : b; }

/* ---------------------------------------------------------------- special */
/* lgamma from the CUDA math library, as eager's CUDA kernels. */
EM_FN float em_lgamma_f(float x) { return lgammaf(x); }
EM_FN double em_lgamma_d(double x) { return lgamma(x); }

/* special.h's functions as device functions, each compiled once
   (__noinline__).  A polynomial degree converts to an integer as eager's
   static_cast does on the GPU: NaN gives 0 (degree 0, value 1, where the
   CPU's INT64_MIN is a negative degree, value 0) and out-of-range values
   saturate (+inf: INT64_MAX, a loop as long as eager's). */
#define EM_SP static __device__ __noinline__
#define EM_SP_F2I(n) ((int64_t)(n))
#define EM_SP_FLOAT_ZETA  /* eager's CUDA float zeta sums in float */
#define EM_SP_LGAMMA(x) lgamma((double)(x))

#include "prelude.h"

/* ---------------------------------------------------------- float16 type */
/* The conversions of gcc's _Float16 on x86-64, which prelude_c.h's em_half is:
   one rounding to nearest even from float, double and int64_t (PTX cvt.rn),
   and a NaN keeps its sign and the top of its payload, made quiet (F16C's
   vcvtps2ph and libgcc's soft float do this; PTX gives a canonical NaN). */
EM_FN uint16_t em_half_nan16(uint32_t sign, uint32_t top10) {
  return (uint16_t)(sign | 0x7e00u | (top10 & 0x3ffu));
}
EM_FN uint16_t em_half_bits_f32(float x) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  uint32_t u = em_f32_bits(x);
  return (u & 0x7fffffffu) > 0x7f800000u ? em_half_nan16((u >> 16) & 0x8000u, u >> 13) : h;
}
EM_FN uint16_t em_half_bits_f64(double x) {
  uint16_t h;
  asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(x));
  uint64_t u = em_f64_bits(x);
  return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull
             ? em_half_nan16((uint32_t)(u >> 48) & 0x8000u, (uint32_t)(u >> 42))
             : h;
}
EM_FN uint16_t em_half_bits_i64(int64_t x) {
  uint16_t h;
  asm("cvt.rn.f16.s64 %0, %1;" : "=h"(h) : "l"(x));
  return h;
}
EM_FN float em_half_to_f32(uint16_t h) {
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

/* ------------------------------------------------------- erfinv, erfcx, ndtri */
/* Where the CUDA math library has the function, it is used, as eager's
   CUDA kernels use it for lgamma and erfinv: lgamma, erfinv, erfcx
   (prelude_c.h's own code on the CPU) and normcdfinv for ndtri, in the
   compute type.  ndtri's edges are eager's: 0 gives -inf, 1 inf, outside
   [0, 1] NaN. */
EM_FN float em_erfinv_f(float x) { return erfinvf(x); }
EM_FN double em_erfinv_d(double x) { return erfinv(x); }
EM_FN float em_erfcx_f(float x) { return erfcxf(x); }
EM_FN double em_erfcx_d(double x) { return erfcx(x); }
EM_FN float em_ndtri_f(float p) {
  return (p > 0 && p < 1) ? normcdfinvf(p) : p == 0 ? -INFINITY : p == 1 ? INFINITY : NAN;
}
EM_FN double em_ndtri_d(double p) {
  return (p > 0 && p < 1) ? normcdfinv(p) : p == 0 ? -INFINITY : p == 1 ? INFINITY : NAN;
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
EM_FN float em_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
EM_FN double em_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
EM_FN int64_t em_shfl_xor(int64_t v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }

/* The combine functions, one struct each; `pad` is the identity, read by
   the lanes past the last warp in the second butterfly. */
struct em_rsum {
  EM_FN float pad(float) { return -0.0f; }
  EM_FN double pad(double) { return -0.0; }
  EM_FN int64_t pad(int64_t) { return 0; }
  EM_FN float f(float a, float b) { return a + b; }
  EM_FN double f(double a, double b) { return a + b; }
  EM_FN int64_t f(int64_t a, int64_t b) { return em_add_i(a, b); }
};
struct em_rprod {
  template <class T> EM_FN T pad(T) { return (T)1; }
  EM_FN float f(float a, float b) { return a * b; }
  EM_FN double f(double a, double b) { return a * b; }
  EM_FN int64_t f(int64_t a, int64_t b) { return em_mul_i(a, b); }
};
struct em_rmax {
  EM_FN float pad(float) { return -INFINITY; }
  EM_FN double pad(double) { return -(double)INFINITY; }
  EM_FN int64_t pad(int64_t) { return INT64_MIN; }
  EM_FN float f(float a, float b) {
    float r = a < b ? b : a;
    r = a == b ? em_f32_from_bits(em_f32_bits(a) & em_f32_bits(b)) : r;  /* +0.0 over -0.0 */
    return (a != a || b != b) ? a + b : r;
  }
  EM_FN double f(double a, double b) {
    double r = a < b ? b : a;
    r = a == b ? __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b)) : r;
    return (a != a || b != b) ? a + b : r;
  }
  EM_FN int64_t f(int64_t a, int64_t b) { return a < b ? b : a; }
};
struct em_rmin {
  EM_FN float pad(float) { return INFINITY; }
  EM_FN double pad(double) { return (double)INFINITY; }
  EM_FN int64_t pad(int64_t) { return INT64_MAX; }
  EM_FN float f(float a, float b) {
    float r = b < a ? b : a;
    r = a == b ? em_f32_from_bits(em_f32_bits(a) | em_f32_bits(b)) : r;  /* -0.0 over +0.0 */
    return (a != a || b != b) ? a + b : r;
  }
  EM_FN double f(double a, double b) {
    double r = b < a ? b : a;
    r = a == b ? __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b)) : r;
    return (a != a || b != b) ? a + b : r;
  }
  EM_FN int64_t f(int64_t a, int64_t b) { return b < a ? b : a; }
};
struct em_ror {
  EM_FN int64_t pad(int64_t) { return 0; }
  EM_FN int64_t f(int64_t a, int64_t b) { return a | b; }
};
struct em_rand {
  EM_FN int64_t pad(int64_t) { return ~(int64_t)0; }
  EM_FN int64_t f(int64_t a, int64_t b) { return a & b; }
};

/* Four consecutive elements, aligned to their size: pointwise kernels read
   and write these in one access (16 bytes for float) where the pointer is
   aligned (the kernel checks at run time). */
template <class T> struct alignas(4 * sizeof(T)) em_vec4 { T v[4]; };

template <class R, class T>
EM_FN T em_block_reduce(T v) {
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

#define EM_BLOCK(name, R, T) EM_FN T name(T v) { return em_block_reduce<R, T>(v); }
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
EM_FN bool em_arg_beats(T v2, int64_t j2, T v, int64_t j) {
  bool n1 = v != v, n2 = v2 != v2;  /* always false on int64_t */
  bool better = Max ? v2 > v : v2 < v;
  return n2 ? (!n1 || j2 < j) : (!n1 && (better || (v2 == v && j2 < j)));
}
template <int Max, class T>
EM_FN void em_block_arg(T &v, int64_t &j) {
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
EM_FN void em_block_argmax(float &v, int64_t &j) { em_block_arg<1>(v, j); }
EM_FN void em_block_argmax(double &v, int64_t &j) { em_block_arg<1>(v, j); }
EM_FN void em_block_argmax(int64_t &v, int64_t &j) { em_block_arg<1>(v, j); }
EM_FN void em_block_argmin(float &v, int64_t &j) { em_block_arg<0>(v, j); }
EM_FN void em_block_argmin(double &v, int64_t &j) { em_block_arg<0>(v, j); }
EM_FN void em_block_argmin(int64_t &v, int64_t &j) { em_block_arg<0>(v, j); }

/* Row groups: W lanes (4, 8, 16 or 32; aligned in their warp, blockDim.x a
   multiple of W) hold the partials of one row, and em_group<W>_sum / _prod /
   _max / _min / _or / _and / _argmax / _argmin combine them with the same
   rules as em_block_*: a butterfly of shuffles among the group's own lanes
   (its mask), which gives every lane of the group the result.  No shared
   memory and no __syncthreads: only the group's lanes must call them, in
   step, so the groups of a warp may run different numbers of rows. */
template <int W> EM_FN unsigned em_group_mask() {
  return W >= 32 ? 0xffffffffu : ((1u << (W & 31)) - 1u) << (threadIdx.x & 31u & ~(unsigned)(W - 1));
}
template <int W, class R, class T> EM_FN T em_group_reduce(T v) {
  const unsigned mask = em_group_mask<W>();
#pragma unroll
  for (int m = W / 2; m; m >>= 1) v = R::f(v, __shfl_xor_sync(mask, v, m));
  return v;
}
template <int W, int Max, class T> EM_FN void em_group_arg(T &v, int64_t &j) {
  const unsigned mask = em_group_mask<W>();
#pragma unroll
  for (int m = W / 2; m; m >>= 1) {
    T v2 = __shfl_xor_sync(mask, v, m);
    int64_t j2 = __shfl_xor_sync(mask, j, m);
    if (em_arg_beats<Max>(v2, j2, v, j)) v = v2, j = j2;
  }
}
#define EM_GROUP_RED(W, fn, R) \
  EM_FN float em_group##W##fn(float v) { return em_group_reduce<W, R>(v); } \
  EM_FN double em_group##W##fn(double v) { return em_group_reduce<W, R>(v); } \
  EM_FN int64_t em_group##W##fn(int64_t v) { return em_group_reduce<W, R>(v); }
#define EM_GROUP_ARG(W, fn, Max) \
  EM_FN void em_group##W##fn(float &v, int64_t &j) { em_group_arg<W, Max>(v, j); } \
  EM_FN void em_group##W##fn(double &v, int64_t &j) { em_group_arg<W, Max>(v, j); } \
  EM_FN void em_group##W##fn(int64_t &v, int64_t &j) { em_group_arg<W, Max>(v, j); }
#define EM_GROUP(W) \
  EM_GROUP_RED(W, _sum, em_rsum) EM_GROUP_RED(W, _prod, em_rprod) \
  EM_GROUP_RED(W, _max, em_rmax) EM_GROUP_RED(W, _min, em_rmin) \
  EM_FN int64_t em_group##W##_or(int64_t v) { return em_group_reduce<W, em_ror>(v); } \
  EM_FN int64_t em_group##W##_and(int64_t v) { return em_group_reduce<W, em_rand>(v); } \
  EM_GROUP_ARG(W, _argmax, 1) EM_GROUP_ARG(W, _argmin, 0)
EM_GROUP(4) EM_GROUP(8) EM_GROUP(16) EM_GROUP(32)
#undef EM_GROUP
#undef EM_GROUP_ARG
#undef EM_GROUP_RED

/* Column reductions: an (X x Y) block where threadIdx.x picks an output
   point and threadIdx.y strides over the reduced elements; these combine the
   Y partials of each column through shared memory (rows of X + 1) and give
   the result to every thread of the column.  X * Y <= 1024 and Y <= 32, so
   Y * (X + 1) <= 32 * 33. */
/* One buffer for every column helper of a kernel (a __shared__ array in a
   template is one array per instantiation: six of them passed the 48 KB of
   static shared memory); each helper ends with __syncthreads, so the next
   may reuse it. */
EM_FN unsigned char *em_col_shm() {
  __shared__ __align__(8) unsigned char em_col_raw[2 * 32 * 33 * 8];
  return em_col_raw;
}
template <class T, class F> EM_FN T em_col_reduce(T v, F f) {
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
template <class T> EM_FN T em_col_sum(T v) { return em_col_reduce(v, em_op_add()); }
template <class T> EM_FN T em_col_prod(T v) { return em_col_reduce(v, em_op_mul()); }
template <class T> EM_FN T em_col_max(T v) { return em_col_reduce(v, em_op_max()); }
template <class T> EM_FN T em_col_min(T v) { return em_col_reduce(v, em_op_min()); }
EM_FN int64_t em_col_or(int64_t v) { return em_col_reduce(v, em_op_or()); }
EM_FN int64_t em_col_and(int64_t v) { return em_col_reduce(v, em_op_and()); }
template <int Max, class T> EM_FN void em_col_arg(T &v, int64_t &j) {
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
template <class T> EM_FN void em_col_argmax(T &v, int64_t &j) { em_col_arg<1>(v, j); }
template <class T> EM_FN void em_col_argmin(T &v, int64_t &j) { em_col_arg<0>(v, j); }

#endif
