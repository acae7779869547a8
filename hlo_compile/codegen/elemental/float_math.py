"""Elemental emitters of float math: rounding, square roots, transcendental functions, power.

Rounding and square roots use the LLVM intrinsics every target lowers (floor, ceil, rint,
round, sqrt); everything transcendental is a ``Target.math`` call (libdevice ``__nv_*`` on
the GPU, libm on the host), never an LLVM intrinsic such as ``llvm.exp``: those abort the
process on the GPU. Formulas match the reference interpreter: ``rsqrt(x) = 1 / sqrt(x)`` and
``logistic(x) = 1 / (1 + exp(-x))``, each step rounded in the arithmetic type.
"""
from __future__ import annotations

from llvmlite import ir

from .table import I1, OpContext, elemental, intrinsic, is_float, is_pred
from ..llvm_types import UnsupportedElementType, is_signed

# opcode -> libm name (the names Target.math must provide for these ops)
LIBM_UNARY: dict[str, str] = {
    "exponential": "exp", "exponential-minus-one": "expm1", "log": "log", "log-plus-one": "log1p",
    "sine": "sin", "cosine": "cos", "tan": "tan", "tanh": "tanh", "erf": "erf", "cbrt": "cbrt",
    "asin": "asin", "acos": "acos", "atan": "atan", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "sinh": "sinh", "cosh": "cosh",
}
# opcode -> LLVM intrinsic that is safe on every target
SAFE_INTRINSIC_UNARY: dict[str, str] = {
    "floor": "floor", "ceil": "ceil", "round-nearest-even": "rint", "round-nearest-afz": "round",
    "sqrt": "sqrt",
}
# every name emit_scalar_op may pass to Target.math
MATH_FUNCTIONS: frozenset[str] = frozenset(LIBM_UNARY.values()) | {"pow", "atan2", "fmod"}


def _require_float(ctx: OpContext) -> None:
    et = ctx.operand_et(0)
    if not is_float(et):
        raise UnsupportedElementType(f"{ctx.inst.opcode} '{ctx.inst.name}' is defined on floats, not {et}")


def _libm_unary(name: str):
    def fn(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
        _require_float(ctx)
        return ctx.target.math(ctx.b, name, [ops[0]])
    return fn


def _intrinsic_unary(name: str):
    def fn(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
        _require_float(ctx)
        return intrinsic(ctx.b, name, [ops[0]])
    return fn


for _op, _name in LIBM_UNARY.items():
    elemental(_op)(_libm_unary(_name))
for _op, _name in SAFE_INTRINSIC_UNARY.items():
    elemental(_op)(_intrinsic_unary(_name))


@elemental("rsqrt")
def _rsqrt(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    _require_float(ctx)
    x = ops[0]
    return ctx.b.fdiv(ir.Constant(x.type, 1.0), intrinsic(ctx.b, "sqrt", [x]))


@elemental("logistic")
def _logistic(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    _require_float(ctx)
    b, x = ctx.b, ops[0]
    one = ir.Constant(x.type, 1.0)
    e = ctx.target.math(b, "exp", [b.fneg(x)])
    return b.fdiv(one, b.fadd(one, e))


@elemental("atan2")
def _atan2(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    _require_float(ctx)
    return ctx.target.math(ctx.b, "atan2", [ops[0], ops[1]])


@elemental("power")
def _power(ctx: OpContext, ops: list[ir.Value]) -> ir.Value:
    et = ctx.operand_et(0)
    if is_float(et):
        return ctx.target.math(ctx.b, "pow", [ops[0], ops[1]])
    if is_pred(et):
        raise UnsupportedElementType(f"power '{ctx.inst.name}' on pred has no code generation")
    return emit_int_power(ctx.b, ops[0], ops[1], is_signed(et))


def emit_int_power(b: ir.IRBuilder, base: ir.Value, exponent: ir.Value, signed: bool) -> ir.Value:
    """``base ** exponent`` by squaring, wrapping in the integer type. A negative (signed)
    exponent gives 1 for a base of 1 and 0 otherwise, as XLA's elemental emitter does.

    Emitted as a loop over the exponent's bits (at most the bit width, so every bit counts:
    XLA's unrolled version looks only at the low 6 bits). The builder ends in a new block."""
    t = base.type
    zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
    negative = b.icmp_signed("<", exponent, zero) if signed else None
    e0 = b.select(negative, zero, exponent) if signed else exponent
    entry = b.block
    loop = b.append_basic_block("pow.loop")
    done = b.append_basic_block("pow.done")
    b.branch(loop)
    b.position_at_end(loop)
    acc = b.phi(t, "pow.acc")
    sq = b.phi(t, "pow.base")
    e = b.phi(t, "pow.exp")
    acc_next = b.select(b.trunc(e, I1), b.mul(acc, sq), acc)
    sq_next = b.mul(sq, sq)
    e_next = b.lshr(e, one)
    for phi, start, nxt in ((acc, one, acc_next), (sq, base, sq_next), (e, e0, e_next)):
        phi.add_incoming(start, entry)
        phi.add_incoming(nxt, loop)
    b.cbranch(b.icmp_unsigned("==", e_next, zero), done, loop)
    b.position_at_end(done)
    if negative is None:
        return acc_next
    base_is_one = b.zext(b.icmp_signed("==", base, one), t)
    return b.select(negative, base_is_one, acc_next)
