"""The opcode table of the elemental emitter and the small IR helpers its entries share.

One function per opcode, registered by name (DESIGN §7). An entry receives an ``OpContext``
(builder, target, instruction) and the operands' scalar values in compute types, and
returns the result's value in the result's compute type.

Entries registered with ``widen=True`` compute narrow floats (f16, bf16) in f32: the
dispatcher extends such operands to ``float`` first and rounds a ``float`` result back to
the narrow type afterwards, so every op rounds once per op, as XLA and the interpreter do.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from llvmlite import ir

from ...hlo.ir import HloInstruction
from .f8 import F8_FORMATS, emit_f8_to_f32, emit_to_f8
from ..llvm_types import F32, I1, I8, compute_type, is_float
from ..target import Target

NARROW_FLOATS = frozenset({"f16", "bf16", *F8_FORMATS})


@dataclass(frozen=True)
class OpContext:
    """What an opcode entry may use: the builder, the target and the instruction."""

    b: ir.IRBuilder
    target: Target
    inst: HloInstruction

    @property
    def et(self) -> str:
        """The result's element type."""
        return self.inst.shape.element_type

    def operand_et(self, i: int = 0) -> str:
        return self.inst.operands[i].shape.element_type


OpFn = Callable[[OpContext, list[ir.Value]], ir.Value]


@dataclass(frozen=True)
class OpEntry:
    fn: OpFn
    widen: bool  # narrow float operands arrive as f32; an f32 result is rounded back


OPS: dict[str, OpEntry] = {}


def elemental(*opcodes: str, widen: bool = True) -> Callable[[OpFn], OpFn]:
    """Register ``fn`` as the emitter of every opcode in ``opcodes``."""
    def wrap(fn: OpFn) -> OpFn:
        for name in opcodes:
            if name in OPS:
                raise ValueError(f"elemental opcode {name} registered twice")
            OPS[name] = OpEntry(fn, widen)
        return fn
    return wrap


# ---- small IR helpers ---------------------------------------------------------------------

def is_narrow_float(et: str) -> bool:
    return et in NARROW_FLOATS


def widen(b: ir.IRBuilder, value: ir.Value, et: str) -> ir.Value:
    """``value`` of element type ``et`` in its arithmetic type (f16/bf16/f8 → float)."""
    if et in F8_FORMATS:
        return emit_f8_to_f32(b, value, et) if value.type == I8 else value
    return b.fpext(value, F32) if is_narrow_float(et) else value


def narrow(b: ir.IRBuilder, value: ir.Value, et: str) -> ir.Value:
    """Round an arithmetic-type value back to ``et`` (a no-op unless ``et`` is f16/bf16/f8)."""
    target = compute_type(et)
    if is_narrow_float(et) and value.type != target:
        return emit_to_f8(b, value, et) if et in F8_FORMATS else b.fptrunc(value, target)
    return value


def type_suffix(t: ir.Type) -> str:
    """The overload suffix of an intrinsic name (``f32``, ``f64``, ``i32``...)."""
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return t.intrinsic_name


def declare(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """The function ``name`` of ``module``, declared on first use."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, list(args)), name)
    return fn


def intrinsic(b: ir.IRBuilder, name: str, args: Sequence[ir.Value], ret: ir.Type | None = None) -> ir.Value:
    """Call the overloaded LLVM intrinsic ``llvm.<name>.<type>`` on ``args``.

    Only intrinsics every target lowers may go through here (see target.py); the
    transcendental ones (exp, log, sin, ...) go through ``Target.math``."""
    ret = ret or args[0].type
    full = f"llvm.{name}.{type_suffix(args[0].type)}"
    fn = declare(b.module, full, ret, [a.type for a in args])
    return b.call(fn, list(args))


def int_const(t: ir.IntType, value: int) -> ir.Constant:
    """An integer constant of any width from a Python int (wrapped to the width)."""
    mask = (1 << t.width) - 1
    v = value & mask
    if t.width > 1 and v >> (t.width - 1):
        v -= 1 << t.width
    return ir.Constant(t, v if t.width > 1 else bool(v))


def is_nan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", x, x)


def is_pred(et: str) -> bool:
    return et == "pred"


__all__ = ["OPS", "OpContext", "OpEntry", "elemental", "widen", "narrow", "intrinsic", "declare", "int_const",
           "is_nan", "is_float", "is_pred", "is_narrow_float", "F32", "I1"]
