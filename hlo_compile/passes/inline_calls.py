"""Inline the ``call`` instructions of ENTRY, as XLA's ``CallInliner``.

JAX outlines helpers (``jnp.where``, ``nan_to_num``, ``norm``...) into computations that ENTRY
reaches through ``call``; code generation wants one flat ENTRY of ordinary ops. Each ``call``
in ENTRY is replaced by a copy of the instructions of the computation it calls (``to_apply``):
the callee's parameters stand for the call's operands, and the copy of the callee's root takes
the call's place, for its users, for ENTRY's ROOT and for control successors. A callee whose
root is a ``tuple`` thus leaves a ``tuple`` in ENTRY, and ``get-tuple-element`` users keep
working; a callee whose root is a parameter leaves no instruction, its users read the call's
operand. Calls inside the copied body are inlined too, recursively.

Copies keep the callee instruction's name when it is free in ENTRY and become ``name.1``,
``name.2``... otherwise; they keep its ``location`` (the line of the callee in the source), its
attributes and its called computations (a ``reduce``'s ``to_apply`` stays shared). The call's
control predecessors become control predecessors of every copied instruction, as the call
ordered all of them. The call's own attributes (``metadata``, ``frontend_attributes``...) are
dropped, as XLA drops them.

Only ENTRY is rewritten: calls inside ``while`` bodies and conditions, conditional branches
and other called computations are left as they are (the interpreter and runtime handle them).
Computations that no call reaches any more stay in the module (XLA removes them with DCE).
"""
from __future__ import annotations

import dataclasses

from hlo_compile.hlo.attributes import Attribute
from hlo_compile.hlo.errors import HloError
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.passes.wrap_fusions import _fresh

_CONTROL = "control-predecessors"


def inline_calls(module: HloModule) -> HloModule:
    """Inline every ``call`` of ``module``'s ENTRY (recursively); rewrites in place and
    returns the module. See the module docstring for what is and is not inlined."""
    entry = module.entry
    if not any(i.opcode == "call" for i in entry.instructions):
        return module
    taken = {i.name for i in entry.instructions}
    out: list[HloInstruction] = []
    replaced: dict[int, HloInstruction] = {}  # id(call in ENTRY) -> what now stands for it
    for inst in entry.instructions:
        if inst.opcode != "call":
            out.append(inst)
            continue
        taken.discard(inst.name)
        operands = [replaced.get(id(op), op) for op in inst.operands]  # an earlier call's result
        control = [replaced.get(id(p), p) for p in _control(inst)]
        value = _Inliner(out, taken).inline(inst, operands, control, ())
        replaced[id(inst)] = value
        if entry.root is inst:
            entry.root = value
    # ENTRY's own instructions after a call may name it, as an operand or a control predecessor
    # (the copies were built with resolved operands already).
    for inst in out:
        inst.operands = [replaced.get(id(op), op) for op in inst.operands]
        preds = _control(inst)
        if any(id(p) in replaced for p in preds):
            _set_control(inst, [replaced.get(id(p), p) for p in preds])
    entry.instructions = out
    for inst in out:
        inst.parent = entry
    entry.rebuild_users()
    return module


class _Inliner:
    """Appends copies of called computations' instructions to ``out``, naming them freshly
    against ``taken`` (ENTRY's names)."""

    def __init__(self, out: list[HloInstruction], taken: set[str]):
        self.out = out
        self.taken = taken

    def inline(self, call: HloInstruction, operands: list[HloInstruction], control: list[HloInstruction],
               active: tuple[int, ...]) -> HloInstruction:
        """Copy ``call``'s callee with parameters bound to ``operands``; every copy also waits
        for ``control``. Returns the instruction that now stands for the call's result."""
        callee = call.to_apply
        if not isinstance(callee, HloComputation):
            raise HloError(f"call '{call.name}' has no to_apply computation")
        if id(callee) in active:
            raise HloError(f"call '{call.name}' calls computation {callee.name} recursively")
        active = active + (id(callee),)
        mapping: dict[int, HloInstruction] = {}
        for inst in callee.instructions:
            if inst.opcode == "parameter":
                if inst.parameter_number >= len(operands):
                    raise HloError(f"call '{call.name}' passes {len(operands)} operand(s) but {callee.name} "
                                   f"reads parameter({inst.parameter_number})")
                mapping[id(inst)] = operands[inst.parameter_number]
                continue
            new_operands = [mapping[id(op)] for op in inst.operands]
            preds = _dedup([mapping[id(p)] for p in _control(inst)] + control)
            if inst.opcode == "call":
                mapping[id(inst)] = self.inline(inst, new_operands, preds, active)
            else:
                mapping[id(inst)] = self.copy(inst, new_operands, preds)
        return mapping[id(callee.root)]

    def copy(self, inst: HloInstruction, operands: list[HloInstruction],
             control: list[HloInstruction]) -> HloInstruction:
        attrs = {k: dataclasses.replace(a) for k, a in inst.attributes.items() if k != _CONTROL}
        new = HloInstruction(_fresh(inst.name, self.taken), inst.opcode, inst.shape, operands, attrs,
                             literal_text=inst.literal_text, parameter_number=inst.parameter_number,
                             location=inst.location)
        new._literal = inst._literal  # a parsed constant's value: immutable, share it
        new.declared_operand_shapes = [op.shape for op in operands]
        _set_control(new, control)
        self.out.append(new)
        return new


# ---- helpers --------------------------------------------------------------------------------

def _control(inst: HloInstruction) -> list[HloInstruction]:
    value = inst.attr(_CONTROL, ())
    return list(value) if isinstance(value, tuple) else []


def _set_control(inst: HloInstruction, preds: list[HloInstruction]) -> None:
    """Set (or, for an empty list, remove) ``control-predecessors``, its text rebuilt from the
    predecessors' current names."""
    preds = _dedup(preds)
    if not preds:
        inst.attributes.pop(_CONTROL, None)
        return
    inst.attributes[_CONTROL] = Attribute(_CONTROL, "{" + ", ".join(f"%{p.name}" for p in preds) + "}",
                                          tuple(preds))


def _dedup(insts: list[HloInstruction]) -> list[HloInstruction]:
    seen: set[int] = set()
    out = []
    for i in insts:
        if id(i) not in seen:
            seen.add(id(i))
            out.append(i)
    return out
