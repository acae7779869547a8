"""The reduction emitter's planner: XLA's row, multi-row and column reductions.

``plan_reduction_kernel`` classifies the fusion's roots (reduce heroes with the analysis'
reduction dimensions, elementwise side outputs of the operand's element count), fixes the
launch geometry as XLA does (notes/xla.md §b.5) and returns a ``ReductionKernelSpec``
whose ``emit`` runs ``reduction_row``, ``reduction_column`` or ``reduction_small_column``.
Disjoint reduction groups (``group_disjoint_reductions``, XLA's ``GroupDisjointReductions``)
are launched on ``blockIdx.z``, each block reducing only its group's roots. Differences
from XLA:

- groups are numbered by their first root (XLA orders them by an internal instruction id);
- grids are not split with ``MaybeSplitGridDimensionX``: a grid beyond the limits falls back;
- what the emitter cannot do falls back to the loop emitter (one thread per output element),
  saying why in ``report_lines``: reductions that are not race-free (XLA first splits them
  with its tree-reduction rewrite, not done here), complex values, several reduce heroes with
  different reduction dimensions, grids beyond the launch limits.
"""
from __future__ import annotations

from ...hlo import HloInstruction
from ..fusion_analysis import (find_hero, fusion_roots, is_race_free, is_real_reduction_hero,
                               multi_row_vector_size, reduction_dimensions)
from ..partitioner import partition
from ..target import LaunchDims
from .loop import LoopFallbackSpec, fall_back_to_loop, kernel_index_type
from .reduction_column import column_geometry
from .reduction_common import ReductionKernelSpec
from .reduction_row import multi_row_geometry, row_geometry
from .reduction_small_column import small_column_geometry


def _vector_size_fn(heroes: list[HloInstruction], smallest_input_bits: int):
    """XLA's ``GetVectorSizeForMlir``: no vectors for complex hero operands; the element
    width that decides is the fusion's narrowest *parameter* (``smallest_input_dtype_bits``;
    so a bf16 parameter converted to f32 before the reduce still gets 4 lanes)."""
    types = [x.shape.element_type for h in heroes for x in h.operands]
    bits = smallest_input_bits
    complex_ = any(t.startswith("c") for t in types)

    def vector_size(minor: int, threads: int) -> int:
        if minor % 2 or threads * 2 > minor or complex_ or bits >= 64:
            return 1
        if bits >= 32 or threads * 4 > minor:
            return 2
        return 4 if minor % 4 == 0 else 2
    return vector_size


def _decline(fusion, analysis, device, kernel_name, why: str) -> LoopFallbackSpec:
    return fall_back_to_loop(fusion, analysis, device, kernel_name, "reduction", why)


def plan_reduction_kernel(fusion: HloInstruction, analysis, device, kernel_name: str):
    comp = fusion.fused_computation
    rd = analysis.reduction
    roots = fusion_roots(comp)
    heroes: list[HloInstruction] = []
    reduce_roots, side_roots = [], []
    for r in roots:
        h = find_hero(r)
        if h.opcode == "reduce" and is_real_reduction_hero(r, h, device):
            if reduction_dimensions(h) != rd:
                return _decline(fusion, analysis, device, kernel_name, f"%{h.name} has other reduction dimensions")
            if not is_race_free(rd, device):
                return _decline(fusion, analysis, device, kernel_name,
                                f"%{h.name} is not race-free (needs XLA's tree-reduction rewrite first)")
            if h not in heroes:
                heroes.append(h)
            reduce_roots.append(r)
        else:
            side_roots.append(r)
    if not heroes:
        return _decline(fusion, analysis, device, kernel_name, "no reduce hero")
    types = [x.shape.element_type for h in heroes for x in h.operands] + \
            [s.element_type for h in heroes for s in (h.shape.tuple_shapes if h.shape.is_tuple else [h.shape])]
    if any(t.startswith("c") for t in types):
        return _decline(fusion, analysis, device, kernel_name, "complex reductions are not supported")
    for shape in [h.operands[0].shape for h in heroes] + [r.shape for r in side_roots]:
        if shape.is_tuple or (shape.layout and shape.layout.tiles):
            return _decline(fusion, analysis, device, kernel_name, "tiled or tuple side output layouts")
    vsize = _vector_size_fn(heroes, analysis.smallest_input_bits)
    notes = []
    if rd.is_row:
        mv = multi_row_vector_size(rd, analysis.smallest_input_bits, analysis.smallest_output_bits, device)
        if analysis.variant == "multi-row" and mv:
            variant, geo = "multi-row", multi_row_geometry(rd, mv)
        else:
            variant, geo = "row", row_geometry(rd, vsize)
        grid, block = (geo["blocks"], 1, 1), (geo["threads"], 1, 1)
        assert geo["reduced_blocks"] == 1, geo  # race-free rows fit one block
    elif analysis.variant == "small-column" and device.threads_per_warp % rd.dimensions[2] == 0:
        variant, geo = "small-column", small_column_geometry(rd, vsize)
        grid, block = (geo["blocks"], 1, 1), (geo["threads"], 1, 1)
    else:
        variant, geo = "column", column_geometry(rd, vsize)
        grid, block = (geo["blocks"][0], geo["blocks"][1], 1), (geo["threads"], 1, 1)
    groups = group_disjoint_reductions(roots, reduce_roots, heroes)
    grid = (grid[0], grid[1], len(groups))
    if any(n > lim for n, lim in zip(grid, device.block_dim_limit)):
        return _decline(fusion, analysis, device, kernel_name, f"grid {grid} exceeds the launch limits")
    launch = LaunchDims(grid, block)
    return ReductionKernelSpec(kernel_name, fusion, partition(comp), variant, analysis.variant, rd, heroes,
                               reduce_roots, side_roots, launch, kernel_index_type(fusion, launch), geo, notes,
                               groups)


def _broadcasted_constant_or_scalar(inst: HloInstruction) -> bool:
    """XLA's ``hlo_query::IsBroadcastedConstantOrScalar``."""
    def scalar(i):
        return i.shape.is_array and i.shape.rank == 0
    return (inst.opcode == "constant" or scalar(inst)
            or (inst.opcode == "broadcast" and (inst.operands[0].opcode == "constant" or scalar(inst.operands[0]))))


def group_disjoint_reductions(roots: list[HloInstruction], reduce_roots: list[HloInstruction],
                              heroes: list[HloInstruction]) -> list[tuple[list, list, list]]:
    """XLA's ``GroupDisjointReductions``: roots reached from a common instruction of the
    fusion share a group; every non-reduction root joins one group (XLA does not yet handle
    aliasing between a fusion's inputs and outputs); a broadcast constant or scalar joins at
    most one reduction root (recomputing it is cheap). Returns ``(heroes, reduce roots, side
    roots)`` per group, groups in order of their first root."""
    n = len(roots)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def merge(i, j):
        i, j = find(i), find(j)
        if i != j:
            parent[max(i, j)] = min(i, j)

    is_reduction = [any(r is x for x in reduce_roots) for r in roots]
    if n > 1:
        side = [i for i in range(n) if not is_reduction[i]]
        for i in side[1:]:
            merge(side[0], i)
        # roots reached from each instruction (the instruction itself included)
        reached: dict[int, tuple[HloInstruction, set[int]]] = {}
        for i, r in enumerate(roots):
            stack = [r]
            while stack:
                x = stack.pop()
                entry = reached.setdefault(id(x), (x, set()))
                if i in entry[1]:
                    continue
                entry[1].add(i)
                stack.extend(x.operands)
        for inst, hits in reached.values():
            ids, added_reduce = [], False
            for i in range(n):
                if is_reduction[i] and added_reduce and _broadcasted_constant_or_scalar(inst):
                    continue
                if i in hits:
                    ids.append(i)
                    added_reduce = added_reduce or is_reduction[i]
            for i in ids[1:]:
                merge(ids[0], i)
    order: list[int] = []
    for i in range(n):
        if find(i) not in order:
            order.append(find(i))
    groups = []
    for rep in order:
        members = [roots[i] for i in range(n) if find(i) == rep]
        g_roots = [r for r in members if any(r is x for x in reduce_roots)]
        g_heroes = [h for h in heroes if any(find_hero(r) is h for r in g_roots)]
        g_sides = [r for r in members if not any(r is x for x in reduce_roots)]
        groups.append((g_heroes, g_roots, g_sides))
    return groups
