"""Runtime steps: each instruction of a computation the runtime runs is one ``Step`` object.

A step is built once, at compile time, from its instruction and the module's plan, and run
any number of times as ``step.run(platform, frame)``: it reads its operands' values from the
``Frame`` (the state of one run of a computation), does its work through the ``Platform``
interface alone, and sets its own value. Kinds (``program.STEP_TYPES`` maps opcodes to them):

- ``Parameter``: the caller's value; ``Constant``: uploaded once per executable
  (``ConstantPool``) and shared, constants are never written;
- ``Bitcast``, ``PassThrough`` (opt-barrier), ``GetTupleElement``, ``MakeTuple``: aliases and
  tuple bookkeeping, no work;
- ``KernelLaunch``: a fusion's kernel into fresh output buffers, or, for an in-place kernel
  whose operand buffer the plan donated, into that buffer;
- ``While`` and ``Conditional`` (``control_flow.py``): host-side control flow over programs.

Library calls and collectives will be steps of their own, registered the same way.

Ownership: a run owns the buffers its steps allocated (``Frame.own``) and those sub-programs
handed to it; at its end it frees those its result does not hold (``settle``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..codegen.compiler import KernelPlan
from ..codegen.kernel import output_leaves
from ..hlo import HloInstruction
from ..hlo.errors import HloUnsupportedError
from .platform import Platform
from .values import Buffer, leaves, nest, upload_value


class ConstantPool:
    """The buffers of an executable's constants, uploaded on first use and then shared."""

    def __init__(self) -> None:
        self._values: dict[int, Any] = {}

    def get(self, platform: Platform, inst: HloInstruction) -> Any:
        value = self._values.get(id(inst))
        if value is None:
            value = self._values[id(inst)] = upload_value(platform, inst.literal, inst.shape)
        return value

    def __len__(self) -> int:
        return len(self._values)


@dataclass
class Resources:
    """What every run of one executable shares: compiled kernels by fusion name, constants."""

    kernels: Mapping[str, Any]
    constants: ConstantPool


@dataclass
class Frame:
    """The state of one run of a computation: its parameters, each instruction's value so far
    and the buffers this run owns (``id(data)`` → data)."""

    resources: Resources
    params: Sequence[Any]
    values: dict[HloInstruction, Any] = field(default_factory=dict)
    owned: dict[int, Any] = field(default_factory=dict)

    def own(self, value: Any) -> None:
        for b in leaves(value):
            self.owned[id(b.data)] = b.data

    def take(self, handed: Mapping[int, Any]) -> None:
        """Buffers a sub-program allocated and handed over (now this run's to free)."""
        self.owned.update(handed)


def settle(platform: Platform, owned: Mapping[int, Any], result: Any) -> dict[int, Any]:
    """Free the owned buffers ``result`` does not hold; return those it does."""
    live = {id(b.data) for b in leaves(result)}
    kept = {}
    for key, data in owned.items():
        if key in live:
            kept[key] = data
        else:
            platform.free(data)
    return kept


class Step(ABC):
    """One instruction at run time."""

    def __init__(self, inst: HloInstruction):
        self.inst = inst

    @abstractmethod
    def run(self, platform: Platform, frame: Frame) -> None:
        """Do this instruction's work and set ``frame.values[self.inst]``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(%{self.inst.name})"


class Parameter(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = frame.params[self.inst.parameter_number]


class Constant(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = frame.resources.constants.get(platform, self.inst)


class Bitcast(Step):
    """The operand's buffer seen with this instruction's shape."""

    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = Buffer(self.inst.shape, frame.values[self.inst.operands[0]].data)


class PassThrough(Step):
    """The operand's value itself (opt-barrier)."""

    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = frame.values[self.inst.operands[0]]


class GetTupleElement(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = frame.values[self.inst.operands[0]][self.inst.tuple_index]


class MakeTuple(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = [frame.values[o] for o in self.inst.operands]


class KernelLaunch(Step):
    """A fusion's kernel. Kernels that update an operand in place (scatter,
    dynamic-update-slice) write into that operand's buffer when the plan donated it (it is
    dead after this kernel: XLA's aliasing), else into a fresh buffer that starts as a copy."""

    def __init__(self, inst: HloInstruction, plan: KernelPlan):
        super().__init__(inst)
        for op in inst.operands:
            if op.shape.is_tuple:
                raise HloUnsupportedError(f"fusion '%{inst.name}' takes a tuple operand '%{op.name}': not supported")
        self.plan = plan
        self.outputs = [shape for _, shape in output_leaves(inst)]

    def run(self, platform: Platform, frame: Frame) -> None:
        inst, plan = self.inst, self.plan
        ins = [frame.values[op].data for op in inst.operands]
        donated = plan.donated
        for k in donated.values():
            if frame.owned.get(id(ins[k])) is not ins[k]:
                raise RuntimeError(f"fusion '%{inst.name}' was planned to take over the buffer of "
                                   f"'%{inst.operands[k].name}', which this program does not own")
        outs = [Buffer(shape, ins[donated[i]] if i in donated else platform.allocate(shape))
                for i, shape in enumerate(self.outputs)]
        for out_index, operand_index in plan.in_place_operands.items():
            if out_index not in donated:
                platform.copy(outs[out_index].data, ins[operand_index], outs[out_index].shape)
        if plan.launch.num_blocks > 0:
            platform.launch(frame.resources.kernels[inst.name], plan, ins + [b.data for b in outs])
        value = nest(inst.shape, outs)
        frame.own(value)
        frame.values[inst] = value
