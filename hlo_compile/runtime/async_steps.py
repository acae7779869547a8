"""Async pairs, tokens, point-to-point transfers and RNG state at run time.

- ``copy-start``/``copy-done``: the start copies into a new buffer (host memory ``S(5)`` is a
  memory space only: the same bytes) and holds XLA's ``(destination, source, u32[])``; the done
  gives element 0;
- ``async-start``/``async-update``/``async-done`` with ``calls=``: the wrapped computation is a
  program of its own (prepared like a ``while`` body: its fusions are kernels, its library calls
  and collectives steps), run at the start through ``Platform.async_begin``/``async_end``
  (cuda: on a stream of its own after an event of the main one; host: synchronous); the start
  holds ``((operands...), result, context...)`` and the done makes the main stream wait
  (``Platform.async_wait``) and gives element 1;
- ``after-all``: a token (an empty tuple of buffers);
- ``send``/``recv``/``-done``: through the participant's communicator, peers from the
  ``_xla_send_recv_source_target_pairs`` frontend attribute, keyed by channel; a recv without a
  source gets zeros; through NCCL (several GPUs) the send and recv post device buffers and the
  dones hand what was posted to NCCL in one group (``nccl_comm.NcclCommunicator.flush``);
- ``rng-get-and-update-state``: XLA's 128-bit counter, starting at 0x7012395, one per
  instruction and participant, kept by the step (so it persists across runs of the executable,
  as in XLA's loaded executable), returned as u64[2] (low word first) then advanced by ``delta``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..hlo import HloInstruction
from ..hlo.collective_groups import has_send_recv_pairs, permute_sources
from ..hlo.dtypes import numpy_dtype
from ..hlo.errors import HloUnsupportedError
from .participants import participant_of
from .platform import Platform
from .steps import Frame, Step
from .values import Buffer, download_value, upload_value

RNG_STATE_START = 0x7012395
TOKEN: list = []  # a token holds no buffer


def _zeros(platform: Platform, frame: Frame, shape) -> Any:
    if shape.is_tuple:
        return [_zeros(platform, frame, s) for s in shape.tuple_shapes]
    if shape.is_token:
        return TOKEN
    value = upload_value(platform, np.zeros(tuple(shape.dimensions), numpy_dtype(shape.element_type)), shape)
    frame.own(value)
    return value


class CopyStart(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        src = frame.values[self.inst.operands[0]]
        shape = self.inst.shape.tuple_shapes[0]
        dst = Buffer(shape, platform.allocate(shape))
        platform.copy(dst.data, src.data, shape)
        frame.own(dst)
        frame.values[self.inst] = [dst, src, _zeros(platform, frame, self.inst.shape.tuple_shapes[2])]


class CopyDone(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = frame.values[self.inst.operands[0]][0]


class AsyncStart(Step):
    """Runs the wrapped computation's program (``program``) at the start."""

    def __init__(self, inst: HloInstruction, program: Any):
        super().__init__(inst)
        self.program = program

    def run(self, platform: Platform, frame: Frame) -> None:
        ops = [frame.values[o] for o in self.inst.operands]
        handle = platform.async_begin()
        try:
            result, handed = self.program.run(platform, frame.resources, ops)
        finally:
            platform.async_end(handle)
        frame.take(handed)
        frame.values[("async", self.inst)] = handle
        ctx = [_zeros(platform, frame, s) for s in self.inst.shape.tuple_shapes[2:]]
        frame.values[self.inst] = [ops, result] + ctx


class AsyncUpdate(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = frame.values[self.inst.operands[0]]


class AsyncDone(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        start = self.inst.operands[0]
        while start.opcode == "async-update":
            start = start.operands[0]
        platform.async_wait(frame.values.get(("async", start)))
        frame.values[self.inst] = frame.values[self.inst.operands[0]][1]


class AfterAll(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        frame.values[self.inst] = TOKEN


class RngGetAndUpdateState(Step):
    def __init__(self, inst: HloInstruction):
        super().__init__(inst)
        self.delta = int(inst.attr("delta"))
        self.states: dict[int, int] = {}  # participant → counter

    def run(self, platform: Platform, frame: Frame) -> None:
        me = participant_of(frame.resources).me
        value = self.states.get(me, RNG_STATE_START)
        self.states[me] = (value + self.delta) % (1 << 128)
        words = np.array([value & ((1 << 64) - 1), value >> 64], np.uint64)
        out = upload_value(platform, words, self.inst.shape)
        frame.own(out)
        frame.values[self.inst] = out


def _on_device(me: Any) -> bool:
    """Whether send/recv go through NCCL (``nccl_comm``: posted, then moved in one group at the
    next done or collective)."""
    return me.communicator.on_device and me.world.size > 1


def _peer(inst: HloInstruction, source: int, target: int) -> tuple:
    return ("p2p", inst.attr("channel_id", 0), source, target)


class Send(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        inst = self.inst
        me = participant_of(frame.resources)
        data = frame.values[inst.operands[0]]
        if has_send_recv_pairs(inst):
            targets = [t for t, s in permute_sources(inst, me.world, frontend=True).items() if s == me.me]
            if _on_device(me):
                me.communicator.post_send(inst, data, targets)
            else:
                host = np.asarray(download_value(platform, data))
                for target in targets:
                    me.communicator.send(_peer(inst, me.me, target), host)
        elif me.world.size > 1:
            raise HloUnsupportedError(f"send '%{inst.name}': no _xla_send_recv_source_target_pairs names its peer",
                                      inst.location)
        frame.values[inst] = [data, _zeros(platform, frame, inst.shape.tuple_shapes[1]), TOKEN]


class Recv(Step):
    """The data arrives at recv-done (the sender may come later in program order); through
    NCCL the receive is posted here, into the buffer it holds."""

    def run(self, platform: Platform, frame: Frame) -> None:
        inst = self.inst
        me = participant_of(frame.resources)
        data = TOKEN
        if _on_device(me) and has_send_recv_pairs(inst):
            source = permute_sources(inst, me.world, frontend=True).get(me.me)
            shape = inst.shape.tuple_shapes[0]
            data = _zeros(platform, frame, shape) if source is None else \
                me.communicator.post_recv(inst, platform, shape, source)
            frame.own(data)
        frame.values[inst] = [data, TOKEN, TOKEN]


class RecvDone(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        recv = self.inst.operands[0]
        me = participant_of(frame.resources)
        if _on_device(me) and has_send_recv_pairs(recv):
            me.communicator.flush(platform)
            frame.values[self.inst] = [frame.values[recv][0], TOKEN]
            return
        shape = recv.shape.tuple_shapes[0]
        source = permute_sources(recv, me.world, frontend=True).get(me.me) if has_send_recv_pairs(recv) else None
        if source is None:
            data = _zeros(platform, frame, shape)
        else:
            what = f"recv-done '%{self.inst.name}'"
            data = upload_value(platform, me.communicator.recv(me.me, _peer(recv, source, me.me), what), shape)
            frame.own(data)
        frame.values[self.inst] = [data, TOKEN]


class SendDone(Step):
    def run(self, platform: Platform, frame: Frame) -> None:
        me = participant_of(frame.resources)
        if _on_device(me):
            me.communicator.flush(platform)
        frame.values[self.inst] = TOKEN


def _async_start(inst: HloInstruction, builder: Any) -> Step:
    calls = inst.attr("calls", None)
    if calls is None:
        raise HloUnsupportedError(f"async-start '%{inst.name}' has no calls= computation", inst.location)
    return AsyncStart(inst, builder.program(calls))


# step kind (``runnable.STEP_KINDS``; each named as its opcode) → its builder
STEPS: dict[str, Callable[[HloInstruction, Any], Step]] = {
    "copy-start": lambda inst, b: CopyStart(inst),
    "copy-done": lambda inst, b: CopyDone(inst),
    "async-start": _async_start,
    "async-update": lambda inst, b: AsyncUpdate(inst),
    "async-done": lambda inst, b: AsyncDone(inst),
    "after-all": lambda inst, b: AfterAll(inst),
    "rng-get-and-update-state": lambda inst, b: RngGetAndUpdateState(inst),
    "send": lambda inst, b: Send(inst),
    "recv": lambda inst, b: Recv(inst),
    "send-done": lambda inst, b: SendDone(inst),
    "recv-done": lambda inst, b: RecvDone(inst),
}
