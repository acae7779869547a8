"""The HLO verifier: is a parsed module well formed?

For every instruction it checks, in this order: the operand count (``OPCODE_ARITY`` and
a few minimums), the declared shape against the shape inferred from the operands (XLA's
rule: equal ignoring layout and dynamic-dimension flags), then opcode-specific rules that
inference cannot express (declared-shape ops such as reshape and broadcast, and the
signatures of called computations; see ``verifier_checks.py``). The first problem found
is raised as ``HloVerifyError`` at the instruction's location.
"""
from __future__ import annotations

from .errors import HloVerifyError
from .ir import HloComputation, HloInstruction, HloModule
from .opcodes import ELEMENTWISE, OPCODE_ARITY
from .shape import Shape
from .shape_inference import NotInferable, ShapeInferenceError, infer_shape
from .shape_inference_base import kind
from .verifier_checks import CHECKS, MIN_OPERANDS, VerifyProblem, compatible, text

# Ops whose result element type is chosen by the instruction (XLA's preferred_element_type)
# rather than by the operands: only the dimensions are compared.
_FREE_ELEMENT_TYPE = frozenset({"dot", "convolution"})
# async-update forwards extra operands in late-binding form (`call-update(start, buffer)`).
_VARIADIC_IN_PRACTICE = frozenset({"async-update"})


def verify_module(module: HloModule) -> None:
    """Raise ``HloVerifyError`` for the first ill-formed instruction of ``module``."""
    for comp in module.computations:
        verify_computation(comp)


def verify_computation(comp: HloComputation) -> None:
    numbers = [p.parameter_number for p in comp.parameters]
    if sorted(numbers) != list(range(len(numbers))):
        raise HloVerifyError(f"computation {comp.name} has parameter numbers {sorted(numbers)}; "
                             f"expected 0 to {len(numbers) - 1}", comp.location)
    for inst in comp.instructions:
        verify_instruction(inst)


def verify_instruction(inst: HloInstruction) -> None:
    try:
        _check_operand_count(inst)
        _check_inferred_shape(inst)
        check = CHECKS.get(inst.opcode)
        if check is not None:
            check(inst)
    except VerifyProblem as p:
        raise HloVerifyError(f"{inst.name} ({inst.opcode}): {p}", inst.location) from None


def _check_operand_count(inst: HloInstruction) -> None:
    n = len(inst.operands)
    arity = None if inst.opcode in _VARIADIC_IN_PRACTICE else OPCODE_ARITY.get(inst.opcode)
    if arity is not None and n != arity:
        raise VerifyProblem(f"expects {arity} operand(s), got {n}")
    minimum = MIN_OPERANDS.get(inst.opcode)
    if minimum is not None and n < minimum[0]:
        raise VerifyProblem(minimum[1] or f"expects at least {minimum[0]} operand(s), got {n}")


def _mixed_float_operands(inst: HloInstruction) -> bool:
    types = {o.shape.element_type for o in inst.operands if o.shape.is_array and kind(o.shape.element_type) == "float"}
    return inst.opcode in ELEMENTWISE and len(types) > 1


def _check_inferred_shape(inst: HloInstruction) -> None:
    attrs = {k: a.value for k, a in inst.attributes.items()}
    try:
        inferred = infer_shape(inst.opcode, [o.shape for o in inst.operands], attrs)
    except NotInferable:
        return  # a declared-shape op; CHECKS holds its rules
    except ShapeInferenceError as e:
        raise VerifyProblem(str(e)) from None
    declared = inst.shape
    if inst.opcode in _FREE_ELEMENT_TYPE and declared.is_array:
        inferred = Shape.array(declared.element_type, inferred.dimensions, dynamic=inferred.dynamic_dimensions)
    if _mixed_float_operands(inst) and declared.is_array and kind(declared.element_type) == kind(inferred.element_type):
        # Mixed-precision elementwise ops (XLA's allow_mixed_precision): any float width goes.
        inferred = Shape.array(declared.element_type, inferred.dimensions, dynamic=inferred.dynamic_dimensions)
    if not compatible(declared, inferred):
        raise VerifyProblem(f"declared shape {text(declared)} is not compatible with the inferred shape "
                            f"{text(inferred)}")
