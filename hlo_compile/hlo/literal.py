"""Literal text (the inside of ``constant(...)``) to numpy values, with XLA's range checks.

numpy loads on first need: a one-element literal of a plain type (``PLAIN_TYPES``) is checked
and read as a Python number without it (``scalar_value``), so compiling a module whose
constants are such scalars never imports numpy (~100 ms of start-up: issue 17).
"""
from __future__ import annotations

import math
import re
import struct
from typing import TYPE_CHECKING, Any

from .dtypes import has_numpy_dtype, numpy_dtype
from .element_types import element_type
from .shape import Shape

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

# Element types whose one-element literals ``scalar_value`` reads without numpy: their values
# are Python's bool, int and float exactly (f32 through a round trip of C's float).
PLAIN_TYPES = frozenset({"pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f32", "f64"})


class LiteralError(ValueError):
    """A malformed literal; ``offset`` is the position in the literal text."""

    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


_TOKEN = re.compile(r"""
    (?P<ws>\s+|/\*.*?\*/)
  | (?P<num>-?(?:nan(?:\(0x[0-9a-fA-F]+\))?|inf|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))
  | (?P<word>true|false|\.\.\.)
  | (?P<punct>[{}(),])
""", re.X | re.S)


def _tokenize(text: str) -> list[tuple[str, int]]:
    out = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if not m:
            raise LiteralError(f"unexpected character '{text[pos]}' in literal", pos)
        if m.lastgroup != "ws":
            out.append((m.group(), pos))
        pos = m.end()
    return out


# Mantissa bits of float types, for NaN payload checks; types whose only NaN encoding has
# no room for a payload are listed with 0.
_MANTISSA = {"f16": 10, "bf16": 7, "f32": 23, "f64": 52, "f8e5m2": 2, "f8e4m3": 3, "f8e3m4": 4,
             "f8e4m3fn": 0, "f8e4m3b11fnuz": 0, "f8e5m2fnuz": 0, "f8e4m3fnuz": 0, "f8e8m0fnu": 0,
             "c64": 23, "c128": 52}


class _Reader:
    def __init__(self, text: str, etype: str):
        self.toks = _tokenize(text)
        self.i = 0
        self.text = text
        self.etype = etype

    def peek(self) -> str | None:
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def offset(self) -> int:
        return self.toks[self.i][1] if self.i < len(self.toks) else len(self.text)

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise LiteralError(f"literal ends early{'; expects ' + repr(expected) if expected else ''}", self.offset())
        if expected is not None and tok != expected:
            raise LiteralError(f"unexpected '{tok}' token in literal; expects '{expected}'", self.offset())
        self.i += 1
        return tok


_F32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]  # numpy's finfo(float32).max
_F64_MAX = 1.7976931348623157e308  # finfo(float64).max


def to_f32(v: float) -> float | None:
    """``v`` rounded to the nearest f32 (as a Python float), or None where the rounding
    overflows a finite ``v`` to infinity: C's double -> float conversion, which numpy's
    ``astype(float32)`` is too (inf and NaN keep their sign)."""
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return None


def _check_scalar(tok: str, etype: str, offset: int) -> Any:
    kind = element_type(etype).kind
    if tok in ("true", "false"):
        if kind not in ("pred", "signed", "unsigned", "float"):
            raise LiteralError(f"'{tok}' is not a value of type {etype}", offset)
        return tok == "true"
    if kind in ("pred", "signed", "unsigned"):
        if not re.fullmatch(r"-?\d+", tok):
            raise LiteralError(f"expects an integer literal for type {etype}, got '{tok}'", offset)
        v = int(tok)
        bits = element_type(etype).bits
        if kind == "pred":
            lo, hi = 0, 1
        elif bits == 64:  # XLA reads 64-bit literals as either signedness and bit-casts
            lo, hi = -(1 << 63), (1 << 64) - 1
        elif kind == "signed":
            lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        else:
            lo, hi = 0, (1 << bits) - 1
        if not lo <= v <= hi:
            raise LiteralError(f"value {tok} is out of range for literal's primitive type {etype.upper()}", offset)
        if bits == 64 and kind == "signed" and v > (1 << 63) - 1:
            v -= 1 << 64
        elif bits == 64 and kind == "unsigned" and v < 0:
            v += 1 << 64
        return v
    # floating point and complex parts
    neg = tok.startswith("-")
    body = tok[1:] if neg else tok
    if body.startswith("nan"):
        m = re.fullmatch(r"nan(?:\(0x([0-9a-fA-F]+)\))?", body)
        if m.group(1) is not None:
            payload = int(m.group(1), 16)
            mbits = _MANTISSA.get(etype, 0)
            if payload == 0 or payload >= (1 << mbits):
                raise LiteralError(f"tries to set NaN payload 0x{m.group(1)} which does not fit type {etype}", offset)
        return -math.nan if neg else math.nan
    if body == "inf":
        return -math.inf if neg else math.inf
    v = float(tok)
    out_of_range = f"value {tok} is out of range for literal's primitive type {etype.upper()}"
    if math.isinf(v):
        raise LiteralError(out_of_range, offset)
    if etype == "f64":
        pass  # a finite double is a finite f64
    elif etype == "f32":
        if to_f32(v) is None:  # (C's double -> float conversion, as numpy's astype does)
            raise LiteralError(out_of_range, offset)
    elif has_numpy_dtype(etype) and kind == "float":
        import ml_dtypes
        import numpy as np
        with np.errstate(over="ignore"):
            if etype in ("f16", "bf16"):
                converted = np.array(v, dtype=np.float64).astype(numpy_dtype(etype))
                if np.isinf(converted):
                    raise LiteralError(out_of_range, offset)
            else:
                finfo = ml_dtypes.finfo(numpy_dtype(etype))
                if abs(v) > float(finfo.max) * 1.0625:
                    raise LiteralError(out_of_range, offset)
    elif kind == "complex":
        if abs(v) > (_F32_MAX if etype == "c64" else _F64_MAX):
            raise LiteralError(out_of_range, offset)
    return v


def _scalar(r: _Reader, etype: str) -> Any:
    if element_type(etype).kind == "complex":
        r.take("(")
        off = r.offset()
        re_ = _check_scalar(r.take(), etype, off)
        r.take(",")
        off = r.offset()
        im = _check_scalar(r.take(), etype, off)
        r.take(")")
        return complex(re_, im)
    off = r.offset()
    tok = r.take()
    if tok in "{}(),":
        raise LiteralError(f"unexpected '{tok}' token in literal; expects a number", off)
    return _check_scalar(tok, etype, off)


def _values(r: _Reader, shape: Shape) -> list | None:
    """The elements of an array literal in logical order, as ``_scalar`` reads them; None for
    ``{...}`` (elided: zeros)."""
    dims = shape.dimensions
    etype = shape.element_type
    if not dims:
        return [_scalar(r, etype)]
    if r.peek() != "{":  # a scalar written for a whole array fills every element
        return [_scalar(r, etype)] * shape.element_count()
    values: list = []

    def nested(level: int) -> None:
        r.take("{")
        if level == 0 and r.peek() == "...":
            r.take()
            r.take("}")
            raise _Elided()
        count = 0
        while r.peek() != "}":
            if count:
                r.take(",")
            if level + 1 < len(dims):
                if r.peek() != "{":
                    raise LiteralError(f"expects nested array in rank {len(dims)}, but sees {level + 1}",
                                       r.offset())
                nested(level + 1)
            else:
                if r.peek() == "{":
                    raise LiteralError(f"expects nested array in rank {len(dims)}, but sees larger",
                                       r.offset())
                values.append(_scalar(r, etype))
            count += 1
        if count != dims[level]:
            raise LiteralError(f"expects {dims[level]} elements in the [{level}]th dimension, but sees {count}",
                               r.offset())
        r.take("}")

    try:
        nested(0)
    except _Elided:
        return None
    return values


def _array(r: _Reader, shape: Shape) -> np.ndarray:
    import numpy as np
    dims = shape.dimensions
    etype = shape.element_type
    values = _values(r, shape)
    if values is None:
        return np.zeros(dims, dtype=numpy_dtype(etype)) if has_numpy_dtype(etype) else np.zeros(dims)
    if not has_numpy_dtype(etype):
        return np.array(values, dtype=object).reshape(dims)
    dt = numpy_dtype(etype)
    if element_type(etype).kind == "float":
        arr = np.array(values, dtype=np.float64).astype(dt)
    elif etype == "pred":
        arr = np.array([bool(v) for v in values], dtype=dt)
    elif element_type(etype).kind in ("signed", "unsigned") and element_type(etype).bits < 8:
        arr = np.array(values, dtype=np.int64).astype(dt)
    else:
        arr = np.array(values, dtype=dt)
    return arr.reshape(dims)


class _Elided(Exception):
    pass


def _value(r: _Reader, shape: Shape) -> Any:
    if shape.is_tuple:
        r.take("(")
        out = []
        for i, s in enumerate(shape.tuple_shapes):
            if i:
                r.take(",")
            out.append(_value(r, s))
        r.take(")")
        return tuple(out)
    if shape.element_type == "token":
        return None
    return _array(r, shape)


def parse_literal(text: str, shape: Shape) -> Any:
    """The value of a literal of ``shape``: a numpy array in logical (row-major) order, or a
    tuple of values. Raises ``LiteralError`` on malformed text or out-of-range values."""
    r = _Reader(text, shape.element_type)
    value = _value(r, shape)
    if r.peek() is not None:
        raise LiteralError(f"unexpected '{r.peek()}' after the literal", r.offset())
    return value


def scalar_value(text: str, shape: Shape) -> bool | int | float | None:
    """The one element of a literal of ``shape`` whose element type is plain (``PLAIN_TYPES``)
    and which has one element, as the Python number ``parse_literal``'s array holds (a bool
    for pred, an int, a float: f32 values exactly as f32 rounds them), read without numpy;
    None for any other shape. Raises ``LiteralError`` as ``parse_literal`` does."""
    etype = shape.element_type
    if not shape.is_array or etype not in PLAIN_TYPES or shape.element_count() != 1:
        return None
    r = _Reader(text, etype)
    values = _values(r, shape)
    if r.peek() is not None:
        raise LiteralError(f"unexpected '{r.peek()}' after the literal", r.offset())
    v = values[0] if values is not None else 0
    if etype == "pred":
        return bool(v)
    if etype == "f32":
        return to_f32(float(v))  # (in range: _check_scalar refused what overflows)
    if etype == "f64":
        return float(v)
    return int(v)
