"""Elemental emitters of arithmetic, bitwise, shift, compare, select and clamp ops.

Integer semantics follow XLA (and the reference interpreter): arithmetic wraps; ``x / 0``
is -1 (all ones when unsigned), ``x % 0`` is ``x``, ``INT_MIN / -1`` is ``INT_MIN`` and
``INT_MIN % -1`` is 0; shifts by an amount >= the bit width (read as unsigned) give 0, or
the sign fill for an arithmetic right shift. ``pred`` arithmetic is boolean: add is or,
subtract is xor, multiply is and. Float maximum/minimum propagate NaN (the first NaN
operand) and otherwise return the second operand on ties, as the interpreter (numpy) does:
``max(+0, -0)`` is ``-0``. XLA's legacy ``EmitFloatMax`` returns the first operand on ties
and its MLIR emitters use ``llvm.maximum`` (+0 > -0), so only the sign of a zero result
can differ from XLA.
"""
from __future__ import annotations

from llvmlite import ir

from .table import (OpContext, elemental, int_const, intrinsic, is_float, is_nan, is_pred, widen)
from ..llvm_types import UnsupportedElementType, is_signed

_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


# ---- max / min, shared with clamp -----------------------------------------------------------

def emit_max(b: ir.IRBuilder, x: ir.Value, y: ir.Value, et: str) -> ir.Value:
    """``maximum`` of two values of element type ``et`` (in arithmetic types), as the interpreter has it."""
    if is_float(et):
        take_x = b.or_(b.fcmp_ordered(">", x, y), is_nan(b, x))
    elif is_signed(et):
        take_x = b.icmp_signed(">=", x, y)
    else:
        take_x = b.icmp_unsigned(">=", x, y)
    return b.select(take_x, x, y)


def emit_min(b: ir.IRBuilder, x: ir.Value, y: ir.Value, et: str) -> ir.Value:
    """``minimum`` of two values of element type ``et`` (in arithmetic types), as the interpreter has it."""
    if is_float(et):
        take_x = b.or_(b.fcmp_ordered("<", x, y), is_nan(b, x))
    elif is_signed(et):
        take_x = b.icmp_signed("<=", x, y)
    else:
        take_x = b.icmp_unsigned("<=", x, y)
    return b.select(take_x, x, y)


@elemental("maximum")
def _maximum(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return emit_max(ctx.b, ops[0], ops[1], ctx.operand_et(0))


@elemental("minimum")
def _minimum(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return emit_min(ctx.b, ops[0], ops[1], ctx.operand_et(0))


@elemental("clamp")
def _clamp(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    lo, x, hi = ops
    et = ctx.operand_et(1)
    return emit_min(ctx.b, emit_max(ctx.b, x, lo, et), hi, et)


# ---- add, subtract, multiply ------------------------------------------------------------------

def _arith(float_op: str, int_op: str, pred_op: str):
    def fn(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
        et = ctx.operand_et(0)
        name = float_op if is_float(et) else pred_op if is_pred(et) else int_op
        return getattr(ctx.b, name)(ops[0], ops[1])
    return fn


elemental("add")(_arith("fadd", "add", "or_"))
elemental("subtract")(_arith("fsub", "sub", "xor"))
elemental("multiply")(_arith("fmul", "mul", "and_"))


# ---- divide, remainder (integer special cases) --------------------------------------------------

def _no_pred(ctx: OpContext) -> None:
    if is_pred(ctx.operand_et(0)):
        raise UnsupportedElementType(f"{ctx.inst.opcode} '{ctx.inst.name}' on pred has no code generation")


def _int_div_parts(ctx: OpContext, a: ir.Value, d: ir.Value):
    """(divisor is zero, INT_MIN / -1 overflow or None, a divisor safe to divide by)."""
    b, t = ctx.b, a.type
    zero = b.icmp_unsigned("==", d, ir.Constant(t, 0))
    ovf = None
    bad = zero
    if is_signed(ctx.operand_et(0)):
        int_min = int_const(t, 1 << (t.width - 1))
        ovf = b.and_(b.icmp_signed("==", a, int_min), b.icmp_signed("==", d, int_const(t, -1)))
        bad = b.or_(zero, ovf)
    return zero, ovf, b.select(bad, ir.Constant(t, 1), d)


@elemental("divide")
def _divide(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    b, (x, y) = ctx.b, ops
    if is_float(ctx.operand_et(0)):
        return b.fdiv(x, y)
    _no_pred(ctx)
    zero, ovf, safe = _int_div_parts(ctx, x, y)
    if ovf is None:
        q = b.udiv(x, safe)
    else:
        q = b.select(ovf, x, b.sdiv(x, safe))
    return b.select(zero, int_const(x.type, -1), q)


@elemental("remainder")
def _remainder(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    b, (x, y) = ctx.b, ops
    if is_float(ctx.operand_et(0)):
        # frem lowers to an inexact x - trunc(x/y)*y on the GPU; fmod is exact everywhere.
        return ctx.target.math(b, "fmod", [x, y])
    _no_pred(ctx)
    zero, ovf, safe = _int_div_parts(ctx, x, y)
    if ovf is None:
        r = b.urem(x, safe)
    else:
        r = b.select(ovf, ir.Constant(x.type, 0), b.srem(x, safe))
    return b.select(zero, x, r)


# ---- unary integer/float ops ------------------------------------------------------------------

@elemental("abs")
def _abs(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    b, x, et = ctx.b, ops[0], ctx.operand_et(0)
    if is_float(et):
        return intrinsic(b, "fabs", [x])
    if not is_signed(et):
        return x
    return b.select(b.icmp_signed("<", x, ir.Constant(x.type, 0)), b.neg(x), x)


@elemental("negate")
def _negate(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return ctx.b.fneg(ops[0]) if is_float(ctx.operand_et(0)) else ctx.b.neg(ops[0])


@elemental("sign")
def _sign(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    b, x, et = ctx.b, ops[0], ctx.operand_et(0)
    t = x.type
    if is_float(et):
        # ±0 and NaN are their own sign; everything else is ±1 with x's sign.
        keep = b.or_(b.fcmp_unordered("==", x, ir.Constant(t, 0.0)), is_nan(b, x))
        return b.select(keep, x, intrinsic(b, "copysign", [ir.Constant(t, 1.0), x]))
    if is_pred(et):
        return x
    zero = ir.Constant(t, 0)
    if not is_signed(et):
        return b.zext(b.icmp_unsigned("!=", x, zero), t)
    positive = b.zext(b.icmp_signed(">", x, zero), t)
    negative = b.zext(b.icmp_signed("<", x, zero), t)
    return b.sub(positive, negative)


@elemental("not")
def _not(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return ctx.b.not_(ops[0])


@elemental("popcnt")
def _popcnt(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return intrinsic(ctx.b, "ctpop", [ops[0]])


@elemental("count-leading-zeros")
def _clz(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    # is_zero_poison = false: clz(0) is the bit width.
    fn_args = [ops[0], ir.Constant(ir.IntType(1), 0)]
    return intrinsic(ctx.b, "ctlz", fn_args)


@elemental("copy", widen=False)
def _copy(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return ops[0]


@elemental("real", widen=False)
def _real(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return ops[0]  # complex operands are refused before dispatch


@elemental("imag", widen=False)
def _imag(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return ir.Constant(ops[0].type, 0.0)


# ---- bitwise, mulhi, shifts -------------------------------------------------------------------

elemental("and")(lambda ctx, ops: ctx.b.and_(ops[0], ops[1]))
elemental("or")(lambda ctx, ops: ctx.b.or_(ops[0], ops[1]))
elemental("xor")(lambda ctx, ops: ctx.b.xor(ops[0], ops[1]))


@elemental("mulhi")
def _mulhi(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    """The high half of the double-width product."""
    b, (x, y) = ctx.b, ops
    t = x.type
    wide = ir.IntType(2 * t.width)
    ext = b.sext if is_signed(ctx.operand_et(0)) else b.zext
    product = b.mul(ext(x, wide), ext(y, wide))
    return b.trunc(b.lshr(product, ir.Constant(wide, t.width)), t)


def _shift(kind: str):
    def fn(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
        b, (x, amount) = ctx.b, ops
        t = x.type
        width = ir.Constant(t, t.width)
        oob = b.icmp_unsigned(">=", amount, width)
        if kind == "ashr":  # shifting by width-1 gives the sign fill
            return b.ashr(x, b.select(oob, ir.Constant(t, t.width - 1), amount))
        safe = b.select(oob, ir.Constant(t, 0), amount)
        shifted = b.shl(x, safe) if kind == "shl" else b.lshr(x, safe)
        return b.select(oob, ir.Constant(t, 0), shifted)
    return fn


elemental("shift-left")(_shift("shl"))
elemental("shift-right-logical")(_shift("lshr"))
elemental("shift-right-arithmetic")(_shift("ashr"))


# ---- compare, select ----------------------------------------------------------------------------

def total_order_key(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """A signed integer whose order is XLA's TOTALORDER: -NaN < -inf < ... < -0 < +0 < ... < +NaN."""
    width = x.type.width if isinstance(x.type, ir.IntType) else {"half": 16, "bfloat": 16, "float": 32,
                                                                 "double": 64}[str(x.type)]
    it = ir.IntType(width)
    k = b.bitcast(x, it)
    flipped = b.xor(k, int_const(it, (1 << (width - 1)) - 1))
    return b.select(b.icmp_signed("<", k, ir.Constant(it, 0)), flipped, k)


@elemental("compare", widen=False)
def _compare(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    b, (x, y) = ctx.b, ops
    et = ctx.operand_et(0)
    op = _CMP[ctx.inst.comparison_direction]
    ctype = ctx.inst.comparison_type
    if is_float(et):
        if ctype == "TOTALORDER":  # on the raw bits of the operand type: no widening
            return b.icmp_signed(op, total_order_key(b, x), total_order_key(b, y))
        x, y = widen(b, x, et), widen(b, y, et)
        # NaN is unequal to everything; every other relation with a NaN is false.
        return b.fcmp_unordered(op, x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
    signed = is_signed(et)
    if ctype == "UNSIGNED":
        signed = False
    elif ctype == "SIGNED" and not is_pred(et):
        signed = True
    return b.icmp_signed(op, x, y) if signed else b.icmp_unsigned(op, x, y)


@elemental("select", widen=False)
def _select(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    return ctx.b.select(ops[0], ops[1], ops[2])
