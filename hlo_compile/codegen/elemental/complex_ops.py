"""Complex arithmetic in LLVM IR: c64/c128 values are literal structs ``{float, float}`` /
``{double, double}`` (real, imaginary), which is also their layout in memory (interleaved, as
XLA stores them).

One function per opcode, registered in ``COMPLEX_OPS``; ``emit_complex_op`` is what the
elemental emitter calls when an operand or the result of an instruction is complex. The
formulas are those XLA emits (read from XLA:CPU's IR, jaxlib 0.10.2; ``interpreter/complex_math.py``
computes the same in numpy), so results agree with XLA to the rounding of the libm/libdevice
calls, special values and signed zeros included: multiply ``(ac - bd, ad + bc)``; divide by
Smith's algorithm with XLA's zero/infinite corner cases; ``abs`` as ``max * sqrt(1 + (min/max)^2)``;
``sign = z / |z|`` (``z`` itself at zero); ``exp``; ``expm1`` with XLA's cosm1 polynomial; ``log``
(``log|z| + i atan2``); ``log1p`` through ``log1p`` of the larger part and of the squared ratio;
``sqrt``/``rsqrt`` through the polar form with XLA's special values; ``sin``/``cos`` from one
``exp``; ``tanh`` in its expm1 form with XLA's limits and ``tan(z) = -i tanh(iz)``; ``power`` in
polar form with its six special cases; ``atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2))`` and
``logistic = 1 / (1 + exp(-z))`` composed of the complex ops above; ``compare`` EQ/NE part by part
and LT/LE/GT/GE, ``maximum``/``minimum`` lexicographically as XLA emits them; ``convert`` between
c64 and c128 and from real types (imaginary part +0). Anything else on complex values is refused
by name.
"""
from __future__ import annotations

from typing import Callable, Sequence

from llvmlite import ir

from ...hlo.element_types import is_complex
from ...hlo.errors import HloUnsupportedError
from ...hlo.ir import HloInstruction
from .arith import emit_max, emit_min
from .convert import emit_convert
from .table import intrinsic
from ..llvm_types import C64, C128, F32, F64
from ..target import Target

COMPONENT = {"c64": "f32", "c128": "f64"}
_STRUCT = {"c64": C64, "c128": C128}
_FLOAT = {"c64": F32, "c128": F64}


class Cx:
    """The builder helpers one complex op needs: parts, composition, float math."""

    def __init__(self, b: ir.IRBuilder, target: Target | None, inst: HloInstruction | None, et: str):
        self.b, self.target, self.inst, self.et = b, target, inst, et
        self.t = _FLOAT[et]

    def re(self, z: ir.Value) -> ir.Value:
        return self.b.extract_value(z, 0)

    def im(self, z: ir.Value) -> ir.Value:
        return self.b.extract_value(z, 1)

    def make(self, re: ir.Value, im: ir.Value) -> ir.Value:
        z = self.b.insert_value(ir.Constant(_STRUCT[self.et], None), re, 0)
        return self.b.insert_value(z, im, 1)

    def c(self, value: float) -> ir.Constant:
        return ir.Constant(self.t, value)

    def const(self, re: float, im: float) -> ir.Constant:
        """The complex constant ``(re, im)``."""
        return ir.Constant(_STRUCT[self.et], [self.c(re), self.c(im)])

    def math(self, name: str, *args: ir.Value) -> ir.Value:
        return self.target.math(self.b, name, list(args))

    def fabs(self, x: ir.Value) -> ir.Value:
        return intrinsic(self.b, "fabs", [x])

    def copysign(self, x: ir.Value, sign: ir.Value) -> ir.Value:
        return intrinsic(self.b, "copysign", [x, sign])

    def sqrt(self, x: ir.Value) -> ir.Value:
        return intrinsic(self.b, "sqrt", [x])

    def oeq(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered("==", x, y)

    def one(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered("!=", x, y)

    def uno(self, x: ir.Value) -> ir.Value:
        return self.b.fcmp_unordered("uno", x, x)

    def sel(self, cond: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(cond, x, y)


ComplexFn = Callable[[Cx, list[ir.Value]], ir.Value]
COMPLEX_OPS: dict[str, ComplexFn] = {}


def complex_op(*names: str) -> Callable[[ComplexFn], ComplexFn]:
    def wrap(fn: ComplexFn) -> ComplexFn:
        for n in names:
            COMPLEX_OPS[n] = fn
        return fn
    return wrap


def _complex_type_of(inst: HloInstruction) -> str:
    for et in [inst.shape.element_type] + [o.shape.element_type for o in inst.operands]:
        if is_complex(et):
            return et
    raise ValueError(f"{inst.opcode} '{inst.name}' has no complex operand or result")


def emit_complex_op(b: ir.IRBuilder, target: Target, inst: HloInstruction, operands: Sequence[ir.Value]) -> ir.Value:
    """The value of elementwise ``inst``, some of whose operands or result are complex."""
    fn = COMPLEX_OPS.get(inst.opcode)
    if fn is None:
        where = f" at line {inst.location.line}" if inst.location else ""
        raise HloUnsupportedError(f"{inst.opcode} '{inst.name}'{where} on complex values has no code generation "
                                  f"(complex ops: {', '.join(sorted(COMPLEX_OPS))})", inst.location)
    return fn(Cx(b, target, inst, _complex_type_of(inst)), list(operands))


def complex_multiply_add(b: ir.IRBuilder, et: str, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
    """``acc + x * y`` on complex values of ``et`` (a dot's or convolution's accumulation step)."""
    cx = Cx(b, None, None, et)
    p = emit_complex_multiply(cx, x, y)
    return cx.make(b.fadd(cx.re(acc), cx.re(p)), b.fadd(cx.im(acc), cx.im(p)))


def complex_zero(et: str) -> ir.Constant:
    t = _FLOAT[et]
    return ir.Constant(_STRUCT[et], [ir.Constant(t, 0.0), ir.Constant(t, 0.0)])


def complex_constant(value: complex, et: str, real_constant: Callable[[float, str], ir.Constant]) -> ir.Constant:
    """The constant of complex element type ``et``; ``real_constant`` makes each part's exact bits."""
    part = COMPONENT[et]
    v = complex(value)
    return ir.Constant(_STRUCT[et], [real_constant(v.real, part), real_constant(v.imag, part)])


# ---- parts, composition, structure ----------------------------------------------------------

complex_op("real")(lambda cx, ops: cx.re(ops[0]))
complex_op("imag")(lambda cx, ops: cx.im(ops[0]))
complex_op("copy")(lambda cx, ops: ops[0])
complex_op("select")(lambda cx, ops: cx.b.select(ops[0], ops[1], ops[2]))


@complex_op("negate")
def _negate(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    return cx.make(cx.b.fneg(cx.re(ops[0])), cx.b.fneg(cx.im(ops[0])))


@complex_op("complex")
def _complex(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    part = COMPONENT[cx.et]
    return cx.make(*(emit_convert(cx.b, v, o.shape.element_type, part) for v, o in zip(ops, cx.inst.operands)))


@complex_op("convert")
def _convert(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    src, dst = cx.inst.operands[0].shape.element_type, cx.inst.shape.element_type
    if not is_complex(dst):
        raise HloUnsupportedError(f"convert '{cx.inst.name}' from {src} to {dst}: XLA does not convert complex "
                                  "to real types (use real/imag)", cx.inst.location)
    part = COMPONENT[dst]
    out = Cx(cx.b, cx.target, cx.inst, dst)
    if is_complex(src):
        return out.make(emit_convert(cx.b, cx.re(ops[0]), COMPONENT[src], part),
                        emit_convert(cx.b, cx.im(ops[0]), COMPONENT[src], part))
    return out.make(emit_convert(cx.b, ops[0], src, part), out.c(0.0))


_ORDERED = {"LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _order(cx: Cx, x: ir.Value, y: ir.Value, direction: str) -> ir.Value:
    """XLA's LT/LE/GT/GE on complex values: ``(re_x == re_y and im_x OP im_y) or re_x OP re_y``
    (ordered compares: false on NaN; ``re_x OP re_y`` alone decides for LE/GE with equal real parts)."""
    b, op = cx.b, _ORDERED[direction]
    same_re = cx.oeq(cx.re(x), cx.re(y))
    return b.or_(b.and_(same_re, b.fcmp_ordered(op, cx.im(x), cx.im(y))), b.fcmp_ordered(op, cx.re(x), cx.re(y)))


@complex_op("compare")
def _compare(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    b, (x, y) = cx.b, ops
    direction = cx.inst.comparison_direction
    if direction == "EQ":
        return b.and_(cx.oeq(cx.re(x), cx.re(y)), cx.oeq(cx.im(x), cx.im(y)))
    if direction == "NE":
        return b.or_(b.fcmp_unordered("!=", cx.re(x), cx.re(y)), b.fcmp_unordered("!=", cx.im(x), cx.im(y)))
    if direction in _ORDERED:
        return _order(cx, x, y, direction)
    raise HloUnsupportedError(f"compare '{cx.inst.name}' direction {direction} is not defined on complex values",
                              cx.inst.location)


@complex_op("maximum", "minimum")
def _max_min(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """``x`` where ``x GE y`` (``LE`` for minimum) in the order above, else ``y``: no NaN propagation."""
    x, y = ops
    return cx.sel(_order(cx, x, y, "GE" if cx.inst.opcode == "maximum" else "LE"), x, y)


# ---- arithmetic -----------------------------------------------------------------------------

@complex_op("add")
def _add(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    x, y = ops
    return cx.make(cx.b.fadd(cx.re(x), cx.re(y)), cx.b.fadd(cx.im(x), cx.im(y)))


@complex_op("subtract")
def _subtract(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    x, y = ops
    return cx.make(cx.b.fsub(cx.re(x), cx.re(y)), cx.b.fsub(cx.im(x), cx.im(y)))


def emit_complex_multiply(cx: Cx, x: ir.Value, y: ir.Value) -> ir.Value:
    b = cx.b
    a, bb, c, d = cx.re(x), cx.im(x), cx.re(y), cx.im(y)
    return cx.make(b.fsub(b.fmul(a, c), b.fmul(bb, d)), b.fadd(b.fmul(a, d), b.fmul(bb, c)))


complex_op("multiply")(lambda cx, ops: emit_complex_multiply(cx, ops[0], ops[1]))


@complex_op("divide")
def _divide(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """Smith's algorithm, then XLA's corner cases where it gives (NaN, NaN)."""
    b = cx.b
    ar, ai, br, bi = cx.re(ops[0]), cx.im(ops[0]), cx.re(ops[1]), cx.im(ops[1])
    zero, one, inf = cx.c(0.0), cx.c(1.0), cx.c(float("inf"))
    r_i = b.fdiv(br, bi)
    den_i = b.fadd(bi, b.fmul(r_i, br))
    i_r = b.fdiv(bi, br)
    den_r = b.fadd(br, b.fmul(i_r, bi))
    br_abs, bi_abs = cx.fabs(br), cx.fabs(bi)
    r_lt_i = b.fcmp_ordered("<", br_abs, bi_abs)
    cr = cx.sel(r_lt_i, b.fdiv(b.fadd(b.fmul(r_i, ar), ai), den_i), b.fdiv(b.fadd(b.fmul(i_r, ai), ar), den_r))
    ci = cx.sel(r_lt_i, b.fdiv(b.fsub(b.fmul(r_i, ai), ar), den_i), b.fdiv(b.fsub(ai, b.fmul(i_r, ar)), den_r))
    result = cx.make(cr, ci)
    # 1: zero denominator, a numerator not all NaN
    zero_den = b.and_(b.and_(cx.oeq(br_abs, zero), cx.oeq(bi_abs, zero)),
                      b.or_(b.not_(cx.uno(ar)), b.not_(cx.uno(ai))))
    signed_inf = cx.copysign(inf, br)
    zero_den_result = cx.make(b.fmul(signed_inf, ar), b.fmul(signed_inf, ai))
    # 2: infinite numerator, finite denominator
    ar_abs, ai_abs = cx.fabs(ar), cx.fabs(ai)
    ar_inf, ai_inf = cx.oeq(ar_abs, inf), cx.oeq(ai_abs, inf)
    inf_num = b.and_(b.or_(ar_inf, ai_inf), b.and_(cx.one(br_abs, inf), cx.one(bi_abs, inf)))
    ar_s = cx.copysign(cx.sel(ar_inf, one, zero), ar)
    ai_s = cx.copysign(cx.sel(ai_inf, one, zero), ai)
    inf_num_result = cx.make(b.fmul(inf, b.fadd(b.fmul(ar_s, br), b.fmul(ai_s, bi))),
                             b.fmul(inf, b.fsub(b.fmul(ai_s, br), b.fmul(ar_s, bi))))
    # 3: finite numerator, infinite denominator
    br_inf, bi_inf = cx.oeq(br_abs, inf), cx.oeq(bi_abs, inf)
    inf_den = b.and_(b.or_(br_inf, bi_inf), b.and_(cx.one(ar_abs, inf), cx.one(ai_abs, inf)))
    br_s = cx.copysign(cx.sel(br_inf, one, zero), br)
    bi_s = cx.copysign(cx.sel(bi_inf, one, zero), bi)
    inf_den_result = cx.make(b.fmul(zero, b.fadd(b.fmul(ar, br_s), b.fmul(ai, bi_s))),
                             b.fmul(zero, b.fsub(b.fmul(ai, br_s), b.fmul(ar, bi_s))))
    both_nan = b.and_(cx.uno(cr), cx.uno(ci))
    fixed = cx.sel(zero_den, zero_den_result, cx.sel(inf_num, inf_num_result, cx.sel(inf_den, inf_den_result, result)))
    return cx.sel(both_nan, fixed, result)


# ---- absolute value and sign ----------------------------------------------------------------

def _abs_parts(cx: Cx, z: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(min, max, 1 + (min/max)^2) of |re|, |im|: |z| = max * sqrt(that), without overflow."""
    b, part = cx.b, COMPONENT[cx.et]
    ar, ai = cx.fabs(cx.re(z)), cx.fabs(cx.im(z))
    hi, lo = emit_max(b, ar, ai, part), emit_min(b, ar, ai, part)
    q = b.fdiv(lo, hi)
    return lo, hi, b.fadd(cx.c(1.0), b.fmul(q, q))


def emit_complex_abs(cx: Cx, z: ir.Value) -> ir.Value:
    lo, hi, s = _abs_parts(cx, z)
    r = cx.b.fmul(hi, cx.sqrt(s))
    return cx.sel(cx.uno(r), lo, r)   # (0,0), (inf,inf), NaN: min


complex_op("abs")(lambda cx, ops: emit_complex_abs(cx, ops[0]))


@complex_op("sign")
def _sign(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """``z / |z|`` part by part, ``z`` itself (its signed zeros kept) where both parts are zero."""
    b, z = cx.b, ops[0]
    re, im = cx.re(z), cx.im(z)
    zero = cx.c(0.0)
    at_zero = b.and_(cx.oeq(re, zero), cx.oeq(im, zero))
    r = emit_complex_abs(cx, z)
    return cx.sel(at_zero, z, cx.make(b.fdiv(re, r), b.fdiv(im, r)))


# ---- exponentials and logarithms --------------------------------------------------------------

@complex_op("exponential")
def _exp(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    e = cx.math("exp", cx.re(ops[0]))
    im = cx.im(ops[0])
    return cx.make(cx.b.fmul(e, cx.math("cos", im)), cx.b.fmul(e, cx.math("sin", im)))


# XLA's cos(x) - 1 for x^2 < 0.61685: x^4 P(x^2) - x^2/2 by Horner's rule in fma (Cephes' coefficients,
# rounded to the component type); cos(x) - 1 above.
_COSM1_COEFFS = (4.737750796424621e-14, -1.147028484342536e-11, 2.087675428708152e-09, -2.755731921499979e-07,
                 2.480158730157055e-05, -0.0013888888888888872, 0.041666666666666664)


def _cosm1(cx: Cx, x: ir.Value) -> ir.Value:
    b = cx.b
    x2 = b.fmul(x, x)
    x4 = b.fmul(x2, x2)
    p = cx.c(_COSM1_COEFFS[0])
    for coeff in _COSM1_COEFFS[1:]:
        p = intrinsic(b, "fma", [p, x2, cx.c(coeff)])
    small = b.fadd(b.fmul(x4, p), b.fmul(x2, cx.c(-0.5)))
    return cx.sel(b.fcmp_ordered(">=", x2, cx.c(0.61685)), b.fadd(cx.math("cos", x), cx.c(-1.0)), small)


@complex_op("exponential-minus-one")
def _expm1(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """``(expm1(a) (cosm1 b + 1) + cosm1 b, (expm1(a) + 1) sin b)``, imaginary part +0 where ``b`` is zero."""
    b = cx.b
    a, bb = cx.re(ops[0]), cx.im(ops[0])
    one = cx.c(1.0)
    em1 = cx.math("expm1", a)
    cm1 = _cosm1(cx, bb)
    real = b.fadd(b.fmul(em1, b.fadd(cm1, one)), cm1)
    imag = cx.sel(cx.oeq(bb, cx.c(0.0)), cx.c(0.0), b.fmul(b.fadd(em1, one), cx.math("sin", bb)))
    return cx.make(real, imag)


@complex_op("log")
def _log(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    z = ops[0]
    angle = cx.math("atan2", cx.im(z), cx.re(z))
    return cx.make(cx.math("log", emit_complex_abs(cx, z)), angle)


@complex_op("log-plus-one")
def _log1p(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """log|1 + z| as ``log1p(hi - 1) + log1p((lo/hi)^2) / 2`` over ``hi, lo = max, min(|a + 1|, |b|)``
    (``a`` itself for ``hi - 1`` where ``a + 1 > |b|``), ``lo`` where that is NaN; angle ``atan2(b, a + 1)``."""
    b, part = cx.b, COMPONENT[cx.et]
    a, bb = cx.re(ops[0]), cx.im(ops[0])
    one = cx.c(1.0)
    a1 = b.fadd(a, one)
    aa1, ab = cx.fabs(a1), cx.fabs(bb)
    hi, lo = emit_max(b, aa1, ab, part), emit_min(b, aa1, ab, part)
    hi_m1 = cx.sel(b.fcmp_ordered(">", a1, ab), a, b.fsub(hi, one))
    ratio = b.fdiv(lo, hi)
    r = b.fadd(b.fmul(cx.c(0.5), cx.math("log1p", b.fmul(ratio, ratio))), cx.math("log1p", hi_m1))
    return cx.make(cx.sel(cx.uno(r), lo, r), cx.math("atan2", bb, a1))


@complex_op("sqrt")
def _sqrt(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    b, z = cx.b, ops[0]
    lo, hi, s = _abs_parts(cx, z)
    r = b.fmul(cx.sqrt(hi), cx.math("pow", s, cx.c(0.25)))
    r = cx.sel(cx.uno(r), lo, r)    # sqrt(|z|)
    a, bb = cx.re(z), cx.im(z)
    t = b.fmul(cx.math("atan2", bb, a), cx.c(0.5))
    cos, sin = cx.math("cos", t), cx.math("sin", t)
    zero, inf, nan = cx.c(0.0), cx.c(float("inf")), cx.c(float("nan"))
    abs_b = cx.fabs(bb)
    real = cx.sel(b.or_(cx.oeq(abs_b, inf), cx.oeq(a, inf)), inf,
                  cx.sel(b.and_(cx.oeq(a, cx.c(float("-inf"))), cx.one(abs_b, inf)), zero, b.fmul(r, cos)))
    imag = cx.sel(b.or_(cx.oeq(abs_b, inf), cx.oeq(a, cx.c(float("-inf")))), cx.copysign(inf, bb),
                  cx.sel(cx.uno(r), nan, cx.sel(cx.oeq(sin, zero), zero, b.fmul(r, sin))))
    return cx.sel(cx.oeq(r, zero), cx.make(zero, zero), cx.make(real, imag))


@complex_op("rsqrt")
def _rsqrt(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    b, z = cx.b, ops[0]
    lo, hi, s = _abs_parts(cx, z)
    rs = b.fmul(cx.math("rsqrt", hi), cx.sqrt(cx.math("rsqrt", s)))
    r = cx.sel(cx.uno(rs), cx.math("rsqrt", lo), rs)
    a, bb = cx.re(z), cx.im(z)
    t = b.fmul(cx.math("atan2", bb, a), cx.c(-0.5))
    cos, sin = cx.math("cos", t), cx.math("sin", t)
    zero, inf, nan = cx.c(0.0), cx.c(float("inf")), cx.c(float("nan"))
    a_zero = cx.copysign(zero, a)
    neg_b_zero = b.fmul(cx.copysign(zero, bb), cx.c(-1.0))
    zero_zero = b.and_(cx.oeq(bb, zero), cx.oeq(a, zero))
    special = b.or_(b.and_(cx.oeq(cx.fabs(bb), inf), cx.uno(a)), cx.oeq(cx.fabs(a), inf))
    real = cx.sel(zero_zero, inf, cx.sel(special, a_zero, b.fmul(r, cos)))
    imag = cx.sel(zero_zero, nan, cx.sel(special, neg_b_zero, b.fmul(r, sin)))
    return cx.make(real, imag)


@complex_op("power")
def _power(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """(a+bi)^(c+di) = |z|^c e^(-d t) (cos q + i sin q), t = atan2(b, a), q = c t + d log|z|, then
    XLA's special cases, the last selected winning: 0^(c >= 0 real) (1 for c = 0, else 0), x^0 = 1,
    1^w = 1, inf^(c > 0 real) = inf, inf^(c < 0 real) = 0."""
    b = cx.b
    a, bb, c, d = cx.re(ops[0]), cx.im(ops[0]), cx.re(ops[1]), cx.im(ops[1])
    zero, one, inf = cx.c(0.0), cx.c(1.0), cx.c(float("inf"))
    r = emit_complex_abs(cx, ops[0])
    t = cx.math("atan2", bb, a)
    coeff = b.fmul(cx.math("pow", r, c), cx.math("exp", b.fmul(b.fneg(d), t)))
    q = b.fadd(b.fmul(c, t), b.fmul(d, cx.math("log", r)))
    result = cx.make(b.fmul(coeff, cx.math("cos", q)), b.fmul(coeff, cx.math("sin", q)))
    c_zero, d_zero, b_zero = cx.oeq(c, zero), cx.oeq(d, zero), cx.oeq(bb, zero)
    unit, origin, infinity = cx.const(1.0, 0.0), cx.const(0.0, 0.0), cx.const(float("inf"), 0.0)
    zero_base = b.and_(b.and_(cx.oeq(r, zero), d_zero), b.fcmp_ordered("<=", zero, c))
    result = cx.sel(zero_base, cx.sel(c_zero, unit, origin), result)
    result = cx.sel(b.and_(c_zero, d_zero), unit, result)
    result = cx.sel(b.and_(cx.oeq(a, one), b_zero), unit, result)
    inf_base = b.and_(cx.oeq(a, inf), b_zero)
    result = cx.sel(b.and_(inf_base, b.and_(d_zero, b.fcmp_ordered(">", c, zero))), infinity, result)
    return cx.sel(b.and_(inf_base, b.and_(d_zero, b.fcmp_ordered("<", c, zero))), origin, result)


@complex_op("atan2")
def _atan2(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2)), every step one of XLA's complex ops (the
    products by 0 and 1 included: they carry NaNs from infinite parts)."""
    y, x = ops
    s = _sqrt(cx, [_add(cx, [emit_complex_multiply(cx, x, x), emit_complex_multiply(cx, y, y)])])
    iy = emit_complex_multiply(cx, cx.const(0.0, 1.0), y)
    return emit_complex_multiply(cx, _log(cx, [_divide(cx, [_add(cx, [x, iy]), s])]), cx.const(0.0, -1.0))


# ---- trigonometric and hyperbolic ---------------------------------------------------------------

def _sin_cos_parts(cx: Cx, z: ir.Value):
    b = cx.b
    a, bb = cx.re(z), cx.im(z)
    e = cx.math("exp", bb)
    half_e = b.fmul(cx.c(0.5), e)
    half_e_neg = b.fdiv(cx.c(0.5), e)
    return cx.math("cos", a), cx.math("sin", a), half_e, half_e_neg


@complex_op("cosine")
def _cos(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    b = cx.b
    cos_a, sin_a, he, hen = _sin_cos_parts(cx, ops[0])
    return cx.make(b.fmul(cos_a, b.fadd(hen, he)), b.fmul(sin_a, b.fsub(hen, he)))


@complex_op("sine")
def _sin(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    b = cx.b
    cos_a, sin_a, he, hen = _sin_cos_parts(cx, ops[0])
    return cx.make(b.fmul(sin_a, b.fadd(he, hen)), b.fmul(cos_a, b.fsub(he, hen)))


def _tanh_parts(cx: Cx, a: ir.Value, bb: ir.Value) -> tuple[ir.Value, ir.Value]:
    """tanh(a + bi) = (e^2a - e^-2a + 2i sin 2b) / (e^2a + e^-2a + 2 cos 2b), through expm1, with XLA's
    limits: +-1 where the exponentials overflow, NaN/0 where sin b is NaN, imaginary +0 where b is zero."""
    b = cx.b
    neg_one, four, zero, inf = cx.c(-1.0), cx.c(4.0), cx.c(0.0), cx.c(float("inf"))
    two_a = b.fadd(a, a)
    e2a_m1 = cx.math("expm1", two_a)
    en2a_m1 = cx.math("expm1", b.fmul(neg_one, two_a))
    real_num = b.fsub(e2a_m1, en2a_m1)
    cos_b, sin_b = cx.math("cos", bb), cx.math("sin", bb)
    four_cos2_b = b.fmul(b.fmul(cos_b, cos_b), four)
    imag_num = b.fmul(four, b.fmul(cos_b, sin_b))
    exp_sum_m2 = b.fadd(e2a_m1, en2a_m1)
    denom = b.fadd(exp_sum_m2, four_cos2_b)
    real = cx.sel(cx.oeq(exp_sum_m2, inf), cx.copysign(neg_one, a), b.fdiv(real_num, denom))
    imag = b.fdiv(imag_num, denom)
    a_inf = cx.oeq(cx.fabs(a), inf)
    sin_nan = cx.uno(imag_num)
    real = cx.sel(b.and_(sin_nan, b.not_(a_inf)), cx.c(float("nan")), real)
    imag = cx.sel(b.or_(cx.oeq(bb, zero), b.and_(a_inf, sin_nan)), zero, imag)
    return real, imag


@complex_op("tanh")
def _tanh(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    return cx.make(*_tanh_parts(cx, cx.re(ops[0]), cx.im(ops[0])))


@complex_op("tan")
def _tan(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """tan(x + iy) = -i tanh(-y + ix)."""
    b, neg_one = cx.b, cx.c(-1.0)
    re, im = _tanh_parts(cx, b.fmul(cx.im(ops[0]), neg_one), cx.re(ops[0]))
    return cx.make(im, b.fmul(re, neg_one))


@complex_op("logistic")
def _logistic(cx: Cx, ops: list[ir.Value]) -> ir.Value:
    """1 / (1 + exp(-z)) in complex ops (XLA's logistic expander)."""
    unit = cx.const(1.0, 0.0)
    e = _exp(cx, [_negate(cx, ops)])
    return _divide(cx, [unit, _add(cx, [unit, e])])


__all__ = ["COMPLEX_OPS", "COMPONENT", "Cx", "emit_complex_op", "emit_complex_abs", "emit_complex_multiply",
           "complex_constant", "complex_multiply_add", "complex_zero"]
