"""XLA's packed transpose emitter (``PackedTranspose``, notes/xla.md §b.4) for elements
narrower than 32 bits.

The normalised transpose is put in canonical form: operand ``[.., T2, .., A, T1, B]``,
output ``[.., T1, .., A, T2, B]`` (A: the dim kept in third-minor position, 1 if none;
B: a kept minor dim, which must be 1). With ``v = 32 / bits`` (bf16/f16: 2, s8: 4) one shared
tile per hero is ``(32·v) × (32·v)`` elements: rows are T2 offsets, columns the (A, T1)
offsets flattened (``col = a·tile_T1 + t1``), so one row holds 32 words of v elements, one per
bank. Columns are swizzled, ``(col + (row / v)·v) mod (32·v)``: the v×v sub-tiles of a row
band shift by one bank per band, so neither phase has bank conflicts.

128 threads = 4 groups (warps) of 32 lanes:

- Phase 1: at loop turn s0 the group w fills row ``s0·4 + w``; lane l reads the v
  consecutive operand elements of columns ``l·v .. l·v + v − 1`` (contiguous along T1: one
  vector load) and stores them as one 32-bit word. Side outputs are written here, at the
  operand's offsets.
- ``barrier``.
- Phase 2: at loop turn s0 lane l of group w reads the v×v register tile with rows
  ``l·v + vv`` and columns ``(s0·4 + w)·v + vh`` (v word loads), transposes it in registers,
  and for each column vh computes the epilogue of the v consecutive output elements
  ``T2 = l·v + vv`` (the output's minor dim) and stores them together (one vector store).

Requirements (``transpose_description``'s packed tile, ``GetPackedTransposeTileSizes``):
≥ 10·v populated rows and columns, B = 1, rows, columns and the last partial T2 tile
divisible by v. ``plan_packed_transpose`` re-derives the canonical form and declines
(``Declined``) when it cannot emit the fusion; the tiled emitter then takes it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ....indexing import affine as A
from ....indexing.indexing_map import IndexingMap
from ....gpu.device_info import DeviceInfo
from ...analysis.emitter_kind import TransposeVariant
from ...analysis.fusion_analysis import FusionAnalysis, bits_of
from ...analysis.hero_shapes import TransposeDescription
from ...kernel import Declined, KernelSpec, kernel_index_type, open_kernel
from ...kernel_builder import NO_WRAP
from ...llvm_types import from_storage, storage_type, to_storage
from ...elemental.partitioner import partition
from ...target import LaunchDims, Target
from ...model.thread_maps import expr_delinearize, expr_linearize, work_item_map
from .common import OutputLeaf, VectorLoads, leaf_value, maps_report_lines, reshape_index, store_value
from .tiling import MAX_BLOCKS, NUM_THREADS

NUM_BANKS = 32
WARP = 32
NUM_GROUPS = NUM_THREADS // WARP   # 4


# ---- the canonical form ----------------------------------------------------------------------

@dataclass(frozen=True)
class PackedTiling:
    """The canonical transpose and its packed tile (notes §b.4)."""

    out_dims: tuple[int, ...]     # canonical output dims [.., T1, .., A, T2, B]
    perm: tuple[int, ...]         # canonical output dim i is canonical operand dim perm[i]
    out_tile: tuple[int, ...]
    vector: int                   # v = 32 / bits

    @staticmethod
    def canonical(dims: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
        """Normalised output dims and permutation -> canonical ones (B and A inserted as 1)."""
        out, cperm = list(dims), list(perm)
        if cperm[-1] != len(out) - 1:      # minor dim moves: B = 1
            cperm.append(len(out))
            out.append(1)
        r = len(out)
        if cperm[r - 3] != r - 3:          # no dim kept in third-minor position: A = 1
            out.insert(r - 2, 1)
            cperm = [p + 1 if p > r - 3 else p for p in cperm]
            cperm.insert(r - 2, r - 2)
        return out, cperm

    @property
    def rank(self) -> int:
        return len(self.out_dims)

    @property
    def inv(self) -> tuple[int, ...]:
        out = [0] * self.rank
        for i, p in enumerate(self.perm):
            out[p] = i
        return tuple(out)

    @property
    def in_dims(self) -> tuple[int, ...]:
        return tuple(self.out_dims[i] for i in self.inv)

    @property
    def in_tile(self) -> tuple[int, ...]:
        return tuple(self.out_tile[i] for i in self.inv)

    # canonical dim ids (XLA's PackedTransposeDescription)
    @property
    def a_id(self) -> int:
        return self.rank - 3

    @property
    def t1_in(self) -> int:
        return self.rank - 2

    @property
    def t1_out(self) -> int:
        return self.inv[self.rank - 2]

    @property
    def t2_in(self) -> int:
        return self.perm[self.rank - 2]

    @property
    def t2_out(self) -> int:
        return self.rank - 2

    @property
    def tile_t1(self) -> int:
        return self.in_tile[self.t1_in]

    @property
    def tile_a(self) -> int:
        return self.in_tile[self.a_id]

    @property
    def tile_t2(self) -> int:
        return self.in_tile[self.t2_in]

    @property
    def rows(self) -> int:
        """Populated shared-memory rows (T2 offsets)."""
        return self.tile_t2

    @property
    def cols(self) -> int:
        """Populated shared-memory columns ((A, T1) offsets)."""
        return self.tile_a * self.tile_t1

    @property
    def shmem_dim(self) -> int:
        return NUM_BANKS * self.vector

    @property
    def block_counts(self) -> tuple[int, ...]:
        """Blocks per canonical output dim."""
        return tuple(-(-d // t) for d, t in zip(self.out_dims, self.out_tile))

    @property
    def num_blocks(self) -> int:
        return math.prod(self.block_counts)

    @property
    def write_iterations(self) -> int:
        """Phase 1 loop turns: one shared row per group and turn."""
        return -(-self.rows // NUM_GROUPS)

    @property
    def read_iterations(self) -> int:
        """Phase 2 loop turns: v columns per group and turn."""
        return -(-self.cols // (self.vector * NUM_GROUPS))

    @property
    def input_vectorised(self) -> bool:
        """A lane's v columns are v consecutive T1 elements, all in range or all out of it."""
        return self.tile_t1 % self.vector == 0 and self.in_dims[self.t1_in] % self.vector == 0


def packed_tiling(desc: TransposeDescription) -> PackedTiling:
    """The packed tiling of ``desc`` (a TransposeDescription with ``packed_tile``); declines
    (``Declined``, with the reason) where there is none."""
    v = 32 // desc.bits if desc.bits and 32 % desc.bits == 0 else 0
    if v < 2:
        raise Declined(f"{desc.bits}-bit elements")
    out, cperm = PackedTiling.canonical(desc.dimensions, desc.permutation)
    tile = tuple(desc.packed_tile)
    if len(tile) != len(out) or len(out) < 3:
        raise Declined("packed tile does not match the canonical transpose")
    t = PackedTiling(tuple(out), tuple(cperm), tile, v)
    if t.in_dims[-1] != 1:
        raise Declined("trailing dim B is not 1")
    if t.rows < 10 * v or t.cols < 10 * v:
        raise Declined(f"{t.rows} x {t.cols} populated shared tile (< {10 * v})")
    if t.rows % v or t.cols % v or t.in_dims[t.t2_in] % t.tile_t2 % v:
        raise Declined(f"tile not divisible by the vector size {v}")
    if t.cols > t.shmem_dim or t.rows > t.shmem_dim:
        raise Declined("tile larger than the shared tile")
    if t.num_blocks > MAX_BLOCKS:
        raise Declined(f"{t.num_blocks} blocks")
    return t


# ---- the plan --------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class PackedTransposeKernelSpec(KernelSpec):
    tiling: PackedTiling
    heroes: tuple[HloInstruction, ...]   # distinct transpose heroes, one shared tile each
    leaves: tuple[OutputLeaf, ...]
    static_shared_bytes: int
    variant: TransposeVariant = TransposeVariant.PACKED
    path: ClassVar[TransposeVariant] = TransposeVariant.PACKED   # the algorithm that emits it

    # ---- thread -> data maps (XLA's GetInputIndexing / GetOutputIndexing) --------------------
    def _ids(self):
        th, bl = A.dim(0), A.dim(3)
        return A.mod(th, WARP), A.floordiv(th, WARP), expr_delinearize(bl, self.tiling.block_counts)

    def _input_walk(self):
        t = self.tiling
        lane, warp, blocks = self._ids()
        in_blocks = [blocks[i] for i in t.inv]
        row = A.add(A.mul(A.sym(0), NUM_GROUPS), warp)
        col = A.add(A.mul(lane, t.vector), A.sym(1))
        off = [A.const(0)] * t.rank
        off[t.a_id] = A.floordiv(col, t.tile_t1)
        off[t.t1_in] = A.mod(col, t.tile_t1)
        off[t.t2_in] = row
        index = [A.add(A.mul(bi, n), o) for bi, n, o in zip(in_blocks, t.in_tile, off)]
        cons = [(col, 0, t.cols - 1), (row, 0, t.rows - 1)] + [(i, 0, d - 1) for i, d in zip(index, t.in_dims)]
        return index, [(0, t.write_iterations - 1), (0, t.vector - 1)], cons

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap | None:
        """``(th_x, ..., bl_z)[s0, s1] -> operand index`` of phase 1 (s0: loop turn = shared row
        band, s1: element of the lane's vector)."""
        if operand not in (None, 0):
            return None
        index, ranges, cons = self._input_walk()
        operand = self.heroes[hero].operands[0].shape
        real = expr_delinearize(expr_linearize(index, self.tiling.in_dims), operand.dimensions)
        return work_item_map(real, self.launch, ranges, cons)

    def thread_to_output_map(self, leaf: int | None = None) -> IndexingMap:
        """``(th_x, ..., bl_z)[s0, s1, s2] -> index`` of output ``leaf`` written in phase 2 (s0:
        loop turn, s1: column of the register tile, s2: its row = the vector element). Side
        outputs are written with the input map."""
        t = self.tiling
        if leaf is None:
            leaf = next(i for i, l in enumerate(self.leaves) if l.hero is not None)
        shape = self.leaves[leaf].shape
        if self.leaves[leaf].hero is None:
            index, ranges, cons = self._input_walk()
            real = expr_delinearize(expr_linearize(index, t.in_dims), shape.dimensions, shape.minor_to_major)
            return work_item_map(real, self.launch, ranges, cons)
        lane, warp, blocks = self._ids()
        col = A.add(A.mul(A.add(A.mul(A.sym(0), NUM_GROUPS), warp), t.vector), A.sym(1))
        row = A.add(A.mul(lane, t.vector), A.sym(2))
        off = [A.const(0)] * t.rank
        off[t.a_id] = A.floordiv(col, t.tile_t1)
        off[t.t1_out] = A.mod(col, t.tile_t1)
        off[t.t2_out] = row
        index = [A.add(A.mul(bo, n), o) for bo, n, o in zip(blocks, t.out_tile, off)]
        cons = [(col, 0, t.cols - 1), (row, 0, t.rows - 1)] + [(i, 0, d - 1) for i, d in zip(index, t.out_dims)]
        real = expr_delinearize(expr_linearize(index, t.out_dims), shape.dimensions, shape.minor_to_major)
        ranges = [(0, t.read_iterations - 1), (0, t.vector - 1), (0, t.vector - 1)]
        return work_item_map(real, self.launch, ranges, cons)

    def report_lines(self) -> list[str]:
        t = self.tiling
        x = "x".join
        s = t.shmem_dim
        lines = [f"transpose packed: canonical [{', '.join(map(str, t.in_dims))}] -> "
                 f"[{', '.join(map(str, t.out_dims))}], permutation {{{','.join(map(str, t.perm))}}}, "
                 f"vector {t.vector}",
                 f"output tile {x(map(str, t.out_tile))}: {t.rows} rows x {t.cols} columns populated "
                 f"({NUM_GROUPS} groups x {WARP} lanes, {t.write_iterations} write / {t.read_iterations} read "
                 f"turns), blocks {x(map(str, t.block_counts))} = {t.num_blocks}",
                 f"shared tile {s}x{s} (swizzled) x {len(self.heroes)} hero(es): "
                 f"{self.static_shared_bytes} B static, index type {self.index_type}",
                 ]
        return lines + maps_report_lines(self)

    def summary_fields(self) -> dict:
        s = self.tiling.shmem_dim
        return {"tile": list(self.tiling.out_tile), "threads_per_block": NUM_THREADS,
                "vector_size": self.tiling.vector, "shared_tile": [s, s],
                "static_shared_bytes": self.static_shared_bytes, "index_type": str(self.index_type)}


def plan_packed_transpose(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo, kernel_name: str,
                          heroes: Sequence[HloInstruction], leaves: Sequence[OutputLeaf],
                          declined: str = "") -> PackedTransposeKernelSpec:
    """The packed plan; declines (``Declined``, the caller then uses the tiled algorithm) where
    the packed emitter cannot take the fusion. XLA's first choice: nothing declined before."""
    t = packed_tiling(analysis.transpose)
    if not heroes:
        raise Declined("no transpose hero")
    if any(bits_of(h.shape.element_type) != analysis.transpose.bits for h in heroes):
        raise Declined("heroes of different widths")
    launch = LaunchDims((t.num_blocks, 1, 1), (NUM_THREADS, 1, 1), 0)
    shared = sum(-(-t.shmem_dim * t.shmem_dim * bits_of(h.shape.element_type) // 8 // 16) * 16 for h in heroes)
    return PackedTransposeKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation),
                                     tiling=t, heroes=tuple(heroes), leaves=tuple(leaves), launch=launch,
                                     index_type=kernel_index_type(fusion, launch), static_shared_bytes=shared)


# ---- emission --------------------------------------------------------------------------------

def emit_packed_transpose(target: Target, spec: PackedTransposeKernelSpec) -> ir.Module:
    kernel = open_kernel(target, spec, inline=True)
    kb, b, fe = kernel.kb, kernel.b, kernel.fe
    t = spec.tiling
    v, S = t.vector, t.shmem_dim
    out_ptrs = kernel.outputs
    tiles = {h: target.shared_array(b, f"tile.{i}", storage_type(h.shape.element_type), S * S)
             for i, h in enumerate(spec.heroes)}

    def c(n: int) -> ir.Constant:
        return kb.index(n)

    def add(x, y):
        return b.add(x, y, flags=NO_WRAP)

    def mul(x, n: int):
        return x if n == 1 else b.mul(x, c(n), flags=NO_WRAP)

    tid = kb.thread_id(0)
    lane = b.urem(tid, c(WARP))
    warp = b.udiv(tid, c(WARP))
    blocks = kb.delinearize(kb.block_id(0), t.block_counts)          # canonical output order
    out_origin = [mul(x, n) for x, n in zip(blocks, t.out_tile)]
    in_origin = [out_origin[i] for i in t.inv]

    def swizzled(row: ir.Value, col: ir.Value) -> ir.Value:
        """Row-major offset of (row, swizzled col) in the S × S tile; ``col`` a multiple of v:
        the v elements from there are ``swizzled(row, col) + 0 .. v − 1`` (one word)."""
        band = mul(b.udiv(row, c(v)), v)
        return add(mul(row, S), b.urem(add(col, band), c(S)))

    def split_col(col: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Column -> (A offset, T1 offset) in the tile."""
        if t.tile_a == 1:
            return c(0), col
        return b.udiv(col, c(t.tile_t1)), b.urem(col, c(t.tile_t1))

    def bounds(index: Sequence[ir.Value], dims: Sequence[int], tile: Sequence[int], which: Sequence[int]):
        """Checks of the canonical dims in ``which`` that a partial block can exceed."""
        return [b.icmp_unsigned("<", index[d], c(dims[d])) for d in which if dims[d] % tile[d]]

    # ---- phase 1: rows of the operand tile into shared memory (and side outputs) -------------
    loads = VectorLoads(fe)
    operand_indices: dict = {}

    def operand_index(h, index):
        """The hero operand's index for canonical ``index`` (one list per index: the vector
        loads recognise a vector's indices by identity)."""
        key = (id(h), tuple(id(x) for x in index))
        if key not in operand_indices:
            operand_indices[key] = reshape_index(kb, index, t.in_dims, h.operands[0].shape.dimensions)
        return operand_indices[key]

    def vector_operand_indices(h, points) -> None:
        """The operand indices of a lane's v consecutive T1 elements as element 0's index plus
        e along the operand's minor dim, where that dim's size is a multiple of v: element 0's
        linear offset is then one too, so all v share its row. (Delinearised one by one, they
        differ in every dim and the vector loads would not see one vector.)"""
        dims = h.operands[0].shape.dimensions
        minor = max((j for j, n in enumerate(dims) if n != 1), default=None)
        if minor is None or dims[minor] % v:
            return
        first = operand_index(h, points[0])
        for e, idx in enumerate(points[1:], 1):
            operand_indices.setdefault((id(h), tuple(id(x) for x in idx)),
                                       first[:minor] + [add(first[minor], c(e))] + first[minor + 1:])

    side = [(leaf, ptr) for leaf, ptr in zip(spec.leaves, out_ptrs) if leaf.hero is None]
    # (a loop, not unrolled: unrolled, the turns' loads were no longer merged into one 32-bit
    # vector load, and registers rose from 32 to 40 on two corpus kernels; XLA's are 32)
    with kb.loop(0, t.write_iterations, name="row") as k:
        row = add(mul(k, NUM_GROUPS), warp)
        col0 = mul(lane, v)
        conds = [b.icmp_unsigned("<", row, c(t.rows))] if t.rows % NUM_GROUPS else []
        if t.cols < S:
            conds.append(b.icmp_unsigned("<", col0, c(t.cols)))   # cols % v == 0: all v or none
        base = swizzled(row, col0)

        def in_index(col, row=row):
            a_off, t1_off = split_col(col)
            off = [c(0)] * t.rank
            off[t.a_id], off[t.t1_in], off[t.t2_in] = a_off, t1_off, row
            return [o if n == 1 else add(o, x) for o, x, n in zip(in_origin, off, t.in_tile)]

        def element(e: int, index, first=None):
            stores = []
            for h in tiles:
                operand = h.operands[0]
                val = fe.value(operand, operand_index(h, index))
                stores.append((h, e, val))
            linear = kb.linearize(index, t.in_dims) if side else None
            if first is None or not side:
                first = linear
            return stores, [(leaf, ptr, leaf_value(kb, fe, leaf, linear, None), linear, first, e)
                            for leaf, ptr in side]

        def flush(stores, side_values, vector: bool, base=base):
            for h, e, val in stores:
                et = h.shape.element_type
                ptr = b.gep(tiles[h], [add(base, c(e)) if e else base], inbounds=True, source_etype=storage_type(et))
                b.store(to_storage(b, val, et), ptr)
            for leaf, ptr, val, linear, first, e in side_values:
                store_value(kb, leaf, ptr, linear, val, first if vector else None, e)

        with kb.if_all(conds), fe.scope():
            index0 = in_index(col0)
            all_dims = [t.a_id, t.t1_in, t.t2_in]
            if t.input_vectorised:
                # v consecutive T1 elements, all in range or all out of it: one guard, v
                # adjacent loads (one vector load), one 32-bit shared store
                with kb.if_all(bounds(index0, t.in_dims, t.in_tile, all_dims)):
                    points = [index0] + [index0[:t.t1_in] + [add(index0[t.t1_in], c(e))] + index0[t.t1_in + 1:]
                                         for e in range(1, v)]
                    for h in tiles:
                        vector_operand_indices(h, points)
                        loads.register([operand_index(h, idx) for idx in points])
                    first = kb.linearize(index0, t.in_dims) if side else None
                    results = [element(e, idx, first) for e, idx in enumerate(points)]
                    flush([s for r in results for s in r[0]], [s for r in results for s in r[1]], True)
                    loads.clear()
            else:
                for e in range(v):
                    index = index0 if e == 0 else in_index(add(col0, c(e)))
                    with kb.if_all(bounds(index, t.in_dims, t.in_tile, all_dims)), fe.scope():
                        flush(*element(e, index), False)

    target.barrier(b)

    # ---- phase 2: v x v register tiles, transposed, through the epilogue ---------------------
    current: dict = {}

    def hero_value(h: HloInstruction):
        et = h.shape.element_type
        smem = tiles[h]

        def value_at(index: Sequence[ir.Value]) -> ir.Value:
            known = current.get((h, tuple(id(x) for x in index)))
            if known is not None:
                return known
            # reached through ops that recomputed the index: map it back into the tile
            canon = reshape_index(kb, index, h.shape.dimensions, t.out_dims)
            rel = [b.sub(x, o) for x, o in zip(canon, out_origin)]
            col = add(mul(rel[t.a_id], t.tile_t1), rel[t.t1_out])
            r = rel[t.t2_out]
            off = add(swizzled(r, mul(b.udiv(col, c(v)), v)), b.urem(col, c(v)))
            ptr = b.gep(smem, [off], inbounds=True, source_etype=storage_type(et))
            return from_storage(b, b.load(ptr, typ=storage_type(et)), et)
        return value_at

    for h in tiles:
        fe.inject(h, hero_value(h))
    transposed = [(leaf, ptr) for leaf, ptr in zip(spec.leaves, out_ptrs) if leaf.hero is not None]
    with kb.loop(0, t.read_iterations, name="col") as k:
        col0 = mul(add(mul(k, NUM_GROUPS), warp), v)
        row0 = mul(lane, v)
        conds = [b.icmp_unsigned("<", col0, c(t.cols))] if t.cols % (v * NUM_GROUPS) else []
        if t.rows < S:
            conds.append(b.icmp_unsigned("<", row0, c(t.rows)))   # rows % v == 0: all v or none
        with kb.if_all(conds):
            # the register tile: v rows of v elements (one word each), all reads before the epilogue
            regs = {}
            for h, smem in tiles.items():
                et = h.shape.element_type
                for vv in range(v):
                    base = swizzled(add(row0, c(vv)) if vv else row0, col0)
                    for vh in range(v):
                        ptr = b.gep(smem, [add(base, c(vh)) if vh else base], inbounds=True,
                                    source_etype=storage_type(et))
                        regs[h, vv, vh] = from_storage(b, b.load(ptr, typ=storage_type(et)), et)
            for vh in range(v):
                col = add(col0, c(vh)) if vh else col0
                a_off, t1_off = split_col(col)
                off = [c(0)] * t.rank
                off[t.a_id], off[t.t1_out], off[t.t2_out] = a_off, t1_off, row0
                index0 = [o if n == 1 else add(o, x) for o, x, n in zip(out_origin, off, t.out_tile)]
                # col0 < cols (checked) covers the v columns (cols % v == 0); the T2 check holds
                # for all v rows or none (the last partial T2 tile is a multiple of v)
                conds = bounds(index0, t.out_dims, t.out_tile, [t.a_id, t.t1_out, t.t2_out])
                with kb.if_all(conds), fe.scope():
                    pending = []
                    first = None
                    for vv in range(v):
                        index = index0 if vv == 0 else \
                            index0[:t.t2_out] + [add(index0[t.t2_out], c(vv))] + index0[t.t2_out + 1:]
                        linear = kb.linearize(index, t.out_dims)
                        first = linear if vv == 0 else first
                        hero_index = {}
                        for h in tiles:
                            hero_index[h] = reshape_index(kb, index, t.out_dims, h.shape.dimensions)
                            current[(h, tuple(id(x) for x in hero_index[h]))] = regs[h, vv, vh]
                        pending += [(leaf, ptr, leaf_value(kb, fe, leaf, linear, hero_index[leaf.hero]), linear, vv)
                                    for leaf, ptr in transposed]
                    for leaf, ptr, val, linear, vv in pending:   # T2 is the output's minor dim: a vector
                        store_value(kb, leaf, ptr, linear, val, first, vv)
                    current.clear()
    return kernel.finish()
