"""The old form of ``dynamic-slice``/``dynamic-update-slice`` (one start-index vector) as the
current one (one scalar start index per dimension), as XLA's ``DynamicIndexSplitter``.

Old HLO text writes ``dynamic-slice(x, s32[3] starts)``: element ``i`` of the vector is the
start in dimension ``i`` (clamped like any start index). XLA still parses it and splits it
before code generation: each element becomes ``reshape(slice(starts, [i:i+1]))``, a scalar of
the vector's type, and the instruction reads those. Our emitters only know the scalar form, so
this pass does the same in every computation of the module. The interpreter reads the vector
itself (``interpreter/shape_ops.py``), which checks this rewrite.
"""
from __future__ import annotations

from hlo_compile.hlo.attributes import Attribute, decode
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.hlo.rewrite import NameScope, insert_instructions, new_instruction
from hlo_compile.hlo.shape import Shape

# the operand number of the first start index
_FIRST_INDEX = {"dynamic-slice": 1, "dynamic-update-slice": 2}


def split_dynamic_indices(module: HloModule) -> HloModule:
    """Old-form dynamic-slice/-update-slice start-index vectors split into scalars (XLA's dynamic-index-splitter).

    Every ``dynamic-slice``/``dynamic-update-slice`` with one start-index vector is rewritten
    to read scalar start indices; in place."""
    names = NameScope.of_instructions(module.computations)
    for comp in module.computations:
        for inst in list(comp.instructions):
            if _is_old_form(inst):
                _split(comp, inst, names)
    return module


def _is_old_form(inst: HloInstruction) -> bool:
    first = _FIRST_INDEX.get(inst.opcode)
    if first is None or len(inst.operands) != first + 1:
        return False
    index = inst.operands[first].shape
    return index.is_array and index.rank == 1 and inst.operands[0].shape.is_array


def _split(comp: HloComputation, inst: HloInstruction, names: NameScope) -> None:
    first = _FIRST_INDEX[inst.opcode]
    vector = inst.operands[first]
    rank = inst.operands[0].shape.rank
    if vector.shape.dimensions[0] != rank:
        raise HloUnsupportedError(f"{inst.opcode} '{inst.name}': start-index vector {vector.shape.to_text(False)} "
                                  f"has {vector.shape.dimensions[0]} elements for an operand of rank {rank}",
                                  inst.location)
    et = vector.shape.element_type
    scalars: list[HloInstruction] = []
    new: list[HloInstruction] = []
    for d in range(rank):
        raw = f"{{[{d}:{d + 1}]}}"
        piece = new_instruction(names.fresh(f"{inst.name}.index{d}.slice"), "slice", Shape.array(et, (1,)), [vector],
                                {"slice": Attribute("slice", raw, decode("slice", raw))}, like=inst)
        scalar = new_instruction(names.fresh(f"{inst.name}.index{d}"), "reshape", Shape.array(et, ()), [piece],
                                 like=inst)
        new += [piece, scalar]
        scalars.append(scalar)
    insert_instructions(comp, new, before=inst)
    inst.operands = inst.operands[:first] + scalars
    inst.declared_operand_shapes = [op.shape for op in inst.operands]
    comp.rebuild_users()
