"""The tiled transpose emitter (XLA's ``TransposeFusion``, notes/xla.md §b.4).

A fusion whose hero is a transpose is emitted in two phases over a tile of the hero's
*normalised* operand (size-1 dims dropped, dims that stay adjacent merged: ``[A, B, C] ->
[A, C, B]`` is "021", ``-> [C, B, A]`` "210", ``-> [B, A, C]`` "102"):

- The tile is 32·v × 32·v on the two dims the transpose swaps into minor position (the
  operand's minor dim and the dim that becomes the output's minor dim; for "102" 32 × 32 on
  the two second-minor dims, with the whole kept minor dim inside the tile), 1 on every other
  dim. A dim smaller than the tile edge gets a tile of its own size (fewer idle loop turns;
  XLA keeps 32·v and masks).
- Vector size v (minor dim moves, ``_vector_size``): tried from 4 bytes / element bytes down
  to 2 (bf16: 2, s8: 4, f32: 1), taken when there is enough work (blocks·128 ≥
  v²·cores·threads per core), the shared tiles ·v² fit, and both swapped dims are divisible
  by v. A thread then handles v consecutive elements of the tile's minor dim per loop turn
  (``lin = s0·128·v + th_x·v + s1``): its v global loads (phase 1) and stores (phase 2) are
  adjacent and merge into vector accesses (``ld.global.nc.v2.b16``, ``st.global.v2.b16``).
- 128 threads per block; blocks = Π ceil(dim / tile) over the operand dims.
- Phase 1: the threads walk the tile in the *operand's* row-major order (consecutive threads
  read consecutive addresses), compute the hero's operand through the fused prologue
  (``FusedEmitter.value``) and store it into a shared array whose operand-minor tile dim is
  padded by one element (``[32][33]`` for f32: no bank conflicts in either phase). Side
  outputs (roots without a transpose hero, bitcast-compatible with the hero's operand) are
  computed and written here, at the same linear offset.
- ``barrier``.
- Phase 2: the threads walk the tile in the *output's* row-major order, read the transposed
  element back, inject it as the hero's value (``FusedEmitter.inject``) and compute and store
  every root through the epilogue, coalesced.

The planner (``transpose/__init__.py``) refuses what this algorithm cannot emit (sub-byte
types, tiled root layouts, layout-changing elementwise ops between hero and root, tuple
roots: the loop emitter then takes the fusion and says so) and runs the variant XLA chose;
when the packed variant (``packed.py``) cannot take a fusion, this one does, reported as such.
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
from ...kernel import KernelSpec, kernel_index_type, open_kernel
from ...kernel_builder import NO_WRAP
from ...llvm_types import from_storage, storage_type, to_storage
from ...elemental.partitioner import partition
from ...target import LaunchDims, Target
from ...model.thread_maps import expr_delinearize, expr_linearize, work_item_map
from .common import (OutputLeaf, VectorLoads, leaf_value, maps_report_lines, reshape_index, store_value,
                     to_operand_order)
from .tiling import NUM_THREADS, TILE, TransposeTiling


@dataclass(frozen=True, kw_only=True)
class TransposeKernelSpec(KernelSpec):
    tiling: TransposeTiling
    heroes: tuple[HloInstruction, ...]   # distinct transpose heroes, one shared tile each
    leaves: tuple[OutputLeaf, ...]
    variant: TransposeVariant            # XLA's choice
    static_shared_bytes: int
    fallback: str = ""                   # why a "packed" fusion is emitted with the tiled algorithm
    path: ClassVar[TransposeVariant] = TransposeVariant.TILED   # the algorithm that emits it

    # ---- thread -> data maps (XLA's indexing of the transpose emitter, notes §b.4) ------------
    def _tile_walk(self, phase: int):
        """The normalised index a thread handles at loop turn ``s0`` in ``phase`` (1: operand
        order, 2: output order), with the constraints of its guard: the description both maps
        share, mirroring ``emit_tiled_transpose``'s ``tile_loop``."""
        t = self.tiling
        th, bl, s0 = A.dim(0), A.dim(3), A.sym(0)
        block = expr_delinearize(bl, t.block_counts)
        origin = [A.mul(v, n) for v, n in zip(block, t.tile)]
        tile, dims = (t.tile, t.dims) if phase == 1 else (t.out_tile, t.out_dims)
        if phase == 2:
            origin = [origin[p] for p in t.perm]
        ranges = [(0, t.iterations - 1)]
        lin = A.add(A.mul(th, t.vector), A.mul(s0, t.per_turn))
        if t.vector > 1:   # symbol s1: the element of the thread's vector
            lin = A.add(lin, A.sym(1))
            ranges.append((0, t.vector - 1))
        cons = [(lin, 0, t.tile_elements - 1)]
        coord = expr_delinearize(lin, tile)
        index = [A.add(o, c) for o, c in zip(origin, coord)]
        cons += [(i, 0, d - 1) for i, d in zip(index, dims)]
        return index, ranges, cons

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap | None:
        """``(th_x, th_y, th_z, bl_x, bl_y, bl_z)[s0(, s1)] -> operand index`` of phase 1 (the
        hero's operand, real shape; s0 = loop turn, s1 = vector element when v > 1)."""
        if operand not in (None, 0):
            return None
        t = self.tiling
        shape = self.heroes[hero].operands[0].shape
        index, ranges, cons = self._tile_walk(1)
        real = expr_delinearize(expr_linearize(index, t.dims), shape.dimensions)
        return work_item_map(real, self.launch, ranges, cons)

    def thread_to_output_map(self, leaf: int | None = None) -> IndexingMap:
        """``(th_x, ..., bl_z)[s0] -> index`` of the output ``leaf`` written in phase 2 (default:
        the first leaf with a transpose hero), through its layout as ``store_value`` writes it."""
        t = self.tiling
        if leaf is None:
            leaf = next(i for i, l in enumerate(self.leaves) if l.hero is not None)
        shape = self.leaves[leaf].shape
        index, ranges, cons = self._tile_walk(2 if self.leaves[leaf].hero is not None else 1)
        dims = t.out_dims if self.leaves[leaf].hero is not None else t.dims
        real = expr_delinearize(expr_linearize(index, dims), shape.dimensions, shape.minor_to_major)
        return work_item_map(real, self.launch, ranges, cons)

    def report_lines(self) -> list[str]:
        t = self.tiling
        x = "x".join
        kind = self.variant + (" (emitted with the tiled algorithm: " + self.fallback + ")"
                               if self.variant == TransposeVariant.PACKED else "")
        lines = [f"transpose {kind}: normalised [{', '.join(map(str, t.dims))}] -> "
                 f"[{', '.join(map(str, t.out_dims))}], permutation {{{','.join(map(str, t.perm))}}}",
                 f"tile {x(map(str, t.tile))} ({NUM_THREADS} threads, {t.iterations} per thread and phase, "
                 f"vector {t.vector}), "
                 f"blocks {x(map(str, t.block_counts))} = {t.num_blocks}",
                 f"shared tile {x(map(str, t.shmem_shape))} x {len(self.heroes)} hero(es): "
                 f"{self.static_shared_bytes} B static, index type {self.index_type}",
                 ]
        return lines + maps_report_lines(self)

    def summary_fields(self) -> dict:
        out = {"tile": list(self.tiling.tile), "threads_per_block": NUM_THREADS, "vector_size": self.tiling.vector,
               "static_shared_bytes": self.static_shared_bytes, "index_type": str(self.index_type)}
        if self.variant == TransposeVariant.PACKED:   # XLA's choice, emitted with the tiled algorithm
            out.update(variant=TransposeVariant.TILED, xla_variant=TransposeVariant.PACKED)
        return out


def plan_tiled_transpose(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo, kernel_name: str,
                         heroes: Sequence[HloInstruction], leaves: Sequence[OutputLeaf],
                         declined: str = "") -> TransposeKernelSpec:
    """The tiled plan; ``declined`` says why the packed variant XLA chose did not take it."""
    desc = analysis.transpose
    tiling = TransposeTiling.for_transpose(desc.operand_dimensions, desc.permutation,
                                           _vector_size(desc, heroes, device))
    launch = LaunchDims((tiling.num_blocks, 1, 1), (NUM_THREADS, 1, 1), 0)
    shared = sum(-(-tiling.shmem_elements * _bytes(h) // 16) * 16 for h in heroes)
    return TransposeKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation),
                               tiling=tiling, heroes=tuple(heroes), leaves=tuple(leaves), launch=launch,
                               index_type=kernel_index_type(fusion, launch),
                               variant=analysis.variant or TransposeVariant.TILED, static_shared_bytes=shared,
                               fallback=declined)


MAX_VECTOR_BYTES = 4   # CUDA: vectorise up to 4 bytes per thread access (ROCm: 16)


def _vector_size(desc, heroes: Sequence[HloInstruction], device) -> int:
    """XLA's vector size of the tiled transpose (notes §b.4): 1 unless the minor dim moves and
    narrow elements leave room; then the largest v in 4 bytes / element bytes, ..., 2 with
    enough work, enough shared memory and both swapped dims divisible by v."""
    dims, perm = desc.operand_dimensions, desc.permutation
    if perm[-1] == len(dims) - 1 or not heroes:
        return 1
    max_bytes = max(_bytes(h) for h in heroes)
    shmem_usage = sum(TILE * (TILE + 1) * _bytes(h) for h in heroes)
    blocks = TransposeTiling.for_transpose(dims, perm).num_blocks
    v = MAX_VECTOR_BYTES // max_bytes
    while v > 1:
        enough_work = blocks * NUM_THREADS >= v * v * device.core_count * device.threads_per_core_limit
        enough_shmem = shmem_usage * v * v <= device.shared_memory_per_block
        aligned = dims[-1] % v == 0 and dims[perm[-1]] % v == 0
        if enough_work and enough_shmem and aligned:
            return v
        v //= 2
    return 1


def _bytes(hero: HloInstruction) -> int:
    return bits_of(hero.shape.element_type) // 8


# ---- emission --------------------------------------------------------------------------------

def emit_tiled_transpose(target: Target, spec: TransposeKernelSpec) -> ir.Module:
    kernel = open_kernel(target, spec, inline=True)
    kb, b, fe = kernel.kb, kernel.b, kernel.fe
    t = spec.tiling
    out_ptrs = kernel.outputs
    tiles = {h: target.shared_array(b, f"tile.{i}", storage_type(h.shape.element_type), t.shmem_elements)
             for i, h in enumerate(spec.heroes)}

    tid = kb.thread_id(0)
    block = kb.delinearize(kb.block_id(0), t.block_counts)
    origin = [v if n == 1 else b.mul(v, kb.index(n)) for v, n in zip(block, t.tile)]

    def shmem_offset(tile_coord: Sequence[ir.Value]) -> ir.Value:
        return kb.linearize(tile_coord, t.shmem_shape)

    vec = t.vector

    def tile_loop(tile_dims: Sequence[int], dims: Sequence[int], base: Sequence[ir.Value]):
        """Yields, per loop turn and guarded, the ``t.vector`` (tile coordinate, index) pairs of
        the consecutive elements a thread handles: the first delinearised, the others one
        further along the tile's minor dim (divisible by v, as are the swapped dims: the v
        elements are all in range or all out of it, one guard for them all)."""
        # unrolled, as XLA has it: every turn's loads independent, all in flight at once. A
        # turn that moves by whole rows of the tile (per_turn a multiple of the minor dims'
        # size) only adds a constant to the major coordinate of the thread's first position:
        # the div/mod chain once, and the turns' addresses one base plus constant offsets
        tlin = b.mul(tid, kb.index(vec), flags=NO_WRAP)
        row = math.prod(tile_dims[1:])
        first = kb.delinearize(tlin, tile_dims) if t.per_turn % row == 0 else None
        for turn in range(t.iterations):
            k = kb.index(turn)
            lin = b.add(tlin, b.mul(k, kb.index(t.per_turn), flags=NO_WRAP), flags=NO_WRAP)
            conds = [b.icmp_unsigned("<", lin, kb.index(t.tile_elements))] if t.tile_elements % t.per_turn else []
            if first is not None:
                step = turn * t.per_turn // row
                coord = [b.add(first[0], kb.index(step), flags=NO_WRAP) if step else first[0]] + first[1:]
            else:
                coord = kb.delinearize(lin, tile_dims)
            index = [o if n == 1 else b.add(o, c, flags=NO_WRAP) for o, c, n in zip(base, coord, tile_dims)]
            conds += [b.icmp_unsigned("<", i, kb.index(d)) for i, d, n in zip(index, dims, tile_dims) if d % n]
            points = [(coord, index)]
            for e in range(1, vec):
                step = kb.index(e)
                points.append((coord[:-1] + [b.add(coord[-1], step, flags=NO_WRAP)],
                               index[:-1] + [b.add(index[-1], step, flags=NO_WRAP)]))
            with kb.if_all(conds), fe.scope():
                yield points

    # phase 1: hero operands into shared memory (operand order), side outputs to memory. All
    # of a thread's values are computed before any store: its v loads sit together.
    side = [(leaf, ptr) for leaf, ptr in zip(spec.leaves, out_ptrs) if leaf.hero is None]
    # every parameter read through VectorLoads: v-element vectors from one base (vec > 1), and
    # offsets of indices delinearised from a linear one taken as that linear index
    loads = VectorLoads(fe)
    for points in tile_loop(t.tile, t.dims, origin):
        stores = []
        for h, smem in tiles.items():
            operand = h.operands[0]
            indices = [reshape_index(kb, index, t.dims, operand.shape.dimensions) for _, index in points]
            if vec > 1:
                loads.register(indices)
            stores += [(h, smem, coord, fe.value(operand, idx)) for (coord, _), idx in zip(points, indices)]
        side_values = []
        if side:
            linears = [kb.linearize(index, t.dims) for _, index in points]
            side_values = [(leaf, ptr, leaf_value(kb, fe, leaf, linear, None), linear, linears[0], e)
                           for leaf, ptr in side for e, linear in enumerate(linears)]
        for h, smem, coord, v in stores:
            et = h.operands[0].shape.element_type
            b.store(to_storage(b, v, et), b.gep(smem, [shmem_offset(coord)], inbounds=True,
                                                source_etype=storage_type(et)))
        for leaf, ptr, v, linear, first, e in side_values:
            store_value(kb, leaf, ptr, linear, v, first if vec > 1 else None, e)
        loads.clear()

    target.barrier(b)

    # phase 2: transposed reads from shared memory through the epilogue, coalesced writes
    current: dict = {}

    def hero_value(h: HloInstruction, smem: ir.Value):
        et = h.shape.element_type

        def value_at(index: Sequence[ir.Value]) -> ir.Value:
            off = current.get((h, tuple(id(x) for x in index)))
            if off is None:  # reached through ops that recomputed the index: map it back into the tile
                norm = reshape_index(kb, index, h.shape.dimensions, t.out_dims)
                c_out = [b.sub(v, origin[p]) if t.tile[p] != 1 else kb.index(0) for v, p in zip(norm, t.perm)]
                off = shmem_offset(to_operand_order(c_out, t.perm))
            ptr = b.gep(smem, [off], inbounds=True, source_etype=storage_type(et))
            return from_storage(b, b.load(ptr, typ=storage_type(et)), et)
        return value_at

    for h, smem in tiles.items():
        fe.inject(h, hero_value(h, smem))
    out_origin = [origin[p] for p in t.perm]
    transposed = [(leaf, ptr) for leaf, ptr in zip(spec.leaves, out_ptrs) if leaf.hero is not None]
    for points in tile_loop(t.out_tile, t.out_dims, out_origin):
        pending = []
        first = None
        for e, (c_out, out_index) in enumerate(points):
            off = shmem_offset(to_operand_order(c_out, t.perm))
            hero_index = {}
            for h in spec.heroes:
                hero_index[h] = reshape_index(kb, out_index, t.out_dims, h.shape.dimensions)
                current[(h, tuple(id(x) for x in hero_index[h]))] = off
            linear = kb.linearize(out_index, t.out_dims)
            first = linear if e == 0 else first
            pending += [(leaf, ptr, leaf_value(kb, fe, leaf, linear, hero_index[leaf.hero]), linear, e)
                        for leaf, ptr in transposed]
        for leaf, ptr, v, linear, e in pending:
            store_value(kb, leaf, ptr, linear, v, first if vec > 1 else None, e)
        current.clear()
    return kernel.finish()
