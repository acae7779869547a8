"""Elementwise ops: unary/binary arithmetic, bitwise, shifts, compare, select, clamp,
convert, bitcast-convert, reduce-precision, complex parts. Narrow floats compute in f32 and
round to the result type after every op, as XLA does."""
from __future__ import annotations

import numpy as np

from ..hlo.element_types import bit_width, is_complex, is_float
from ..hlo.errors import HloUnsupportedError
from . import complex_math
from .numerics import (bits_view, compute, convert, dtype_of, int_limits, is_narrow_float, kind, result,
                       total_order_key)
from .registry import op
from .special import erf as _erf


def _et(inst, i: int | None = None) -> str:
    return inst.shape.element_type if i is None else inst.operands[i].shape.element_type


def _is_int(et: str) -> bool:
    return kind(et) in ("signed", "unsigned")


# ---- unary float math ------------------------------------------------------------------

def _not_on_complex(inst) -> HloUnsupportedError:
    where = f" at line {inst.location.line}" if inst.location else ""
    return HloUnsupportedError(f"{inst.opcode} '{inst.name}'{where} on {_et(inst, 0)} values: XLA implements no "
                               f"{inst.opcode} of complex numbers", inst.location)


def _float_unary(fn, opcode: str):
    def handler(ev, inst, ops):
        et = _et(inst, 0)
        if is_complex(et):
            if opcode == "logistic":   # XLA's LogisticExpander: 1 / (1 + exp(-x)), complex ops throughout
                x = np.asarray(ops[0])
                one = np.ones_like(x)
                return result(complex_math.binary("divide", one, one + complex_math.unary("exponential", -x)), et)
            if opcode not in complex_math.UNARY:
                raise _not_on_complex(inst)
            return result(complex_math.unary(opcode, ops[0]), _et(inst))
        x = compute(ops[0], et)
        if isinstance(fn, np.ufunc) and is_narrow_float(et):
            return result(fn(x, out=x), _et(inst))  # x is the f32 copy: no second temporary
        return result(fn(x), _et(inst))
    return handler


def _logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _erf_typed(x):
    return _erf(x).astype(x.dtype)


def _round_afz(x):
    t = np.trunc(x)
    frac = x - t
    return np.where(np.abs(frac) >= 0.5, t + np.sign(x), t).astype(x.dtype)


_FLOAT_UNARY = {
    "exponential": np.exp, "exponential-minus-one": np.expm1, "log": np.log, "log-plus-one": np.log1p,
    "sqrt": np.sqrt, "rsqrt": _rsqrt, "cbrt": np.cbrt, "sine": np.sin, "cosine": np.cos, "tan": np.tan,
    "tanh": np.tanh, "logistic": _logistic, "erf": _erf_typed, "floor": np.floor, "ceil": np.ceil,
    "round-nearest-even": np.rint, "round-nearest-afz": _round_afz, "acos": np.arccos, "asin": np.arcsin,
    "acosh": np.arccosh, "asinh": np.arcsinh, "atanh": np.arctanh, "cosh": np.cosh, "sinh": np.sinh,
    "atan": np.arctan,
}
for _name, _fn in _FLOAT_UNARY.items():
    op(_name)(_float_unary(_fn, _name))


@op("abs")
def _abs(ev, inst, ops):
    et = _et(inst, 0)
    if is_complex(et):
        return result(complex_math.complex_abs(ops[0]), _et(inst))
    return result(np.abs(compute(ops[0], et)), _et(inst))


@op("negate")
def _negate(ev, inst, ops):
    et = _et(inst)
    return result(np.negative(compute(ops[0], et)), et)


@op("sign")
def _sign(ev, inst, ops):
    et = _et(inst)
    x = compute(ops[0], et)
    if is_complex(et):
        return result(complex_math.complex_sign(x), et)
    if is_float(et):
        return result(np.where((x == 0) | np.isnan(x), x, np.sign(x)), et)
    return result(np.sign(x), et)


@op("not")
def _not(ev, inst, ops):
    if _et(inst) == "pred":
        return np.logical_not(ops[0])
    return np.invert(ops[0])


@op("is-finite")
def _is_finite(ev, inst, ops):
    return np.isfinite(compute(ops[0], _et(inst, 0)))


@op("popcnt")
def _popcnt(ev, inst, ops):
    et = _et(inst)
    x = np.asarray(ops[0])
    if bit_width(et) < 8:
        x = (x.astype(np.int64) & ((1 << bit_width(et)) - 1)).astype(np.uint8)
    b = np.asarray(x, order="C").reshape(-1).view(np.uint8).reshape(x.shape + (x.dtype.itemsize,))
    table = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)
    return result(table[b].sum(axis=-1), et)


@op("count-leading-zeros")
def _clz(ev, inst, ops):
    et = _et(inst)
    bits = bit_width(et)
    u = np.asarray(ops[0]).astype(np.int64) if bits < 8 else bits_view(np.asarray(ops[0]), et)
    u = np.asarray(u).astype(np.uint64) & np.uint64((1 << bits) - 1) if bits < 64 else u.astype(np.uint64)
    count = np.zeros(u.shape, dtype=np.int64)
    seen = np.zeros(u.shape, dtype=bool)
    for b in range(bits - 1, -1, -1):
        seen |= ((u >> np.uint64(b)) & np.uint64(1)).astype(bool)
        count += ~seen
    return result(count, et)


@op("real")
def _real(ev, inst, ops):
    return result(np.real(ops[0]), _et(inst))


@op("imag")
def _imag(ev, inst, ops):
    return result(np.imag(ops[0]), _et(inst))


@op("complex")
def _complex(ev, inst, ops):
    return result(np.asarray(ops[0]) + 1j * np.asarray(ops[1]), _et(inst))


# ---- binary arithmetic --------------------------------------------------------------------

_COMPLEX_BINARY = ("add", "subtract", "multiply", "divide", "power", "atan2", "maximum", "minimum")


def _complex_binary(inst, a, b) -> np.ndarray:
    if inst.opcode in ("add", "subtract"):
        return np.add(a, b) if inst.opcode == "add" else np.subtract(a, b)
    if inst.opcode in ("maximum", "minimum"):
        return complex_math.select_max_min(a, b, inst.opcode == "maximum")
    if inst.opcode not in _COMPLEX_BINARY:
        raise _not_on_complex(inst)
    return complex_math.binary(inst.opcode, a, b)


def _binary(float_fn, int_fn=None):
    int_fn = int_fn or float_fn

    def handler(ev, inst, ops):
        et = _et(inst, 0)
        a, b = compute(ops[0], et), compute(ops[1], et)
        if is_complex(et):
            return result(_complex_binary(inst, a, b), _et(inst))
        if et == "pred" or _is_int(et):
            return result(int_fn(a, b, et), _et(inst))
        if isinstance(float_fn, np.ufunc) and is_narrow_float(et) and a.shape == np.broadcast_shapes(a.shape, b.shape):
            out = float_fn(a, b, out=a)  # a is the f32 copy of a narrow float: computed in place
            del b
            return result(out, _et(inst))
        return result(float_fn(a, b), _et(inst))
    return handler


def _float_pow(a, b):
    """``pow`` with C99's special cases, as LLVM's pow and libdevice give them: numpy's vector
    loop and its scalar path disagree on some (``(-inf) ** 0.5`` is NaN from one, inf from the
    other), so they are set here: a base of -inf or -0 with a non-integer or even exponent acts
    as +inf or +0, an odd integer exponent keeps the sign; ``x ** 0`` and ``1 ** y`` are 1, and
    ``(-1) ** ±inf`` is 1."""
    a, b = np.asarray(a), np.asarray(b)
    out = np.asarray(np.power(a, b))
    if out.dtype.kind == "c":
        return out
    a, b = np.broadcast_to(a, out.shape), np.broadcast_to(b, out.shape)
    with np.errstate(all="ignore"):
        odd = np.isfinite(b) & (np.floor(b) == b) & (np.fmod(b, 2) != 0)
        neg_inf = np.isneginf(a) & ~np.isnan(b)
        neg_zero = (a == 0) & np.signbit(a) & ~np.isnan(b)
        big = np.where(b > 0, np.inf, 0.0)   # (-inf) ** b
        small = np.where(b > 0, 0.0, np.inf)  # (-0) ** b
        fixed = np.where(neg_inf, np.where(odd, -big, big), np.where(neg_zero, np.where(odd, -small, small), out))
        fixed = np.where((b == 0) | (a == 1) | ((a == -1) & np.isinf(b)), 1.0, fixed)
    return fixed.astype(out.dtype)


def _int_div_parts(a, b, et):
    """XLA's special cases of integer division: divisor zero, and (signed) INT_MIN / -1.
    Returns (zero mask, overflow mask, safe divisor, truncated remainder)."""
    zero = b == 0
    if kind(et) == "signed":
        lo, _ = int_limits(et)
        ovf = (a == lo) & (b == -1)
    else:
        ovf = np.zeros(np.shape(zero), dtype=bool)
    sb = np.where(zero | ovf, np.ones((), a.dtype), b).astype(a.dtype)
    return zero, ovf, sb, np.fmod(a, sb)


def _int_div(a, b, et):
    zero, ovf, sb, r = _int_div_parts(a, b, et)
    q = (a - r) // sb
    all_ones = np.array(-1).astype(a.dtype) if kind(et) == "signed" else np.array(np.iinfo(a.dtype).max, a.dtype)
    q = np.where(zero, all_ones, q)
    if kind(et) == "signed":
        q = np.where(ovf, a, q)
    return q


def _int_rem(a, b, et):
    zero, ovf, _, r = _int_div_parts(a, b, et)
    r = np.where(zero, a, r)
    return np.where(ovf, np.zeros((), a.dtype), r)


def _int_pow(a, b, et):
    """Exponentiation by squaring in the integer type (wrapping); negative exponents give
    1 for a base of 1 and 0 otherwise, as XLA's elemental emitter does."""
    a = np.asarray(a)
    b = np.asarray(b)
    acc = np.ones(np.broadcast(a, b).shape, dtype=a.dtype)
    base = np.broadcast_to(a, acc.shape).copy()
    e = np.broadcast_to(b, acc.shape).astype(np.int64 if kind(et) == "signed" else np.uint64)
    neg = e < 0
    e = np.where(neg, 0, e)
    for _ in range(bit_width(et)):
        odd = (e & 1).astype(bool)
        acc = np.where(odd, acc * base, acc)
        base = base * base
        e = e >> 1
        if not e.any():
            break
    one = np.ones((), a.dtype)
    return np.where(neg, np.where(np.broadcast_to(a, acc.shape) == one, one, np.zeros((), a.dtype)), acc)


def _pred_or_int(fn_bool, fn_int):
    def f(a, b, et):
        return fn_bool(a, b) if et == "pred" else fn_int(a, b)
    return f


op("add")(_binary(np.add, _pred_or_int(np.logical_or, lambda a, b: a + b)))
op("subtract")(_binary(np.subtract, _pred_or_int(np.logical_xor, lambda a, b: a - b)))
op("multiply")(_binary(np.multiply, _pred_or_int(np.logical_and, lambda a, b: a * b)))
op("divide")(_binary(np.divide, _int_div))
op("remainder")(_binary(np.fmod, _int_rem))
op("power")(_binary(_float_pow, _int_pow))
op("atan2")(_binary(np.arctan2, lambda a, b, et: np.arctan2(a, b)))
op("maximum")(_binary(np.maximum, lambda a, b, et: np.maximum(a, b)))
op("minimum")(_binary(np.minimum, lambda a, b, et: np.minimum(a, b)))
op("and")(_binary(None, _pred_or_int(np.logical_and, np.bitwise_and)))
op("or")(_binary(None, _pred_or_int(np.logical_or, np.bitwise_or)))
op("xor")(_binary(None, _pred_or_int(np.logical_xor, np.bitwise_xor)))


def _mulhi64(a, b, signed: bool) -> np.ndarray:
    """High 64 bits of the 128-bit product, from 32-bit limbs (numpy has no 128-bit integer).
    The signed high word is the unsigned one minus ``b`` where ``a < 0`` and ``a`` where ``b < 0``."""
    ua = np.asarray(a).astype(np.uint64)
    ub = np.asarray(b).astype(np.uint64)
    mask, s32 = np.uint64(0xFFFFFFFF), np.uint64(32)
    al, ah, bl, bh = ua & mask, ua >> s32, ub & mask, ub >> s32
    hl, lh = ah * bl, al * bh
    cross = ((al * bl) >> s32) + (hl & mask) + (lh & mask)
    hi = ah * bh + (hl >> s32) + (lh >> s32) + (cross >> s32)
    if signed:
        hi = hi - np.where(np.asarray(a) < 0, ub, np.uint64(0)) - np.where(np.asarray(b) < 0, ua, np.uint64(0))
        return hi.astype(np.int64)
    return hi


@op("mulhi")
def _mulhi(ev, inst, ops):
    et = _et(inst)
    bits = bit_width(et)
    if bits > 32:
        return result(_mulhi64(ops[0], ops[1], kind(et) == "signed"), et)
    wide = np.int64 if kind(et) == "signed" else np.uint64
    p = np.asarray(ops[0]).astype(wide) * np.asarray(ops[1]).astype(wide)
    return result(p >> bits, et)


# ---- shifts -----------------------------------------------------------------------------

def _shift_parts(inst, ops):
    et = _et(inst)
    a = np.asarray(ops[0])
    b = np.asarray(ops[1])
    bits = bit_width(et)
    amount = b.astype(np.int64) if bits < 8 else bits_view(b, et).astype(np.uint64)
    if bits < 8:
        amount = amount & ((1 << bits) - 1)
    oob = amount >= bits
    safe = np.where(oob, 0, amount).astype(a.dtype)
    return et, a, safe, oob


@op("shift-left")
def _shl(ev, inst, ops):
    et, a, s, oob = _shift_parts(inst, ops)
    return result(np.where(oob, np.zeros((), a.dtype), np.left_shift(a, s)), et)


@op("shift-right-logical")
def _shrl(ev, inst, ops):
    et, a, s, oob = _shift_parts(inst, ops)
    if bit_width(et) < 8:
        u = a.astype(np.int64) & ((1 << bit_width(et)) - 1)
        out = np.where(oob, 0, u >> s.astype(np.int64))
        return convert(out.astype(np.int64), "s64", et)
    u = bits_view(a, et)
    out = np.where(oob, np.zeros((), u.dtype), np.right_shift(u, s.astype(u.dtype)))
    return np.asarray(out, order="C").view(a.dtype)


@op("shift-right-arithmetic")
def _shra(ev, inst, ops):
    et, a, s, oob = _shift_parts(inst, ops)
    if bit_width(et) < 8:
        v = a.astype(np.int64)
        if kind(et) == "unsigned":
            v = np.where(v >= (1 << (bit_width(et) - 1)), v - (1 << bit_width(et)), v)
        out = np.where(oob, np.where(v < 0, -1, 0), v >> s.astype(np.int64))
        return convert(out, "s64", et)
    sv = bits_view(a, et, signed=True)
    out = np.where(oob, np.where(sv < 0, np.array(-1, sv.dtype), np.zeros((), sv.dtype)),
                   np.right_shift(sv, s.astype(sv.dtype)))
    return np.asarray(out, order="C").view(a.dtype)


# ---- compare, select, clamp -----------------------------------------------------------------

_CMP = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
        "GE": np.greater_equal}


@op("compare")
def _compare(ev, inst, ops):
    et = _et(inst, 0)
    fn = _CMP[inst.attr("direction")]
    a, b = np.asarray(ops[0]), np.asarray(ops[1])
    if is_complex(et):
        return complex_math.compare(a, b, inst.attr("direction"))
    if is_float(et) and inst.attr("type", None) == "TOTALORDER":
        return fn(total_order_key(a, et), total_order_key(b, et))
    if inst.attr("type", None) == "UNSIGNED" and kind(et) == "signed":
        a, b = bits_view(a, et), bits_view(b, et)
    elif inst.attr("type", None) == "SIGNED" and kind(et) == "unsigned":
        a, b = bits_view(a, et, signed=True), bits_view(b, et, signed=True)
    return fn(compute(a, et), compute(b, et))


@op("select")
def _select(ev, inst, ops):
    return np.where(ops[0], ops[1], ops[2])


@op("clamp")
def _clamp(ev, inst, ops):
    et = _et(inst)
    lo, x, hi = (compute(o, et) for o in ops)
    return result(np.minimum(np.maximum(x, lo), hi), et)


# ---- conversions -------------------------------------------------------------------------------

@op("convert")
def _convert(ev, inst, ops):
    if is_complex(_et(inst, 0)) and not is_complex(_et(inst)):
        raise HloUnsupportedError(_complex_to_real(inst), inst.location)
    return convert(ops[0], _et(inst, 0), _et(inst))


def _complex_to_real(inst) -> str:
    where = f" at line {inst.location.line}" if inst.location else ""
    return (f"convert '{inst.name}'{where} from {_et(inst, 0)} to {_et(inst)}: XLA does not convert complex to "
            "real types (its shape inference: not implemented); use real or imag")


@op("bitcast-convert")
def _bitcast_convert(ev, inst, ops):
    src, dst = _et(inst, 0), _et(inst)
    return bitcast_convert(np.asarray(ops[0]), src, dst, tuple(inst.shape.dimensions))


def bitcast_convert(x: np.ndarray, src: str, dst: str, out_dims: tuple[int, ...]) -> np.ndarray:
    """Reinterpret the bits of ``x``; a width change adds or removes a minor dimension."""
    if bit_width(src) < 8 or bit_width(dst) < 8:
        raise NotImplementedError("bitcast-convert of sub-byte types")
    dt = dtype_of(dst)
    raw = np.asarray(x, order="C")
    return raw.reshape(-1).view(np.uint8).view(dt).reshape(out_dims)


@op("reduce-precision")
def _reduce_precision(ev, inst, ops):
    et = _et(inst)
    e_bits, m_bits = inst.attr("exponent_bits"), inst.attr("mantissa_bits")
    return reduce_precision(np.asarray(ops[0]), et, e_bits, m_bits)


def reduce_precision(x: np.ndarray, et: str, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's reduce-precision: round the mantissa to nearest even, overflow to inf, values
    below the smallest normal of the target flush to zero, NaN stays NaN."""
    wide = np.float64 if et == "f64" else np.float32
    src_m, src_e = (52, 11) if wide == np.float64 else (23, 8)
    utype = np.uint64 if wide == np.float64 else np.uint32
    v = np.asarray(x).astype(wide)
    bits = np.asarray(v, order="C").view(utype).copy()
    one = utype(1)
    if mantissa_bits < src_m:
        shift = utype(src_m - mantissa_bits)
        last = (bits >> shift) & one
        bias = (one << (shift - one)) - one + last
        bits = (bits + bias) & ~((one << shift) - one)
    if exponent_bits < src_e:
        sign = bits & (one << utype(src_m + src_e))
        exp_bias = (1 << (src_e - 1)) - 1
        new_bias = (1 << (exponent_bits - 1)) - 1
        exp = ((bits >> utype(src_m)) & utype((1 << src_e) - 1)).astype(np.int64) - exp_bias
        overflow = exp > new_bias
        underflow = exp <= -new_bias
        inf_bits = utype(((1 << src_e) - 1) << src_m)
        bits = np.where(overflow, sign | inf_bits, np.where(underflow, sign, bits))
    out = np.asarray(bits, order="C").view(wide)
    out = np.where(np.isnan(v), v, out)
    return out.astype(dtype_of(et))
