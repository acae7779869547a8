"""The bitonic sort emitter: one block sorts one row in shared memory.

A ``sort`` fusion (see ``__init__.py`` for the HLO semantics) whose rows fit in a block's static
shared memory is emitted as a bitonic sorting network instead of the rank sort, which costs
O(n²) comparator calls per row. A *row* is the 1-D slice along the sort dim through one
combination of the other dims; block ``r`` (grid x, then y past the grid's x limit) sorts row
``r`` in three phases:

- Load: the row's length ``n`` is padded to ``P``, the next power of two (at least 2). Each
  of the ``T = max(1, P/4)`` threads (XLA's sort: ``tile_size / kUnrollFactor`` threads, each
  copying 4 adjacent elements) handles the adjacent slots ``t·S .. t·S + S - 1`` (``S = P/T``,
  4 from ``P = 4`` on); for a slot
  ``s < n`` it computes every operand of the sort at index ``s`` of the row through the
  ``FusedEmitter`` (fused prologue ops are recomputed, as in the rank sort) and stores it in
  that operand's shared array (storage type: ``pred`` and narrow integers as a byte, bf16 and
  f16 as themselves). A parallel ``i32`` array holds each slot's original position. Padding
  slots get position ``s`` (≥ n) and zero bits, only so that the comparator never reads
  uninitialised memory: it does run on them, but its answer is discarded (see below). A
  thread's slots go in groups of ``g`` (4 when ``n`` is a multiple of 4: all inside the row or
  all padding, one guard each), and the parameters the operands read at their own index are
  loaded a group at a time as explicit vectors (``vectors.py``: ``ld.global.nc.v4.b32`` like
  XLA's, where the layout makes them aligned), the fused prologue computing on the lanes.
- Sort: for ``k = 2, 4, ..., P`` and ``j = k/2, ..., 1`` every thread compare-exchanges its
  ``P/2/T`` pairs (2 from ``P = 4`` on) ``(i, i + j)`` (``i`` with bit ``j`` clear), ascending where ``i & k == 0``,
  then a barrier. The order (a strict total order when the comparator is a strict weak
  order) is on (values, position):

      x before y  <=>  both valid and ((less(x, y) and not less(y, x))
                                        or (less(x, y) == less(y, x) and pos_x < pos_y))
                       or, if either is padding, pos_x < pos_y

  A slot is valid when its position is below ``n``; padding positions are all ≥ n, so the
  position test alone sends padding after every valid element whatever the comparator says.
  For a comparator that is a strict weak order the valid part is ``less(x, y) or (!less(y, x)
  and pos_x < pos_y)``: ties keep their original order, so the result is the stable sort,
  exactly the rank sort's answer (and the interpreter's). The symmetric form (the rank sort's)
  also orders ``LE``/``GE`` comparators, which answer true both ways on ties. A swap moves
  every operand's value and the position together. Two comparator calls per pair.
- Store: after the last barrier slot ``s < n`` holds the row's element of rank ``s``; every
  fusion output (a sort output, picked by ``leaf_outputs`` as in the rank sort) gets it at
  index ``s`` along the sort dim, at its physical offset; a group of slots is one vector store
  per output whose layout allows it (``st.global.v4.b32``), else one store per element.

Cost per row: ``log2(P)·(log2(P)+1)/2`` steps of ``P/2`` pairs, i.e. O(n log² n) comparator
calls instead of the rank sort's O(n²), and one barrier per step.

When (``plan_bitonic_sort``): the hero is a ``sort`` (``topk`` keeps the rank kernel), the row
has at least ``BITONIC_MIN_ROW`` (2) elements (a row of one is a copy: the rank kernel does it
with full blocks), there is at least one row, and the arrays — ``P`` elements per operand plus
the positions, each array rounded up to 16 bytes as the targets place them — fit the device's
static shared memory per block (48 KiB): rows of up to 4096 elements for one or two
32-bit operands (4096 · 12 B is exactly 48 KiB), up to 2048 for three or four. Otherwise the
rank sort takes the fusion and says why in its report. Short rows get one small block each too,
as XLA's GPU sort (``EmitBitonicSortLLVMIR``: tile = the row padded to a power of two, at most
4096 and what fits 48 KiB; one block of ``tile / 4`` threads per tile; XLA keeps no position
array: its tile is ``P`` x the operands' bytes, ours adds the ``P`` x 4 B positions that make
the result the stable sort whatever the comparator). Not measured here yet (no GPU in the session that wrote this): very many very short
rows leave most lanes of a warp idle, where the rank sort fills 128-thread blocks; a
measurement could raise ``BITONIC_MIN_ROW``.
"""
from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import ClassVar, Iterator, Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ....hlo.shape import Shape
from ....indexing import affine as A
from ....indexing.indexing_map import IndexingMap
from ....gpu.device_info import DeviceInfo
from ...elemental.fused_emitter import FusedEmitter
from ...kernel import Declined, KernelSpec, kernel_index_type, open_kernel, output_leaves
from ...kernel_builder import KernelBuilder
from ...launch import split_grid
from ...llvm_types import I32, UnsupportedElementType, from_storage, storage_bytes, storage_type, to_storage
from ...elemental.partitioner import partition
from ...target import LaunchDims, Target
from ...model.thread_maps import expr_delinearize, work_item_map
from .common import SortAlgorithm, comparator_before, store_at_position
from .vectors import chunk, group_size, load_group, params_at_operand_index, store_group

BITONIC_MIN_ROW = 2          # shorter rows (of one element) stay with the rank kernel
MAX_THREADS = 1024           # CUDA's limit on threads per block
SHARED_ALIGN = 16            # both targets start every shared array on a 16-byte boundary
POSITION_BYTES = 4           # the i32 array of original positions
UNROLL = 4                   # XLA's kUnrollFactor: adjacent elements a thread copies to shared memory


@dataclass(frozen=True, kw_only=True)
class BitonicSortKernelSpec(KernelSpec):
    """A bitonic sort kernel: one block per row of a fusion whose root is a ``sort``."""

    hero: HloInstruction            # the sort
    leaf_outputs: tuple[int, ...]   # fusion output buffer k holds hero output leaf_outputs[k]
    dims: tuple[int, ...]           # the operands' logical dims
    sort_dim: int
    padded: int                     # P: the row length rounded up to a power of two (≥ 2)
    static_shared_bytes: int
    algorithm: ClassVar[SortAlgorithm] = SortAlgorithm.BITONIC

    @property
    def row_length(self) -> int:
        return self.dims[self.sort_dim]

    @property
    def rows(self) -> int:
        return math.prod(self.dims) // self.row_length

    @property
    def threads(self) -> int:
        return self.launch.block[0]

    @property
    def slots_per_thread(self) -> int:
        return self.padded // self.threads

    @property
    def group(self) -> int:
        """Adjacent slots of a thread accessed together (a vector per buffer that allows it):
        the most that are all inside the row or all padding (``vectors.group_size``)."""
        return group_size(self.row_length, self.slots_per_thread)

    @property
    def pairs_per_thread(self) -> int:
        return self.padded // 2 // self.threads

    @property
    def log2_padded(self) -> int:
        return self.padded.bit_length() - 1

    @property
    def steps(self) -> int:
        """Compare-exchange steps of the network, one barrier each."""
        s = self.log2_padded
        return s * (s + 1) // 2

    # ---- thread -> data maps ----------------------------------------------------------------
    def _slot_map(self) -> IndexingMap:
        """Row ``bl_y · grid_x + bl_x``, slot ``th_x · slots + s0`` of it (s0: the thread's
        adjacent slots), as an index of the operands: where the load phase reads and, after sorting,
        the store phase writes (the value is the element of that rank)."""
        row = A.add(A.dim(3), A.mul(A.dim(4), self.launch.grid[0]))
        slot = A.add(A.mul(A.dim(0), self.slots_per_thread), A.sym(0))
        outer = [d for k, d in enumerate(self.dims) if k != self.sort_dim]
        index = expr_delinearize(row, outer)
        index.insert(self.sort_dim, slot)
        return work_item_map(index, self.launch, [(0, self.slots_per_thread - 1)],
                             [(row, 0, self.rows - 1), (slot, 0, self.row_length - 1)])

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap:
        return self._slot_map()

    def thread_to_output_map(self, leaf: int | None = None) -> IndexingMap:
        return self._slot_map()

    def report_lines(self) -> list[str]:
        n, p = self.row_length, self.padded
        ops = ", ".join(str(o.shape.element_type) for o in self.hero.operands)
        return [f"bitonic sort in shared memory: sort of {len(self.hero.operands)} operand(s) ({ops}), "
                f"stable={self.hero.attr('is_stable', False)} (the result is stable either way), along dim "
                f"{self.sort_dim}, {self.rows} row(s) of {n}",
                f"one block per row: tile {p} (row padded to a power of two, padding sorts last by position), "
                f"{self.threads} threads, {self.slots_per_thread} slot(s) and {self.pairs_per_thread} "
                f"compare-exchange pair(s) per thread and step",
                f"{self.log2_padded} stage(s), {self.steps} step(s), {self.steps + 1} barriers; "
                f"{2 * self.steps * self.pairs_per_thread} comparator calls per thread (O(n log^2 n) per row)",
                f"shared memory {self.static_shared_bytes} B static ({len(self.hero.operands)} operand array(s) "
                f"+ i32 positions, {p} elements each), index type {self.index_type}",
                self._vector_line(),
                *self.partitioned.to_text().splitlines()]

    def _vector_line(self) -> str:
        """Which global accesses are vectors (``vectors.py``): elements per access of each
        parameter the operands read at their own index and of each output."""
        loads = ", ".join(f"%{p.name} {chunk(p.shape, self.sort_dim, self.group)}"
                          for p in params_at_operand_index(self.hero, self.dims)) or "-"
        stores = ", ".join(str(chunk(shape, self.sort_dim, self.group)) for _, shape in output_leaves(self.fusion))
        return (f"global accesses in groups of {self.group} adjacent slot(s); elements per vector: "
                f"loads {loads}; stores {stores}")

    def summary_fields(self) -> dict:
        return {"algorithm": self.algorithm, "row_length": self.row_length, "sort_dim": self.sort_dim,
                "tile": self.padded, "threads_per_block": self.threads, "steps": self.steps,
                "barriers": self.steps + 1, "comparisons_per_thread": 2 * self.steps * self.pairs_per_thread,
                "static_shared_bytes": self.static_shared_bytes, "index_type": str(self.index_type)}


# ---- the plan ------------------------------------------------------------------------------------

def padded_length(n: int) -> int:
    """The smallest power of two ≥ max(n, 2): the network's width."""
    return max(2, 1 << (max(n, 1) - 1).bit_length())


def shared_bytes_for(hero: HloInstruction, padded: int) -> int:
    """Static shared memory of the kernel: one array per operand (storage type) and the i32
    positions, ``padded`` elements each, every array rounded up to ``SHARED_ALIGN``."""
    sizes = [padded * storage_bytes(o.shape.element_type) for o in hero.operands] + [padded * POSITION_BYTES]
    return sum(-(-s // SHARED_ALIGN) * SHARED_ALIGN for s in sizes)


def plan_bitonic_sort(fusion: HloInstruction, device: DeviceInfo, kernel_name: str, hero: HloInstruction,
                      leaves: tuple[int, ...], dims: tuple[int, ...], sort_dim: int,
                      declined: str = "") -> BitonicSortKernelSpec:
    """The bitonic plan for a sort fusion; declines (``Declined``, why the rank sort should
    take it) where it does not fit. The first algorithm tried: nothing declined before."""
    if hero.opcode != "sort":
        raise Declined(f"{hero.opcode} uses the rank kernel")
    n = dims[sort_dim]
    if n < BITONIC_MIN_ROW:
        raise Declined(f"rows of {n} element(s): nothing to sort")
    rows = math.prod(dims) // n
    if rows == 0:
        raise Declined("no rows")
    padded = padded_length(n)
    try:
        shared = shared_bytes_for(hero, padded)
    except UnsupportedElementType as e:
        raise Declined(str(e)) from None
    limit = device.shared_memory_per_block
    if shared > limit:
        raise Declined(f"a row padded to {padded} needs {shared} B of shared memory, more than the {limit} B "
                       "of static shared memory per block")
    # XLA's tiled sort kernel: tile_size / kUnrollFactor threads (at least one), 4 slots each
    threads = min(max(1, padded // UNROLL), MAX_THREADS, device.threads_per_block_limit)
    launch = LaunchDims(split_grid(rows, device, f"{rows} rows need {rows} blocks"), (threads, 1, 1))
    return BitonicSortKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation),
                                 hero=hero, leaf_outputs=leaves, dims=dims, sort_dim=sort_dim, padded=padded,
                                 launch=launch, index_type=kernel_index_type(fusion, launch),
                                 static_shared_bytes=shared)


# ---- emission ------------------------------------------------------------------------------------

@dataclass
class _Row:
    """What the three phases share: the builder, the fused emitter, the shared arrays and the
    row's index (the sort dim's entry is filled per slot)."""

    kb: KernelBuilder
    fe: FusedEmitter
    spec: BitonicSortKernelSpec
    arrays: list[ir.Value]          # one per sort operand, storage type
    positions: ir.Value             # i32 original positions
    index: list[ir.Value | None]    # the row's index, None at the sort dim
    tid: ir.Value
    vector_params: list[tuple[HloInstruction, int]]  # parameters loaded as vectors of k elements

    def at(self, s: ir.Value) -> list[ir.Value]:
        out = list(self.index)
        out[self.spec.sort_dim] = s
        return out

    def element_types(self) -> list[str]:
        return [o.shape.element_type for o in self.spec.hero.operands]


def emit_bitonic_sort(target: Target, spec: BitonicSortKernelSpec) -> ir.Module:
    vector_params = [(p, k) for p in params_at_operand_index(spec.hero, spec.dims)
                     if (k := chunk(p.shape, spec.sort_dim, spec.group)) > 1]
    # seeded vector lanes are looked up in the kernel body: the prologue is emitted inline
    kernel = open_kernel(target, spec, inline=bool(vector_params))
    kb, b, fe = kernel.kb, kernel.b, kernel.fe
    outputs = [(shape, ptr) for (_, shape), ptr in zip(output_leaves(spec.fusion), kernel.outputs)]
    arrays = [target.shared_array(b, f"sort.operand{i}", storage_type(o.shape.element_type), spec.padded)
              for i, o in enumerate(spec.hero.operands)]
    positions = target.shared_array(b, "sort.position", I32, spec.padded)

    row = kb.linear_block_id(spec.launch.grid)  # one block per row
    with _row_guard(kb, spec, row):   # uniform per block: the barriers inside never diverge
        outer = [d for k, d in enumerate(spec.dims) if k != spec.sort_dim]
        index: list = kb.delinearize(row, outer)
        index.insert(spec.sort_dim, None)
        r = _Row(kb, fe, spec, arrays, positions, index, kb.thread_id(0), vector_params)
        _load_row(r)
        target.barrier(b)
        _sorting_network(r)
        _store_row(r, outputs)
    return kernel.finish()


@contextmanager
def _row_guard(kb: KernelBuilder, spec: BitonicSortKernelSpec, row: ir.Value) -> Iterator[None]:
    """Skip the blocks past the last row (only when the grid is split over x and y)."""
    if spec.launch.num_blocks == spec.rows:
        yield
        return
    with kb.if_(kb.b.icmp_unsigned("<", row, kb.index(spec.rows))):
        yield


@contextmanager
def _per_thread(kb: KernelBuilder, tid: ir.Value, count: int, threads: int, name: str) -> Iterator[ir.Value]:
    """The thread's ``count`` work items ``tid + q·threads`` (no loop when there is one)."""
    if count == 1:
        yield tid
        return
    b = kb.b
    with kb.loop(0, count, name=name) as q:
        yield b.add(tid, b.mul(q, kb.index(threads)), name=f"{name}.item")


def _slot_pointer(kb: KernelBuilder, array: ir.Value, et: str | None, s: ir.Value) -> ir.Value:
    t = I32 if et is None else storage_type(et)
    return kb.b.gep(array, [s], inbounds=True, source_etype=t)


def _group_slots(kb: KernelBuilder, tid: ir.Value, spec: BitonicSortKernelSpec, name: str) -> Iterator[list[ir.Value]]:
    """The thread's adjacent slots ``tid·S .. tid·S + S - 1`` in groups of ``spec.group`` (all
    inside the row or all padding), unrolled: a group's elements are one vector access per
    buffer that takes vectors (``vectors.py``)."""
    b, count = kb.b, spec.slots_per_thread
    base = tid if count == 1 else b.mul(tid, kb.index(count), name=f"{name}.base")
    for first in range(0, count, spec.group):
        yield [base if first + q == 0 else b.add(base, kb.index(first + q), name=f"{name}.slot", flags=["nuw", "nsw"])
               for q in range(spec.group)]


def _load_row(r: _Row) -> None:
    """Phase 1: the row's elements (through the fused prologue) and positions into shared
    memory; padding slots get zero bits and their own (≥ n) position. The parameters the sort
    operands read at their own index are loaded a group at a time as vectors and seeded into the
    fused emitter at each slot's index."""
    kb, spec, b = r.kb, r.spec, r.kb.b
    n = spec.row_length
    ets = r.element_types()
    for slots in _group_slots(kb, r.tid, spec, "load"):
        if n == spec.padded:
            _load_values(r, slots)
        else:
            with b.if_else(b.icmp_unsigned("<", slots[0], kb.index(n))) as (valid, padding):
                with valid:
                    _load_values(r, slots)
                with padding:
                    for s in slots:
                        for et, arr in zip(ets, r.arrays):
                            b.store(ir.Constant(storage_type(et), None), _slot_pointer(kb, arr, et, s))
        for s in slots:
            b.store(kb.cast_int(s, I32), _slot_pointer(kb, r.positions, None, s))


def _load_values(r: _Row, slots: list[ir.Value]) -> None:
    """The sort operands at a group of slots into shared memory (vector parameter loads first)."""
    kb, b = r.kb, r.kb.b
    with r.fe.scope():
        indices = [r.at(s) for s in slots]
        for param, k in r.vector_params:
            for idx, v in zip(indices, load_group(r.fe, param, indices, k)):
                r.fe.seed(param, idx, v)
        for s, idx in zip(slots, indices):
            values = [r.fe.value(op, idx) for op in r.spec.hero.operands]
            for v, et, arr in zip(values, r.element_types(), r.arrays):
                b.store(to_storage(b, v, et), _slot_pointer(kb, arr, et, s))


def _sorting_network(r: _Row) -> None:
    """Phase 2: the bitonic network as two nested loops over the stage ``log2 k`` and the step
    ``log2 j``, a barrier after each step."""
    kb, spec, b = r.kb, r.spec, r.kb.b
    one = kb.index(1)
    with kb.loop(1, spec.log2_padded + 1, name="stage") as log_k:
        with kb.loop(0, log_k, name="step") as m:
            log_j = b.sub(b.sub(log_k, one), m, name="log_j")
            with _per_thread(kb, r.tid, spec.pairs_per_thread, spec.threads, "pair") as p:
                _compare_exchange(r, p, log_j, log_k)
            kb.target.barrier(b)


def _compare_exchange(r: _Row, p: ir.Value, log_j: ir.Value, log_k: ir.Value) -> None:
    """Pair ``p`` of the step: slots ``lo`` (``p`` with a zero bit inserted at ``log j``) and
    ``hi = lo + j``; swapped when out of the order of their ``k``-block (ascending where
    ``lo & k == 0``)."""
    kb, b = r.kb, r.kb.b
    one = kb.index(1)
    j = b.shl(one, log_j)
    low_bits = b.and_(p, b.sub(j, one))
    lo = b.or_(b.shl(b.lshr(p, log_j), b.add(log_j, one)), low_bits, name="lo")
    hi = b.or_(lo, j, name="hi")
    ascending = b.icmp_unsigned("==", b.and_(lo, b.shl(one, log_k)), kb.index(0), name="ascending")
    x, y = _read_slot(r, lo), _read_slot(r, hi)
    hi_first = _goes_before(r, y, x)
    with kb.if_(b.icmp_unsigned("==", hi_first, ascending)):
        _write_slot(r, lo, y)
        _write_slot(r, hi, x)


@dataclass
class _Slot:
    stored: list[ir.Value]     # operand values as in shared memory
    values: list[ir.Value]     # the same in compute types (the comparator's arguments)
    position: ir.Value         # i32


def _read_slot(r: _Row, s: ir.Value) -> _Slot:
    b = r.kb.b
    stored, values = [], []
    for et, arr in zip(r.element_types(), r.arrays):
        v = b.load(_slot_pointer(r.kb, arr, et, s), typ=storage_type(et))
        stored.append(v)
        values.append(from_storage(b, v, et))
    pos = b.load(_slot_pointer(r.kb, r.positions, None, s), typ=I32)
    return _Slot(stored, values, pos)


def _write_slot(r: _Row, s: ir.Value, slot: _Slot) -> None:
    b = r.kb.b
    for et, arr, v in zip(r.element_types(), r.arrays, slot.stored):
        b.store(v, _slot_pointer(r.kb, arr, et, s))
    b.store(slot.position, _slot_pointer(r.kb, r.positions, None, s))


def _goes_before(r: _Row, x: _Slot, y: _Slot) -> ir.Value:
    """The network's strict total order (module docstring): the comparator with the position
    as tie-break between valid elements, the position alone once padding is involved."""
    b = r.kb.b
    n = ir.Constant(I32, r.spec.row_length)
    position_first = b.icmp_unsigned("<", x.position, y.position)
    by_comparator = comparator_before(b, r.kb.target, r.spec.hero.to_apply, x.values, y.values, position_first)
    both_valid = b.and_(b.icmp_unsigned("<", x.position, n), b.icmp_unsigned("<", y.position, n))
    return b.select(both_valid, by_comparator, position_first, name="before")


def _store_row(r: _Row, outputs: Sequence[tuple[Shape, ir.Value]]) -> None:
    """Phase 3: slot ``s < n`` of the sorted arrays to index ``s`` along the sort dim of every
    fusion output (each one a sort output, ``leaf_outputs``), a group of adjacent slots as
    vectors where the output's layout allows (``vectors.chunk``)."""
    kb, spec, b = r.kb, r.spec, r.kb.b
    n = spec.row_length
    ets = r.element_types()
    chunks = [chunk(shape, spec.sort_dim, spec.group) for shape, _ in outputs]
    for slots in _group_slots(kb, r.tid, spec, "store"):
        guard = kb.if_(b.icmp_unsigned("<", slots[0], kb.index(n))) if n < spec.padded else nullcontext()
        with guard, r.fe.scope():
            for (shape, ptr), which, k in zip(outputs, spec.leaf_outputs, chunks):
                et = ets[which]
                stored = [b.load(_slot_pointer(kb, r.arrays[which], et, s), typ=storage_type(et)) for s in slots]
                if k > 1:
                    store_group(r.fe, shape, ptr, r.at(slots[0]), stored, k)
                    continue
                for s, v in zip(slots, stored):
                    store_at_position(r.fe, shape, ptr, r.at(s), s, spec.sort_dim, from_storage(b, v, et))
