"""Host-side control flow between programs (DESIGN §4): the ``While`` and ``Conditional`` steps.

Their condition, body and branch computations are programs of their own (``program.py``),
built at compile time with ENTRY's. A program takes and gives buffers with no round trip
through numpy; only a ``while``'s predicate and a ``conditional``'s predicate or branch index
are copied back to the host (``values.read_scalar``).

Buffers are never written after the kernel that produced them, so values may alias freely (a
body passing a tuple element through returns the very same buffer). A ``while`` owns the
state buffers its body handed it and frees one as soon as the next state no longer holds it,
so a long loop runs in bounded memory; what the final state holds is handed to the caller.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

from ..hlo import HloInstruction
from .platform import Platform
from .steps import Frame, Resources, Step, settle
from .values import read_scalar


class Program(Protocol):
    """A computation's steps (``program.ComputationProgram``)."""

    def run(self, platform: Platform, resources: Resources,
            params: Sequence[Any]) -> tuple[Any, dict[int, Any]]: ...


class While(Step):
    """Run the condition, read its predicate, run the body on the state, until false."""

    def __init__(self, inst: HloInstruction, condition: Program, body: Program):
        super().__init__(inst)
        self.condition, self.body = condition, body

    def run(self, platform: Platform, frame: Frame) -> None:
        state, owned = frame.values[self.inst.operands[0]], {}
        while True:
            pred, pred_owned = self.condition.run(platform, frame.resources, [state])
            go = bool(read_scalar(platform, pred))
            for data in pred_owned.values():
                platform.free(data)
            if not go:
                break
            state, handed = self.body.run(platform, frame.resources, [state])
            owned = settle(platform, owned, state)
            owned.update(handed)
        frame.take(owned)
        frame.values[self.inst] = state


class Conditional(Step):
    """Read the predicate (two branches) or the s32 index, run that branch on its operand;
    an index out of range runs the last branch, as XLA."""

    def __init__(self, inst: HloInstruction, branches: Sequence[Program], by_index: bool):
        super().__init__(inst)
        self.branches, self.by_index = list(branches), by_index  # by pred: [true, false]

    def run(self, platform: Platform, frame: Frame) -> None:
        operands = [frame.values[o] for o in self.inst.operands]
        selector = read_scalar(platform, operands[0])
        if self.by_index:
            i = int(selector)
            if i < 0 or i >= len(self.branches):
                i = len(self.branches) - 1
        else:
            i = 0 if bool(selector) else 1
        value, handed = self.branches[i].run(platform, frame.resources, [operands[1 + i]])
        frame.take(handed)
        frame.values[self.inst] = value

