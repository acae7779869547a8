"""Block-level fusions: XLA's generic Triton emitter (``__triton``: softmax, layer norm, RMS norm,
cross-entropy...) as one kernel with XLA's tiling and launch.

XLA tiles the fusion's output by ``block_level_fusion_config.output_tiles`` and runs one block
of ``num_warps`` warps per output tile (a 1-D grid of prod(ceil(dim / tile)) blocks); each
block computes its tile as a Triton tile program: every value is a tile, elementwise ops act
per element, a reduce over the tiled row dims reduces inside the block and its result is
broadcast back. ``passes/custom_fusions.block_level_tiling`` works out, from the root tile and
the indexing maps, which elements of each reduce a block needs (a box of ``rows``) and keeps
the fusions it can tile; this module emits them:

- the block's tile offset ``off = tile index x tile`` (the tile index row-major over the grid);
- the reduces, level by level (a level depends only on earlier ones): for each reduce, its
  ``rows x K`` elements (K reduced elements) are laid out over the block's threads as Triton's
  blocked layout does, minor first: ``v`` consecutive elements per thread (16 bytes of the
  narrowest element read or written at its own index), ``lanes`` threads along a row,
  ``groups = threads / lanes`` rows at a time, ``chunks`` vectors per thread per row. Each thread folds its elements in order (values from
  the fused emitter, parameters read at the element's own index as one ``<v x T>`` load),
  shuffles down within its lanes (warp tree), and lane 0 of each warp writes its partial to
  shared memory ``[rows][warps per row]``; one barrier per level. The reduce's value at any
  index is then the fold of its row's partials in warp order (the same in every thread);
- the outputs: the tile laid out the same way over ``[prod(tile[:-1]), tile[-1]]``, each
  element computed by the fused emitter (the reduces read from shared memory) and stored
  where it lies inside the tile and the array (vector stores where the loads are vectors).

Tiles are padded to powers of two as Triton's are: positions past the tile or the array are
clamped to a valid element (so every thread computes on real data, reaches every shuffle and
barrier, and reads nothing out of bounds) and masked out of the folds and the stores.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir

from ...hlo import HloInstruction
from ...indexing import affine as A
from ...passes.custom_fusions import BlockLevelTiling, TiledReduce, block_level_tiling
from ..elemental.affine import AffineEmitter
from ...gpu.device_info import DeviceInfo
from ..elemental.scalar_ops import emit_call_computation
from ..analysis.fusion_analysis import FusionAnalysis
from ..kernel import Declined, Kernel, KernelSpec, kernel_index_type, open_kernel, output_leaves
from ..kernel_builder import KernelBuilder
from ..llvm_types import I8, I32, compute_type, from_storage, is_complex, storage_bytes, storage_type, to_storage
from ..elemental.partitioner import partition
from ..target import LaunchDims, Target
from .reduction.emitter import same_index_parameters, shared_type, shuffle_down, storage_bytes_of

WARP = 32
VECTOR_BYTES = 16


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class TileLayout:
    """``rows x cols`` elements over ``threads`` threads (Triton's blocked layout, minor
    first): thread ``t`` is lane ``t mod lanes`` of group ``t div lanes``; in slot ``s`` it
    holds row ``s * groups + group`` and, per chunk ``c``, the ``vector`` columns from
    ``(c * lanes + lane) * vector``. Columns are padded to a power of two."""

    rows: int
    cols: int
    threads: int
    vector: int

    @property
    def padded(self) -> int:
        return _pow2_ceil(self.cols)

    @property
    def lanes(self) -> int:
        return max(1, min(self.threads, self.padded // self.vector))

    @property
    def groups(self) -> int:
        return self.threads // self.lanes

    @property
    def chunks(self) -> int:
        return max(1, self.padded // (self.lanes * self.vector))

    @property
    def slots(self) -> int:
        return -(-self.rows // self.groups)

    @property
    def warps_per_row(self) -> int:
        return max(1, self.lanes // WARP)

    @staticmethod
    def of(rows: int, cols: int, threads: int, vector: int) -> "TileLayout":
        v = min(vector, _pow2_ceil(cols))
        if cols % v:
            v = 1
        return TileLayout(rows, cols, threads, v)


@dataclass(frozen=True)
class RowVectorLayout(TileLayout):
    """A reduce whose reduced dims are all physically major (a sum over the batch dim of
    ``[b, m, n]``): each thread folds all ``cols`` reduced elements of ``vector`` consecutive
    rows (kept elements adjacent in memory, one ``<v x T>`` load per reduced position), as
    Triton's layout keeps the reduced major axis inside the thread; thread ``t`` holds rows
    ``(s * threads + t) * vector ..`` in slot ``s``. No shuffles: one partial per row."""

    @property
    def lanes(self) -> int:
        return 1

    @property
    def groups(self) -> int:
        return self.threads

    @property
    def chunks(self) -> int:
        return 1

    @property
    def slots(self) -> int:
        return -(-self.rows // (self.threads * self.vector))

    @property
    def warps_per_row(self) -> int:
        return 1


# the most reduced elements one thread of a row-vector layout folds, unrolled, per slot and row
ROW_VECTOR_MAX_ELEMENTS = 128


@dataclass(frozen=True, kw_only=True)
class BlockLevelKernelSpec(KernelSpec):
    """A block-level fusion: XLA's tiling and launch, a layout per reduce and one for the outputs."""

    tiling: BlockLevelTiling
    reduce_vectors: tuple[int, ...]
    output_vector: int

    def reduce_layout(self, r: TiledReduce) -> TileLayout:
        v = self.reduce_vectors[next(i for i, x in enumerate(self.tiling.reduces) if x.inst is r.inst)]
        if _lanes_contiguous(r.inst.operands[0], r.inst.dimensions):
            return TileLayout.of(r.num_rows, r.reduced_elements, self.launch.num_threads, v)
        rv = row_vector(r, self.tiling, v, self.launch.num_threads)
        if rv > 1:
            return RowVectorLayout(r.num_rows, r.reduced_elements, self.launch.num_threads, rv)
        return TileLayout.of(r.num_rows, r.reduced_elements, self.launch.num_threads, 1)

    def output_layout(self) -> TileLayout:
        t = self.tiling
        rows = math.prod(min(a, d) for a, d in zip(t.tile[:-1], t.dims[:-1]))
        cols = min(t.tile[-1], t.dims[-1])
        v = self.output_vector
        if not (cols % v == 0 and t.dims[-1] % v == 0 and t.tile[-1] % v == 0
                and all(_lanes_contiguous_shape(s, len(t.dims) - 1) for _, s in output_leaves(self.fusion))):
            v = 1
        return TileLayout.of(rows, cols, self.launch.num_threads, v)

    def shared_bytes(self) -> int:
        total = 0
        for r in self.tiling.reduces:
            lay = self.reduce_layout(r)
            st = shared_type(compute_type(r.inst.shape.element_type))
            total += -(-r.num_rows * lay.warps_per_row * storage_bytes_of(st) // 16) * 16
        return total

    def report_lines(self) -> list[str]:
        t = self.tiling
        lines = [f"block-level tiles {'x'.join(map(str, t.tile))} of {'x'.join(map(str, t.dims))}: "
                 f"{t.num_tiles} blocks of {t.num_warps} warps"]
        for r in t.reduces:
            lay = self.reduce_layout(r)
            if isinstance(lay, RowVectorLayout):
                lines.append(f"reduce %{r.inst.name} (level {r.level}): {r.num_rows} rows x {r.reduced_elements}, "
                             f"{lay.cols} reduced elements per thread, vector {lay.vector} along the rows, "
                             f"{lay.slots} slots")
                continue
            lines.append(f"reduce %{r.inst.name} (level {r.level}): {r.num_rows} rows x {r.reduced_elements}, "
                         f"{lay.lanes} lanes x {lay.groups} groups, vector {lay.vector}, "
                         f"{lay.warps_per_row} warps per row")
        out = self.output_layout()
        lines.append(f"outputs: {out.rows} rows x {out.cols}, {out.lanes} lanes x {out.groups} groups, "
                     f"vector {out.vector}")
        return lines

    def summary_fields(self) -> dict:
        t = self.tiling
        return {"output_tile": list(t.tile), "num_warps": t.num_warps, "reduces": len(t.reduces),
                "shared_bytes": self.shared_bytes()}


def _lanes_contiguous_shape(shape, dim: int) -> bool:
    """Whether ``dim`` of ``shape`` is its physically minor dim (untiled layout)."""
    if shape.layout is not None and shape.layout.tiles:
        return False
    return bool(shape.minor_to_major) and shape.minor_to_major[0] == dim


def _lanes_contiguous(operand: HloInstruction, reduced: Sequence[int]) -> bool:
    """Whether consecutive reduced positions are consecutive in memory: the operand's
    physically minor dim is reduced (it is then the fastest of the reduced dims)."""
    shape = operand.shape
    return bool(shape.minor_to_major) and shape.minor_to_major[0] in reduced and _lanes_contiguous_shape(
        shape, shape.minor_to_major[0])


def row_vector(r: TiledReduce, tiling: BlockLevelTiling, vector: int, threads: int) -> int:
    """The vector of a row-vector layout (``RowVectorLayout``) for reduce ``r``, or 0 where there
    is none: the operand's physically minor dim is kept and is the box's fastest row dim, its
    box positions start at multiples of the vector and are never clamped (the whole dim, or the
    root's own tile dim with tiles dividing the array), so ``v`` consecutive rows are ``v``
    adjacent aligned elements; ``v`` is the largest power of two up to ``vector`` dividing the
    box along that dim and the operand's minor dim."""
    shape = r.inst.operands[0].shape
    if not shape.minor_to_major or (shape.layout is not None and shape.layout.tiles):
        return 0
    minor = shape.minor_to_major[0]
    reduced = set(r.inst.dimensions)
    if minor in reduced:
        return 0
    kept = [d for d in range(shape.rank) if d not in reduced]
    od = kept.index(minor)
    if any(n > 1 for n in r.rows[od + 1:]):
        return 0
    n = r.rows[od]
    if not r.full[od]:
        root_dim = r.row_dims[od]
        if (root_dim is None or r.exprs[od] != A.dim(root_dim) or r.strides[od] != 1
                or tiling.dims[root_dim] % tiling.tile[root_dim]):
            return 0
        n = math.gcd(n, tiling.tile[root_dim])
    v = 1
    while v * 2 <= vector and n % (v * 2) == 0 and shape.dimensions[minor] % (v * 2) == 0:
        v *= 2
    if v < 2:
        return 0
    slots = -(-r.num_rows // (threads * v))
    return v if slots * r.reduced_elements * v <= ROW_VECTOR_MAX_ELEMENTS else 0


# ---- planning ------------------------------------------------------------------------------------

def plan_block_level_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                            kernel_name: str) -> BlockLevelKernelSpec:
    tiling = block_level_tiling(fusion)
    if isinstance(tiling, str):
        raise Declined(tiling)
    comp = fusion.fused_computation
    for r in tiling.reduces:
        if is_complex(r.inst.shape.element_type):
            raise Declined(f"complex reduce %{r.inst.name}")
    if tiling.num_tiles >= 2**31:
        raise Declined(f"{tiling.num_tiles} tiles exceed the grid")
    # Triton's vector: 16 bytes of the narrowest element read or written at a phase's own
    # index (f32 in, bf16 out: 8 elements, two 128-bit loads and one 128-bit store), one for
    # every phase so that each element sits in the same thread throughout
    starts = [r.inst.operands[0] for r in tiling.reduces] + [r for r, _ in output_leaves(fusion)]
    vector = _vector(starts, [s for _, s in output_leaves(fusion)])
    reduce_vectors = tuple(vector for _ in tiling.reduces)
    output_vector = vector
    launch = LaunchDims((tiling.num_tiles, 1, 1), (tiling.num_threads, 1, 1))
    return BlockLevelKernelSpec(name=kernel_name, fusion=fusion, launch=launch,
                                index_type=kernel_index_type(fusion, launch), partitioned=partition(comp),
                                tiling=tiling, reduce_vectors=reduce_vectors, output_vector=output_vector)


def _vector(starts: list[HloInstruction], written: list) -> int:
    types = [p.shape.element_type for x in starts for _, p in same_index_parameters(x, match_layout=False)]
    types += [s.element_type for s in written]
    if any(is_complex(et) for et in types):
        return 1
    return max(1, VECTOR_BYTES // min([storage_bytes(et) for et in types], default=4))


# ---- emission ------------------------------------------------------------------------------------

def emit_block_level_kernel(target: Target, spec: BlockLevelKernelSpec) -> ir.Module:
    return _BlockLevelEmitter(target, spec).emit()


class _BlockLevelEmitter:
    def __init__(self, target: Target, spec: BlockLevelKernelSpec):
        self.target, self.spec = target, spec
        self.kernel: Kernel = open_kernel(target, spec, inline=True)
        self.kb: KernelBuilder = self.kernel.kb
        self.b = self.kb.b
        assert self.kernel.fe is not None
        self.fe = self.kernel.fe
        self.tiling = spec.tiling
        kb = self.kb
        self.tid = kb.thread_id(0)
        counts = self.tiling.tile_counts
        tile_index = kb.delinearize(kb.block_id(0), counts)
        self.off = [kb.index(0) if n == 1 else tile_index[d] if t == 1 else self.b.mul(tile_index[d], kb.index(t))
                    for d, (t, n) in enumerate(zip(self.tiling.tile, counts))]

    # ---- helpers ----
    def _umin(self, a: ir.Value, bound: int) -> ir.Value:
        c = self.kb.index(bound)
        return self.b.select(self.b.icmp_unsigned("<", a, c), a, c)

    def _add(self, a: ir.Value, b: ir.Value) -> ir.Value:
        if isinstance(a, ir.Constant) and a.constant == 0:
            return b
        return self.b.add(a, b)

    def _tile_position(self, d: int, u: ir.Value | None) -> tuple[ir.Value, ir.Value | None]:
        """Root dim ``d`` at position ``u`` of the block's tile (None: 0), clamped into the
        array, and whether it lies inside (None: always)."""
        t = self.tiling
        pos = self.off[d] if u is None else self._add(self.off[d], u)
        if t.dims[d] % t.tile[d] == 0:
            return pos, None
        return self._umin(pos, t.dims[d] - 1), self._lt(pos, t.dims[d])

    def _lt(self, a: ir.Value, bound: int) -> ir.Value:
        return self.b.icmp_unsigned("<", a, self.kb.index(bound))

    def _thread(self, lay: TileLayout) -> tuple[ir.Value, ir.Value]:
        """(lane, group) of this thread in ``lay``."""
        b, kb = self.b, self.kb
        if lay.groups == 1:
            return self.tid, kb.index(0)
        return b.urem(self.tid, kb.index(lay.lanes)), b.udiv(self.tid, kb.index(lay.lanes))

    def _positions(self, lay: TileLayout):
        """For each slot: (row, row valid, [(column base, base valid, columns of the v lanes)] per chunk);
        row and columns clamped into range."""
        b, kb = self.b, self.kb
        lane, group = self._thread(lay)
        v = lay.vector
        lane_col = b.mul(lane, kb.index(v)) if v > 1 else lane
        out = []
        exact_rows = lay.groups * lay.slots == lay.rows
        exact_cols = lay.lanes * v * lay.chunks == lay.cols
        for s in range(lay.slots):
            row = group if s == 0 else b.add(kb.index(s * lay.groups), group)
            row_ok = None if exact_rows else self._lt(row, lay.rows)
            row_c = row if exact_rows else self._umin(row, lay.rows - 1)
            chunks = []
            for c in range(lay.chunks):
                base = lane_col if c == 0 else b.add(kb.index(c * lay.lanes * v), lane_col)
                ok = None if exact_cols else self._lt(base, lay.cols)
                base_c = base if exact_cols else self._umin(base, lay.cols - v)
                cols = [base_c if j == 0 else b.add(base_c, kb.index(j)) for j in range(v)]
                chunks.append((base_c, ok, cols))
            out.append((row_c, row_ok, chunks))
        return out

    def _and(self, *conds) -> ir.Value | None:
        got = [c for c in conds if c is not None]
        if not got:
            return None
        out = got[0]
        for c in got[1:]:
            out = self.b.and_(out, c)
        return out

    # ---- vector loads ----
    def _vector_loads(self, start: HloInstruction, lanes: list[list[ir.Value]], dim: int) -> None:
        """Seed the fused emitter with one ``<v x T>`` load for each parameter ``start`` reads at
        its own index (lanes differ in dim ``dim`` only, which is physically minor)."""
        if len(lanes) == 1:
            return
        fe, b = self.fe, self.b
        for leaf, param in same_index_parameters(start, match_layout=False):
            shape = leaf.shape
            if not _lanes_contiguous_shape(shape, dim) or shape.dimensions[dim] % len(lanes):
                continue
            if fe.known(leaf, lanes[0]):
                continue
            et = shape.element_type
            st = storage_type(et)
            ptr = b.gep(fe.parameter_pointer(param), [fe.offset(shape, lanes[0])], inbounds=True, source_etype=st)
            vec = b.load(ptr, typ=ir.VectorType(st, len(lanes)))
            vec.align = min(16, len(lanes) * storage_bytes(et))
            self.target.mark_invariant(vec)
            for j, idx in enumerate(lanes):
                fe.seed(leaf, idx, from_storage(b, b.extract_element(vec, ir.Constant(I32, j)), et))

    # ---- reduces ----
    def _reduce_index(self, r: TiledReduce, row: ir.Value, bases: list[ir.Value]) -> list[ir.Value]:
        """The reduce's output index of row ``row`` of its box (clamped into the array)."""
        b, kb = self.b, self.kb
        sizes = [n for n in r.rows if n > 1]
        us = kb.delinearize(row, sizes) if sizes else []
        out, k = [], 0
        for d, n in enumerate(r.rows):
            if n > 1:
                root_dim = r.row_dims[d]
                if r.full[d]:
                    out.append(us[k])
                elif root_dim is not None and r.exprs[d] == A.dim(root_dim):
                    # the root's own position, built as the outputs build it
                    out.append(self._tile_position(root_dim, us[k])[0])
                else:
                    step = us[k] if r.strides[d] == 1 else b.mul(us[k], kb.index(r.strides[d]))
                    out.append(self._umin(b.add(bases[d], step), r.inst.shape.dimensions[d] - 1))
                k += 1
            else:
                out.append(bases[d])
        return out

    def _operand_index(self, r: TiledReduce, kept: list[ir.Value], k: ir.Value) -> list[ir.Value]:
        """The reduce operand's index at kept index ``kept`` and reduced position ``k`` (the
        reduced dims in physical order, the minor one fastest)."""
        b, kb = self.b, self.kb
        shape = r.inst.operands[0].shape
        reduced = set(r.inst.dimensions)
        order = [d for d in shape.minor_to_major if d in reduced and shape.dimensions[d] > 1]
        coords: dict[int, ir.Value] = {}
        for i, d in enumerate(order):
            last = i == len(order) - 1
            coords[d] = k if last else b.urem(k, kb.index(shape.dimensions[d]))
            if not last:
                k = b.udiv(k, kb.index(shape.dimensions[d]))
        it = iter(kept)
        return [coords.get(d, kb.index(0)) if d in reduced else next(it) for d in range(shape.rank)]

    def _emit_level(self, level: list[TiledReduce], bases: dict) -> None:
        b, kb, fe, target = self.b, self.kb, self.fe, self.target
        partials: list[tuple[TiledReduce, TileLayout, list]] = []
        for r in level:
            inst = r.inst
            lay = self.spec.reduce_layout(r)
            if isinstance(lay, RowVectorLayout):
                partials.append((r, lay, self._row_vector_partials(r, lay, bases[id(inst)])))
                continue
            init = fe.value(inst.operands[1], ())
            operand = inst.operands[0]
            minor = operand.shape.minor_to_major[0] if operand.shape.minor_to_major else 0
            accs = []
            for row, row_ok, chunks in self._positions(lay):
                kept = self._reduce_index(r, row, bases[id(inst)])
                acc = init
                for _, ok, cols in chunks:
                    lanes = [self._operand_index(r, kept, c) for c in cols]
                    if lay.vector > 1:
                        self._vector_loads(operand, lanes, minor)
                    for idx in lanes:
                        val = fe.value(operand, idx)
                        new = emit_call_computation(b, target, inst.to_apply, [acc, val])[0]
                        acc = new if ok is None else b.select(ok, new, acc)
                accs.append((row, row_ok, acc))
            partials.append((r, lay, accs))
        # warp trees, then lane 0 of each warp writes its row's partial
        for r, lay, accs in partials:
            dist = min(lay.lanes, WARP) // 2
            reduced = []
            for row, row_ok, acc in accs:
                d = dist
                while d >= 1:
                    acc = emit_call_computation(b, target, r.inst.to_apply, [acc, shuffle_down(b, target, acc, d)])[0]
                    d //= 2
                reduced.append((row, row_ok, acc))
            st = shared_type(reduced[0][2].type)
            count = r.num_rows * lay.warps_per_row
            with b.goto_entry_block():
                arr = target.shared_array(b, f"{r.inst.name}.partials", I8, count * storage_bytes_of(st))
            self.shared[id(r.inst)] = (arr, st, lay)
            lane, _ = self._thread(lay)
            first = b.icmp_unsigned("==", b.urem(lane, kb.index(WARP)) if lay.lanes > WARP else lane, kb.index(0))
            warp = b.udiv(lane, kb.index(WARP)) if lay.lanes > WARP else None
            for row, row_ok, acc in reduced:
                slot = b.mul(row, kb.index(lay.warps_per_row)) if lay.warps_per_row > 1 else row
                if warp is not None:
                    slot = b.add(slot, warp)
                cond = self._and(first, row_ok)
                with kb.if_(cond):
                    v = b.zext(acc, st) if st != acc.type else acc
                    b.store(v, b.gep(arr, [slot], inbounds=True, source_etype=st))
        target.barrier(b)
        for r, _, _ in partials:
            fe.inject(r.inst, functools.partial(self._reduced_value, r, bases[id(r.inst)]))

    def _row_vector_partials(self, r: TiledReduce, lay: RowVectorLayout,
                             bases: list[ir.Value]) -> list[tuple[ir.Value, ir.Value | None, ir.Value]]:
        """(row, row valid, the row's fold) of the rows this thread holds in ``lay``: v adjacent
        rows per slot, each folding every reduced element in order, the v operand elements of
        one reduced position read as one vector."""
        b, kb, fe, target = self.b, self.kb, self.fe, self.target
        inst = r.inst
        operand = inst.operands[0]
        minor = operand.shape.minor_to_major[0]
        v = lay.vector
        init = fe.value(inst.operands[1], ())
        exact = lay.slots * lay.threads * v == lay.rows
        out = []
        for s in range(lay.slots):
            slot = self.tid if s == 0 else b.add(kb.index(s * lay.threads), self.tid)
            row0 = b.mul(slot, kb.index(v))
            ok = None if exact else self._lt(row0, lay.rows)
            row0 = row0 if exact else self._umin(row0, lay.rows - v)   # rows % v == 0: still aligned
            rows = [row0 if j == 0 else b.add(row0, kb.index(j)) for j in range(v)]
            kept = [self._reduce_index(r, row, bases) for row in rows]
            accs = [init] * v
            for k in range(lay.cols):
                lanes = [self._operand_index(r, kj, kb.index(k)) for kj in kept]
                self._vector_loads(operand, lanes, minor)
                for j, idx in enumerate(lanes):
                    accs[j] = emit_call_computation(b, target, inst.to_apply, [accs[j], fe.value(operand, idx)])[0]
            out += [(row, ok, acc) for row, acc in zip(rows, accs)]
        return out

    def _reduced_value(self, r: TiledReduce, bases: list[ir.Value], idx: Sequence[ir.Value]) -> ir.Value:
        """The reduce at output index ``idx`` (inside the block's box): its row's partials
        folded in warp order."""
        b, kb = self.b, self.kb
        arr, st, lay = self.shared[id(r.inst)]
        row = kb.index(0)
        for d, n in enumerate(r.rows):
            if n == 1:
                continue
            if r.full[d]:
                u = idx[d]
            else:
                u = b.sub(idx[d], bases[d])
                u = b.select(b.icmp_signed("<", u, kb.index(0)), kb.index(0), u)
                if r.strides[d] > 1:
                    u = b.udiv(u, kb.index(r.strides[d]))
            u = b.select(b.icmp_unsigned("<", u, kb.index(n)), u, kb.index(n - 1))
            row = b.add(b.mul(row, kb.index(n)), u)
        w = lay.warps_per_row
        slot0 = b.mul(row, kb.index(w)) if w > 1 else row
        vt = self.fe.value(r.inst.operands[1], ()).type
        out = None
        for k in range(w):
            slot = slot0 if k == 0 else b.add(slot0, kb.index(k))
            v = b.load(b.gep(arr, [slot], inbounds=True, source_etype=st), typ=st)
            if st != vt:
                v = b.trunc(v, vt)
            out = v if out is None else emit_call_computation(b, self.target, r.inst.to_apply, [out, v])[0]
        assert out is not None
        return out

    # ---- outputs ----
    def _emit_outputs(self) -> None:
        b, kb, fe = self.b, self.kb, self.fe
        t = self.tiling
        lay = self.spec.output_layout()
        rank = len(t.dims)
        row_sizes = [min(a, d) for a, d in zip(t.tile[:-1], t.dims[:-1])]
        leaves = list(zip(output_leaves(self.spec.fusion), self.kernel.outputs))
        for row, row_ok, chunks in self._positions(lay):
            us = kb.delinearize(row, row_sizes) if rank > 1 else []
            head, head_ok = [], [row_ok]
            for d in range(rank - 1):
                pos, inside = self._tile_position(d, None if row_sizes[d] == 1 else us[d])
                head.append(pos)
                head_ok.append(inside)
            for base, ok, _ in chunks:
                first = self._add(self.off[-1], base)
                conds = list(head_ok) + [ok]
                if t.dims[-1] % t.tile[-1]:
                    conds.append(self._lt(first, t.dims[-1]))
                    first = self._umin(first, t.dims[-1] - lay.vector)
                lanes = [head + [first if j == 0 else b.add(first, kb.index(j))] for j in range(lay.vector)]
                if lay.vector > 1:
                    for root in {id(r): r for (r, _), _ in leaves}.values():
                        self._vector_loads(root, lanes, rank - 1)
                values = [[fe.value(root, idx) for idx in lanes] for (root, _), _ in leaves]
                cond = self._and(*conds)
                with kb.if_(cond) if cond is not None else contextlib.nullcontext():
                    for ((_, shape), ptr), vals in zip(leaves, values):
                        self._store(shape, ptr, lanes, vals)

    def _store(self, shape, ptr: ir.Value, lanes: list[list[ir.Value]], vals: list[ir.Value]) -> None:
        b, fe = self.b, self.fe
        if len(lanes) == 1:
            fe.store(shape, ptr, lanes[0], vals[0])
            return
        et = shape.element_type
        st = storage_type(et)
        vec = ir.Constant(ir.VectorType(st, len(vals)), ir.Undefined)
        for j, v in enumerate(vals):
            vec = b.insert_element(vec, to_storage(b, v, et), ir.Constant(I32, j))
        dst = b.gep(ptr, [fe.offset(shape, lanes[0])], inbounds=True, source_etype=st)
        store = b.store(vec, dst)
        store.align = min(16, len(vals) * storage_bytes(et))

    def emit(self) -> ir.Module:
        self.shared: dict[int, tuple] = {}
        bases: dict[int, list[ir.Value]] = {}
        ae = AffineEmitter(self.kb, self.off)
        for r in self.tiling.reduces:
            bases[id(r.inst)] = [self._umin(ae.emit(e), n - 1)
                                 for e, n in zip(r.exprs, r.inst.shape.dimensions)]
        for level in self.tiling.levels:
            self._emit_level(level, bases)
        self._emit_outputs()
        return self.kernel.finish()


