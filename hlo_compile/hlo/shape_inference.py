"""Shape inference: the result shape of an instruction from its operands' shapes and its
attributes, following XLA's ShapeInference (``xla/service/shape_inference.cc``).

Results carry the default layout. Ops whose result depends on something the operands do
not say (``reshape``, ``broadcast``, ``convert``, ``iota``, ``custom-call``...) have a rule
that raises ``NotInferable`` (a ``ShapeInferenceError``) asking for a declared shape; the verifier checks those
against their operands separately. Rules live in three modules, by family:
``shape_inference_elementwise`` (elementwise, tuples, tokens, one-device collectives),
``shape_inference_array`` (data movement, gather/scatter) and ``shape_inference_compute``
(reductions, dot, convolution, sort, control flow).
"""
from __future__ import annotations

from typing import Any

from . import shape_inference_array, shape_inference_compute, shape_inference_elementwise  # noqa: F401  (register)
from .shape import Shape
from .shape_inference_base import RULES, NotInferable, ShapeInferenceError
from .shape_inference_elementwise import DECLARED_ONLY

__all__ = ["ShapeInferenceError", "NotInferable", "infer_shape", "has_rule", "can_infer", "DECLARED_ONLY"]


def has_rule(opcode: str) -> bool:
    """True if ``opcode`` has a shape rule (possibly one that demands a declared shape)."""
    return opcode in RULES


def can_infer(opcode: str) -> bool:
    """True if the result shape of ``opcode`` can be computed from operands and attributes."""
    return opcode in RULES and opcode not in DECLARED_ONLY


def infer_shape(opcode: str, operand_shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    """The result shape of ``opcode`` applied to ``operand_shapes`` with decoded ``attrs``."""
    fn = RULES.get(opcode)
    if fn is None:
        raise NotInferable(f"there is no shape rule for {opcode}; the instruction must declare its shape")
    return fn(opcode, list(operand_shapes), attrs)
