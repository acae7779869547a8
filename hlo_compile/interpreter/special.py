"""Special functions numpy lacks (erf), vectorised, accurate to f64 rounding."""
from __future__ import annotations

import numpy as np

try:  # scipy is optional: exact and fast when present
    from scipy.special import erf as _scipy_erf
except ImportError:  # pragma: no cover
    _scipy_erf = None


def erf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if _scipy_erf is not None:
        return _scipy_erf(x)
    return _erf_series(x)


def _erf_series(x: np.ndarray) -> np.ndarray:
    """Taylor series for |x| < 3, Lentz continued fraction of erfc beyond."""
    ax = np.abs(x)
    small = ax < 3.0
    xs = np.where(small, ax, 0.0)
    term = xs.copy()
    total = xs.copy()
    x2 = xs * xs
    for n in range(1, 80):
        term = -term * x2 / n
        total = total + term / (2 * n + 1)
    s = total * (2.0 / np.sqrt(np.pi))
    xl = np.where(small, 3.0, ax)
    # erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
    f = xl.copy()
    for k in range(60, 0, -1):
        f = xl + (k / 2.0) / f
    erfc = np.exp(-xl * xl) / np.sqrt(np.pi) / f
    big = 1.0 - erfc
    out = np.where(small, s, big)
    out = np.where(np.isnan(x), np.nan, out)
    return np.copysign(out, x)
