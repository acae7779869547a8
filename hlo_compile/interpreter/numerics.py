"""Element-type numerics shared by the op families: numpy dtypes, the computation type of
narrow floats (computed in f32 and rounded per op, as XLA does), XLA's convert rules and the
total order of floats."""
from __future__ import annotations

import numpy as np

from ..hlo.dtypes import numpy_dtype
from ..hlo.element_types import bit_width, element_type, is_float

F32 = np.dtype(np.float32)


def dtype_of(et: str) -> np.dtype:
    return numpy_dtype(et)


def is_narrow_float(et: str) -> bool:
    """Floats narrower than f32 (f16, bf16, f8, f6, f4): computed in f32, rounded per op."""
    return is_float(et) and bit_width(et) < 32


def kind(et: str) -> str:
    return element_type(et).kind


def compute(x: np.ndarray, et: str) -> np.ndarray:
    """``x`` (of element type ``et``) in the type arithmetic happens in."""
    if is_narrow_float(et):
        return np.asarray(x).astype(np.float32)
    return np.asarray(x)


def result(x, et: str) -> np.ndarray:
    """Round/cast a computed value to element type ``et``."""
    dt = dtype_of(et)
    x = np.asarray(x)
    if x.dtype == dt:
        return x
    return x.astype(dt)


def int_limits(et: str) -> tuple[int, int]:
    bits = bit_width(et)
    if kind(et) == "signed":
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def bits_view(x: np.ndarray, et: str, signed: bool = False) -> np.ndarray:
    """The raw bits of ``x`` as a (un)signed integer array of the same width (8 bits min)."""
    bits = max(8, bit_width(et))
    bits = 8 if bits <= 8 else bits
    dt = np.dtype(f"{'i' if signed else 'u'}{bits // 8}")
    x = np.asarray(x, order="C")
    if x.dtype.itemsize != dt.itemsize:
        raise ValueError(f"cannot view {x.dtype} as {dt}")
    return x.view(dt)


# ---- total order ---------------------------------------------------------------------

def total_order_key(x: np.ndarray, et: str) -> np.ndarray:
    """A signed integer key whose order is XLA's TOTALORDER on floats:
    -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN."""
    k = bits_view(x, et, signed=True)
    mask = np.array(np.iinfo(k.dtype).max, dtype=k.dtype)
    return np.where(k < 0, k ^ mask, k)


# ---- convert -------------------------------------------------------------------------

def convert(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """XLA's convert: float->int truncates toward zero, saturates, NaN->0; int->int wraps;
    to pred is != 0; complex->real keeps the real part."""
    x = np.asarray(x)
    dk, sk = kind(dst), kind(src)
    dt = dtype_of(dst)
    if src == dst:
        return x.astype(dt, copy=False)
    if dk == "pred":
        return x != 0
    if sk == "complex" and dk != "complex":
        x = x.real
        sk = "float"
        src = "f64" if x.dtype == np.float64 else "f32"
    if dk in ("signed", "unsigned") and sk == "float":
        return _float_to_int(x, dst)
    if dk in ("signed", "unsigned") and sk in ("signed", "unsigned"):
        if bit_width(dst) < 8:  # s4/u4/s2...: wrap through the 8-bit type
            lo, hi = int_limits(dst)
            span = 1 << bit_width(dst)
            v = x.astype(np.int64)
            v = (v - lo) % span + lo
            return v.astype(dt)
        return x.astype(dt)
    if dk == "float" and sk in ("signed", "unsigned", "pred"):
        if is_narrow_float(dst) and sk != "pred":
            return x.astype(np.float64).astype(dt)
        return x.astype(dt)
    if dk == "float" and sk == "float":
        if is_narrow_float(dst) and is_narrow_float(src):
            return x.astype(np.float32).astype(dt)
        return x.astype(dt)
    if dk in ("signed", "unsigned") and sk == "pred":
        return x.astype(dt)
    if dk == "complex":
        return x.astype(dt)
    return x.astype(dt)


def _float_to_int(x: np.ndarray, dst: str) -> np.ndarray:
    dt = dtype_of(dst)
    lo, hi = int_limits(dst)
    # truncated in the source's own float type (f32 or f64; narrower ones in f32): exact, and
    # every bound compared with below is a power of two, exact in f32 too
    y = np.trunc(x if x.dtype in (np.float32, np.float64) else x.astype(np.float32))
    nan = np.isnan(y)
    too_high = y >= float(hi) + 1.0  # float(hi)+1 is a power of two: exact
    too_low = y < float(lo)
    bad = nan | too_high | too_low
    safe = np.where(bad, 0.0, y)
    if bit_width(dst) < 8:
        out = safe.astype(np.int64)
    else:
        out = safe.astype(dt)
    out = np.where(too_high, np.array(hi).astype(out.dtype), out)
    out = np.where(too_low, np.array(lo).astype(out.dtype), out)
    return out.astype(dt)
