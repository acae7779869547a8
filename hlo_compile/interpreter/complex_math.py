"""XLA's meaning of the elementwise ops on complex values (c64, c128), in numpy.

XLA does not define these ops by the textbook (or numpy's C99 Annex G) functions: its
elemental emitter computes each with a fixed formula, and the special values (zeros,
infinities, NaNs, overflow at huge magnitudes) are whatever that formula gives. This module
writes those formulas over the real and imaginary parts, in the component type (f32 for c64),
so the reference gives XLA's answers on corner cases too. They are the formulas of XLA's
``ElementalIrEmitter`` as XLA:CPU (jaxlib 0.10.2) emits them, read from its IR:

- ``abs``: ``max * sqrt(1 + (min/max)^2)`` over ``|re|, |im|`` (NaN-propagating max/min), ``min``
  where that is NaN (so ``|(inf, NaN)|`` is NaN, not numpy's inf);
- ``sign``: ``z`` itself where both parts are zero, else ``z / |z|`` part by part;
- ``multiply`` ``(ac - bd, ad + bc)``; ``divide`` by Smith's algorithm, then XLA's three corner
  cases where it gives ``(NaN, NaN)``;
- ``exp``, ``expm1`` (``expm1(a) cos b + cosm1 b``), ``log`` (``log|z| + i atan2``), ``log1p``
  (through ``log1p`` of the larger part and of the squared ratio), ``sqrt``/``rsqrt`` (polar form
  and XLA's special values), ``sin``/``cos`` (``cosh``/``sinh`` from one ``exp``), ``tanh`` and
  ``tan(z) = -i tanh(iz)`` (the expm1 form with its limits), ``power`` (polar form and six
  special cases), ``atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2))`` on complex values;
- ``compare`` EQ/NE part by part (NE unordered); LT/LE/GT/GE as XLA emits them:
  ``(re_a == re_b and im_a OP im_b) or re_a OP re_b``; ``maximum``/``minimum`` select ``a``
  where ``(re_a == re_b and im_a >= im_b) or re_a >= re_b`` (``<=`` for minimum), else ``b``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Parts = tuple[np.ndarray, np.ndarray]


def parts(z: np.ndarray) -> Parts:
    z = np.asarray(z)
    return np.real(z).copy(), np.imag(z).copy()


def compose(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    re, im = np.broadcast_arrays(np.asarray(re), np.asarray(im))
    ct = np.complex64 if re.dtype == np.float32 else np.complex128
    out = np.empty(re.shape, dtype=ct)
    out.real = re
    out.imag = im
    return out


def _c(x: np.ndarray, value: float) -> np.ndarray:
    """``value`` in the component type of ``x``."""
    return np.asarray(value, dtype=np.asarray(x).dtype)


# ---- absolute value --------------------------------------------------------------------------

def _abs_parts(re: np.ndarray, im: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(min, max, 1 + (min/max)^2) of |re|, |im|, the pieces of XLA's overflow-free |z|."""
    ar, ai = np.abs(re), np.abs(im)
    hi, lo = np.maximum(ar, ai), np.minimum(ar, ai)
    q = lo / hi
    return lo, hi, _c(re, 1.0) + q * q


def abs_parts(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    lo, hi, s = _abs_parts(re, im)
    r = hi * np.sqrt(s)
    return np.where(np.isnan(r), lo, r)


# ---- arithmetic ------------------------------------------------------------------------------

def multiply_parts(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> Parts:
    return a * c - b * d, a * d + b * c


def divide_parts(ar, ai, br, bi) -> Parts:
    """Smith's algorithm; where it gives (NaN, NaN): zero denominator, infinite numerator over a
    finite denominator, finite numerator over an infinite denominator, as XLA selects them."""
    zero, one, inf = _c(ar, 0.0), _c(ar, 1.0), _c(ar, np.inf)
    r_i = br / bi
    den_i = bi + r_i * br
    i_r = bi / br
    den_r = br + i_r * bi
    br_abs, bi_abs = np.abs(br), np.abs(bi)
    r_lt_i = br_abs < bi_abs
    cr = np.where(r_lt_i, (r_i * ar + ai) / den_i, (i_r * ai + ar) / den_r)
    ci = np.where(r_lt_i, (r_i * ai - ar) / den_i, (ai - i_r * ar) / den_r)
    zero_den = (br_abs == zero) & (bi_abs == zero) & (~np.isnan(ar) | ~np.isnan(ai))
    s_inf = np.copysign(inf, br)
    ar_abs, ai_abs = np.abs(ar), np.abs(ai)
    ar_inf, ai_inf = ar_abs == inf, ai_abs == inf
    inf_num = (ar_inf | ai_inf) & (br_abs != inf) & (bi_abs != inf) & ~np.isnan(br) & ~np.isnan(bi)
    ar_s = np.copysign(np.where(ar_inf, one, zero), ar)
    ai_s = np.copysign(np.where(ai_inf, one, zero), ai)
    br_inf, bi_inf = br_abs == inf, bi_abs == inf
    inf_den = (br_inf | bi_inf) & (ar_abs != inf) & (ai_abs != inf) & ~np.isnan(ar) & ~np.isnan(ai)
    br_s = np.copysign(np.where(br_inf, one, zero), br)
    bi_s = np.copysign(np.where(bi_inf, one, zero), bi)
    fix_r = np.where(zero_den, s_inf * ar, np.where(inf_num, inf * (ar_s * br + ai_s * bi),
                                                    np.where(inf_den, zero * (ar * br_s + ai * bi_s), cr)))
    fix_i = np.where(zero_den, s_inf * ai, np.where(inf_num, inf * (ai_s * br - ar_s * bi),
                                                    np.where(inf_den, zero * (ai * br_s - ar * bi_s), ci)))
    both_nan = np.isnan(cr) & np.isnan(ci)
    return np.where(both_nan, fix_r, cr), np.where(both_nan, fix_i, ci)


def power_parts(a, b, c, d) -> Parts:
    """(a+bi)^(c+di) = |z|^c e^(-d t) (cos q + i sin q), t = atan2(b, a), q = c t + d log|z|,
    then XLA's special cases, the last selected winning: 0^(c>=0 real), x^0, 1^w, inf^(real)."""
    zero, one, inf = _c(a, 0.0), _c(a, 1.0), _c(a, np.inf)
    r = abs_parts(a, b)
    t = np.arctan2(b, a)
    coeff = np.power(r, c) * np.exp(-d * t)
    q = c * t + d * np.log(r)
    re, im = coeff * np.cos(q), coeff * np.sin(q)
    sel = (r == zero) & (d == zero) & (zero <= c)
    re, im = np.where(sel, np.where(c == zero, one, zero), re), np.where(sel, zero, im)
    for cond, value in (((c == zero) & (d == zero), (one, zero)),
                        ((a == one) & (b == zero), (one, zero)),
                        ((a == inf) & (b == zero) & (d == zero) & (c > zero), (inf, zero)),
                        ((a == inf) & (b == zero) & (d == zero) & (c < zero), (zero, zero))):
        re, im = np.where(cond, value[0], re), np.where(cond, value[1], im)
    return re, im


# ---- exponentials and logarithms ---------------------------------------------------------------

# Cephes' coefficients of (cos x - 1 + x^2/2) / x^4 in x^2, as XLA's cosm1 has them (rounded to f32 for c64)
_COSM1_COEFFS = (4.737750796424621e-14, -1.147028484342536e-11, 2.087675428708152e-09, -2.755731921499979e-07,
                 2.480158730157055e-05, -0.0013888888888888872, 0.041666666666666664)


def _cosm1(x: np.ndarray) -> np.ndarray:
    """cos(x) - 1 without cancellation near 0, as XLA emits it: ``x^4 P(x^2) - x^2/2`` (P by Horner's
    rule in fused multiply-adds) below x^2 = 0.61685, ``cos(x) - 1`` above. Its zero is +0 at x = +-0
    (expm1(-0 + 0i) is (+0, 0) in XLA, where -2 sin^2(x/2) gave -0)."""
    x2 = x * x
    p = _c(x, _COSM1_COEFFS[0])
    for coeff in _COSM1_COEFFS[1:]:
        p = _fma(p, x2, _c(x, coeff))
    small = (x2 * x2) * p + x2 * _c(x, -0.5)
    return np.where(x2 >= _c(x, 0.61685), np.cos(x) + _c(x, -1.0), small)


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c rounded once: exact in f64 for f32 parts; for f64 parts the product's error is below
    the term's last bit here (|a b| < 0.05 |c| on cosm1's range), so rounding twice rarely differs."""
    a = np.asarray(a)
    if a.dtype == np.float32:
        return (a.astype(np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float32)
    return a * b + c


def exp_parts(a, b) -> Parts:
    e = np.exp(a)
    return e * np.cos(b), e * np.sin(b)


def expm1_parts(a, b) -> Parts:
    em1 = np.expm1(a)
    cm1 = _cosm1(b)
    return em1 * (cm1 + _c(a, 1.0)) + cm1, np.where(b == _c(b, 0.0), _c(b, 0.0), (em1 + _c(a, 1.0)) * np.sin(b))


def log_parts(a, b) -> Parts:
    return np.log(abs_parts(a, b)), np.arctan2(b, a)


def log1p_parts(a, b) -> Parts:
    one = _c(a, 1.0)
    a1 = a + one
    aa1, ab = np.abs(a1), np.abs(b)
    hi, lo = np.maximum(aa1, ab), np.minimum(aa1, ab)
    hi_m1 = np.where(a1 > ab, a, hi - one)
    ratio = lo / hi
    r = _c(a, 0.5) * np.log1p(ratio * ratio) + np.log1p(hi_m1)
    return np.where(np.isnan(r), lo, r), np.arctan2(b, a1)


def sqrt_parts(a, b) -> Parts:
    zero, inf = _c(a, 0.0), _c(a, np.inf)
    lo, hi, s = _abs_parts(a, b)
    r = np.sqrt(hi) * np.power(s, _c(a, 0.25))
    r = np.where(np.isnan(r), lo, r)          # sqrt(|z|)
    t = np.arctan2(b, a) * _c(a, 0.5)
    cos, sin = np.cos(t), np.sin(t)
    abs_b = np.abs(b)
    # |b| < inf: XLA's ordered 'one' compare, false for NaN (sqrt(-inf + NaN i) has a NaN real part)
    real = np.where((abs_b == inf) | (a == inf), inf, np.where((a == -inf) & (abs_b < inf), zero, r * cos))
    imag0 = np.where(sin == zero, zero, r * sin)
    imag = np.where((abs_b == inf) | (a == -inf), np.copysign(inf, b), np.where(np.isnan(r), _c(a, np.nan), imag0))
    at_zero = r == zero
    return np.where(at_zero, zero, real), np.where(at_zero, zero, imag)


def rsqrt_parts(a, b) -> Parts:
    zero, one, inf = _c(a, 0.0), _c(a, 1.0), _c(a, np.inf)
    lo, hi, s = _abs_parts(a, b)
    r = (one / np.sqrt(hi)) * np.sqrt(one / np.sqrt(s))
    r = np.where(np.isnan(r), one / np.sqrt(lo), r)
    t = np.arctan2(b, a) * _c(a, -0.5)
    special = ((np.abs(b) == inf) & np.isnan(a)) | (np.abs(a) == inf)
    zz = (a == zero) & (b == zero)
    real = np.where(zz, inf, np.where(special, np.copysign(zero, a), r * np.cos(t)))
    imag = np.where(zz, _c(a, np.nan), np.where(special, -np.copysign(zero, b), r * np.sin(t)))
    return real, imag


# ---- trigonometric and hyperbolic ------------------------------------------------------------------

def _cosh_sinh(y):
    e = np.exp(y)
    he, hen = _c(y, 0.5) * e, _c(y, 0.5) / e
    return he + hen, he - hen


def sin_parts(x, y) -> Parts:
    cosh, sinh = _cosh_sinh(y)
    return np.sin(x) * cosh, np.cos(x) * sinh


def cos_parts(x, y) -> Parts:
    """(cos x cosh y, (e^-y/2 - e^y/2) sin x): the imaginary part is that product, not -(sin x sinh y),
    whose zero has the other sign (cos(1 + 0i) is (0.54, +0) in XLA)."""
    e = np.exp(y)
    he, hen = _c(y, 0.5) * e, _c(y, 0.5) / e
    return np.cos(x) * (hen + he), (hen - he) * np.sin(x)


def tanh_parts(a, b) -> Parts:
    """(e^2a - e^-2a + 2i sin 2b) / (e^2a + e^-2a + 2 cos 2b) through expm1, with XLA's limits."""
    zero, four, inf = _c(a, 0.0), _c(a, 4.0), _c(a, np.inf)
    two_a = a + a
    em, emn = np.expm1(two_a), np.expm1(-two_a)
    cos_b, sin_b = np.cos(b), np.sin(b)
    imag_num = four * (cos_b * sin_b)
    exp_sum_m2 = em + emn
    denom = exp_sum_m2 + cos_b * cos_b * four
    real = np.where(exp_sum_m2 == inf, np.copysign(_c(a, 1.0), a), (em - emn) / denom)
    imag = imag_num / denom
    a_inf = np.abs(a) == inf
    sin_nan = np.isnan(imag_num)
    real = np.where(sin_nan & ~a_inf, _c(a, np.nan), real)
    imag = np.where((b == zero) | (a_inf & sin_nan), zero, imag)
    return real, imag


def tan_parts(x, y) -> Parts:
    """tan(x + iy) = -i tanh(-y + ix)."""
    re, im = tanh_parts(-y, x)
    return im, -re


def atan2_parts(yr, yi, xr, xi) -> Parts:
    """atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2)), every step a complex op of XLA's
    (the multiplications by 0 and 1 included: they carry NaNs from infinite parts)."""
    zero, one = _c(xr, 0.0), _c(xr, 1.0)
    x2 = (xr * xr - xi * xi, xi * xr + xi * xr)
    y2 = (yr * yr - yi * yi, yi * yr + yi * yr)
    s = sqrt_parts(x2[0] + y2[0], x2[1] + y2[1])
    iy = (yr * zero - yi, yr + yi * zero)
    q = divide_parts(xr + iy[0], xi + iy[1], s[0], s[1])
    lr, li = log_parts(*q)
    return lr * zero - li * -one, lr * -one + li * zero


# ---- comparisons and ordering ------------------------------------------------------------------------

_ORDER: dict[str, Callable] = {"LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal}


def compare(x: np.ndarray, y: np.ndarray, direction: str) -> np.ndarray:
    (a, b), (c, d) = parts(x), parts(y)
    if direction == "EQ":
        return (a == c) & (b == d)
    if direction == "NE":
        return (a != c) | (b != d)
    fn = _ORDER[direction]
    return ((a == c) & fn(b, d)) | fn(a, c)


def select_max_min(x: np.ndarray, y: np.ndarray, maximum: bool) -> np.ndarray:
    take_x = compare(x, y, "GE" if maximum else "LE")
    return np.where(take_x, x, y)


UNARY: dict[str, Callable[[np.ndarray, np.ndarray], Parts]] = {
    "exponential": exp_parts, "exponential-minus-one": expm1_parts, "log": log_parts,
    "log-plus-one": log1p_parts, "sqrt": sqrt_parts, "rsqrt": rsqrt_parts, "sine": sin_parts,
    "cosine": cos_parts, "tan": tan_parts, "tanh": tanh_parts,
}
BINARY: dict[str, Callable[..., Parts]] = {
    "multiply": multiply_parts, "divide": divide_parts, "power": power_parts, "atan2": atan2_parts,
}


def unary(opcode: str, z: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return compose(*UNARY[opcode](*parts(z)))


def binary(opcode: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    with np.errstate(all="ignore"):
        return compose(*BINARY[opcode](*parts(x), *parts(y)))


def complex_abs(z: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return abs_parts(*parts(z))


def complex_sign(z: np.ndarray) -> np.ndarray:
    re, im = parts(z)
    with np.errstate(all="ignore"):
        r = abs_parts(re, im)
        zero = (re == 0) & (im == 0)
        return np.where(zero, z, compose(re / r, im / r))
