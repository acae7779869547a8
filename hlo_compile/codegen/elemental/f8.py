"""8-bit floats in LLVM IR: held as their raw ``i8`` bits, decoded to f32 for arithmetic and
encoded back after every op (LLVM has no 8-bit float type).

Encoding rounds to nearest even from f32, bit-exactly as ml_dtypes (and the interpreter, which
computes with ml_dtypes) does; an f64 is first rounded to f32, as ml_dtypes does: types without infinity (``fn``, ``fnuz``)
turn an overflow, an infinity and a NaN into NaN; ``fnuz`` types have no -0 (a negative
value that rounds to zero is +0) and one NaN (0x80); the others keep the sign of a NaN.
Decoding is exact. ``f8e8m0fnu`` (exponent only, no sign) is not handled.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..llvm_types import F32, F64, I8, I32


@dataclass(frozen=True)
class F8Format:
    exponent_bits: int
    mantissa_bits: int
    bias: int
    inf_bits: int | None      # the encoding of +inf (None: the type has none)
    nan_bits: int             # the NaN written for a NaN (or overflow without infinity)
    fnuz: bool = False        # no -0; 0x80 is the one NaN

    @property
    def max_finite_bits(self) -> int:
        if self.fnuz:
            return 0x7F
        if self.inf_bits is not None:
            return self.inf_bits - 1
        return self.nan_bits - 1  # e4m3fn: 0x7f is NaN, 0x7e = 448


F8_FORMATS: dict[str, F8Format] = {
    "f8e4m3fn": F8Format(4, 3, 7, None, 0x7F),
    "f8e5m2": F8Format(5, 2, 15, 0x7C, 0x7E),
    "f8e4m3": F8Format(4, 3, 7, 0x78, 0x7C),
    "f8e3m4": F8Format(3, 4, 3, 0x70, 0x78),
    "f8e4m3fnuz": F8Format(4, 3, 8, None, 0x80, fnuz=True),
    "f8e5m2fnuz": F8Format(5, 2, 16, None, 0x80, fnuz=True),
    "f8e4m3b11fnuz": F8Format(4, 3, 11, None, 0x80, fnuz=True),
}


def _c(t: ir.IntType, v: int) -> ir.Constant:
    return ir.Constant(t, v)


def emit_f8_to_f32(b: ir.IRBuilder, bits: ir.Value, et: str) -> ir.Value:
    """The f32 value of the ``i8`` bits of an ``et`` element (exact)."""
    f = F8_FORMATS[et]
    x = b.zext(bits, I32)
    sign = b.and_(x, _c(I32, 0x80))
    mag = b.and_(x, _c(I32, 0x7F))
    exp = b.lshr(mag, _c(I32, f.mantissa_bits))
    man = b.and_(mag, _c(I32, (1 << f.mantissa_bits) - 1))
    # normal: rebias the exponent, move the mantissa to f32's top bits
    normal_bits = b.or_(b.shl(b.add(exp, _c(I32, 127 - f.bias)), _c(I32, 23)),
                        b.shl(man, _c(I32, 23 - f.mantissa_bits)))
    normal = b.bitcast(normal_bits, F32)
    # subnormal: man * 2^(1 - bias - mantissa_bits), exact in f32
    scale = ir.Constant(F32, 2.0 ** (1 - f.bias - f.mantissa_bits))
    subnormal = b.fmul(b.uitofp(man, F32), scale)
    value = b.select(b.icmp_unsigned("==", exp, _c(I32, 0)), subnormal, normal)
    if f.inf_bits is not None:
        value = b.select(b.icmp_unsigned("==", mag, _c(I32, f.inf_bits)), ir.Constant(F32, float("inf")), value)
        is_nan = b.icmp_unsigned(">", mag, _c(I32, f.inf_bits))
    elif f.fnuz:
        is_nan = b.icmp_unsigned("==", x, _c(I32, 0x80))
    else:
        is_nan = b.icmp_unsigned("==", mag, _c(I32, f.nan_bits))
    value = b.select(is_nan, ir.Constant(F32, float("nan")), value)
    signed = b.or_(b.bitcast(value, I32), b.shl(sign, _c(I32, 24)))
    out = b.bitcast(signed, F32)
    return out if not f.fnuz else b.select(is_nan, ir.Constant(F32, float("nan")), out)


def emit_to_f8(b: ir.IRBuilder, value: ir.Value, et: str) -> ir.Value:
    """The ``i8`` bits of ``value`` (a float type) rounded to ``et``, nearest even (an f64
    through f32, as ml_dtypes)."""
    f = F8_FORMATS[et]
    if value.type == F64:
        value = b.fptrunc(value, F32)
    elif value.type != F32:
        value = b.fpext(value, F32)
    total, man_in, bias_in, t = 32, 23, 127, I32
    x = b.bitcast(value, t)
    sign = b.trunc(b.lshr(x, _c(t, total - 8)), I8)
    sign = b.and_(sign, _c(I8, 0x80))
    mag = b.and_(x, _c(t, (1 << (total - 1)) - 1))
    exp_mask = ((1 << (total - 1 - man_in)) - 1)
    exp_in = b.lshr(mag, _c(t, man_in))
    man = b.and_(mag, _c(t, (1 << man_in) - 1))
    is_nan = b.icmp_unsigned(">", mag, _c(t, exp_mask << man_in))
    is_inf = b.icmp_unsigned("==", mag, _c(t, exp_mask << man_in))
    # the significand with its implicit bit, and the target's biased exponent
    full = b.select(b.icmp_unsigned("==", exp_in, _c(t, 0)), man, b.or_(man, _c(t, 1 << man_in)))
    e_unbiased = b.sub(b.select(b.icmp_unsigned("==", exp_in, _c(t, 0)), _c(t, 1), exp_in), _c(t, bias_in))
    e_target = b.add(e_unbiased, _c(t, f.bias))  # may be "negative" (wrapped): compare signed
    # far beyond the largest finite value: overflow without shifting (keeps the shift in range)
    huge = b.icmp_signed(">", e_target, _c(t, (1 << f.exponent_bits) + 1))
    normal = b.icmp_signed(">=", e_target, _c(t, 1))
    # normal: (e_target - 1) << man_in + full == e_target << man_in | man; subnormal: full itself
    packed = b.select(normal, b.add(b.shl(b.sub(e_target, _c(t, 1)), _c(t, man_in)), full), full)
    extra = b.select(normal, _c(t, 0), b.sub(_c(t, 1), e_target))  # subnormal: the exponent deficit
    shift = b.add(_c(t, man_in - f.mantissa_bits), extra)
    too_far = b.icmp_unsigned(">=", shift, _c(t, total - 1))
    shift = b.select(too_far, _c(t, total - 2), shift)
    q = b.lshr(packed, shift)
    rem = b.sub(packed, b.shl(q, shift))
    half = b.shl(_c(t, 1), b.sub(shift, _c(t, 1)))
    round_up = b.or_(b.icmp_unsigned(">", rem, half),
                     b.and_(b.icmp_unsigned("==", rem, half), b.icmp_unsigned("!=", b.and_(q, _c(t, 1)), _c(t, 0))))
    q = b.add(q, b.zext(round_up, t))
    q = b.select(too_far, _c(t, 0), q)
    overflow = b.or_(huge, b.icmp_unsigned(">", q, _c(t, f.max_finite_bits)))
    overflow_bits = f.inf_bits if f.inf_bits is not None else f.nan_bits
    qbits = b.trunc(b.select(overflow, _c(t, overflow_bits), q), I8)
    qbits = b.select(is_inf, _c(I8, overflow_bits), qbits)
    if f.fnuz:
        # no -0: a zero result is +0; every NaN (and overflow, infinity) is the unsigned 0x80
        nan_like = b.or_(is_nan, b.or_(is_inf, overflow))
        signed = b.select(b.icmp_unsigned("==", qbits, _c(I8, 0)), qbits, b.or_(qbits, sign))
        return b.select(nan_like, _c(I8, 0x80), signed)
    out = b.or_(qbits, sign)
    return b.select(is_nan, b.or_(_c(I8, f.nan_bits), sign), out)
