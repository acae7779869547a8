"""The scalar half of the elemental emitter: one HLO elementwise op on scalar LLVM values.

``emit_scalar_op`` dispatches on the opcode through the table of ``elemental_table``
(filled by ``elemental_arith``, ``elemental_math`` and ``elemental_convert``); values are
in compute types (``llvm_types.compute_type``: pred is ``i1``). ``emit_constant_scalar``
makes literal elements and ``emit_call_computation`` inlines a scalar computation (the
``to_apply`` of a reduce or map).

Semantics are XLA's as the reference interpreter encodes them; f16/bf16 arithmetic runs
in f32 and is rounded back after every op. Transcendental functions are ``Target.math``
calls (the names are listed in ``MATH_FUNCTIONS``). Ops with integer powers emit a loop,
so the builder may end in a different basic block than it started in.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Iterator, Sequence

from llvmlite import ir

from ...hlo.dtypes import numpy_dtype
from ...hlo.element_types import is_complex
from ...hlo.errors import HloUnsupportedError
from ...hlo.ir import HloComputation, HloInstruction
from ...hlo.shape import Shape
from . import arith as elemental_arith, convert as elemental_convert, float_math as elemental_math  # noqa: F401  (fill the opcode table)
from .complex_ops import complex_constant, emit_complex_op
from .convert import emit_convert, emit_reduce_precision
from .float_math import MATH_FUNCTIONS
from .table import OPS, OpContext, int_const, narrow, widen
from ..llvm_types import BFLOAT, F16, F32, F64, I1, I8, UnsupportedElementType, compute_type, is_f8
from ..target import Target

__all__ = ["emit_scalar_op", "emit_constant_scalar", "emit_call_computation", "emit_convert",
           "emit_reduce_precision", "MATH_FUNCTIONS", "SCALAR_OPCODES"]

SCALAR_OPCODES: frozenset[str] = frozenset(OPS)


def _where(inst: HloInstruction) -> str:
    loc = inst.location
    return f" at line {loc.line}" if loc is not None else ""


def _check_element_types(inst: HloInstruction) -> None:
    """Refuse f6/f4 (and other types without code generation), naming the op and the type."""
    for et in [inst.shape.element_type] + [o.shape.element_type for o in inst.operands]:
        reason = None
        try:
            compute_type(et)
        except UnsupportedElementType:
            reason = f"{et} has no arithmetic in code generation yet"
        if reason is not None:
            raise UnsupportedElementType(f"{inst.opcode} '{inst.name}'{_where(inst)} on element type {et}: {reason}")


def emit_scalar_op(b: ir.IRBuilder, target: Target, inst: HloInstruction,
                   operands: Sequence[ir.Value]) -> ir.Value:
    """The value of elementwise ``inst`` given its operands' scalar values (compute types)."""
    if any(is_complex(o.shape.element_type) for o in [inst, *inst.operands]):
        _check_element_types(inst)
        return emit_complex_op(b, target, inst, operands)
    entry = OPS.get(inst.opcode)
    if entry is None:
        raise HloUnsupportedError(
            f"the elemental emitter does not implement opcode '{inst.opcode}' (instruction '{inst.name}'"
            f"{_where(inst)})", inst.location)
    _check_element_types(inst)
    if len(operands) != len(inst.operands):
        raise ValueError(f"{inst.opcode} '{inst.name}' has {len(inst.operands)} operands, got {len(operands)} values")
    ctx = OpContext(b, target, inst)
    if not entry.widen:
        return entry.fn(ctx, list(operands))
    values = [widen(b, v, o.shape.element_type) for v, o in zip(operands, inst.operands)]
    return narrow(b, entry.fn(ctx, values), inst.shape.element_type)


# ---- constants ------------------------------------------------------------------------------

def _float_bits(value: Any, et: str) -> int:
    if type(value) is float and et in ("f32", "f64"):  # a Python float: no numpy (issue 17)
        try:  # (C's double -> float conversion, as numpy's astype)
            return struct.unpack("<I", struct.pack("<f", value))[0] if et == "f32" else \
                struct.unpack("<Q", struct.pack("<d", value))[0]
        except OverflowError:  # a finite double beyond f32's range: numpy's astype makes it inf
            pass
    import numpy as np
    dt = numpy_dtype(et)
    raw = np.asarray(value).astype(dt).reshape(())
    return int(raw.view(np.dtype(f"u{dt.itemsize}")))


def _f32_bits_as_double_hex(bits: int) -> str:
    """LLVM writes float constants as the equivalent double: widen exactly, keeping NaN
    payloads and signs (``float(np.float32)`` may quiet a signalling NaN)."""
    sign, exp, man = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exp == 0xFF:
        d = (sign << 63) | (0x7FF << 52) | (man << 29)
    else:
        d = struct.unpack("<Q", struct.pack("<d", struct.unpack("<f", struct.pack("<I", bits))[0]))[0]
    return f"0x{d:016X}"


class _ExactFloat(ir.FormattedConstant):
    """A float constant written from its exact bits in LLVM's hex syntax; prints like any
    ``ir.Constant`` (``float 0x...``), which ``FormattedConstant`` alone does not."""

    def _to_string(self) -> str:
        return f"{self.type} {self.constant}"


def emit_constant_scalar(value: Any, et: str) -> ir.Constant:
    """The constant of element type ``et`` (compute type) for one literal element: a Python
    or numpy scalar (or 0-d array). Float constants keep their exact bits (-0, inf, NaN)."""
    python = type(value) in (bool, int, float)  # (a Python number needs no numpy: issue 17)
    if is_complex(et):
        import numpy as np
        return complex_constant(complex(np.asarray(value).reshape(())), et, emit_constant_scalar)
    t = compute_type(et)
    if t == I1:
        if python:
            return ir.Constant(I1, bool(value))
        import numpy as np
        return ir.Constant(I1, bool(np.asarray(value)))
    if is_f8(et):  # the raw bits of the value rounded as the literal's type
        import numpy as np
        return ir.Constant(I8, int(np.asarray(value).astype(numpy_dtype(et)).view(np.uint8)))
    if isinstance(t, ir.IntType):
        if type(value) in (bool, int):
            return int_const(t, int(value))
        import numpy as np
        return int_const(t, int(np.asarray(value)))
    bits = _float_bits(value, et)
    if t == BFLOAT:
        return _ExactFloat(BFLOAT, f"0xR{bits:04X}")
    if t == F16:
        return _ExactFloat(F16, f"0xH{bits:04X}")
    if t == F32:
        return _ExactFloat(F32, _f32_bits_as_double_hex(bits))
    return _ExactFloat(F64, f"0x{bits:016X}")


# ---- scalar computations -------------------------------------------------------------------

Value = Any  # an ir.Value, or a tuple of Values for a tuple-shaped instruction


def _scalar_literal(inst: HloInstruction) -> Any:
    plain = inst.plain_scalar()
    if plain is not None:  # (no numpy: issue 17)
        return plain
    import numpy as np
    lit = np.asarray(inst.literal)
    if lit.size != 1:
        raise HloUnsupportedError(f"constant '{inst.name}'{_where(inst)} is not a scalar", inst.location)
    return lit.reshape(())


def _same_value(b: ir.IRBuilder, target: Target, inst: HloInstruction, ops: list[Value]) -> Value:
    """bitcast/reshape/broadcast of a one-element value is the value itself; a ``bitcast``
    that changes the element type (same width: XLA's layout passes write JAX's
    ``bitcast-convert`` that way) reinterprets its bits."""
    src = inst.operands[0].shape
    if inst.shape.is_tuple or inst.shape.element_count() != 1:
        raise HloUnsupportedError(f"{inst.opcode} '{inst.name}'{_where(inst)} in a scalar computation must keep "
                                  "one element", inst.location)
    if src.element_type != inst.shape.element_type:
        if inst.opcode != "bitcast":
            raise HloUnsupportedError(f"{inst.opcode} '{inst.name}'{_where(inst)} in a scalar computation "
                                      "changes the element type", inst.location)
        return emit_scalar_op(b, target, _AsBitcastConvert(inst), ops)
    return ops[0]


class _AsBitcastConvert:
    """A view of a type-changing scalar ``bitcast`` as the ``bitcast-convert`` it means."""

    opcode = "bitcast-convert"

    def __init__(self, inst: HloInstruction):
        self._inst = inst

    def __getattr__(self, name: str):
        return getattr(self._inst, name)


def _call(b: ir.IRBuilder, target: Target, inst: HloInstruction, ops: list[Value]) -> Value:
    return _emit_computation(b, target, inst.to_apply, ops)


def _fusion(b: ir.IRBuilder, target: Target, inst: HloInstruction, ops: list[Value]) -> Value:
    """A fusion inside a scalar computation (a reducer or comparator that XLA's passes fused)
    means its fused computation applied to the operands, as a call."""
    return _emit_computation(b, target, inst.fused_computation, ops)


_STRUCTURAL: dict[str, Callable[[ir.IRBuilder, Target, HloInstruction, list[Value]], Value]] = {
    "constant": lambda b, t, inst, ops: emit_constant_scalar(_scalar_literal(inst), inst.shape.element_type),
    "tuple": lambda b, t, inst, ops: tuple(ops),
    "get-tuple-element": lambda b, t, inst, ops: ops[0][inst.tuple_index],
    "call": _call,
    "fusion": _fusion,
    "bitcast": _same_value,
    "reshape": _same_value,
    "broadcast": _same_value,
}


def _emit_computation(b: ir.IRBuilder, target: Target, comp: HloComputation, args: Sequence[Value]) -> Value:
    params = comp.parameters
    if len(args) != len(params):
        raise HloUnsupportedError(f"computation {comp.name} takes {len(params)} arguments, got {len(args)}",
                                  comp.location)
    env: dict[int, Value] = {id(p): a for p, a in zip(params, args)}
    for inst in comp.instructions:
        if inst.opcode == "parameter":
            continue
        ops = [env[id(o)] for o in inst.operands]
        structural = _STRUCTURAL.get(inst.opcode)
        if structural is not None:
            env[id(inst)] = structural(b, target, inst, ops)
        else:
            env[id(inst)] = emit_scalar_op(b, target, inst, ops)
    return env[id(comp.root)]


def _unflatten(shape: Shape, leaves: Iterator[ir.Value]) -> Value:
    if shape.is_tuple:
        return tuple(_unflatten(s, leaves) for s in shape.tuple_shapes)
    return next(leaves)


def _flatten(value: Value) -> list[ir.Value]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _flatten(v)]
    return [value]


def emit_call_computation(b: ir.IRBuilder, target: Target, comp: HloComputation,
                          args: Sequence[ir.Value]) -> list[ir.Value]:
    """Emit scalar computation ``comp`` inline on ``args`` (one value per parameter leaf,
    depth-first) and return the root's values (several for a tuple root, depth-first)."""
    expected = sum(len(list(p.shape.leaves())) for p in comp.parameters)
    if len(args) != expected:
        raise HloUnsupportedError(f"computation {comp.name} takes {expected} scalar arguments, got {len(args)}",
                                  comp.location)
    leaves = iter(args)
    structured = [_unflatten(p.shape, leaves) for p in comp.parameters]
    return _flatten(_emit_computation(b, target, comp, structured))
