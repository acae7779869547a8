"""Inline the ``call`` instructions of ENTRY (or of any computation), as XLA's ``CallInliner``.

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

Only the computation given is rewritten (a module's ENTRY; ``prepare_control_flow`` gives it
the computations ``while`` and ``conditional`` run): calls inside other computations are left
as they are (the interpreter and runtime handle them). Computations that no call reaches any
more stay in the module (XLA removes them with DCE).
"""
from __future__ import annotations

from hlo_compile.hlo.errors import HloError
from hlo_compile.hlo.ir import HloComputation, HloInstruction, clone_instruction
from hlo_compile.hlo.rewrite import (NameScope, Target, computation_of, control_predecessors, insert_instructions,
                                     replace_uses, set_control_predecessors)


def inline_calls(target: Target) -> Target:
    """Inline every ``call`` of ``target`` (a computation, or a module's ENTRY), recursively;
    rewrites in place and returns ``target``. See the module docstring for what is and is not
    inlined."""
    comp = computation_of(target)
    if not any(i.opcode == "call" for i in comp.instructions):
        return target
    names = NameScope.of_instructions([comp])
    out: list[HloInstruction] = []
    replaced: dict[HloInstruction, HloInstruction] = {}  # call -> what now stands for it
    for inst in comp.instructions:
        if inst.opcode != "call":
            out.append(inst)
            continue
        names.release(inst.name)
        operands = [replaced.get(op, op) for op in inst.operands]  # an earlier call's result
        control = [replaced.get(p, p) for p in control_predecessors(inst)]
        replaced[inst] = _Inliner(out, names).inline(inst, operands, control, ())
    # the computation's own instructions after a call may name it, as an operand, a control
    # predecessor or ROOT (the copies were built with resolved operands already)
    comp.instructions = []
    insert_instructions(comp, out)
    replace_uses(comp, replaced)
    return target


class _Inliner:
    """Appends copies of called computations' instructions to ``out``, naming them freshly
    in ``names`` (the names of the computation they are inlined into)."""

    def __init__(self, out: list[HloInstruction], names: NameScope):
        self.out = out
        self.names = names

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
            preds = [mapping[id(p)] for p in control_predecessors(inst)] + control
            if inst.opcode == "call":
                mapping[id(inst)] = self.inline(inst, new_operands, preds, active)
            else:
                mapping[id(inst)] = self.copy(inst, new_operands, preds)
        return mapping[id(callee.root)]

    def copy(self, inst: HloInstruction, operands: list[HloInstruction],
             control: list[HloInstruction]) -> HloInstruction:
        new = clone_instruction(inst, operands, name=self.names.fresh(inst.name))
        new.declared_operand_shapes = [op.shape for op in operands]
        set_control_predecessors(new, control)
        self.out.append(new)
        return new
