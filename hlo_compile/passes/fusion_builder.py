"""Building a fusion: a new fused computation and the ``fusion`` instruction that calls it
(used by ``fusion.py`` for groups and by ``wrap_fusions.py`` for single instructions)."""
from __future__ import annotations

from typing import Sequence

from hlo_compile.hlo.attributes import Attribute
from hlo_compile.hlo.ir import HloComputation, HloInstruction, clone_instruction
from hlo_compile.hlo.rewrite import NameScope, new_instruction, set_control_predecessors
from hlo_compile.hlo.shape import Shape


def fusion_attributes(comp: HloComputation, kind: str) -> dict[str, Attribute]:
    """``kind=<kind>, calls=%<comp>``."""
    return {"kind": Attribute("kind", kind, kind), "calls": Attribute("calls", f"%{comp.name}", comp)}


def fusion_parameters(members: Sequence[HloInstruction],
                      like: HloInstruction) -> tuple[list[HloInstruction], list[HloInstruction]]:
    """(the distinct operands the ``members`` of a new fusion read from outside it, in first-use
    order; a ``param_<i>`` parameter for each, named apart from the members, located at
    ``like``)."""
    inside = {id(m) for m in members}
    operands: list[HloInstruction] = []
    for m in members:
        for op in m.operands:
            if id(op) not in inside and all(op is not o for o in operands):
                operands.append(op)
    names = NameScope(m.name for m in members)
    params = [new_instruction(names.fresh(f"param_{i}"), "parameter", op.shape, parameter_number=i, like=like)
              for i, op in enumerate(operands)]
    return operands, params


def build_fusion(members: Sequence[HloInstruction], root: HloInstruction, comp_name: str,
                 kind: str) -> HloInstruction:
    """A ``fusion`` named, shaped and located as ``root`` that reads the distinct operands the
    ``members`` read from outside; it calls a new computation ``comp_name`` holding copies of
    the members (in the order given, operands first; ``root``'s copy is its ROOT) after a
    parameter per operand. The members stay where they are; their copies have no control
    predecessors (ordering against other instructions is the fusion's)."""
    operands, params = fusion_parameters(members, root)
    copies = {id(op): p for op, p in zip(operands, params)}
    body = []
    for m in members:
        copy = clone_instruction(m, [copies[id(o)] for o in m.operands])
        set_control_predecessors(copy, ())
        copies[id(m)] = copy
        body.append(copy)
    comp = HloComputation(comp_name, params + body, copies[id(root)])
    return new_instruction(root.name, "fusion", root.shape, operands, fusion_attributes(comp, kind), like=root)


def build_fusion_of_outputs(members: Sequence[HloInstruction], outputs: Sequence[HloInstruction], comp_name: str,
                            kind: str, name: str, names: NameScope, like: HloInstruction) -> HloInstruction:
    """``build_fusion`` writing ``outputs`` (members): the one output as ROOT, or a tuple of
    them; the fusion is named ``name`` (made fresh in ``names``), the tuple is located at ``like``."""
    if len(outputs) == 1:
        fusion = build_fusion(members, outputs[0], comp_name, kind)
    else:
        root = new_instruction(names.fresh(f"{name}.tuple"), "tuple",
                               Shape.tuple_of([o.shape for o in outputs]), list(outputs), like=like)
        fusion = build_fusion(list(members) + [root], root, comp_name, kind)
    fusion.name = names.fresh(name)
    return fusion


def output_readers(fusion: HloInstruction, count: int, names: NameScope) -> list[HloInstruction]:
    """What stands for each of the ``count`` outputs of ``fusion`` outside it: the fusion
    itself, or a ``get-tuple-element`` per output (new, not yet placed in a computation)."""
    if count == 1 and not fusion.shape.is_tuple:
        return [fusion]
    return [new_instruction(names.fresh(f"{fusion.name}.{k}"), "get-tuple-element", s, [fusion],
                            {"index": Attribute("index", str(k), k)}, like=fusion)
            for k, s in enumerate(fusion.shape.tuple_shapes[:count])]


def add_note(fusion: HloInstruction, key: str, text: str) -> None:
    """Record on a fusion a pass built why it exists, as ``frontend_attributes={key="text"}``
    (kept in dumps; the fusion analysis puts it in its reason: ``SPLIT_NOTES``)."""
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    old = fusion.attributes.get("frontend_attributes")
    body = old.raw.strip()[1:-1].strip() if old is not None else ""
    raw = "{" + (body + "," if body else "") + f'{key}="{quoted}"' + "}"
    fusion.attributes["frontend_attributes"] = Attribute("frontend_attributes", raw, raw)
