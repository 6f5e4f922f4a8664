"""Derive the Taylor coefficients of Temme's c0(eta) and c1(eta) at eta = 0,
which src/special.h uses for the incomplete gamma functions of large a.

With lambda = x / a and eta = sign(lambda - 1) sqrt(2 (lambda - 1 - ln lambda))
(DLMF 8.12.1-2), DLMF 8.12.8-9 give
    c0(eta) = 1/(lambda - 1) - 1/eta,
    c1(eta) = 1/eta^3 - 1/(lambda - 1)^3 - 1/(lambda - 1)^2 - 1/(12 (lambda - 1)),
whose terms cancel as eta -> 0.  This inverts mu - ln(1 + mu) = eta^2/2 for
mu = lambda - 1 as a power series in eta (Newton's iteration on series), then
expands c0 and c1; the exact rationals are printed as C doubles, highest
power first, for Horner's rule.  Run: python3 tools/temme_coeffs.py (sympy)."""
import sympy as sp

N = 18  # terms: |eta| < 0.5 and a radius of convergence of 2 sqrt(pi) leave < 1e-16


def main():
    eta = sp.symbols("eta")
    mu = eta
    for _ in range(N + 2):
        f = mu - sp.log(1 + mu) - eta ** 2 / 2
        mu = sp.series(mu - f / (1 - 1 / (1 + mu)), eta, 0, N + 2).removeO()
    c0 = sp.series(1 / mu - 1 / eta, eta, 0, N).removeO()
    c1 = sp.series(1 / eta ** 3 - 1 / mu ** 3 - 1 / mu ** 2 - 1 / (12 * mu), eta, 0, N).removeO()
    for name, c in (("c0", c0), ("c1", c1)):
        coeffs = [sp.Rational(c.coeff(eta, k)) for k in range(N)]
        print(f"{name}, eta^{N - 1} .. eta^0:")
        print(", ".join("%.17e" % float(q) for q in reversed(coeffs)))


if __name__ == "__main__":
    main()
