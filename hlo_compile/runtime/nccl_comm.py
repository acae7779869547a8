"""The collective steps through NCCL: one participant per GPU, NVIDIA's ``nccl4py`` bindings.

``NcclCommunicator`` is the device implementation of ``participants.Communicator`` (the host's
is ``HostCommunicator``): the collective steps hand it their operands' buffers and it returns
the results' buffers, moved by NCCL on the platform's current stream (the main queue, or an
async region's side stream). nccl4py (import ``nccl.core``) API used: ``get_unique_id()``,
``Communicator.init(nranks, rank, unique_id)``, ``split(color, key)``, ``allreduce(send, recv,
op, stream=)``, ``allgather``, ``reduce_scatter(send, recv, op, stream=)``, ``broadcast(send,
recv, root, stream=)``, ``send(buf, peer, stream=)``/``recv(buf, peer, stream=)`` inside
``group()``, ``NcclRedOp.SUM/PROD/MAX/MIN``. nccl4py takes no datatype argument: it reads
pointer, count and dtype from the buffer (``NcclBuffer``: a cuda.core ``StridedMemoryView``
of its ``__cuda_array_interface__``, whose dtype is ``numpy.dtype(typestr)``; ``NcclDataType``
maps the ml_dtypes names ``bfloat16``, ``float8_e4m3fn``, ``float8_e5m2`` before the standard
kinds). So ``DeviceArray`` names bf16 and f8 by those dtype names, which numpy resolves (ml_dtypes
is imported), and NCCL reduces them as ``ncclBfloat16`` (NCCL 2.10+) and ``ncclFloat8e4m3``/
``ncclFloat8e5m2`` (2.24+, sm_90+), as XLA:GPU reduces them (in the element type itself).

What runs how (XLA's semantics, as ``collective_steps.Collective.results`` on the host):

- direct, on the buffers themselves (NCCL into the result; the device arranges with strided
  copies, ``cuMemcpy2DAsync``, on the same stream), when every operand and result has a plain
  layout (no tiles or padding) and the operand's layout is the result's:
  all-reduce (elementwise: any layout); all-gather into the result when the gathered
  dimension is the major one of the physical layout (every more major dimension of size 1),
  else into a scratch buffer (participant-major) copied into place; reduce-scatter the same way
  round (the scattered blocks made contiguous first); all-to-all as ``send``/``recv`` of the
  blocks (or of scratch blocks) grouped in one ``group()``; collective-permute and
  collective-broadcast (``broadcast`` from the group's first participant) of the buffers;
  pred ``and``/``or`` reduce as MIN/MAX of bytes, c64/c128 ``add`` as the sum of their floats;
- staged through host bytes when the layouts differ (a result in another physical order): the
  participant's logical operand (row-major, on the device) is moved by NCCL and arranged on
  the host (``staged`` counts them: ``paths`` records which path each collective took);
- send/recv (``_xla_send_recv_source_target_pairs``): the ``send`` and ``recv`` steps post
  their transfer (the recv's buffer is allocated then); the posted transfers go to NCCL in one
  ``group()`` (in channel order, so the sender's and receiver's calls pair) at the next
  send-done/recv-done or collective. Every participant runs the same program, so they group
  the same instructions, and a ring (everyone sends and receives) cannot wait on itself;
- ragged-all-to-all (``_ragged_all_to_all``): its offsets and sizes are device data, so they
  are read to the host first (the stream waits, as XLA:GPU's NCCL path does: it copies them to
  the host and blocks; its one-shot kernel reads them on the device instead), every member's
  gathered (one ``allgather`` of ``int64[4, n * k]``) and every transfer of the group checked
  alike (``ragged_all_to_all.ragged_transfers``: a refusal stops every member before any row
  moves); then the result starts as a copy of the output operand and each update is one
  ``send`` of the sender's rows and one ``recv`` into the receiver's rows at its offset, all in
  one ``group()`` (per pair in update order, so they pair). Rows are contiguous bytes when
  dimension 0 is the major one of the input's, output's and result's one plain layout; else
  the rows go through row-major scratch buffers (staged);
- replica groups other than "everyone" run on a sub-communicator (``split``: color = the group's
  index, key = the rank in it), made once per distinct set of groups;
- refused by name: sub-byte elements, reductions of types NCCL has no datatype for (s16, u16,
  f8 variants other than e4m3fn/e5m2, ...), c64/c128 other than ``add``.

Launching (``spmd_run``): one process per GPU, spawned (multiprocessing ``spawn``, the unique id
passed to the children) or started by an MPI launcher (``mpi4py``: rank and size from MPI, the
unique id broadcast from rank 0). Untested on GPUs here: the unit tests use a fake nccl4py.
"""
from __future__ import annotations

import ctypes
import importlib
import importlib.util
from typing import Any, Sequence

import ml_dtypes
import numpy as np

from ..hlo import HloInstruction, HloModule
from ..hlo.collective_groups import World, group_of, participant_groups, permute_sources, ragged_updates_per_peer
from ..hlo.dtypes import numpy_dtype
from ..hlo.errors import HloUnsupportedError
from ..hlo.shape import Shape
from .participants import Communicator
from .physical import buffer_bytes, storage_dtype
from .ragged_all_to_all import metadata_rows, ragged_transfers
from ..driver.runnable import reduction_kind, where
from .values import Buffer, download_value, upload_value

NCCL_OPS = {"add": "SUM", "multiply": "PROD", "maximum": "MAX", "minimum": "MIN", "and": "MIN", "or": "MAX"}
# element type → (the dtype NCCL reduces it as, by its typestr; elements per HLO element)
REDUCE_TYPES = {"f16": ("<f2", 1), "f32": ("<f4", 1), "f64": ("<f8", 1), "s8": ("|i1", 1), "u8": ("|u1", 1),
                "s32": ("<i4", 1), "u32": ("<u4", 1), "s64": ("<i8", 1), "u64": ("<u8", 1), "pred": ("|u1", 1),
                "c64": ("<f4", 2), "c128": ("<f8", 2),
                # ml_dtypes' names: ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2 (module docstring)
                "bf16": ("bfloat16", 1), "f8e4m3fn": ("float8_e4m3fn", 1), "f8e5m2": ("float8_e5m2", 1)}
_SUB_BYTE = frozenset({"s2", "u2", "s4", "u4", "f4e2m1fn"})
BYTES = "|u1"


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


def gpu_arch(ordinal: int = 0) -> str:
    """``sm_XY`` of GPU ``ordinal``, read from the driver without making a context."""
    from cuda.bindings import driver

    from .cuda import check
    check(driver.cuInit(0), "cuInit")
    dev = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
    attr = driver.CUdevice_attribute
    major = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "attribute")
    minor = check(driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "attribute")
    return f"sm_{major}{minor}"


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


def plain(shape: Shape) -> bool:
    """Whether a buffer of ``shape`` is its elements in its layout's order and nothing else
    (no tiles, padding or other suffix that moves bytes)."""
    layout = shape.layout
    if layout is not None and (layout.tiles or layout.element_size_in_bits or layout.tail_padding_alignment != 1):
        return False
    itemsize = storage_dtype(shape.element_type).itemsize
    return buffer_bytes(shape) == shape.element_count() * itemsize


def same_order(a: Shape, b: Shape) -> bool:
    """Whether two plain buffers keep their dimensions in one physical order."""
    return plain(a) and plain(b) and a.element_type == b.element_type and a.minor_to_major == b.minor_to_major


def rows(shape: Shape, d: int) -> tuple[int, int]:
    """A plain buffer of ``shape`` as (rows, bytes per row) around dimension ``d``: the rows
    index the dimensions more major than ``d`` in its physical order, a row holds ``d`` and
    every more minor one. Splitting ``d`` in n blocks splits each row in n pieces."""
    major_to_minor = list(reversed(shape.minor_to_major))
    k = major_to_minor.index(d)
    outer = int(np.prod([shape.dimensions[i] for i in major_to_minor[:k]], dtype=np.int64))
    per_row = buffer_bytes(shape) // outer if outer else 0
    return outer, per_row


def copy_rows(platform: Any, stream: int, dst: int, dst_pitch: int, src: int, src_pitch: int, width: int,
              height: int) -> None:
    """``height`` rows of ``width`` bytes from ``src`` (rows ``src_pitch`` apart) to ``dst``
    (``dst_pitch`` apart), on ``stream`` after the work queued there (cuda: one
    ``cuMemcpy2DAsync``; the host platform: its buffers are host memory)."""
    if not width or not height:
        return
    if getattr(platform, "name", "") != "cuda":
        for r in range(height):
            ctypes.memmove(dst + r * dst_pitch, src + r * src_pitch, width)
        return
    from cuda.bindings import driver

    from .cuda import check
    p = driver.CUDA_MEMCPY2D()
    p.srcMemoryType = p.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.srcPitch = driver.CUdeviceptr(src), src_pitch
    p.dstDevice, p.dstPitch = driver.CUdeviceptr(dst), dst_pitch
    p.WidthInBytes, p.Height = width, height
    check(driver.cuMemcpy2DAsync(p, driver.CUstream(stream)), "cuMemcpy2DAsync")


class NcclCommunicator(Communicator):
    """One participant's NCCL communicator over the whole world (rank = flattened id)."""

    on_device = True

    def __init__(self, nccl: Any, comm: Any, world: World, rank: int):
        self.nccl, self.comm, self.world, self.rank = nccl, comm, world, rank
        self._subs: dict[tuple, Any] = {}
        self._p2p: list[tuple] = []  # posted send/recv: (channel, kind, pointer, bytes, peer)
        self.paths: list[tuple[str, str]] = []  # (instruction, "direct" | "arranged" | "staged")

    # ---- the host interface (every collective goes through ``collective``) -------------------------
    def all_values(self, me: int, seq: int, value: Any, what: str) -> list[Any]:
        raise HloUnsupportedError(f"{what}: not a collective NCCL runs")

    def send(self, key: tuple, value: Any) -> None:
        raise HloUnsupportedError("send/recv through NCCL post device buffers (post_send)")

    def recv(self, me: int, key: tuple, what: str) -> Any:
        raise HloUnsupportedError(f"{what}: send/recv through NCCL post device buffers (post_recv)")

    # ---- send/recv ----------------------------------------------------------------------------------
    def post_send(self, inst: HloInstruction, data: Buffer, targets: Sequence[int]) -> None:
        """``send`` ``inst``: its operand's buffer to each of ``targets`` (world ranks), at the
        next ``flush``."""
        self._check_bytes(inst, data.shape)
        for t in targets:
            self._p2p.append((_channel(inst), "send", pointer(data.data), buffer_bytes(data.shape), t))

    def post_recv(self, inst: HloInstruction, platform: Any, shape: Shape, source: int) -> Buffer:
        """``recv`` ``inst``: a new buffer the data from ``source`` arrives in by the next ``flush``."""
        self._check_bytes(inst, shape)
        out = Buffer(shape, platform.allocate(shape))
        self._p2p.append((_channel(inst), "recv", pointer(out.data), buffer_bytes(shape), source))
        return out

    def flush(self, platform: Any) -> None:
        """Hand every posted send and recv to NCCL in one group, in channel order."""
        if not self._p2p:
            return
        ops, self._p2p = sorted(self._p2p, key=lambda o: o[0]), []
        stream = stream_of(platform)
        with self.nccl.group():
            for _, kind, ptr, n, peer in ops:
                getattr(self.comm, kind)(DeviceArray(ptr, n, BYTES), peer, stream=stream)

    def _check_bytes(self, inst: HloInstruction, shape: Shape) -> None:
        if shape.element_type in _SUB_BYTE:
            raise HloUnsupportedError(f"{where(inst)}: sub-byte elements do not run through NCCL yet", inst.location)

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
            self._check_bytes(inst, s)
            if opcode in ("all-reduce", "reduce-scatter"):
                self._op(inst, s.element_type)  # refused before anything moves
        self.flush(platform)
        stream = stream_of(platform)
        if opcode == "ragged-all-to-all":
            return self._ragged_all_to_all(inst, platform, operands, shapes[0], stream)
        if all(same_order(op.shape, s) for op, s in zip(operands, shapes)) \
                and (opcode != "all-to-all" or len({op.shape.minor_to_major for op in operands}) == 1):
            return self._direct(inst, opcode, platform, operands, shapes, stream)
        self.paths.append((inst.name, "staged"))
        xs = [np.asarray(download_value(platform, v)) for v in operands]
        outs = self._staged(inst, opcode, platform, xs, stream)
        return [upload_value(platform, x.astype(numpy_dtype(s.element_type), copy=False), s)
                for x, s in zip(outs, shapes)]

    def _op(self, inst: HloInstruction, element_type: str) -> Any:
        kind = reduction_kind(inst)
        if element_type not in REDUCE_TYPES or (element_type in ("c64", "c128") and kind != "add") \
                or kind is None:
            raise HloUnsupportedError(f"{where(inst)}: a {kind} reduction of {element_type} does not run through "
                                      "NCCL (no NCCL datatype or operation for it)", inst.location)
        return getattr(self.nccl.NcclRedOp, NCCL_OPS[kind])

    def _typed(self, ptr: int, shape: Shape, blocks: int = 1) -> DeviceArray:
        """``1/blocks`` of a buffer of ``shape`` at ``ptr``, as the type NCCL reduces it as."""
        typestr, per = REDUCE_TYPES[shape.element_type]
        return DeviceArray(ptr, shape.element_count() * per // blocks, typestr)

    # ---- direct: NCCL on the buffers, arranged on the device ----------------------------------------
    def _direct(self, inst, opcode, platform, operands, shapes, stream) -> list[Any]:
        if opcode == "collective-permute":
            return self._permute_buffers(inst, platform, operands, shapes, stream)
        comm, group = self.sub(participant_groups(inst, self.world))
        n, me = len(group), group.index(self.rank)
        outs = [Buffer(s, platform.allocate(s)) for s in shapes]
        temps: list[Any] = []
        arranged = False
        try:
            if opcode == "all-reduce":
                with self.nccl.group():
                    for src, dst in zip(operands, outs):
                        op = self._op(inst, dst.shape.element_type)
                        comm.allreduce(self._typed(pointer(src.data), src.shape),
                                       self._typed(pointer(dst.data), dst.shape), op, stream=stream)
            elif opcode == "collective-broadcast":
                with self.nccl.group():
                    for src, dst in zip(operands, outs):
                        nbytes = buffer_bytes(src.shape)
                        comm.broadcast(DeviceArray(pointer(src.data), nbytes, BYTES),
                                       DeviceArray(pointer(dst.data), nbytes, BYTES), 0, stream=stream)
            elif opcode == "all-gather":
                arranged = self._all_gather(inst, comm, n, platform, operands, outs, stream, temps)
            elif opcode == "reduce-scatter":
                arranged = self._reduce_scatter_buffers(inst, comm, n, platform, operands, outs, stream, temps)
            elif opcode == "all-to-all":
                arranged = self._all_to_all(inst, comm, n, me, platform, operands, outs, stream, temps)
            else:
                raise HloUnsupportedError(f"{where(inst)}: no NCCL step for {opcode}", inst.location)
        finally:
            if temps:
                platform.synchronize()
                for t in temps:
                    platform.free(t)
        self.paths.append((inst.name, "arranged" if arranged else "direct"))
        return outs

    def _scratch(self, platform: Any, nbytes: int, temps: list) -> int:
        data = platform.allocate(_bytes_shape(nbytes))
        temps.append(data)
        return pointer(data)

    def _all_gather(self, inst, comm, n, platform, operands, outs, stream, temps) -> bool:
        """Participant j's operand is block j of each row of the result (rows around the
        gathered dimension): NCCL gathers straight into the result when there is one row."""
        d = inst.dimensions[0]
        later = []
        with self.nccl.group():
            for src, dst in zip(operands, outs):
                height, width = rows(src.shape, d)
                nbytes = height * width
                into = pointer(dst.data) if height <= 1 else self._scratch(platform, n * nbytes, temps)
                comm.allgather(DeviceArray(pointer(src.data), nbytes, BYTES), DeviceArray(into, n * nbytes, BYTES),
                               stream=stream)
                if height > 1:
                    later.append((into, dst, height, width))
        for gathered, dst, height, width in later:  # (n, rows, width) → (rows, n, width)
            for j in range(n):
                copy_rows(platform, stream, pointer(dst.data) + j * width, n * width, gathered + j * height * width,
                          width, width, height)
        return bool(later)

    def _reduce_scatter_buffers(self, inst, comm, n, platform, operands, outs, stream, temps) -> bool:
        """Block j of every row of the operand goes to participant j: made contiguous first
        (rows, n, width) → (n, rows, width) when there are several rows."""
        d = inst.dimensions[0]
        sends = []
        for src in operands:
            height, per_row = rows(src.shape, d)
            if height <= 1:
                sends.append(pointer(src.data))
                continue
            width = per_row // n
            packed = self._scratch(platform, height * per_row, temps)
            for j in range(n):
                copy_rows(platform, stream, packed + j * height * width, width, pointer(src.data) + j * width, per_row,
                          width, height)
            sends.append(packed)
        with self.nccl.group():
            for send, src, dst in zip(sends, operands, outs):
                comm.reduce_scatter(self._typed(send, src.shape), self._typed(pointer(dst.data), src.shape, n),
                                    self._op(inst, dst.shape.element_type), stream=stream)
        return bool(temps)

    def _all_to_all(self, inst, comm, n, me, platform, operands, outs, stream, temps) -> bool:
        """Block j (of the split dimension, or operand j of the tuple form) to participant j,
        participant j's block into block j of the result, in one group."""
        if not inst.dimensions:
            pairs = [(pointer(src.data), pointer(dst.data), buffer_bytes(src.shape))
                     for src, dst in zip(operands, outs)]
            self._exchange_buffers(comm, pairs, stream)
            return False
        (src,), (dst,) = operands, outs
        height, per_row = rows(src.shape, inst.dimensions[0])
        width = per_row // n
        if height <= 1:
            self._exchange_buffers(comm, [(pointer(src.data) + j * width, pointer(dst.data) + j * width, width)
                                          for j in range(n)], stream)
            return False
        block = height * width
        packed, got = self._scratch(platform, n * block, temps), self._scratch(platform, n * block, temps)
        for j in range(n):
            copy_rows(platform, stream, packed + j * block, width, pointer(src.data) + j * width, per_row, width,
                      height)
        self._exchange_buffers(comm, [(packed + j * block, got + j * block, block) for j in range(n)], stream)
        for j in range(n):
            copy_rows(platform, stream, pointer(dst.data) + j * width, per_row, got + j * block, width, width, height)
        return True

    def _exchange_buffers(self, comm, pairs: list[tuple[int, int, int]], stream: int) -> None:
        """``pairs[j]`` = (what goes to group rank j, where j's comes, bytes), in one group."""
        with self.nccl.group():
            for peer, (send, recv, nbytes) in enumerate(pairs):
                comm.send(DeviceArray(send, nbytes, BYTES), peer, stream=stream)
                comm.recv(DeviceArray(recv, nbytes, BYTES), peer, stream=stream)

    def _permute_buffers(self, inst, platform, operands, shapes, stream) -> list[Any]:
        sources = permute_sources(inst, self.world)
        targets = [t for t, s in sources.items() if s == self.rank]
        source = sources.get(self.rank)
        if source is None:  # nothing arrives: zeros (XLA's runtime behaviour)
            outs = [upload_value(platform, np.zeros(tuple(s.dimensions), numpy_dtype(s.element_type)), s)
                    for s in shapes]
        else:
            outs = [Buffer(s, platform.allocate(s)) for s in shapes]
        with self.nccl.group():
            for src, dst in zip(operands, outs):
                nbytes = buffer_bytes(src.shape)
                for t in targets:
                    self.comm.send(DeviceArray(pointer(src.data), nbytes, BYTES), t, stream=stream)
                if source is not None:
                    self.comm.recv(DeviceArray(pointer(dst.data), nbytes, BYTES), source, stream=stream)
        self.paths.append((inst.name, "direct"))
        return outs

    # ---- ragged-all-to-all: metadata to the host, rows by send/recv -----------------------------------
    def _ragged_all_to_all(self, inst, platform, operands, shape: Shape, stream: int) -> list[Any]:
        comm, group = self.sub(participant_groups(inst, self.world))
        n, me = len(group), group.index(self.rank)
        k = ragged_updates_per_peer(inst, n)
        data, out = operands[0], operands[1]
        mine = metadata_rows([np.asarray(download_value(platform, v)) for v in operands[2:]])
        temps: list[Any] = []
        try:
            src, dst = self._put(platform, mine), self._put(platform, np.zeros((n,) + mine.shape, np.int64))
            temps += [src, dst]
            comm.allgather(self._bytes(src, mine), DeviceArray(pointer(dst), n * mine.nbytes, BYTES), stream=stream)
            everyone = self._get(platform, dst, mine, (n,) + mine.shape)
            moves = ragged_transfers(inst, list(everyone), k, data.shape.dimensions[0], out.shape.dimensions[0])
            direct = all(same_order(s, shape) and _rows_major(s) for s in (data.shape, out.shape))
            if direct:
                result = Buffer(shape, platform.allocate(shape))
                platform.copy(result.data, out.data, out.shape)
                send_ptr, recv_ptr = pointer(data.data), pointer(result.data)
                row = buffer_bytes(shape) // max(shape.dimensions[0], 1)
            else:  # row-major scratch: the logical arrays' bytes
                x, y = (np.asarray(download_value(platform, v)) for v in (data, out))
                staged_in, staged_out = self._put(platform, x), self._put(platform, y)
                temps += [staged_in, staged_out]
                send_ptr, recv_ptr = pointer(staged_in), pointer(staged_out)
                row = y.nbytes // max(y.shape[0], 1)
            with self.nccl.group():
                for t in moves:
                    if t.sender == me:
                        comm.send(DeviceArray(send_ptr + t.src * row, t.rows * row, BYTES), t.receiver, stream=stream)
                    if t.receiver == me:
                        comm.recv(DeviceArray(recv_ptr + t.dst * row, t.rows * row, BYTES), t.sender, stream=stream)
            if not direct:
                result = upload_value(platform, self._get(platform, staged_out, y, y.shape), shape)
        finally:
            platform.synchronize()
            for t in temps:
                platform.free(t)
        self.paths.append((inst.name, "direct" if direct else "staged"))
        return [result]

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
              np.dtype(np.complex64): "c64", np.dtype(np.complex128): "c128", np.dtype(ml_dtypes.bfloat16): "bf16",
              np.dtype(ml_dtypes.float8_e4m3fn): "f8e4m3fn", np.dtype(ml_dtypes.float8_e5m2): "f8e5m2"}


def _type_name(x: np.ndarray) -> str:
    return _NP_TO_HLO.get(x.dtype, str(x.dtype))



def _rows_major(shape: Shape) -> bool:
    """Whether dimension 0's rows are contiguous in a plain buffer of ``shape`` (every more
    major dimension of its layout has size 1)."""
    major_to_minor = list(reversed(shape.minor_to_major))
    return all(shape.dimensions[d] == 1 for d in major_to_minor[:major_to_minor.index(0)])


def _channel(inst: HloInstruction) -> int:
    return int(inst.attr("channel_id", 0) or 0)
