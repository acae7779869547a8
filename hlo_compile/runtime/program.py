"""Programs: every computation the runtime runs as a sequence of step objects.

ENTRY and, transitively, the conditions, bodies and branches that ``while`` and
``conditional`` run each become one ``ComputationProgram`` at compile time, its instructions
in order, each a ``Step`` built through ``STEP_TYPES`` (one builder per opcode; a new kind of
step, a library call or a collective, is one more entry). An instruction with no step is
refused then, naming the instruction and its line.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..codegen.compiler import ModulePlan
from ..hlo import HloComputation, HloInstruction
from . import async_steps, collective_steps
from .control_flow import Conditional, While
from .fft_steps import fft_step
from .library_steps import library_step
from .platform import Platform
from ..driver.runnable import STEP_KINDS, unsupported
from .steps import (Bitcast, Constant, Frame, GetTupleElement, KernelLaunch, MakeTuple, Parameter, PassThrough,
                    Resources, Step, settle)


class ComputationProgram:
    """One computation as its steps, in order."""

    def __init__(self, comp: HloComputation, steps: Sequence[Step]):
        self.comp = comp
        self.steps = list(steps)

    def run(self, platform: Platform, resources: Resources, params: Sequence[Any]) -> tuple[Any, dict[int, Any]]:
        """(the root's value, the buffers of it this run allocated: id(data) → data, now the
        caller's to free)."""
        frame = Frame(resources, params)
        for step in self.steps:
            step.run(platform, frame)
        result = frame.values[self.comp.root]
        return result, settle(platform, frame.owned, result)


class ProgramBuilder:
    """Builds the programs of a plan, each computation once (callees before their callers)."""

    def __init__(self, plan: ModulePlan, platform_name: str):
        self.plan = plan
        self.platform_name = platform_name
        self.programs: dict[int, ComputationProgram] = {}

    def program(self, comp: HloComputation) -> ComputationProgram:
        built = self.programs.get(id(comp))
        if built is None:
            built = ComputationProgram(comp, [self.step(inst) for inst in comp.instructions])
            self.programs[id(comp)] = built
        return built

    def step(self, inst: HloInstruction) -> Step:
        build = STEP_TYPES.get(inst.opcode)
        if build is None:
            raise unsupported(inst, self.platform_name)
        return build(inst, self)


def _while(inst: HloInstruction, b: ProgramBuilder) -> Step:
    return While(inst, b.program(inst.attr("condition")), b.program(inst.attr("body")))


def _conditional(inst: HloInstruction, b: ProgramBuilder) -> Step:
    if inst.has_attr("branch_computations"):
        return Conditional(inst, [b.program(c) for c in inst.attr("branch_computations")], by_index=True)
    if len(inst.operands) != 3:
        raise unsupported(inst, b.platform_name)
    branches = [b.program(inst.attr("true_computation")), b.program(inst.attr("false_computation"))]
    return Conditional(inst, branches, by_index=False)


# step kind → the builder of its step
STEP_BUILDERS: dict[str, Callable[[HloInstruction, ProgramBuilder], Step]] = {
    "parameter": lambda inst, b: Parameter(inst),
    "constant": lambda inst, b: Constant(inst),
    "bitcast": lambda inst, b: Bitcast(inst),
    "pass-through": lambda inst, b: PassThrough(inst),
    "get-tuple-element": lambda inst, b: GetTupleElement(inst),
    "tuple": lambda inst, b: MakeTuple(inst),
    "kernel": lambda inst, b: KernelLaunch(inst, b.plan.kernel_for(inst)),
    "while": _while,
    "conditional": _conditional,
    "library-call": library_step,
    "fft": fft_step,
    **collective_steps.STEPS,  # collectives, partition-id, replica-id
    **async_steps.STEPS,  # async pairs, tokens, send/recv, rng-get-and-update-state
}
# opcode → the step that runs it: runnable.STEP_KINDS (the one list of opcodes) through the builders
STEP_TYPES: dict[str, Callable[[HloInstruction, ProgramBuilder], Step]] = {
    op: STEP_BUILDERS[kind] for op, kind in STEP_KINDS.items()}


def build_programs(plan: ModulePlan, platform_name: str) -> dict[int, ComputationProgram]:
    """A program for every computation the plan runs: ``id(computation)`` → program."""
    builder = ProgramBuilder(plan, platform_name)
    for comp in plan.computations or [plan.module.entry]:
        builder.program(comp)
    return builder.programs
