"""The complex inputs the complex-op tests share: a grid of corner values (signed zeros,
infinities, NaN, magnitudes near the largest finite value, tiny normals) for both parts,
random values over six decades, and the right-hand operands of the binary grid. The
interpreter is checked on them against XLA:CPU (``test_complex_interpreter_xla.py``) and the
code generator against the interpreter (``test_complex_corner_cases.py``)."""
from __future__ import annotations

import numpy as np

NP = {"c64": np.complex64, "c128": np.complex128}
BIG = {"c64": 1e38, "c128": 1e307}
TINY = {"c64": 1e-30, "c128": 1e-300}     # normal numbers (no FTZ on the inputs)
OVERFLOWING = {"c64": 1e30, "c128": 1e300}
RIGHT = [complex(0, 0), complex(-0.0, 0), complex(np.inf, 1), complex(1, np.inf), complex(np.nan, 0),
         complex(2, -3), complex(0.5, 0), complex(-1, 0), complex(np.inf, 0), complex(1, 0), complex(0, 2)]


def corners(ct: str) -> np.ndarray:
    """Every pair (re, im) of 13 corner values: 169 elements of complex type ``ct``."""
    vals = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, BIG[ct], -BIG[ct], TINY[ct], 40.0, -100.0, 0.5]
    return np.array([complex(a, b) for a in vals for b in vals], dtype=NP[ct])


def random_values(ct: str, n: int = 256, seed: int = 0) -> np.ndarray:
    """``n`` values uniform in [-3, 3]^2, then ``n`` with magnitudes 1e-3..1e3 and random signs."""
    rng = np.random.default_rng(seed)
    mag = 10.0 ** rng.uniform(-3, 3, (2, n)) * rng.choice([-1.0, 1.0], (2, n))
    uni = rng.uniform(-3, 3, (2, n))
    both = np.concatenate([uni, mag], axis=1)
    return (both[0] + 1j * both[1]).astype(NP[ct])


def binary_grid(ct: str, keep_finite_products: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Every corner value against every right-hand operand (and one huge one), then random pairs.
    ``keep_finite_products`` drops operands with a finite part >= 1e30 (c64) / 1e300 (c128), whose
    partial products overflow (where FMA contraction decides inf or NaN)."""
    left = corners(ct)
    right = np.array(RIGHT + [complex(BIG[ct], BIG[ct])], dtype=NP[ct])
    a = np.repeat(left, right.size)
    b = np.tile(right, left.size)
    if keep_finite_products:
        def huge(z):
            return ((np.abs(z.real) >= OVERFLOWING[ct]) & np.isfinite(z.real)) | \
                ((np.abs(z.imag) >= OVERFLOWING[ct]) & np.isfinite(z.imag))
        keep = ~huge(a) & ~huge(b)
        a, b = a[keep], b[keep]
    r1, r2 = random_values(ct, 128, seed=1), random_values(ct, 128, seed=2)
    return np.concatenate([a, r1]), np.concatenate([b, r2])
