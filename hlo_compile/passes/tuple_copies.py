"""A ``copy`` of a tuple as a tuple of copies of its leaves (XLA's deep copy).

``copy`` of a tuple-shaped value is valid HLO (XLA's copy insertion writes them, and parser tests
copy an async context through a ``get-tuple-element``); its value is the operand's. Our kernels
copy arrays, so each such copy becomes ``tuple(copy(get-tuple-element(x, 0)), ...)``, nested
tuples recursively, as XLA's ``DeepCopyInstruction`` spells it; a leaf that is not an array (a
token) is passed through unchanged. The new tuple takes the copy's name and its place.
"""
from __future__ import annotations

from hlo_compile.hlo.attributes import Attribute
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.hlo.rewrite import NameScope, insert_instructions, new_instruction, replace_instructions, take_name


def expand_tuple_copies(module: HloModule) -> HloModule:
    """Copies of tuples as tuples of leaf copies (XLA's deep copy); in place."""
    names = NameScope.of_instructions(module.computations)
    for comp in module.computations:
        for inst in list(comp.instructions):
            if inst.opcode == "copy" and inst.shape.is_tuple and len(inst.operands) == 1:
                _expand(comp, inst, names)
    return module


def _expand(comp: HloComputation, copy: HloInstruction, names: NameScope) -> None:
    new: list[HloInstruction] = []

    def deep_copy(value: HloInstruction) -> HloInstruction:
        if not value.shape.is_tuple:
            if not value.shape.is_array:
                return value
            leaf = new_instruction(names.fresh(f"{copy.name}.leaf"), "copy", value.shape, [value], like=copy)
            new.append(leaf)
            return leaf
        parts = []
        for i, _ in enumerate(value.shape.tuple_shapes):
            gte = new_instruction(names.fresh(f"{copy.name}.gte"), "get-tuple-element", value.shape.tuple_shapes[i],
                                  [value], {"index": Attribute("index", str(i), i)}, like=copy)
            new.append(gte)
            parts.append(deep_copy(gte))
        tup = new_instruction(names.fresh(f"{copy.name}.tuple"), "tuple", value.shape, parts, like=copy)
        new.append(tup)
        return tup

    result = deep_copy(copy.operands[0])
    take_name(result, copy, names)
    insert_instructions(comp, new[:-1], before=copy)  # operands first, where the copy was
    replace_instructions(comp, {copy: result})
