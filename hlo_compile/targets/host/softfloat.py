"""Soft-float helpers for half/bfloat conversions, defined in LLVM IR for the host JIT.

On x86 CPUs without F16C (half) or AVX512-BF16 (bfloat), LLVM lowers ``fptrunc``/``fpext``
of ``half``/``bfloat`` to calls of compiler-rt style helpers (``__truncsfhf2``,
``__extendhfsf2``, ``__truncdfhf2``, ``__truncsfbf2``, ``__truncdfbf2``). The process often
lacks them (Debian 12's libgcc_s has only ``__truncsfhf2``) and MCJIT crashes on an unresolved
symbol, so every host module defines them itself; LLVM's libcalls then bind to these.

All truncations round to nearest even with integer arithmetic, in a single rounding (also
from ``double``). NaNs follow ml_dtypes / numpy, so results are bit-identical to them:
``half`` keeps the top payload bits (made non-zero) without quieting, ``bfloat`` becomes
the canonical quiet NaN ``0x7FC0`` with the input's sign. ml_dtypes converts ``double`` to
``bfloat16`` through ``float`` (two roundings); we round once, as LLVM's ``fptrunc`` means.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from llvmlite import ir

from ...codegen.llvm_types import BFLOAT, F16, F32, F64, I16, I32

HELPER_NAMES = ("__truncsfhf2", "__truncdfhf2", "__truncsfbf2", "__truncdfbf2", "__extendhfsf2")


@dataclass(frozen=True)
class FloatFormat:
    """A binary IEEE-style format: ``exp_bits`` exponent bits, ``man_bits`` stored mantissa bits."""

    llvm_type: ir.Type
    exp_bits: int
    man_bits: int

    @property
    def width(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1


F16_FMT = FloatFormat(F16, 5, 10)
BF16_FMT = FloatFormat(BFLOAT, 8, 7)
F32_FMT = FloatFormat(F32, 8, 23)
F64_FMT = FloatFormat(F64, 11, 52)


def _emit_truncate(module: ir.Module, name: str, src: FloatFormat, dst: FloatFormat) -> None:
    """Define ``dst name(src)``: round-to-nearest-even narrowing, see the module docstring."""
    it = ir.IntType(src.width)
    fn = ir.Function(module, ir.FunctionType(dst.llvm_type, [src.llvm_type]), name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def c(v: int) -> ir.Constant:
        return ir.Constant(it, v)

    bits = b.bitcast(fn.args[0], it)
    sign_mask = 1 << (src.width - 1)
    absv = b.and_(bits, c(sign_mask - 1))
    dst_sign = b.lshr(b.and_(bits, c(sign_mask)), c(src.width - dst.width))
    src_inf = ((1 << src.exp_bits) - 1) << src.man_bits
    dst_inf = ((1 << dst.exp_bits) - 1) << dst.man_bits
    drop = src.man_bits - dst.man_bits

    # NaN: half keeps the payload's top bits (never zero), bfloat becomes canonical.
    if dst is BF16_FMT:
        nan = c(dst_inf | (1 << (dst.man_bits - 1)))
    else:
        payload = b.lshr(b.and_(absv, c((1 << src.man_bits) - 1)), c(drop))
        payload = b.select(b.icmp_unsigned("==", payload, c(0)), c(1), payload)
        nan = b.or_(c(dst_inf), payload)

    # Smallest magnitude that rounds to infinity: max finite + half an ulp (a tie goes up,
    # because max finite has an odd mantissa).
    emax = (1 << dst.exp_bits) - 2 - dst.bias
    overflow = ((emax + src.bias) << src.man_bits) | (((1 << (dst.man_bits + 1)) - 1) << (drop - 1))

    # Normal result: rebias the exponent, then round away the dropped mantissa bits.
    min_normal = (src.bias - dst.bias + 1) << src.man_bits
    rebased = b.sub(absv, c((src.bias - dst.bias) << src.man_bits))
    normal = _round_shift(b, rebased, c(drop), c)

    # Subnormal (or zero) result: value = mant * 2^(e' - bias_s - man_s) with e' = max(e, 1),
    # dst subnormal = m * 2^(1 - bias_d - man_d); shift = difference, clamped (past
    # man_s + 2 every input rounds to zero).
    e = b.lshr(absv, c(src.man_bits))
    e1 = b.select(b.icmp_unsigned("==", e, c(0)), c(1), e)
    implicit = b.select(b.icmp_unsigned("==", e, c(0)), c(0), c(1 << src.man_bits))
    mant = b.or_(b.and_(absv, c((1 << src.man_bits) - 1)), implicit)
    shift = b.sub(c(src.bias + src.man_bits + 1 - dst.bias - dst.man_bits), e1)
    shift = b.select(b.icmp_unsigned(">", shift, c(src.man_bits + 2)), c(src.man_bits + 2), shift)
    subnormal = _round_shift(b, mant, shift, c)

    res = b.select(b.icmp_unsigned(">=", absv, c(min_normal)), normal, subnormal)
    res = b.select(b.icmp_unsigned(">=", absv, c(overflow)), c(dst_inf), res)
    res = b.select(b.icmp_unsigned(">", absv, c(src_inf)), nan, res)
    out = b.trunc(b.or_(res, dst_sign), ir.IntType(dst.width))
    b.ret(b.bitcast(out, dst.llvm_type))


def _round_shift(b: ir.IRBuilder, v: ir.Value, shift: ir.Value, c) -> ir.Value:
    """``v >> shift`` rounded to nearest, ties to even (``shift`` >= 1)."""
    one = c(1)
    q = b.lshr(v, shift)
    half = b.shl(one, b.sub(shift, one))
    rem = b.and_(v, b.sub(b.shl(one, shift), one))
    up = b.or_(b.icmp_unsigned(">", rem, half),
               b.and_(b.icmp_unsigned("==", rem, half), b.icmp_unsigned("==", b.and_(q, one), one)))
    return b.add(q, b.zext(up, v.type))


def _emit_extend_half(module: ir.Module) -> None:
    """``float __extendhfsf2(half)``: exact; NaN payloads are shifted, not quieted (numpy)."""
    fn = ir.Function(module, ir.FunctionType(F32, [F16]), "__extendhfsf2")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    h = b.zext(b.bitcast(fn.args[0], I16), I32)

    def c(v: int) -> ir.Constant:
        return ir.Constant(I32, v)

    sign = b.shl(b.and_(h, c(0x8000)), c(16))
    e = b.and_(b.lshr(h, c(10)), c(0x1F))
    m = b.and_(h, c(0x3FF))
    normal = b.or_(b.shl(b.add(e, c(127 - 15)), c(23)), b.shl(m, c(13)))
    special = b.or_(c(0x7F800000), b.shl(m, c(13)))
    # subnormal: m * 2^-24, exact in float arithmetic
    sub = b.bitcast(b.fmul(b.uitofp(m, F32), ir.Constant(F32, 2.0 ** -24)), I32)
    res = b.select(b.icmp_unsigned("==", e, c(0x1F)), special, normal)
    res = b.select(b.icmp_unsigned("==", e, c(0)), sub, res)
    b.ret(b.bitcast(b.or_(res, sign), F32))


def add_softfloat_helpers(module: ir.Module) -> None:
    """Define every helper of ``HELPER_NAMES`` in ``module`` (external linkage)."""
    _emit_truncate(module, "__truncsfhf2", F32_FMT, F16_FMT)
    _emit_truncate(module, "__truncdfhf2", F64_FMT, F16_FMT)
    _emit_truncate(module, "__truncsfbf2", F32_FMT, BF16_FMT)
    _emit_truncate(module, "__truncdfbf2", F64_FMT, BF16_FMT)
    _emit_extend_half(module)


@lru_cache(maxsize=None)
def softfloat_ir(triple: str, data_layout: str) -> str:
    """The helpers as a standalone module's text (built once per triple and layout)."""
    m = ir.Module(name="host_softfloat")
    m.triple = triple
    m.data_layout = data_layout
    add_softfloat_helpers(m)
    return str(m)
