"""LLVM types for HLO element types, plus the two types llvmlite lacks (``bfloat``, ``token``).

Storage types: ``pred`` is stored as ``i8`` (one byte per element, as XLA stores it) and
computed as ``i1``; unsigned integers are LLVM integers of the same width (signedness lives
in the instructions chosen, not the type); 8-bit floats (``f8.py``) are held as their raw
``i8`` bits and computed in f32 (decoded and re-encoded around every op); complex c64/c128
are literal structs of two floats (real, imaginary: XLA's interleaved layout in memory, the
arithmetic in ``complex_ops.py``); f6/f4 and ``f8e8m0fnu`` have no code generation yet.
"""
from __future__ import annotations

import struct

from llvmlite import ir

from ..hlo.errors import HloUnsupportedError


class _BFloatType(ir.types._BaseFloatType):
    """LLVM's ``bfloat``: constants are written as ``0xRXXXX`` (the 16 raw bits)."""

    null = "0xR0000"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        # round to nearest even on the upper 16 bits (NaN stays a quiet NaN)
        if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
            return "0xR7FC0"
        bits += 0x7FFF + ((bits >> 16) & 1)
        return f"0xR{(bits >> 16) & 0xFFFF:04X}"


class _TokenType(ir.Type):
    """LLVM's ``token`` (needed by the coroutine intrinsics); its only constant is ``none``."""

    null = "none"

    def _to_string(self) -> str:
        return "token"

    def __eq__(self, other) -> bool:
        return isinstance(other, _TokenType)

    def __hash__(self) -> int:
        return hash("token")


_BFloatType._create_instance()  # llvmlite float types are singletons
BFLOAT = _BFloatType()
TOKEN = _TokenType()

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
VOID = ir.VoidType()
PTR = ir.PointerType()  # opaque pointer in the generic address space
C64 = ir.LiteralStructType([F32, F32])     # (real, imaginary)
C128 = ir.LiteralStructType([F64, F64])

_INT_BITS = {"s1": 1, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
             "u1": 1, "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64}
_FLOATS = {"f16": F16, "f32": F32, "f64": F64, "bf16": BFLOAT}
_COMPLEX = {"c64": C64, "c128": C128}
# 8-bit floats held as raw bits (codegen/elemental/f8.py has their formats)
_F8 = frozenset({"f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz"})


class UnsupportedElementType(HloUnsupportedError, ValueError):
    """An element type code generation does not handle (f6/f4, f8e8m0fnu so far)."""


def is_signed(et: str) -> bool:
    return et.startswith("s")


def is_unsigned(et: str) -> bool:
    return et.startswith("u")


def is_integer(et: str) -> bool:
    return et in _INT_BITS


def is_float(et: str) -> bool:
    """A floating-point element type with code generation (8-bit floats are held as ``i8``)."""
    return et in _FLOATS or et in _F8


def is_f8(et: str) -> bool:
    return et in _F8


def is_complex(et: str) -> bool:
    return et in _COMPLEX


def compute_type(et: str) -> ir.Type:
    """The type values of ``et`` have in registers (``pred`` is ``i1``)."""
    if et == "pred":
        return I1
    if et in _INT_BITS:
        return ir.IntType(_INT_BITS[et])
    if et in _FLOATS:
        return _FLOATS[et]
    if et in _F8:
        return I8
    if et in _COMPLEX:
        return _COMPLEX[et]
    raise UnsupportedElementType(f"element type {et} has no LLVM code generation yet")


def storage_type(et: str) -> ir.Type:
    """The type of one element in memory (sub-byte integers and ``pred`` take a byte)."""
    if et == "pred":
        return I8
    if et in _INT_BITS and _INT_BITS[et] < 8:
        return I8
    return compute_type(et)


def storage_bytes(et: str) -> int:
    t = storage_type(et)
    if isinstance(t, ir.IntType):
        return max(1, t.width // 8)
    if et in _COMPLEX:
        return 8 if et == "c64" else 16
    return {"half": 2, "bfloat": 2, "float": 4, "double": 8}[str(t)]


# ---- conversions between the two -----------------------------------------------------------------

def to_storage(b: ir.IRBuilder, v: ir.Value, et: str) -> ir.Value:
    """A compute-type value of ``et`` as it is stored (``pred`` and sub-byte integers widened)."""
    st = storage_type(et)
    if v.type == st:
        return v
    if et == "pred" or et.startswith("u"):
        return b.zext(v, st)
    return b.sext(v, st)


def from_storage(b: ir.IRBuilder, v: ir.Value, et: str) -> ir.Value:
    """A stored value of ``et`` in its compute type."""
    ct = compute_type(et)
    if v.type == ct:
        return v
    if et == "pred":
        return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
    return b.trunc(v, ct)


def to_storage_constant(c: ir.Constant, st: ir.Type) -> ir.Constant:
    """A compute-type constant as its storage type (only integers narrower than a byte differ)."""
    if c.type == st:
        return c
    return ir.Constant(st, int(c.constant) if not isinstance(c.constant, str) else 0)
