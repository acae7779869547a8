"""Shape inference (placeholder: elementwise ops only; the verifier's full version replaces it)."""
from __future__ import annotations

from .shape import Shape


class ShapeInferenceError(ValueError):
    pass


def infer_shape(opcode, operand_shapes, attrs):
    from .opcodes import ELEMENTWISE
    if opcode == "tuple":
        return Shape.tuple_of(operand_shapes)
    if opcode in ELEMENTWISE and operand_shapes:
        s = max(operand_shapes, key=lambda x: x.rank)
        if opcode == "compare":
            return Shape.array("pred", s.dimensions)
        return Shape.array(s.element_type, s.dimensions)
    raise ShapeInferenceError(f"no shape rule for {opcode}")
