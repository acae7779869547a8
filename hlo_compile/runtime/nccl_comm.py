"""The collective steps through NCCL: one participant per GPU, NVIDIA's ``nccl4py`` bindings.

``NcclCommunicator`` is the device implementation of ``participants.Communicator`` (the host's
is ``HostCommunicator``): the collective steps hand it their operands' buffers and it returns
the results' buffers, moved by NCCL on the platform's current stream (the main queue, or an
async region's side stream). nccl4py (import ``nccl.core``) API used: ``get_unique_id()``,
``Communicator.init(nranks, rank, unique_id)``, ``split(color, key)``, ``allreduce(send, recv,
op, stream=)``, ``allgather``, ``reduce_scatter(send, recv, op, stream=)``, ``broadcast(send,
recv, root, stream=)``, ``send(buf, peer, stream=)``/``recv(buf, peer, stream=)`` inside
``group()``, ``NcclRedOp.SUM/PROD/MAX/MIN``; buffers are passed as objects with a
``__cuda_array_interface__`` (nccl4py reads pointer, count and dtype from it).

What runs how (XLA's semantics, as ``collective_steps.Collective.results`` on the host):

- all-reduce: ``allreduce`` on the operand and result buffers themselves when their layouts
  agree (elementwise, so the physical order does not matter); pred ``and``/``or`` as MIN/MAX of
  bytes, c64/c128 ``add`` as the sum of their float parts; otherwise staged as below;
- the rest is staged: the participant's logical operand (row-major, on the device) is moved by
  NCCL (``allgather``; ``reduce_scatter`` of the operand with its scatter dimension moved first;
  all-to-all and collective-permute as ``send``/``recv`` grouped in one ``group()``, so every
  pair is posted before any waits; collective-broadcast as ``broadcast`` from the group's first
  participant), and arranged into XLA's result on the host;
- replica groups other than "everyone" run on a sub-communicator (``split``: color = the group's
  index, key = the rank in it), made once per distinct set of groups;
- send/recv with several participants, bf16/fp8/sub-byte reductions are refused by name.

Launching (``spmd_run``): one process per GPU, spawned (multiprocessing ``spawn``, the unique id
passed to the children) or started by an MPI launcher (``mpi4py``: rank and size from MPI, the
unique id broadcast from rank 0). Untested on GPUs here: the unit tests use a fake nccl4py.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Sequence

import numpy as np

from ..hlo import HloInstruction, HloModule
from ..hlo.collective_groups import World, group_of, participant_groups, permute_sources
from ..hlo.dtypes import numpy_dtype
from ..hlo.errors import HloUnsupportedError
from ..hlo.shape import Shape
from .participants import Communicator
from .runnable import reduction_kind, where
from .values import Buffer, download_value, upload_value

NCCL_OPS = {"add": "SUM", "multiply": "PROD", "maximum": "MAX", "minimum": "MIN", "and": "MIN", "or": "MAX"}
# element type → (typestr NCCL reduces as, elements per HLO element)
REDUCE_TYPES = {"f16": ("<f2", 1), "f32": ("<f4", 1), "f64": ("<f8", 1), "s8": ("|i1", 1), "u8": ("|u1", 1),
                "s32": ("<i4", 1), "u32": ("<u4", 1), "s64": ("<i8", 1), "u64": ("<u8", 1), "pred": ("|u1", 1),
                "c64": ("<f4", 2), "c128": ("<f8", 2)}
_SUB_BYTE = frozenset({"s2", "u2", "s4", "u4", "f4e2m1fn"})


def load_nccl() -> Any:
    """``nccl.core`` of nccl4py, or a refusal that says how to install it."""
    if importlib.util.find_spec("nccl") is None:
        raise HloUnsupportedError("the Python package 'nccl4py' is not installed (pip install 'hlo-compile[cuda]')")
    try:
        return importlib.import_module("nccl.core")
    except ImportError as e:
        raise HloUnsupportedError(f"nccl4py cannot be imported: {e}") from e


def gpu_count() -> int:
    """GPUs the driver sees (0 without a driver)."""
    try:
        from cuda.bindings import driver
        if int(driver.cuInit(0)[0]) != 0:
            return 0
        code, count = driver.cuDeviceGetCount()
        return int(count) if int(code) == 0 else 0
    except Exception:  # no cuda-python or no libcuda: no GPU
        return 0


def check_cuda_participants(module: HloModule, world: World, gpus: int | None = None) -> None:
    """Refuse, by name, an SPMD run cuda cannot do here: fewer GPUs than participants (one
    process per GPU on this machine; under MPI, the launcher's size must be the world's), or
    no nccl4py."""
    if world.size > 1:
        have = gpu_count() if gpus is None else gpus
        if have < world.size:
            raise HloUnsupportedError(f"module {module.name} runs on {world.size} participants but {have} GPU(s) "
                                      "are here (one GPU per participant)")
        load_nccl()


class DeviceArray:
    """``count`` elements of ``typestr`` at ``ptr``, as nccl4py takes buffers (CUDA Array Interface)."""

    def __init__(self, ptr: int, count: int, typestr: str):
        self.ptr, self.count, self.typestr = ptr, count, typestr
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": typestr, "data": (ptr, False),
                                         "version": 3, "strides": None}


def pointer(data: Any) -> int:
    """The address of a platform buffer (a ``cuda.DeviceBuffer``; a numpy array on the host)."""
    ptr = getattr(data, "ptr", None)
    return int(ptr) if ptr is not None else int(data.ctypes.data)


def stream_of(platform: Any) -> int:
    """The stream NCCL work goes on: the platform's current queue (0: the legacy stream)."""
    handle = getattr(platform, "nccl_stream", None)
    return int(handle()) if handle is not None else 0


def _bytes_shape(n: int) -> Shape:
    return Shape.array("u8", (n,))


class NcclCommunicator(Communicator):
    """One participant's NCCL communicator over the whole world (rank = flattened id)."""

    on_device = True

    def __init__(self, nccl: Any, comm: Any, world: World, rank: int):
        self.nccl, self.comm, self.world, self.rank = nccl, comm, world, rank
        self._subs: dict[tuple, Any] = {}

    # ---- the host interface (every collective goes through ``collective``) -------------------------
    def all_values(self, me: int, seq: int, value: Any, what: str) -> list[Any]:
        raise HloUnsupportedError(f"{what}: not a collective NCCL runs")

    def send(self, key: tuple, value: Any) -> None:
        raise HloUnsupportedError("send/recv between several GPUs are not supported yet")

    def recv(self, me: int, key: tuple, what: str) -> Any:
        raise HloUnsupportedError(f"{what}: send/recv between several GPUs are not supported yet")

    # ---- collectives ------------------------------------------------------------------------------
    def sub(self, groups: Sequence[Sequence[int]]) -> tuple[Any, list[int]]:
        """(the communicator of my group, my group) for ``groups`` (split once per set)."""
        mine = group_of(groups, self.rank)
        if len(mine) == self.world.size and mine == list(range(self.world.size)):
            return self.comm, mine
        key = tuple(tuple(g) for g in groups)
        if key not in self._subs:
            color = next(i for i, g in enumerate(groups) if self.rank in g)
            self._subs[key] = self.comm.split(color, mine.index(self.rank))
        return self._subs[key], mine

    def collective(self, inst: HloInstruction, opcode: str, platform: Any, operands: list[Any],
                   shapes: list[Shape]) -> list[Any]:
        """The result buffers (one per ``shapes``) of collective ``inst`` (base ``opcode``) on my
        ``operands`` (buffers), new and owned by the caller."""
        for s in shapes:
            if s.element_type in _SUB_BYTE:
                raise HloUnsupportedError(f"{where(inst)}: sub-byte elements do not run through NCCL yet",
                                          inst.location)
            if opcode in ("all-reduce", "reduce-scatter"):
                self._op(inst, s.element_type)  # refused before anything moves
        stream = stream_of(platform)
        if opcode == "all-reduce" and self._direct_all_reduce(inst, operands, shapes):
            return self._all_reduce(inst, platform, operands, shapes, stream)
        xs = [np.asarray(download_value(platform, v)) for v in operands]
        outs = self._staged(inst, opcode, platform, xs, stream)
        return [upload_value(platform, x.astype(numpy_dtype(s.element_type), copy=False), s)
                for x, s in zip(outs, shapes)]

    def _direct_all_reduce(self, inst, operands, shapes) -> bool:
        return all(op.shape.layout == s.layout and op.shape.element_type in REDUCE_TYPES
                   for op, s in zip(operands, shapes))

    def _op(self, inst: HloInstruction, element_type: str) -> Any:
        kind = reduction_kind(inst)
        if element_type not in REDUCE_TYPES or (element_type in ("c64", "c128") and kind != "add") \
                or kind is None:
            raise HloUnsupportedError(f"{where(inst)}: a {kind} reduction of {element_type} does not run through "
                                      "NCCL yet", inst.location)
        return getattr(self.nccl.NcclRedOp, NCCL_OPS[kind])

    def _all_reduce(self, inst, platform, operands, shapes, stream) -> list[Any]:
        comm, _ = self.sub(participant_groups(inst, self.world))
        outs = [Buffer(s, platform.allocate(s)) for s in shapes]
        with self.nccl.group():
            for src, dst, s in zip(operands, outs, shapes):
                typestr, per = REDUCE_TYPES[s.element_type]
                n = int(np.prod(s.dimensions, dtype=np.int64)) * per
                comm.allreduce(DeviceArray(pointer(src.data), n, typestr), DeviceArray(pointer(dst.data), n, typestr),
                               self._op(inst, s.element_type), stream=stream)
        return outs

    # ---- staged: logical row-major bytes through NCCL, arranged on the host -------------------------
    def _put(self, platform: Any, x: np.ndarray) -> Any:
        return platform.upload(np.ascontiguousarray(x).reshape(-1).view(np.uint8))

    def _get(self, platform: Any, data: Any, like: np.ndarray, shape: tuple) -> np.ndarray:
        raw = platform.download(data, _bytes_shape(like.itemsize * int(np.prod(shape, dtype=np.int64))))
        return np.frombuffer(raw.tobytes(), like.dtype).reshape(shape)

    def _bytes(self, data: Any, x: np.ndarray) -> DeviceArray:
        return DeviceArray(pointer(data), x.nbytes, "|u1")

    def _staged(self, inst: HloInstruction, opcode: str, platform: Any, xs: list[np.ndarray],
                stream: int) -> list[np.ndarray]:
        if opcode == "collective-permute":
            return self._permute(inst, platform, xs, stream)
        comm, group = self.sub(participant_groups(inst, self.world))
        n, rank = len(group), group.index(self.rank)
        temps: list[Any] = []
        try:
            if opcode == "all-reduce":
                return [self._reduce_scatter(inst, comm, platform, x, 1, 0, stream, temps) for x in xs]
            if opcode == "reduce-scatter":
                d = inst.dimensions[0]
                return [np.moveaxis(self._reduce_scatter(inst, comm, platform, np.moveaxis(x, d, 0), n, rank, stream,
                                                         temps), 0, d) for x in xs]
            if opcode == "all-gather":
                d = inst.dimensions[0]
                outs = []
                for x in xs:
                    src, dst = self._put(platform, x), self._put(platform, np.zeros((n,) + x.shape, x.dtype))
                    temps += [src, dst]
                    comm.allgather(self._bytes(src, x), DeviceArray(pointer(dst), n * x.nbytes, "|u1"), stream=stream)
                    parts = self._get(platform, dst, x, (n,) + x.shape)
                    outs.append(np.concatenate(list(parts), axis=d))
                return outs
            if opcode == "collective-broadcast":
                outs = []
                for x in xs:
                    src, dst = self._put(platform, x), self._put(platform, np.zeros_like(x))
                    temps += [src, dst]
                    comm.broadcast(self._bytes(src, x), self._bytes(dst, x), 0, stream=stream)
                    outs.append(self._get(platform, dst, x, x.shape))
                return outs
            if opcode == "all-to-all":
                if inst.dimensions:
                    d = inst.dimensions[0]
                    chunks = np.split(xs[0], n, axis=d)
                    got = self._exchange(comm, platform, chunks, list(range(n)), stream, temps)
                    return [np.concatenate(got, axis=d)]
                return self._exchange(comm, platform, xs, list(range(n)), stream, temps)
        finally:
            platform.synchronize()
            for t in temps:
                platform.free(t)
        raise HloUnsupportedError(f"{where(inst)}: no NCCL step", inst.location)

    def _reduce_scatter(self, inst, comm, platform, x: np.ndarray, n: int, rank: int, stream: int,
                        temps: list) -> np.ndarray:
        """Block ``rank`` of ``n`` (along axis 0) of the sum of every participant's ``x``."""
        typestr, per = REDUCE_TYPES.get(_type_name(x), (None, 1))
        op = self._op(inst, _type_name(x))
        flat = np.ascontiguousarray(x).reshape(-1)
        if x.dtype == np.bool_:
            flat = flat.view(np.uint8)
        block = (x.shape[0] // n,) + x.shape[1:]
        src, dst = self._put(platform, flat), self._put(platform, np.zeros(flat.size // n, flat.dtype))
        temps += [src, dst]
        count = flat.size * per
        if n == 1:
            comm.allreduce(DeviceArray(pointer(src), count, typestr), DeviceArray(pointer(dst), count, typestr), op,
                           stream=stream)
        else:
            comm.reduce_scatter(DeviceArray(pointer(src), count, typestr),
                                DeviceArray(pointer(dst), count // n, typestr), op, stream=stream)
        out = self._get(platform, dst, flat, (flat.size // n,))
        return (out.view(np.bool_) if x.dtype == np.bool_ else out).reshape(block)

    def _exchange(self, comm, platform, sends: list[np.ndarray], peers: list[int], stream: int,
                  temps: list) -> list[np.ndarray]:
        """``sends[j]`` to group rank ``peers[j]``, one buffer back from each, in one group."""
        srcs = [self._put(platform, x) for x in sends]
        dsts = [self._put(platform, np.zeros_like(x)) for x in sends]
        temps += srcs + dsts
        with self.nccl.group():
            for x, s, d, peer in zip(sends, srcs, dsts, peers):
                comm.send(self._bytes(s, x), peer, stream=stream)
                comm.recv(self._bytes(d, x), peer, stream=stream)
        return [self._get(platform, d, x, x.shape) for x, d in zip(sends, dsts)]

    def _permute(self, inst, platform, xs: list[np.ndarray], stream: int) -> list[np.ndarray]:
        sources = permute_sources(inst, self.world)
        targets = [t for t, s in sources.items() if s == self.rank]
        source = sources.get(self.rank)
        temps: list[Any] = []
        try:
            srcs = [self._put(platform, x) for x in xs]
            dsts = [self._put(platform, np.zeros_like(x)) for x in xs]
            temps += srcs + dsts
            with self.nccl.group():
                for x, s, d in zip(xs, srcs, dsts):
                    for t in targets:
                        self.comm.send(self._bytes(s, x), t, stream=stream)
                    if source is not None:
                        self.comm.recv(self._bytes(d, x), source, stream=stream)
            return [self._get(platform, d, x, x.shape) if source is not None else np.zeros_like(x)
                    for x, d in zip(xs, dsts)]
        finally:
            platform.synchronize()
            for t in temps:
                platform.free(t)

    def finished(self, me: int) -> None:
        pass

    def failed(self, error: BaseException) -> None:
        pass


_NP_TO_HLO = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
              np.dtype(np.int8): "s8", np.dtype(np.uint8): "u8", np.dtype(np.int32): "s32", np.dtype(np.uint32): "u32",
              np.dtype(np.int64): "s64", np.dtype(np.uint64): "u64", np.dtype(np.bool_): "pred",
              np.dtype(np.complex64): "c64", np.dtype(np.complex128): "c128"}


def _type_name(x: np.ndarray) -> str:
    return _NP_TO_HLO.get(x.dtype, str(x.dtype))

