"""Fusion maps: compose per-op maps through a fused computation.

Output → input: start with the identity at the fused root (or at the tuple root's operand
for output ``k``), visit the fused instructions from users to operands, compose each map
gathered for an instruction with that instruction's own output→operand maps, simplify, and
collect a de-duplicated set per instruction. A fusion operand gets the set of its fused
parameter. Anything reached through an op without a rule is unknown (never guessed).
Input → output runs the same way from a parameter towards the root.
"""
from __future__ import annotations

from .indexing_map import IndexingMap, compose
from .op_maps import Entry, input_to_output, output_to_input
from .simplifier import simplify, split_clamped_iota_rt_vars

_UNKNOWN = None


def _norm(m: IndexingMap) -> list[IndexingMap]:
    return split_clamped_iota_rt_vars(simplify(m).remove_unused_symbols())


def _add(store: dict, key, m: IndexingMap) -> None:
    store.setdefault(key, {}).setdefault(m.key(), m)


def _outputs(comp) -> list[tuple[object, int]]:
    """(instruction, output index) for each fusion output."""
    root = comp.root
    if root.opcode == "tuple":
        return [(op, 0) for op in root.operands]
    if root.shape.is_tuple:
        return [(root, k) for k in range(len(root.shape.tuple_shapes))]
    return [(root, 0)]


def _shape(inst, k: int):
    return inst.shape.tuple_shapes[k] if inst.shape.is_tuple else inst.shape


def fusion_output_to_input(fusion, output: int = 0) -> list[Entry]:
    comp = fusion.fused_computation
    start, k0 = _outputs(comp)[output]
    return instruction_to_parameters(comp, start, k0)


def instruction_to_parameters(comp, start, k0: int = 0) -> list[Entry]:
    """Per parameter of ``comp``, the maps from element ``k0`` of ``start`` (any instruction
    of ``comp``: a root, or a hero's operand as XLA's ``ComputeGroupedOutputToInputIndexing``)
    to that parameter; None where an op without a rule is in the way, [] where unreached."""
    maps: dict = {}
    unknown: set = set()
    _add(maps, (start, k0), IndexingMap.identity(_shape(start, k0).dimensions))
    for inst in reversed(comp.instructions):
        if inst.opcode == "parameter":
            continue
        if inst in unknown:
            unknown.update(inst.operands)
            continue
        for k in [k for (i, k) in maps if i is inst]:
            consumer_maps = list(maps[(inst, k)].values())
            if inst.opcode == "get-tuple-element":
                for c in consumer_maps:
                    _add(maps, (inst.operands[0], inst.tuple_index), c)
                continue
            for op, entry in zip(inst.operands, output_to_input(inst, k)):
                if entry is None or not op.shape.is_array:
                    unknown.add(op)
                    continue
                for c in consumer_maps:
                    for p in entry:
                        for n in _norm(compose(c, p)):
                            _add(maps, (op, 0), n)
    return [None if p in unknown else list(maps.get((p, 0), {}).values()) for p in comp.parameters]


def fusion_input_to_output(fusion, operand: int) -> list[Entry]:
    comp = fusion.fused_computation
    param = comp.parameters[operand]
    outputs = _outputs(comp)
    if not param.shape.is_array:
        return [None for _ in outputs]
    maps: dict = {}
    unknown: set = set()
    _add(maps, (param, 0), IndexingMap.identity(param.shape.dimensions))
    for inst in comp.instructions:
        if inst.opcode in ("parameter", "tuple"):
            continue
        for j, op in enumerate(inst.operands):
            if op in unknown:
                unknown.add(inst)
                continue
            if inst.opcode == "get-tuple-element":
                for c in list(maps.get((op, inst.tuple_index), {}).values()):
                    _add(maps, (inst, 0), c)
                continue
            if not any(i is op for (i, _) in maps):
                continue
            per_out = input_to_output(inst, j)
            for k, entry in enumerate(per_out):
                if entry is None:
                    unknown.add(inst)
                    continue
                for c in list(maps.get((op, 0), {}).values()):
                    for p in entry:
                        for n in _norm(compose(c, p)):
                            _add(maps, (inst, k), n)
    return [None if r in unknown else list(maps.get((r, k), {}).values()) for r, k in outputs]


def instruction_output_to_input(inst, output: int = 0) -> list[Entry]:
    """Per-operand maps of any instruction: fusions composed, other ops as built."""
    if inst.opcode == "fusion":
        return fusion_output_to_input(inst, output)
    return output_to_input(inst, output)


def instruction_input_to_output(inst, operand: int) -> list[Entry]:
    if inst.opcode == "fusion":
        return fusion_input_to_output(inst, operand)
    return input_to_output(inst, operand)
