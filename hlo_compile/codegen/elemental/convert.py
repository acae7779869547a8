"""Elemental emitters of type changes: convert, bitcast-convert, reduce-precision, is-finite.

``convert`` follows XLA's rules as the reference interpreter encodes them:

- to ``pred`` is ``!= 0`` (a NaN converts to true); from ``pred`` is 0 or 1;
- integer to integer wraps (sign- or zero-extension by the *source's* signedness);
- float to integer truncates toward zero, saturates at the type's limits and maps NaN to 0
  (``llvm.fpto[su]i.sat``, as XLA's GPU emitter does);
- 8-bit floats decode exactly to f32; anything to an 8-bit float rounds once from f32 (an
  f64 rounds to f32 first, as ml_dtypes does) — ``f8.py``;
- anything to bf16 goes through f32 first (so f64 → bf16 and s32 → bf16 round twice, as
  ml_dtypes and XLA's ``EmitF32ToBF16`` path do); f64 → f16 rounds once, as numpy does.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ...hlo.element_types import bit_width
from ...hlo.errors import HloUnsupportedError
from .table import (F32, OpContext, declare, elemental, int_const, intrinsic, is_float, is_nan,
                              is_narrow_float, is_pred, widen)
from .f8 import emit_f8_to_f32, emit_to_f8
from ..llvm_types import F64, I8, compute_type, is_f8, is_signed


def _kind(et: str) -> str:
    if is_pred(et):
        return "pred"
    if is_float(et):
        return "float"
    return "int"


def _resize_int(b: ir.IRBuilder, x: ir.Value, src: str, dst: str) -> ir.Value:
    t = compute_type(dst)
    if t.width == x.type.width:
        return x
    if t.width < x.type.width:
        return b.trunc(x, t)
    return b.sext(x, t) if is_signed(src) else b.zext(x, t)


def _int_to_float(b: ir.IRBuilder, x: ir.Value, src: str, dst: str) -> ir.Value:
    to = F32 if is_narrow_float(dst) else compute_type(dst)
    v = b.sitofp(x, to) if is_signed(src) else b.uitofp(x, to)
    return _float_to_float(b, v, "f32", dst) if is_narrow_float(dst) else v


def _float_to_int(b: ir.IRBuilder, x: ir.Value, src: str, dst: str) -> ir.Value:
    v = widen(b, x, src)
    t = compute_type(dst)
    name = "fptosi" if is_signed(dst) else "fptoui"
    fn = declare(b.module, f"llvm.{name}.sat.i{t.width}.{v.type.intrinsic_name}", t, [v.type])
    return b.call(fn, [v])


def _float_to_float(b: ir.IRBuilder, x: ir.Value, src: str, dst: str) -> ir.Value:
    if src == dst:
        return x
    if is_f8(src):  # exact in f32
        return _float_to_float(b, emit_f8_to_f32(b, x, src), "f32", dst)
    if is_f8(dst):  # f16/bf16 widen exactly; f64 rounds to f32 first, as ml_dtypes does
        return emit_to_f8(b, x, dst)
    if dst == "bf16" or (dst == "f16" and src == "bf16"):
        v = _float_to_float(b, x, src, "f32")
        return b.fptrunc(v, compute_type(dst))
    to = compute_type(dst)
    return b.fpext(x, to) if bit_width(src) < bit_width(dst) else b.fptrunc(x, to)


def _to_pred(b: ir.IRBuilder, x: ir.Value, src: str, dst: str) -> ir.Value:
    if is_float(src):
        v = widen(b, x, src)
        return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
    return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))


def _from_pred_to_int(b: ir.IRBuilder, x: ir.Value, src: str, dst: str) -> ir.Value:
    return b.zext(x, compute_type(dst))


Converter = Callable[[ir.IRBuilder, ir.Value, str, str], ir.Value]
_CONVERT: dict[tuple[str, str], Converter] = {
    ("pred", "int"): _from_pred_to_int,
    ("pred", "float"): _int_to_float,  # pred is unsigned: uitofp
    ("int", "pred"): _to_pred,
    ("int", "int"): _resize_int,
    ("int", "float"): _int_to_float,
    ("float", "pred"): _to_pred,
    ("float", "int"): _float_to_int,
    ("float", "float"): _float_to_float,
}


def emit_convert(b: ir.IRBuilder, x: ir.Value, src: str, dst: str) -> ir.Value:
    """``x`` (compute type of ``src``) converted to element type ``dst`` with XLA's rules."""
    if src == dst:
        return x
    return _CONVERT[(_kind(src), _kind(dst))](b, x, src, dst)


@elemental("convert", widen=False)
def _convert(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return emit_convert(ctx.b, ops[0], ctx.operand_et(0), ctx.et)


@elemental("bitcast-convert", widen=False)
def _bitcast_convert(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    b, x = ctx.b, ops[0]
    src, dst = ctx.operand_et(0), ctx.et
    if bit_width(src) != bit_width(dst):
        raise HloUnsupportedError(
            f"bitcast-convert '{ctx.inst.name}' from {src} to {dst} changes the bit width; only equal "
            "widths have elemental code generation", ctx.inst.location)
    if src == dst:
        return x
    if is_pred(src):  # a pred occupies one byte holding 0 or 1
        x = b.zext(x, I8)
    if is_pred(dst):
        return b.icmp_unsigned("!=", b.bitcast(x, I8), ir.Constant(I8, 0))
    return b.bitcast(x, compute_type(dst))


@elemental("is-finite")
def _is_finite(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    b, x = ctx.b, ops[0]
    return b.fcmp_ordered("<", intrinsic(b, "fabs", [x]), ir.Constant(x.type, float("inf")))


@elemental("reduce-precision")
def _reduce_precision(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    e_bits, m_bits = int(ctx.inst.attr("exponent_bits")), int(ctx.inst.attr("mantissa_bits"))
    return emit_reduce_precision(ctx.b, ops[0], e_bits, m_bits)


def emit_reduce_precision(b: ir.IRBuilder, x: ir.Value, exponent_bits: int, mantissa_bits: int) -> ir.Value:
    """XLA's reduce-precision of an f32/f64 value: round the mantissa to nearest even, then
    overflow to ±inf and flush values below the smallest normal to ±0; NaN stays NaN."""
    src_m, src_e, width = (52, 11, 64) if x.type == F64 else (23, 8, 32)
    it = ir.IntType(width)
    bits = b.bitcast(x, it)
    if mantissa_bits < src_m:
        shift = src_m - mantissa_bits
        last_kept = b.and_(b.lshr(bits, ir.Constant(it, shift)), ir.Constant(it, 1))
        bias = b.add(ir.Constant(it, (1 << (shift - 1)) - 1), last_kept)
        bits = b.and_(b.add(bits, bias), int_const(it, ~((1 << shift) - 1)))
    if exponent_bits < src_e:
        sign = b.and_(bits, int_const(it, 1 << (width - 1)))
        field = b.and_(b.lshr(bits, ir.Constant(it, src_m)), ir.Constant(it, (1 << src_e) - 1))
        old_bias, new_bias = (1 << (src_e - 1)) - 1, (1 << (exponent_bits - 1)) - 1
        overflow = b.icmp_unsigned(">", field, ir.Constant(it, old_bias + new_bias))
        underflow = b.icmp_unsigned("<=", field, ir.Constant(it, old_bias - new_bias))
        inf = b.or_(sign, int_const(it, ((1 << src_e) - 1) << src_m))
        bits = b.select(overflow, inf, b.select(underflow, sign, bits))
    return b.select(is_nan(b, x), x, b.bitcast(bits, x.type))


__all__ = ["emit_convert", "emit_reduce_precision"]
