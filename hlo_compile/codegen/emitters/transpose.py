"""The tiled transpose emitter (XLA's ``TransposeFusion``, notes/xla.md §b.4).

A fusion whose hero is a transpose is emitted in two phases over a tile of the hero's
*normalised* operand (size-1 dims dropped, dims that stay adjacent merged: ``[A, B, C] ->
[A, C, B]`` is "021", ``-> [C, B, A]`` "210", ``-> [B, A, C]`` "102"):

- The tile is 32 × 32 on the two dims the transpose swaps into minor position (the operand's
  minor dim and the dim that becomes the output's minor dim; for "102" the two second-minor
  dims, with the whole kept minor dim inside the tile), 1 on every other dim. A dim smaller
  than 32 gets a tile of its own size (fewer idle loop turns; XLA keeps 32 and masks).
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

Normalised ↔ real indices: ``transpose_description`` only accepts heroes whose operand and
output have default (row-major) layouts, so the normalised and the real shapes share their
row-major linear index; a root reached from its hero through intermediate ops (elementwise
keeping the layout, bitcasts) shares the hero's physical offset. Both are plain
(de)linearisations. Anything else (sub-byte types, tiled root layouts, layout-changing
elementwise ops between hero and root, tuple roots) is refused: ``plan_transpose_kernel``
then hands the fusion to the loop emitter and says so. The packed variant (§b.4) is emitted
with the same tiled algorithm (reported as such).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir

from ...hlo import HloInstruction
from ...hlo.shape import Shape
from ..fused_emitter import FusedEmitter, from_storage, to_storage
from ..fusion_analysis import bits_of, is_elementwise, transpose_description
from ..kernel_builder import KernelBuilder
from ..llvm_types import storage_type
from ..partitioner import PartitionedComputation, partition
from ..target import KernelParam, LaunchDims, Target
from .loop import fall_back_to_loop, fusion_params, kernel_index_type, output_leaves
from .transpose_tiling import (MAX_BLOCKS, NUM_THREADS, Guarded, TransposeTiling, delinearize,
                               delinearize_order, expr_delinearize, expr_linearize, linearize, reshape_index,
                               thread_map)


# ---- the plan --------------------------------------------------------------------------------

@dataclass(frozen=True)
class OutputLeaf:
    root: HloInstruction
    shape: Shape
    hero: HloInstruction | None     # the transpose hero (phase 2), or None: side output (phase 1)


@dataclass(frozen=True)
class TransposeKernelSpec:
    kernel_name: str
    fusion: HloInstruction
    partitioned: PartitionedComputation
    tiling: TransposeTiling
    heroes: tuple[HloInstruction, ...]   # distinct transpose heroes, one shared tile each
    leaves: tuple[OutputLeaf, ...]
    launch: LaunchDims
    index_type: ir.IntType
    variant: str
    static_shared_bytes: int

    @property
    def params(self) -> list[KernelParam]:
        return fusion_params(self.fusion)

    def emit(self, target: Target) -> ir.Module:
        return emit_transpose_kernel(target, self)

    # ---- thread -> data maps (XLA's indexing of the transpose emitter, notes §b.4) ------------
    def _tile_walk(self, phase: int):
        """The normalised index a thread handles at loop turn ``s0`` in ``phase`` (1: operand
        order, 2: output order), with the constraints of its guard: the description both maps
        share, mirroring ``emit_transpose_kernel.tile_loop``."""
        from ...indexing import affine as A
        t = self.tiling
        th, bl, s0 = A.dim(0), A.dim(3), A.sym(0)
        block = expr_delinearize(bl, t.block_counts)
        origin = [A.mul(v, n) for v, n in zip(block, t.tile)]
        tile, dims = (t.tile, t.dims) if phase == 1 else (t.out_tile, t.out_dims)
        if phase == 2:
            origin = [origin[p] for p in t.perm]
        lin = A.add(th, A.mul(s0, NUM_THREADS))
        cons = [(lin, 0, t.tile_elements - 1)]
        coord = expr_delinearize(lin, tile)
        index = [A.add(o, c) for o, c in zip(origin, coord)]
        cons += [(i, 0, d - 1) for i, d in zip(index, dims)]
        return index, [(0, t.iterations - 1)], cons

    def thread_to_input_map(self, hero: int = 0):
        """``(th_x, th_y, th_z, bl_x, bl_y, bl_z)[s0] -> operand index`` of phase 1 (the hero's
        operand, real shape; s0 = loop turn)."""
        t = self.tiling
        operand = self.heroes[hero].operands[0].shape
        index, ranges, cons = self._tile_walk(1)
        real = expr_delinearize(expr_linearize(index, t.dims), operand.dimensions)
        return thread_map(real, self.launch, ranges, cons)

    def thread_to_output_map(self, leaf: int | None = None):
        """``(th_x, ..., bl_z)[s0] -> index`` of the output ``leaf`` written in phase 2 (default:
        the first leaf with a transpose hero), through its layout as ``_store_leaf`` writes it."""
        t = self.tiling
        if leaf is None:
            leaf = next(i for i, l in enumerate(self.leaves) if l.hero is not None)
        shape = self.leaves[leaf].shape
        index, ranges, cons = self._tile_walk(2 if self.leaves[leaf].hero is not None else 1)
        dims = t.out_dims if self.leaves[leaf].hero is not None else t.dims
        real = expr_delinearize(expr_linearize(index, dims), shape.dimensions, shape.minor_to_major)
        return thread_map(real, self.launch, ranges, cons)

    def report_lines(self) -> list[str]:
        t = self.tiling
        x = "x".join
        kind = self.variant + (" (emitted with the tiled algorithm)" if self.variant == "packed" else "")
        lines = [f"transpose {kind}: normalised [{', '.join(map(str, t.dims))}] -> "
                 f"[{', '.join(map(str, t.out_dims))}], permutation {{{','.join(map(str, t.perm))}}}",
                 f"tile {x(map(str, t.tile))} ({NUM_THREADS} threads, {t.iterations} per thread and phase), "
                 f"blocks {x(map(str, t.block_counts))} = {t.num_blocks}",
                 f"shared tile {x(map(str, t.shmem_shape))} x {len(self.heroes)} hero(es): "
                 f"{self.static_shared_bytes} B static, index type {self.index_type}",
                 f"side outputs (phase 1): {', '.join('%' + l.root.name for l in self.leaves if l.hero is None) or '-'}",
                 f"thread -> input (%{self.heroes[0].operands[0].name}): {self.thread_to_input_map()}"]
        lines += [f"thread -> output {i} (%{l.root.name}): {self.thread_to_output_map(i)}"
                  for i, l in enumerate(self.leaves)]
        return lines + self.partitioned.to_text().splitlines()

    def summary_fields(self) -> dict:
        return {"tile": list(self.tiling.tile), "threads_per_block": NUM_THREADS,
                "static_shared_bytes": self.static_shared_bytes, "index_type": str(self.index_type)}


def plan_transpose_kernel(fusion: HloInstruction, analysis, device, kernel_name: str):
    """The tiled transpose plan for ``fusion``, or the loop emitter's plan with the reason."""
    why = _refusal(fusion, analysis)
    if why is not None:
        return fall_back_to_loop(fusion, analysis, device, kernel_name, "transpose", why)
    desc = analysis.transpose
    tiling = TransposeTiling.for_transpose(desc.operand_dimensions, desc.permutation)
    leaves, heroes = [], []
    for (root, shape), hero in zip(output_leaves(fusion), _hero_per_leaf(analysis)):
        if hero is not None and hero not in heroes:
            heroes.append(hero)
        leaves.append(OutputLeaf(root, shape, hero))
    launch = LaunchDims((tiling.num_blocks, 1, 1), (NUM_THREADS, 1, 1), 0)
    shared = sum(-(-tiling.shmem_elements * _bytes(h) // 16) * 16 for h in heroes)
    return TransposeKernelSpec(kernel_name, fusion, partition(fusion.fused_computation), tiling, tuple(heroes),
                               tuple(leaves), launch, kernel_index_type(fusion, launch), analysis.variant or "tiled",
                               shared)


def _bytes(hero: HloInstruction) -> int:
    return bits_of(hero.shape.element_type) // 8


def _hero_per_leaf(analysis) -> list[HloInstruction | None]:
    heroes = {id(r): h for r, h in zip(analysis.roots, analysis.heroes)}
    out = []
    for root, _ in output_leaves(analysis.fusion):
        h = heroes.get(id(root))
        out.append(h if h is not None and h.opcode == "transpose" and _same_transpose(h, analysis) else None)
    return out


def _same_transpose(hero: HloInstruction, analysis) -> bool:
    d = transpose_description(hero)
    return d is not None and d.equivalent(analysis.transpose)


def _refusal(fusion: HloInstruction, analysis) -> str | None:
    """Why the tiled emitter cannot take this fusion, or None."""
    desc = analysis.transpose
    if desc is None:
        return "no transpose description"
    if desc.bits < 8:
        return f"{desc.bits}-bit elements (sub-byte storage)"
    tiling = TransposeTiling.for_transpose(desc.operand_dimensions, desc.permutation)
    if tiling.num_blocks > MAX_BLOCKS:
        return f"{tiling.num_blocks} blocks"
    in_count = math.prod(desc.operand_dimensions)
    for (root, shape), hero in zip(output_leaves(fusion), _hero_per_leaf(analysis)):
        if root.shape.is_tuple:
            return f"tuple-shaped root %{root.name}"
        if shape.layout is not None and shape.layout.tiles:
            return f"tiled layout of root %{root.name}"
        if shape.element_count() != in_count:
            return f"root %{root.name} has {shape.element_count()} elements, the transpose {in_count}"
        if hero is not None and not _keeps_offsets(root, hero):
            return f"an op between %{hero.name} and root %{root.name} changes the layout"
    return None


def _keeps_offsets(root: HloInstruction, hero: HloInstruction) -> bool:
    """Whether every elementwise op on the paths from ``hero`` to ``root`` keeps its operand's
    layout (bitcasts keep offsets by definition), so the root's physical offset is the hero's."""
    below, stack = set(), list(hero.users)
    while stack:
        x = stack.pop()
        if id(x) not in below:
            below.add(id(x))
            stack.extend(x.users)
    if root is not hero and id(root) not in below:
        return False
    stack, seen = [root], set()
    while stack:
        inst = stack.pop()
        if inst is hero or id(inst) in seen:
            continue
        seen.add(id(inst))
        for op in inst.operands:
            if op is not hero and id(op) not in below:
                continue  # not on a path from the hero
            if is_elementwise(inst) and op.shape.rank == inst.shape.rank and \
                    tuple(op.shape.minor_to_major) != tuple(inst.shape.minor_to_major):
                return False
            stack.append(op)
    return True


# ---- emission --------------------------------------------------------------------------------

def emit_transpose_kernel(target: Target, spec: TransposeKernelSpec) -> ir.Module:
    module = target.new_module(spec.kernel_name)
    kf = target.begin_kernel(module, spec.kernel_name, spec.params)
    kb = KernelBuilder(kf.builder, target, spec.index_type)
    b = kb.b
    t = spec.tiling
    n_in = len(spec.fusion.fused_computation.parameters)
    fe = FusedEmitter(target, module, spec.kernel_name, spec.partitioned, spec.index_type, inline=True)
    fe.bind(kb, kf.args[:n_in])
    out_ptrs = kf.args[n_in:]
    tiles = {h: target.shared_array(b, f"tile.{i}", storage_type(h.shape.element_type), t.shmem_elements)
             for i, h in enumerate(spec.heroes)}

    tid = kb.thread_id(0)
    block = delinearize(kb, kb.block_id(0), t.block_counts)
    origin = [v if n == 1 else b.mul(v, kb.index(n)) for v, n in zip(block, t.tile)]

    def shmem_offset(tile_coord: Sequence[ir.Value]) -> ir.Value:
        return linearize(kb, tile_coord, t.shmem_shape)

    def tile_loop(tile_dims: Sequence[int], dims: Sequence[int], base: Sequence[ir.Value]):
        """Yields (tile coordinate, index) for each element a thread handles, guarded."""
        with kb.loop(0, t.iterations, name="row") as k:
            lin = b.add(tid, b.mul(k, kb.index(NUM_THREADS)))
            conds = [b.icmp_unsigned("<", lin, kb.index(t.tile_elements))] if t.tile_elements % NUM_THREADS else []
            coord = delinearize(kb, lin, tile_dims)
            index = [o if n == 1 else b.add(o, c) for o, c, n in zip(base, coord, tile_dims)]
            conds += [b.icmp_unsigned("<", i, kb.index(d)) for i, d, n in zip(index, dims, tile_dims) if d % n]
            with Guarded(kb, conds), fe.scope():
                yield coord, index

    # phase 1: hero operands into shared memory (operand order), side outputs to memory
    side = [(leaf, ptr) for leaf, ptr in zip(spec.leaves, out_ptrs) if leaf.hero is None]
    for coord, index in (tile_loop(t.tile, t.dims, origin)):
        off = shmem_offset(coord)
        for h, smem in tiles.items():
            operand = h.operands[0]
            v = fe.value(operand, reshape_index(kb, index, t.dims, operand.shape.dimensions))
            et = operand.shape.element_type
            b.store(to_storage(b, v, et), b.gep(smem, [off], inbounds=True, source_etype=storage_type(et)))
        if side:
            linear = linearize(kb, index, t.dims)
            for leaf, ptr in side:
                _store_leaf(kb, fe, leaf, ptr, linear, None)

    target.barrier(b)

    # phase 2: transposed reads from shared memory through the epilogue, coalesced writes
    current: dict = {}

    def hero_value(h: HloInstruction, smem: ir.Value):
        et = h.shape.element_type

        def value_at(index: Sequence[ir.Value]) -> ir.Value:
            known = current.get(h)
            if known is not None and all(x is y for x, y in zip(known[0], index)):
                off = known[1]
            else:  # reached through ops that recomputed the index: map it back into the tile
                norm = reshape_index(kb, index, h.shape.dimensions, t.out_dims)
                c_out = [b.sub(v, origin[p]) if t.tile[p] != 1 else kb.index(0) for v, p in zip(norm, t.perm)]
                off = shmem_offset(_to_operand_order(c_out, t.perm))
            ptr = b.gep(smem, [off], inbounds=True, source_etype=storage_type(et))
            return from_storage(b, b.load(ptr, typ=storage_type(et)), et)
        return value_at

    for h, smem in tiles.items():
        fe.inject(h, hero_value(h, smem))
    out_origin = [origin[p] for p in t.perm]
    transposed = [(leaf, ptr) for leaf, ptr in zip(spec.leaves, out_ptrs) if leaf.hero is not None]
    for c_out, out_index in (tile_loop(t.out_tile, t.out_dims, out_origin)):
        off = shmem_offset(_to_operand_order(c_out, t.perm))
        hero_index = {}
        for h in spec.heroes:
            hero_index[h] = reshape_index(kb, out_index, t.out_dims, h.shape.dimensions)
            current[h] = (hero_index[h], off)
        linear = linearize(kb, out_index, t.out_dims)
        for leaf, ptr in transposed:
            _store_leaf(kb, fe, leaf, ptr, linear, hero_index[leaf.hero])
        current.clear()
    target.end_kernel(b)
    return module


def _to_operand_order(c_out: Sequence[ir.Value], perm: Sequence[int]) -> list[ir.Value]:
    c_in: list = [None] * len(perm)
    for i, p in enumerate(perm):
        c_in[p] = c_out[i]
    return c_in


def _store_leaf(kb: KernelBuilder, fe: FusedEmitter, leaf: OutputLeaf, ptr: ir.Value, linear: ir.Value,
                hero_index: list[ir.Value] | None) -> None:
    """Compute ``leaf``'s root at physical offset ``linear`` (the hero's) and store it there."""
    shape, b = leaf.shape, kb.b
    default = tuple(shape.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))
    if hero_index is not None and default and tuple(shape.dimensions) == tuple(leaf.hero.shape.dimensions):
        index = hero_index
    else:
        index = delinearize_order(kb, linear, shape.dimensions, shape.minor_to_major)
    v = fe.root_value(leaf.root, index)
    et = shape.element_type
    b.store(to_storage(b, v, et), b.gep(ptr, [linear], inbounds=True, source_etype=storage_type(et)))
