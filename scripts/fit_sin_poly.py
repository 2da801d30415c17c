"""Fits the sine polynomial of mini/tensor/scalar_math.h (sin_poly) and prints its coefficients.

    .venv/bin/python scripts/fit_sin_poly.py [--terms 4]

sin(d) = d + d^3 * P(d^2) on [-pi/2, pi/2], P with `terms` coefficients, fitted for the smallest
maximum *relative* error of sin (a float result near zero needs relative accuracy) by Lawson's
iteratively reweighted least squares, which converges to the minimax (Chebyshev) fit. The
printed error is the approximation error alone, in float64; evaluating in float32 adds about
one rounding per term (mini's C++ test checks the float32 result against libm).
"""

import argparse

import numpy as np


def fit(terms, iterations=200):
    d = np.cos(np.linspace(0, np.pi / 2, 20000)) * (np.pi / 2)  # Chebyshev-like points on (0, pi/2]
    d = d[d > 1e-4]
    s = d * d
    target = (np.sin(d) - d) / d**3  # what P(s) should be
    scale = d**3 / np.sin(d)  # turns an error in P into a relative error of sin
    basis = np.stack([s**k for k in range(terms)], 1)
    weights = np.ones_like(d)
    for _ in range(iterations):
        w = np.sqrt(weights) * scale
        coef, *_ = np.linalg.lstsq(basis * w[:, None], target * w, rcond=None)
        err = np.abs((basis @ coef - target) * scale)
        weights = weights * err
        weights /= weights.sum()
    return coef, err.max()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--terms", type=int, default=4, help="coefficients of P (4: degree 9)")
    args = parser.parse_args()
    coef, err = fit(args.terms)
    print(f"sin(d) = d + d^3 * P(d^2), degree {2 * args.terms + 1}, max relative error {err:.3g}")
    print("P's coefficients, highest power first (as float32, Horner order in sin_poly):")
    for c in coef[::-1]:
        print(f"  {float(np.float32(c))!r}f")


if __name__ == "__main__":
    main()
