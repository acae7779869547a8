"""Collectives at run time: one step per collective instruction, over the participant's
``Communicator`` (``participants.py`` on the host; NCCL on cuda, ``nccl_comm.py``).

A step downloads its operands, gets every participant's through the communicator, computes
its own result as XLA defines it, and uploads that into new buffers this run owns. Groups and
group modes come from ``hlo.collective_groups`` (XLA's rules); the numerics are this module's
own, as XLA's backends implement them: an all-reduce's ``to_apply`` must be add, multiply,
minimum, maximum (and/or for pred) of its two parameters (``MatchReductionComputation``),
folded over ranks 0..n-1 in order; anything else is refused by name.

ragged-all-to-all: ``ragged_all_to_all.py`` (its rows checked on every member before any move).

The native async forms run the collective at the start and hold XLA's start shape:
``all-reduce-start`` the result, ``all-gather-start`` ``(input, output)``,
``collective-permute-start`` ``(input, output, u32[], u32[])``; ``-done`` reads element 1.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from ..hlo import HloInstruction
from ..hlo.collective_groups import (base_opcode, group_of, participant_groups, permute_sources,
                                     ragged_updates_per_peer)
from ..hlo.dtypes import numpy_dtype
from ..hlo.errors import HloUnsupportedError
from .participants import participant_of
from .platform import Platform
from .ragged_all_to_all import metadata_rows, ragged_result, ragged_transfers
from ..driver.runnable import collective_refusal, reduction_kind, where
from .steps import Frame, Step
from .values import download_value, upload_value

_REDUCTIONS = {"add": np.add, "multiply": np.multiply, "minimum": np.minimum, "maximum": np.maximum,
               "and": np.logical_and, "or": np.logical_or}


def reduction_of(inst: HloInstruction) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The elementwise function of an all-reduce's ``to_apply`` (XLA's supported kinds only;
    and/or of pred alone: ``runnable.reduction_kind``)."""
    kind = reduction_kind(inst)
    if kind is None:
        raise HloUnsupportedError(f"{where(inst)}: {collective_refusal(inst)}", inst.location)
    fn = _REDUCTIONS[kind]
    return (lambda a, b: fn(a, b).astype(a.dtype)) if kind in ("and", "or") else fn


def _upload(platform: Platform, frame: Frame, value: Any, shape) -> Any:
    out = upload_value(platform, value, shape)
    frame.own(out)
    return out


class Collective(Step):
    """all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute,
    collective-broadcast, ragged-all-to-all and the native ``-start`` forms."""

    def __init__(self, inst: HloInstruction, opcode: str):
        super().__init__(inst)
        self.opcode = opcode
        why = collective_refusal(inst)
        if why is not None:
            raise HloUnsupportedError(f"{where(inst)}: {why}", inst.location)
        if opcode in ("all-reduce", "reduce-scatter"):
            self.reduce = reduction_of(inst)

    def results(self, me: int, world, everyone: list[list[np.ndarray]]) -> list[np.ndarray]:
        inst, op = self.inst, self.opcode
        n_ops = len(everyone[me])
        if op == "collective-permute":
            source = permute_sources(inst, world).get(me)
            return [np.zeros_like(x) if source is None else everyone[source][i] for i, x in enumerate(everyone[me])]
        group = group_of(participant_groups(inst, world), me)
        rank, n = group.index(me), len(group)
        if op == "collective-broadcast":
            return list(everyone[group[0]])
        if op in ("all-reduce", "reduce-scatter"):
            with np.errstate(all="ignore"):  # NaN and inf are values here, as in the kernels
                reduced = [functools.reduce(self.reduce, [everyone[j][i] for j in group]) for i in range(n_ops)]
            if op == "all-reduce":
                return reduced
            d = inst.dimensions[0]
            return [np.split(x, n, axis=d)[rank] for x in reduced]
        if op == "all-gather":
            d = inst.dimensions[0]
            return [np.concatenate([everyone[j][i] for j in group], axis=d) for i in range(n_ops)]
        if op == "all-to-all":
            if inst.dimensions:
                d = inst.dimensions[0]
                return [np.concatenate([np.split(everyone[j][0], n, axis=d)[rank] for j in group], axis=d)]
            return [everyone[j][rank] for j in group]
        if op == "ragged-all-to-all":
            k = ragged_updates_per_peer(inst, n)
            moves = ragged_transfers(inst, [metadata_rows(everyone[j][2:]) for j in group], k,
                                     everyone[me][0].shape[0], everyone[me][1].shape[0])
            return [ragged_result(everyone[me][1], [everyone[j][0] for j in group], moves, rank)]
        raise HloUnsupportedError(f"{where(inst)}: no collective step", inst.location)

    def run(self, platform: Platform, frame: Frame) -> None:
        inst = self.inst
        me = participant_of(frame.resources)
        shapes = self._result_shapes()
        if me.communicator.on_device:  # NCCL: the communicator moves the buffers itself
            self._check_group_sizes(me)
            bufs = me.communicator.collective(inst, self.opcode, platform, [frame.values[o] for o in inst.operands],
                                              shapes)
            for b in bufs:
                frame.own(b)
        else:
            mine = [np.asarray(download_value(platform, frame.values[o])) for o in inst.operands]
            everyone = me.all_values(mine, where(inst))
            outs = self.results(me.me, me.world, everyone)
            for x, s in zip(outs, shapes):
                self._check_shape(tuple(x.shape), s)
            bufs = [_upload(platform, frame, x.astype(numpy_dtype(s.element_type), copy=False), s)
                    for x, s in zip(outs, shapes)]
        result = bufs[0] if len(bufs) == 1 else bufs
        frame.values[inst] = self._start_value(platform, frame, result)

    def _check_shape(self, got: tuple, s) -> None:
        if got != tuple(s.dimensions):
            raise HloUnsupportedError(f"{where(self.inst)}: its groups give a result of shape {list(got)}, but it "
                                      f"declares {s.to_text(False)} (a group of another size?)", self.inst.location)

    def _check_group_sizes(self, me) -> None:
        """What ``results`` checks on the host, checked before NCCL moves anything: the result
        shapes the group size gives (ragged-all-to-all checks its own, ``nccl_comm``)."""
        if self.opcode in ("collective-permute", "ragged-all-to-all"):
            return
        n = len(group_of(participant_groups(self.inst, me.world), me.me))
        d = self.inst.dimensions[0] if self.inst.dimensions else None
        for op, s in zip(self.inst.operands, self._result_shapes()):
            dims = list(op.shape.dimensions)
            if self.opcode == "all-gather":
                dims[d] *= n
            elif self.opcode == "reduce-scatter":
                dims[d] //= n
            self._check_shape(tuple(dims), s)

    def _result_shapes(self) -> list:
        s = self.inst.shape
        if self.inst.opcode in ("all-gather-start", "collective-permute-start") and s.is_tuple:
            s = s.tuple_shapes[1]
        return list(s.tuple_shapes) if s.is_tuple else [s]

    def _start_value(self, platform: Platform, frame: Frame, result: Any) -> Any:
        inst = self.inst
        if inst.opcode == "all-gather-start" and inst.shape.is_tuple:
            ins = [frame.values[o] for o in inst.operands]
            return [ins[0] if len(ins) == 1 else ins, result]
        if inst.opcode == "collective-permute-start":
            ins = [frame.values[o] for o in inst.operands]
            ctx = [_upload(platform, frame, np.zeros((), np.uint32), s) for s in inst.shape.tuple_shapes[2:]]
            return [ins[0] if len(ins) == 1 else ins, result] + ctx
        return result


class CollectiveDone(Step):
    """``-done`` of a native async collective: the start's result (element 1 of a tuple start)."""

    def run(self, platform: Platform, frame: Frame) -> None:
        start = self.inst.operands[0]
        value = frame.values[start]
        if start.shape.is_tuple and start.opcode != "all-reduce-start":
            value = value[1]
        frame.values[self.inst] = value


class LogicalId(Step):
    """partition-id / replica-id (u32[]) of the participant running."""

    def run(self, platform: Platform, frame: Frame) -> None:
        me = participant_of(frame.resources)
        value = me.partition if self.inst.opcode == "partition-id" else me.replica
        frame.values[self.inst] = _upload(platform, frame, np.asarray(value, np.uint32), self.inst.shape)


def _collective(inst: HloInstruction, builder: Any) -> Step:
    return Collective(inst, base_opcode(inst.opcode))


# step kind (``runnable.STEP_KINDS``) → its builder
STEPS: dict[str, Callable[[HloInstruction, Any], Step]] = {
    "collective": _collective,
    "collective-done": lambda inst, b: CollectiveDone(inst),
    "logical-id": lambda inst, b: LogicalId(inst),
}
