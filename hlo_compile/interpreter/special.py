"""Special functions numpy lacks (erf), vectorised, accurate to f64 rounding."""
from __future__ import annotations

import math

import numpy as np

try:  # scipy is optional: exact and fast when present
    from scipy.special import erf as _scipy_erf
except ImportError:  # pragma: no cover
    _scipy_erf = None

_math_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if _scipy_erf is not None:
        return _scipy_erf(x)
    # the C library's erf, element by element: slower than scipy, as accurate
    return np.asarray(_math_erf(x), dtype=np.float64).reshape(x.shape)
