/*
 * special.h - the special functions that the CPU and CUDA preludes share:
 * digamma, trigamma, polygamma, the Hurwitz zeta function, the regularized
 * incomplete gamma functions P and Q, Airy's Ai, the modified Bessel
 * functions I0, I1, K0, K1 (plain and exponentially scaled), the
 * spherical Bessel function j0 and the orthogonal polynomials (Chebyshev
 * T, U, V, W and their shifted forms, Hermite H and He, Laguerre L,
 * Legendre P).
 *
 * It is not a header of its own: tools/embed.py pastes it where the shared
 * prelude, src/prelude.h, says `#include "special.h"` (and the C unit test,
 * which includes prelude_c.h from src/, reads it through that line), so the
 * same text is compiled as C11 by gcc and as C++17 device code by NVRTC.
 * The target's prelude (prelude_c.h, prelude_cuda.h) defines first:
 *   EM_SP        the qualifiers of these functions (static inline; on CUDA
 *                static __device__ __noinline__, so that NVRTC compiles each
 *                once rather than once per lane of every call: a polygamma
 *                kernel builds in 0.14 s instead of 0.9 s);
 *   EM_SP_LGAMMA(x) lgamma in double (reentrant);
 *   EM_SP_F2I(n) the conversion of a float or double polynomial degree to
 *                int64_t as eager's static_cast does on that target (x86:
 *                NaN and out-of-range values give INT64_MIN; CUDA: NaN gives
 *                0, out-of-range values saturate);
 * and INFINITY and NAN.  Only the math functions that both C's <math.h> and
 * the CUDA math API have are called, in their double or float spellings.
 * No fitted coefficients: the constants are the series' own (Bernoulli
 * numbers, factorials), written out where they are used.
 *
 * Each function comes as em_<name>_f (float) and em_<name>_d (double);
 * prelude.h adds the dispatch (its em_<name> macros).  Values follow eager PyTorch, edge cases included: where
 * eager's own code produces a particular value at an edge (a pole, an
 * infinity, an overflow of its float arithmetic), the comment says so and
 * the code gives that value.  Elsewhere the algorithms are ours, derived
 * from the series, recurrences, asymptotic expansions and integrals of the
 * functions (references are to the DLMF, dlmf.nist.gov), computed in double
 * and rounded for float, bfloat16 and float16 (more accurate than eager's
 * float code).  The polynomials are the exception: their value is the
 * recurrence itself, so they run in the compute type, as eager's do.
 */

#define EM_SP_PI 3.14159265358979323846
#define EM_SP_EULER 0.57721566490153286061     /* Euler's gamma */
#define EM_SP_2PI 6.28318530717958647693

/* ------------------------------------------------------ digamma, trigamma */
/* psi(x) = digamma(x).  Eager's edges: psi(+-0) = -+inf, psi(negative
   integer) = NaN, psi(-inf) = NaN, psi(inf) = inf.  Below zero the
   reflection psi(x) = psi(1 - x) - pi / tan(pi * r), r the fractional part
   of x (exact, so that tan sees a small argument).  Then the recurrence
   psi(x) = psi(x + 1) - 1/x up to x >= 10, and the asymptotic expansion
   psi(x) ~ ln x - 1/(2x) - sum B_2k / (2k x^2k) (DLMF 5.11.2), whose terms
   up to B_14 leave an error below 1e-17 there. */
EM_SP double em_sp_digamma(double x) {
  if (x == 0) return copysign(INFINITY, -x);
  double acc = 0;
  if (x < 0) {
    if (x == trunc(x)) return NAN;
    acc = -EM_SP_PI / tan(EM_SP_PI * (x - trunc(x)));
    x = 1 - x;
  }
  for (; x < 10; x += 1) acc -= 1 / x;
  double z = 1 / (x * x);
  /* B_2k / 2k for k = 1..7: 1/12, -1/120, 1/252, -1/240, 1/132, -691/32760, 1/12 */
  double s = z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132
             - z * (691.0 / 32760 - z * (1.0 / 12)))))));
  return acc + log(x) - 0.5 / x - s;
}
EM_SP float em_digamma_f(float x) { return (float)em_sp_digamma(x); }
EM_SP double em_digamma_d(double x) { return em_sp_digamma(x); }

/* psi'(x) for x >= 0.5: the recurrence psi'(x) = psi'(x + 1) + 1/x^2 up to
   x >= 10, then psi'(x) ~ 1/x + 1/(2x^2) + sum B_2k / x^(2k+1) (DLMF
   5.15.8), terms up to B_14. */
EM_SP double em_sp_trigamma_pos(double x) {
  double acc = 0;
  for (; x < 10; x += 1) acc += 1 / (x * x);
  double r = 1 / x, z = r * r;
  /* B_2k for k = 1..7: 1/6, -1/30, 1/42, -1/30, 5/66, -691/2730, 7/6 */
  double s = 1.0 / 6 - z * (1.0 / 30 - z * (1.0 / 42 - z * (1.0 / 30 - z * (5.0 / 66
             - z * (691.0 / 2730 - z * (7.0 / 6))))));
  return acc + r + z * (0.5 + r * s);
}
/* psi'(x).  Below 0.5 eager reflects with psi'(x) = pi^2 / sin^2(pi x) -
   psi'(1 - x), sin(pi x) computed in the compute type on pi * x as it is
   (not reduced): at negative integers that gives a large finite value (the
   rounding of pi * x), not inf, and at -inf NaN.  The same here, the sine in
   float for float, so that those values are eager's. */
EM_SP double em_trigamma_d(double x) {
  if (x < 0.5) {
    double s = sin(EM_SP_PI * x);
    return EM_SP_PI * EM_SP_PI / (s * s) - em_sp_trigamma_pos(1 - x);
  }
  return em_sp_trigamma_pos(x);
}
EM_SP float em_trigamma_f(float x) {
  if (x < 0.5f) {
    const float pi = (float)EM_SP_PI;
    float s = sinf(pi * x);
    return (float)((double)(pi * pi) / ((double)s * s) - em_sp_trigamma_pos(1 - (double)x));
  }
  return (float)em_sp_trigamma_pos(x);
}

/* ------------------------------------------------------------------- zeta */
/* The Hurwitz zeta function zeta(s, q) = sum_{k >= 0} (q + k)^-s for s > 1
   by Euler-Maclaurin summation (DLMF 2.10.1): the terms up to
   q + N >= w directly, then
     w^(1-s) / (s-1) + w^-s / 2 + sum_j B_2j / (2j)! s (s+1) .. (s+2j-2) w^(-s-2j+1),
   where w = 12 + s is large enough that the correction terms fall by a
   factor (s+2j)^2 / (2 pi w)^2 each: ten of them reach 1e-17.  For large s
   the direct sum stops as soon as what is left is below its rounding. */
EM_SP double em_sp_zeta_em(double s, double q) {
  double w = 12 + s, acc = 0;
  for (; q < w; q += 1) {
    double t = pow(q, -s);
    acc += t;
    /* the remaining terms, below t q / (s - 1) together, are below rounding */
    if (q > 0 && (t == 0 || t * q <= 1e-17 * (s - 1) * fabs(acc))) return acc;
  }
  double b = pow(q, -s);                 /* q^-s, q now >= w */
  acc += b * q / (s - 1) + 0.5 * b;
  /* B_2j / (2j)! for j = 1..10 */
  const double c[10] = {1.0 / 12, -1.0 / 720, 1.0 / 30240, -1.0 / 1209600, 1.0 / 47900160,
                        -691.0 / 1307674368000.0, 1.0 / 74724249600.0, -3617.0 / 10670622842880000.0,
                        43867.0 / 5109094217170944000.0, -174611.0 / 802857662698291200000.0};
  double r = 1 / (q * q), f = s * b / q;  /* f: s (s+1) .. (s+2j-2) q^(-s-2j+1) */
  for (int j = 0; j < 10; j++) {
    double t = c[j] * f;
    acc += t;
    if (fabs(t) < 1e-17 * fabs(acc)) break;
    f *= (s + 2 * j + 1) * (s + 2 * j + 2) * r;
  }
  return acc;
}
/* zeta(s, q) with eager's (Cephes') edges: s = 1 gives inf, s < 1 NaN;
   q <= 0 gives inf at an integer q and NaN when s is not an integer (q^-s
   is not real); q = +inf gives NaN (eager's tail term is 0 * inf).  Down to
   q = -1000 the terms below zero are summed one by one, as eager does (at
   large negative q with s odd they cancel, and the order of the sum decides
   the digits that are left); below that, so that the cost does not grow
   with |q|, as a difference of two sums over positive arguments: with
   m = floor(-q) + 1 and r = 1 - (q + m) in (0, 1),
   sum_{k < m} (q + k)^-s = (-1)^s (zeta(s, r) - zeta(s, r + m)). */
EM_SP double em_sp_zeta(double s, double q) {
  if (s == 1) return INFINITY;
  if (s < 1) return NAN;
  if (q <= 0) {
    if (q == floor(q)) return INFINITY;
    if (s != floor(s)) return NAN;
  }
  if (q == INFINITY || s != s || q != q) return NAN;
  if (s == INFINITY) return q == 1 ? 1 : q < 1 ? INFINITY : NAN;  /* eager's, below too */
  /* Huge s: where q^-s underflows (q > 1), eager's correction terms multiply
     s (s+1) .. (s+22), which overflows from s = 2.5e13, by 0: NaN.
     Elsewhere the value is 0. */
  if (s > 1e13 && q > 1 && pow(q, -s) == 0) {
    double p = s;
    for (int k = 1; k < 23; k++) p *= s + k;
    return p == INFINITY ? NAN : 0.0;
  }
  if (q < -1000) {
    double m = floor(-q) + 1, qm = q + m, r = 1 - qm;
    double below = em_sp_zeta_em(s, r) - em_sp_zeta_em(s, r + m);
    return (fmod(s, 2.0) == 0 ? below : -below) + em_sp_zeta_em(s, qm);
  }
  return em_sp_zeta_em(s, q);
}
/* Eager's float zeta sums in double on the CPU but in float on CUDA, where
   that product overflows from s = 37: there (EM_SP_FLOAT_ZETA, defined by
   prelude_cuda.h) float gives NaN where q^-s underflows float. */
EM_SP float em_zeta_f(float s, float q) {
#ifdef EM_SP_FLOAT_ZETA
  if (s > 30 && q > 1 && q < INFINITY && powf(q, -s) == 0) {
    float p = s;
    for (int k = 1; k < 23; k++) p *= s + k;
    if (p == INFINITY) return NAN;
  }
#endif
  return (float)em_sp_zeta(s, q);
}
EM_SP double em_zeta_d(double s, double q) { return em_sp_zeta(s, q); }

/* polygamma(n, x) for n >= 2 (n = 0 and 1 are digamma and trigamma), as
   eager: (-1)^(n+1) exp(lgamma(n+1)) zeta(n+1, x), so its poles are +-inf
   and polygamma(n, +inf) is NaN.  n! is a product (exact to 22!, then
   rounded: within an ULP or two of exp(lgamma)), inf from n = 171. */
EM_SP double em_sp_polygamma(double x, double n) {
  double fact = 1;
  for (double k = 2; k <= n && fact < INFINITY; k += 1) fact *= k;
  double sign = fmod(n, 2.0) != 0 ? 1.0 : -1.0;
  return sign * fact * em_sp_zeta(n + 1, x);
}
/* Eager's float code forms n! as expf(lgammaf(n + 1)), inf from n = 35:
   there float gives +-inf, or NaN where zeta rounds to 0 in float. */
EM_SP float em_polygamma_f(float x, float n) {
  if (n >= 35) return (fmodf(n, 2.0f) != 0 ? INFINITY : -INFINITY) * em_zeta_f(n + 1, x);
  return (float)em_sp_polygamma(x, n);
}
EM_SP double em_polygamma_d(double x, double n) { return em_sp_polygamma(x, n); }

/* -------------------------------------------------- modified Bessel I0, I1 */
/* exp(-x) I_nu(x) for x >= 0 (nu = 0 or 1).  Up to x = 20 the power series
   (x/2)^nu sum (x^2/4)^k / (k! (k+nu)!) (DLMF 10.25.2), whose terms are all
   positive, times exp(-x); above, the asymptotic expansion (DLMF 10.40.1)
   exp(-x) I_nu(x) ~ (2 pi x)^-1/2 sum_k (-1)^k a_k(nu) / x^k, whose smallest
   term is below 1e-17 from x = 18 on.  NaN gives NaN. */
EM_SP double em_sp_ie(double x, int nu) {
  if (x <= 20) {
    double q = 0.25 * x * x, t = nu ? 0.5 * x : 1.0, acc = t;
    for (int k = 1; k < 60 && t > 1e-17 * acc; k++) {
      t *= q / ((double)k * (k + nu));
      acc += t;
    }
    return acc * exp(-x);
  }
  double mu = 4.0 * nu * nu, t = 1, acc = 1;
  for (int k = 1; k < 40; k++) {
    t *= ((2.0 * k - 1) * (2.0 * k - 1) - mu) / (8.0 * k * x);
    acc += t;
    if (fabs(t) < 1e-17 * acc) break;
  }
  return acc / sqrt(EM_SP_2PI * x);
}
/* I_nu(x) itself: below 20 the series alone; above, exp(x) times the
   scaled value, as eager computes it, so inf from x = 709.78 (where exp
   overflows, a little before I_nu does) and NaN at +-inf (inf * 0).  I1 is
   odd, with I1(-0.0) = +0.0 as eager. */
EM_SP double em_sp_i(double x, int nu) {
  double ax = fabs(x), r;
  if (ax <= 20) {
    double q = 0.25 * ax * ax, t = nu ? 0.5 * ax : 1.0;
    r = t;
    for (int k = 1; k < 60 && t > 1e-17 * r; k++) {
      t *= q / ((double)k * (k + nu));
      r += t;
    }
  } else {
    r = exp(ax) * em_sp_ie(ax, nu);
  }
  return nu && x < 0 ? -r : r;
}
/* Eager's float code multiplies by expf(|x|), which overflows from |x| =
   88.72 while I0 and I1 are finite up to 91.9: there it gives +-inf (and NaN
   at +-inf), and so does this. */
#define EM_SP_EXPF_MAX 88.7228317f  /* the largest float whose expf is finite */
EM_SP float em_sp_i_f(float x, int nu) {
  float ax = fabsf(x);
  if (ax > EM_SP_EXPF_MAX) return ax == INFINITY ? NAN : (nu && x < 0 ? -INFINITY : INFINITY);
  return (float)em_sp_i(x, nu);
}
EM_SP float em_i0_f(float x) { return em_sp_i_f(x, 0); }
EM_SP double em_i0_d(double x) { return em_sp_i(x, 0); }
EM_SP float em_i1_f(float x) { return em_sp_i_f(x, 1); }
EM_SP double em_i1_d(double x) { return em_sp_i(x, 1); }
/* i0e(x) = exp(-|x|) I0(x), i1e odd; i0e(+-inf) = 0, i1e(-inf) = -0.0. */
EM_SP double em_i0e_d(double x) { return em_sp_ie(fabs(x), 0); }
EM_SP float em_i0e_f(float x) { return (float)em_sp_ie(fabs((double)x), 0); }
EM_SP double em_i1e_d(double x) {
  double r = em_sp_ie(fabs(x), 1);
  return x < 0 ? -r : r;
}
EM_SP float em_i1e_f(float x) { return (float)em_i1e_d(x); }

/* -------------------------------------------------- modified Bessel K0, K1 */
/* exp(x) K_nu(x) for x > 2 (any real nu) by the trapezoidal rule on
   exp(x) K_nu(x) = int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt (DLMF
   10.32.9).  The integrand is analytic and decays double-exponentially, so
   the rule converges geometrically: with the step h = 2 pi a / (47.5 + ln x)
   its error is below exp(-2 pi a / h) times the integrand's size on the
   strip |Im t| < a, where a = min(1, 2 / sqrt(x)) keeps that size below e^2;
   the sum stops where x (cosh t - 1) > 45.  At most 48 points up to x =
   1e4, where the asymptotic expansion takes over. */
EM_SP double em_sp_ke_trap(double x, double nu) {
  double a = x > 4 ? 2 / sqrt(x) : 1.0;
  double h = EM_SP_2PI * a / (47.5 + log(x));
  double acc = 0.5;
  for (int j = 1; j < 200; j++) {
    double t = j * h, sh = sinh(0.5 * t);
    double u = 2 * sh * sh;              /* cosh t - 1, without cancellation */
    if (x * u > 45) break;
    acc += exp(-x * u) * (nu == 0 ? 1.0 : cosh(nu * t));
  }
  return h * acc;
}
/* K0 and K1 for 0 < x <= 2: DLMF 10.31.1,
     K0(x) = -ln(x/2) I0(x) + sum psi(k+1) q^k / (k!)^2,
     K1(x) = 1/x + ln(x/2) I1(x) - (x/4) sum (psi(k+1) + psi(k+2)) q^k / (k! (k+1)!),
   q = x^2/4, psi(k+1) = -gamma + 1 + 1/2 + .. + 1/k. */
EM_SP double em_sp_k_small(double x, int nu) {
  double q = 0.25 * x * x, lg = log(0.5 * x);
  double psi = -EM_SP_EULER, t = 1, acc = 0, bes = 0;  /* bes: the series of I_nu / (x/2)^nu */
  for (int k = 0; k < 30; k++) {
    if (k > 0) {
      t *= q / ((double)k * (k + nu));
      psi += 1.0 / k;
    }
    acc += t * (nu ? 2 * psi + 1.0 / (k + 1) : psi);  /* psi(k+2) = psi(k+1) + 1/(k+1) */
    bes += t;
    if (t < 1e-17 * bes) break;
  }
  if (!nu) return acc - lg * bes;
  return 1 / x + lg * (0.5 * x * bes) - 0.25 * x * acc;
}
/* exp(x) K_nu(x) for x > 1e4 (nu = 0 or 1): the asymptotic expansion (DLMF
   10.40.2) sqrt(pi / (2x)) sum_k a_k(nu) / x^k, whose terms fall by
   k / (2x) or faster there; the trapezoidal rule would need ever more
   points (as ln x). */
EM_SP double em_sp_ke_asym(double x, int nu) {
  double mu = 4.0 * nu * nu, t = 1, acc = 1;
  for (int k = 1; k < 12; k++) {
    t *= (mu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k * x);
    acc += t;
  }
  return acc * sqrt(EM_SP_PI / (2 * x));
}
/* Eager's edges: K(0) = inf, K(x < 0) = NaN, K(+inf) = 0, NaN gives NaN.
   Unscaled above 2 as exp(-x) times the scaled value, as eager (so it
   underflows alike); scaled below 2 as exp(x) times the unscaled one. */
EM_SP double em_sp_k(double x, int nu, int scaled) {
  if (x == 0) return INFINITY;
  if (x < 0 || x != x) return NAN;
  if (x == INFINITY) return 0;
  if (x <= 2) {
    double k = em_sp_k_small(x, nu);
    return scaled ? k * exp(x) : k;
  }
  double ke = x > 1e4 ? em_sp_ke_asym(x, nu) : em_sp_ke_trap(x, nu);
  return scaled ? ke : exp(-x) * ke;
}
EM_SP float em_k0_f(float x) { return (float)em_sp_k(x, 0, 0); }
EM_SP double em_k0_d(double x) { return em_sp_k(x, 0, 0); }
EM_SP float em_k1_f(float x) { return (float)em_sp_k(x, 1, 0); }
EM_SP double em_k1_d(double x) { return em_sp_k(x, 1, 0); }
EM_SP float em_k0e_f(float x) { return (float)em_sp_k(x, 0, 1); }
EM_SP double em_k0e_d(double x) { return em_sp_k(x, 0, 1); }
EM_SP float em_k1e_f(float x) { return (float)em_sp_k(x, 1, 1); }
EM_SP double em_k1e_d(double x) { return em_sp_k(x, 1, 1); }

/* ------------------------------------------------ incomplete gamma P, Q */
/* ln(x^a e^-x / Gamma(a)) for a, x > 0.  Below a = 10 as written
   (EM_SP_LGAMMA is the prelude's lgamma); above, so that a ln x and
   lgamma(a) (each ~ a ln a) do not cancel, from Stirling's series
   lgamma(a) = (a - 1/2) ln a - a + ln(2 pi)/2 + mu(a), mu(a) = sum
   B_2k / (2k (2k-1) a^(2k-1)) (DLMF 5.11.1):
   -a (t - ln(1 + t)) + ln(a / 2 pi) / 2 - mu(a), t = (x - a) / a, with
   t - ln(1 + t) from its series where it cancels. */
EM_SP double em_sp_log1pmx_neg(double t) {  /* t - ln(1 + t) >= 0 */
  if (fabs(t) > 0.1) return t - log1p(t);
  double acc = 0, p = t * t;
  for (int k = 2; k < 20; k++, p *= -t) acc += p / k;  /* t^2/2 - t^3/3 + t^4/4 - .. */
  return acc;
}
EM_SP double em_sp_igam_lnpre(double a, double x) {
  if (a < 10) return a * log(x) - x - EM_SP_LGAMMA(a);
  double r = 1 / a, z = r * r;
  double mu = r * (1.0 / 12 - z * (1.0 / 360 - z * (1.0 / 1260 - z * (1.0 / 1680 - z * (1.0 / 1188
              - z * (691.0 / 360360))))));
  return -a * em_sp_log1pmx_neg((x - a) / a) + 0.5 * log(a / EM_SP_2PI) - mu;
}
/* P(a, x) by its series x^a e^-x / Gamma(a+1) sum_k x^k / ((a+1) .. (a+k))
   (DLMF 8.11.4 with 8.7.1), all terms positive: for x <= a + 1. */
EM_SP double em_sp_igam_series(double a, double x) {
  double ln = em_sp_igam_lnpre(a, x);
  if (ln < -760) return 0;
  double t = 1, acc = 1;
  for (int k = 1; k < 20000 && t > 1e-17 * acc; k++) {
    t *= x / (a + k);
    acc += t;
  }
  return exp(ln) / a * acc;
}
/* Q(a, x) by Legendre's continued fraction (DLMF 8.9.2),
   x^a e^-x / Gamma(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ..))),
   evaluated by the modified Lentz method: for x > a + 1. */
EM_SP double em_sp_igamc_cf(double a, double x) {
  double ln = em_sp_igam_lnpre(a, x);
  if (ln < -760) return 0;
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 20000; i++) {
    double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (fabs(c) < tiny) c = tiny;
    d = 1 / d;
    double del = d * c;
    h *= del;
    if (fabs(del - 1) < 1e-16) break;
  }
  return exp(ln) * h;
}
/* Q(a, x) for a < 1 and x < 2, where 1 - P would cancel: (DLMF 8.7.3)
   Q = 1 - x^a / Gamma(a+1) - x^a / Gamma(a) sum_{n>=1} (-x)^n / (n! (a + n)),
   the first part by expm1. */
EM_SP double em_sp_igamc_small(double a, double x) {
  double lx = log(x), t = 1, acc = 0;
  for (int n = 1; n < 60; n++) {
    t *= -x / n;
    double term = t / (a + n);
    acc += term;
    if (fabs(term) < 1e-17 * fabs(acc)) break;
  }
  return -expm1(a * lx - EM_SP_LGAMMA(1 + a)) - exp(a * lx - EM_SP_LGAMMA(a)) * acc;
}
/* Temme's uniform expansion for a > 1e5 (DLMF 8.12.3-9): with lambda = x/a
   and eta = sign(lambda - 1) sqrt(2 (lambda - 1 - ln lambda)),
     Q = erfc(eta sqrt(a/2)) / 2 + R,  P = erfc(-eta sqrt(a/2)) / 2 - R,
     R = exp(-a eta^2 / 2) / sqrt(2 pi a) (c0(eta) + c1(eta) / a + ..),
   c0 = 1/(lambda-1) - 1/eta, c1 = 1/eta^3 - 1/(lambda-1)^3 - 1/(lambda-1)^2
   - 1/(12 (lambda-1)).  Near eta = 0, where those cancel, their Taylor
   series (derived by tools/temme_coeffs.py); the next term, c2 / a^2 ~
   4e-3 / a^2, is below 1e-12 of R. */
EM_SP double em_sp_igam_temme(double a, double x, int upper) {
  double m = (x - a) / a, phi = em_sp_log1pmx_neg(m);  /* lambda - 1, lambda - 1 - ln lambda */
  double eta = m < 0 ? -sqrt(2 * phi) : sqrt(2 * phi);
  double c0, c1;
  if (fabs(eta) < 0.5) {
    const double k0[18] = {
      2.43619480206674150e-11, -5.83077213255042561e-11, -2.55141939949462482e-11, 9.14769958223679021e-10,
      -4.38203601845335294e-09, 1.02618097842403086e-08, 6.70785354340149841e-09, -1.76659527368260782e-07,
      8.29671134095308652e-07, -1.85406221071515997e-06, -2.18544851067999198e-06, 3.91926317852243767e-05,
      -1.78755144032921798e-04, 3.52733686067019424e-04, 1.15740740740740734e-03, -1.48148148148148154e-02,
      8.33333333333333287e-02, -3.33333333333333315e-01};
    const double k1[18] = {
      -4.57815337041021587e-13, -8.48849198729126736e-11, 4.16279299184258280e-10, -1.00915437106004126e-09,
      -1.75432417197476467e-11, 1.19516285997781477e-08, -5.75254560351770471e-08, 1.37863344691572092e-07,
      4.64712780280743402e-09, -1.61209008945634465e-06, 7.64916091608110982e-06, -1.80985503344899767e-05,
      -4.01877572016460897e-07, 2.05761316872427979e-04, -9.90226337448559630e-04, 2.64550264550264536e-03,
      -3.47222222222222203e-03, -1.85185185185185192e-03};
    c0 = 0, c1 = 0;
    for (int k = 0; k < 18; k++) c0 = c0 * eta + k0[k], c1 = c1 * eta + k1[k];
  } else {
    c0 = 1 / m - 1 / eta;
    c1 = 1 / (eta * eta * eta) - 1 / (m * m * m) - 1 / (m * m) - 1 / (12 * m);
  }
  double y = eta * sqrt(0.5 * a);
  double r = exp(-a * phi) / sqrt(EM_SP_2PI * a) * (c0 + c1 / a);
  return upper ? 0.5 * erfc(y) + r : 0.5 * erfc(-y) - r;
}
/* P(a, x) (upper = 0) or Q(a, x) (upper = 1) with eager's (SciPy's) edges:
   a or x below 0 gives NaN; a = 0 gives P = 1, Q = 0 for x > 0, else NaN;
   x = 0 gives P = 0, Q = 1 (even for a NaN); a = inf gives P = 0, Q = 1
   (NaN when x is inf too); x = inf gives P = 1, Q = 0. */
EM_SP double em_sp_igamma(double a, double x, int upper) {
  if (x < 0 || a < 0) return NAN;
  if (a == 0) return x > 0 ? (upper ? 0.0 : 1.0) : NAN;
  if (x == 0) return upper ? 1.0 : 0.0;
  if (a == INFINITY) return x == INFINITY ? NAN : (upper ? 1.0 : 0.0);
  if (x == INFINITY) return upper ? 0.0 : 1.0;
  if (a != a || x != x) return NAN;
  if (a > 1e5) return em_sp_igam_temme(a, x, upper);
  if (x > a + 1) {
    double q = em_sp_igamc_cf(a, x);
    return upper ? q : 1 - q;
  }
  if (upper && a < 1) return em_sp_igamc_small(a, x);
  double p = em_sp_igam_series(a, x);
  return upper ? 1 - p : p;
}
EM_SP float em_igamma_f(float a, float x) { return (float)em_sp_igamma(a, x, 0); }
EM_SP double em_igamma_d(double a, double x) { return em_sp_igamma(a, x, 0); }
EM_SP float em_igammac_f(float a, float x) { return (float)em_sp_igamma(a, x, 1); }
EM_SP double em_igammac_d(double a, double x) { return em_sp_igamma(a, x, 1); }

/* -------------------------------------------------------------- Airy Ai */
/* Double-double arithmetic (a value as hi + lo, |lo| <= ulp(hi) / 2) for
   the Maclaurin series below: exact products by fma, exact sums by two-sum. */
typedef struct { double hi, lo; } em_sp_dd;
EM_SP em_sp_dd em_sp_dd_add(em_sp_dd a, em_sp_dd b) {
  double s = a.hi + b.hi, v = s - a.hi, e = (a.hi - (s - v)) + (b.hi - v) + a.lo + b.lo;
  em_sp_dd r = {s + e, e - ((s + e) - s)};
  return r;
}
EM_SP em_sp_dd em_sp_dd_mul(em_sp_dd a, em_sp_dd b) {
  double p = a.hi * b.hi, e = fma(a.hi, b.hi, -p) + (a.hi * b.lo + a.lo * b.hi);
  em_sp_dd r = {p + e, e - ((p + e) - p)};
  return r;
}
EM_SP em_sp_dd em_sp_dd_div_d(em_sp_dd a, double d) {  /* a / d, d a small integer */
  double q = a.hi / d, r0 = fma(-q, d, a.hi) + a.lo, q2 = r0 / d;
  em_sp_dd r = {q + q2, q2 - ((q + q2) - q)};
  return r;
}
/* Ai(x) with eager's edges: +-inf gives NaN, above 103.892 0.
   -9.5 < x < 2.09: the Maclaurin series (DLMF 9.4.1) Ai = Ai(0) f - |Ai'(0)| g,
   f = sum x^3k 1.4..(3k-2) / (3k)!, g = sum x^(3k+1) 2.5..(3k-1) / (3k+1)!, in
   double-double: at -9.5 its terms are 1.6e7 times the result.
   x >= 2.09: Ai(x) = sqrt(x/3) / pi K_1/3(zeta), zeta = 2/3 x^3/2 (DLMF 9.6.1),
   K by the trapezoidal rule above.
   x <= -9.5: the asymptotic expansion (DLMF 9.7.9) Ai(-z) = pi^-1/2 z^-1/4
   (sin t P - cos t Q), t = zeta + pi/4, P = sum (-1)^k u_2k zeta^-2k,
   Q = sum (-1)^k u_2k+1 zeta^-2k-1, u_k = u_(k-1) (6k-5)(6k-3)(6k-1) /
   (216 k (2k-1)); its smallest term is below 1e-17 there.  t is formed as
   eager forms it, so that where it loses its digits (|x| ~ 1e10) the values
   agree with eager's. */
EM_SP double em_sp_airy_ai(double x) {
  if (fabs(x) == INFINITY) return NAN;
  if (x > 103.892) return 0;
  if (x >= 2.09) {
    double zeta = 2 * x * sqrt(x) / 3;
    return sqrt(x / 3) / EM_SP_PI * exp(-zeta) * em_sp_ke_trap(zeta, 1.0 / 3);
  }
  if (x <= -9.5) {
    double zeta = -2.0 * x * sqrt(-x) / 3.0, t = zeta + 0.25 * EM_SP_PI;
    double r = 1 / zeta, u = 1, p = 1, q = 0, last = INFINITY;  /* u: u_k zeta^-k */
    for (int k = 1; k < 60; k++) {
      u *= (6.0 * k - 5) * (6.0 * k - 3) * (6.0 * k - 1) / (216.0 * k * (2.0 * k - 1)) * r;
      if (fabs(u) > last || fabs(u) < 1e-17) break;  /* below rounding, or starting to grow */
      last = fabs(u);
      double term = (k / 2) % 2 ? -u : u;            /* (-1)^k' for u_2k' and u_2k'+1 */
      if (k % 2) q += term;
      else p += term;
    }
    return 0.56418958354775628695 / sqrt(sqrt(-x)) * (sin(t) * p - cos(t) * q);  /* 1/sqrt(pi) */
  }
  em_sp_dd xd = {x, 0}, a = {1, 0}, b = xd, f = a, g = b;
  em_sp_dd x3 = em_sp_dd_mul(em_sp_dd_mul(xd, xd), xd);
  for (int k = 1; k < 80; k++) {
    a = em_sp_dd_div_d(em_sp_dd_mul(a, x3), (3.0 * k - 1) * (3.0 * k));
    b = em_sp_dd_div_d(em_sp_dd_mul(b, x3), (3.0 * k) * (3.0 * k + 1));
    f = em_sp_dd_add(f, a);
    g = em_sp_dd_add(g, b);
    if (fabs(a.hi) < 1e-34 * fabs(f.hi) + 1e-300 && fabs(b.hi) < 1e-34 * fabs(g.hi) + 1e-300) break;
  }
  /* Ai(0) = 3^(-2/3) / Gamma(2/3) and -Ai'(0) = 3^(-1/3) / Gamma(1/3), in double-double */
  const em_sp_dd c1 = {0.3550280538878172, 2.05233632436212e-17}, c2 = {-0.2588194037928068, 2.522243111610832e-17};
  em_sp_dd r = em_sp_dd_add(em_sp_dd_mul(c1, f), em_sp_dd_mul(c2, g));
  return r.hi + r.lo;
}
EM_SP float em_airy_ai_f(float x) { return (float)em_sp_airy_ai(x); }
EM_SP double em_airy_ai_d(double x) { return em_sp_airy_ai(x); }

/* ------------------------------------------------------- spherical j0 */
/* sin(x) / x, as eager: 0 at +-inf; below |x| = 0.5 its Maclaurin series
   sum (-x^2)^k / (2k+1)! (to k = 9, below 1e-17 there). */
EM_SP double em_sp_sph_j0(double x) {
  if (fabs(x) == INFINITY) return 0;
  if (fabs(x) < 0.5) {
    double z = x * x, t = 1, acc = 1;
    for (int k = 1; k < 10; k++) {
      t *= -z / ((2.0 * k) * (2.0 * k + 1));
      acc += t;
    }
    return acc;
  }
  return sin(x) / x;
}
EM_SP float em_sph_j0_f(float x) { return (float)em_sp_sph_j0(x); }
EM_SP double em_sph_j0_d(double x) { return em_sp_sph_j0(x); }

/* ------------------------------------------------------------ polynomials */
/* The orthogonal polynomials of degree n at x, n given in the compute type
   and converted to an integer as eager does (EM_SP_F2I); a negative degree
   gives 0.  Their values are those of the three-term recurrences (DLMF
   18.9), run in the compute type (float for float32, as eager), with
   eager's shortcuts: the closed forms at x = +-1 (at 1 and 0 for the
   shifted ones), and for |x| < 1 (|2x - 1| < 1) and degrees above 6 or 8
   the trigonometric forms T_n(cos t) = cos(n t), U_n = sin((n+1) t) / sin t,
   V_n = cos((n+1/2) t) / cos(t/2), W_n = sin((n+1/2) t) / sin(t/2) (DLMF
   18.5.1-4).  A recurrence stops once it reaches NaN (eager's loops test
   isnan).  Hermite's are NaN above degree 128 (float) or 512 (double), as
   eager's.  EM_SP_POLYS(T, s, m) stamps them out for one compute type:
   em_<poly>_<s>, with m the suffix of that type's math functions. */
#define EM_SP_POLYS(T, s, m, HLIM) \
  /* T_n(x), U_n(x), V_n(x), W_n(x) for n >= 0 by the recurrence p_(k+1) = 2x p_k - p_(k-1) \
     from p_0 = 1 and p_1 = y1 (x, 2x, 2x - 1, 2x + 1): shared by the plain and shifted forms */ \
  EM_SP T em_sp_cheb_rec_##s(T two_x, T y1, int64_t n) { \
    if (n == 0) return (T)1; \
    T p = 1, q = y1, r = y1; \
    for (int64_t k = 2; k <= n && q == q; k++) { \
      r = two_x * q - p; \
      p = q; \
      q = r; \
    } \
    return r; \
  } \
  EM_SP T em_sp_cheb_t_##s(T x, int64_t n) { \
    if (n < 0) return 0; \
    if (fabs##m(x) == 1) return (x > 0 || n % 2 == 0) ? (T)1 : (T)-1; \
    if (n > 6 && fabs##m(x) < 1) return cos##m((T)n * acos##m(x)); \
    return em_sp_cheb_rec_##s(x + x, x, n); \
  } \
  EM_SP T em_sp_cheb_u_##s(T x, int64_t n) { \
    if (n < 0) return 0; \
    if (fabs##m(x) == 1) return (x > 0 || n % 2 == 0) ? ((T)n + 1) : -((T)n + 1); \
    if (n > 8 && fabs##m(x) < 1) { \
      T t = acos##m(x); \
      if (sin##m(t) != 0) return sin##m(((T)n + 1) * t) / sin##m(t); \
      return ((T)n + 1) * cos##m(((T)n + 1) * t) / x; \
    } \
    return em_sp_cheb_rec_##s(x + x, x + x, n); \
  } \
  EM_SP T em_sp_cheb_v_##s(T x, int64_t n) { \
    if (n < 0) return 0; \
    if (fabs##m(x) == 1) return x > 0 ? (T)1 : n % 2 == 0 ? ((T)n + (T)n + 1) : -((T)n + (T)n + 1); \
    if (n > 8 && fabs##m(x) < 1) { \
      T t = acos##m(x); \
      if (sin##m(t / 2) != 1) return cos##m(((T)n + (T)0.5) * t) / cos##m(t / 2); \
      return n % 2 == 0 ? ((T)n + (T)n + 1) : -((T)n + (T)n + 1); \
    } \
    return em_sp_cheb_rec_##s(x + x, x + x - 1, n); \
  } \
  EM_SP T em_sp_cheb_w_##s(T x, int64_t n) { \
    if (n < 0) return 0; \
    if (fabs##m(x) == 1) return x > 0 ? ((T)n + (T)n + 1) : n % 2 == 0 ? (T)1 : (T)-1; \
    if (n > 8 && fabs##m(x) < 1) { \
      T t = acos##m(x); \
      if (cos##m(t / 2) != 1) return sin##m(((T)n + (T)0.5) * t) / sin##m(t / 2); \
      return x > 0 ? ((T)n + (T)n + 1) : n % 2 == 0 ? (T)1 : (T)-1; \
    } \
    return em_sp_cheb_rec_##s(x + x, x + x + 1, n); \
  } \
  /* shifted: the same in y = 2x - 1, with the closed forms at x = 1 and x = 0 \
     and the trigonometric forms above degree 6 (4 for W) */ \
  EM_SP T em_sp_scheb_t_##s(T x, int64_t n) { \
    T y = x + x - 1; \
    if (n < 0) return 0; \
    if (x == 1) return 1; \
    if (x == 0) return n % 2 == 0 ? (T)1 : (T)-1; \
    if (n > 6 && fabs##m(y) < 1) return cos##m((T)n * acos##m(y)); \
    return em_sp_cheb_rec_##s(y + y, y, n); \
  } \
  EM_SP T em_sp_scheb_u_##s(T x, int64_t n) { \
    T y = x + x - 1; \
    if (n < 0) return 0; \
    if (x == 1) return ((T)n + 1); \
    if (x == 0) return n % 2 == 0 ? ((T)n + 1) : -((T)n + 1); \
    if (n > 6 && fabs##m(y) < 1) { \
      T t = acos##m(y); \
      if (sin##m(t) != 0) return sin##m(((T)n + 1) * t) / sin##m(t); \
      return ((T)n + 1) * cos##m(((T)n + 1) * t) / y; \
    } \
    return em_sp_cheb_rec_##s(y + y, y + y, n); \
  } \
  EM_SP T em_sp_scheb_v_##s(T x, int64_t n) { \
    T y = x + x - 1; \
    if (n < 0) return 0; \
    if (x == 1) return 1; \
    if (x == 0) return n % 2 == 0 ? ((T)n + (T)n + 1) : -((T)n + (T)n + 1); \
    if (n > 6 && fabs##m(y) < 1) { \
      T t = acos##m(y); \
      if (sin##m(t / 2) != 1) return cos##m(((T)n + (T)0.5) * t) / cos##m(t / 2); \
      return n % 2 == 0 ? ((T)n + (T)n + 1) : -((T)n + (T)n + 1); \
    } \
    return em_sp_cheb_rec_##s(y + y, y + y - 1, n); \
  } \
  EM_SP T em_sp_scheb_w_##s(T x, int64_t n) { \
    T y = x + x - 1; \
    if (n < 0) return 0; \
    if (x == 1) return ((T)n + (T)n + 1); \
    if (x == 0) return n % 2 == 0 ? (T)1 : (T)-1; \
    if (n > 4 && fabs##m(y) < 1) { \
      T t = acos##m(y); \
      if (cos##m(t / 2) != 1) return sin##m(((T)n + (T)0.5) * t) / sin##m(t / 2); \
      return n % 2 == 0 ? (T)1 : (T)-1; \
    } \
    return em_sp_cheb_rec_##s(y + y, y + y + 1, n); \
  } \
  /* H_(k+1) = 2x H_k - 2k H_(k-1) and He_(k+1) = x He_k - k He_(k-1) (DLMF 18.9.20) */ \
  EM_SP T em_sp_herm_h_##s(T x, int64_t n) { \
    if (n < 0) return 0; \
    if (n == 0) return 1; \
    if (n == 1) return x + x; \
    if (n > HLIM) return NAN; \
    T p = 1, q = x + x, r = 0; \
    for (int64_t k = 2; k < n + n; k += 2) { \
      r = (x + x) * q - (T)k * p; \
      p = q; \
      q = r; \
    } \
    return r; \
  } \
  EM_SP T em_sp_herm_he_##s(T x, int64_t n) { \
    if (n < 0) return 0; \
    if (n == 0) return 1; \
    if (n == 1) return x; \
    if (n > HLIM) return NAN; \
    T p = 1, q = x, r = x; \
    for (int64_t k = 1; k < n; k++) { \
      r = x * q - (T)k * p; \
      p = q; \
      q = r; \
    } \
    return r; \
  } \
  /* (k+1) L_(k+1) = (2k + 1 - x) L_k - k L_(k-1); L_n(0) = 1 */ \
  EM_SP T em_sp_laguerre_##s(T x, int64_t n) { \
    if (n < 0) return 0; \
    if (x == 0 || n == 0) return 1; \
    T p = 1, q = 1 - x, r = q; \
    for (int64_t k = 1; k < n && q == q; k++) { \
      r = (((T)(k + k) + (1 - x)) * q - (T)k * p) / (T)(k + 1); \
      p = q; \
      q = r; \
    } \
    return r; \
  } \
  /* (k+1) P_(k+1) = (2k+1) x P_k - k P_(k-1); P_n(+-1) = (+-1)^n */ \
  EM_SP T em_sp_legendre_##s(T x, int64_t n) { \
    if (n < 0) return 0; \
    if (fabs##m(x) == 1) return (x > 0 || n % 2 == 0) ? (T)1 : (T)-1; \
    if (n == 0) return 1; \
    T p = 1, q = x, r = x; \
    for (int64_t k = 1; k < n && q == q; k++) { \
      r = ((T)(k + k + 1) * x * q - (T)k * p) / (T)(k + 1); \
      p = q; \
      q = r; \
    } \
    return r; \
  } \
  EM_SP T em_chebyshev_t_##s(T x, T n) { return em_sp_cheb_t_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_chebyshev_u_##s(T x, T n) { return em_sp_cheb_u_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_chebyshev_v_##s(T x, T n) { return em_sp_cheb_v_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_chebyshev_w_##s(T x, T n) { return em_sp_cheb_w_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_shifted_chebyshev_t_##s(T x, T n) { return em_sp_scheb_t_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_shifted_chebyshev_u_##s(T x, T n) { return em_sp_scheb_u_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_shifted_chebyshev_v_##s(T x, T n) { return em_sp_scheb_v_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_shifted_chebyshev_w_##s(T x, T n) { return em_sp_scheb_w_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_hermite_h_##s(T x, T n) { return em_sp_herm_h_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_hermite_he_##s(T x, T n) { return em_sp_herm_he_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_laguerre_l_##s(T x, T n) { return em_sp_laguerre_##s(x, EM_SP_F2I(n)); } \
  EM_SP T em_legendre_p_##s(T x, T n) { return em_sp_legendre_##s(x, EM_SP_F2I(n)); }
EM_SP_POLYS(float, f, f, 128)
EM_SP_POLYS(double, d, , 512)
#undef EM_SP_POLYS
