"""The reduction emitter's planner: XLA's row, multi-row and column reductions.

``plan_reduction_kernel`` classifies the fusion's roots (reduce heroes with the analysis'
reduction dimensions, elementwise side outputs of the operand's element count), fixes the
launch geometry as XLA does (notes/xla.md §b.5) and returns a ``ReductionKernelSpec``
whose ``emit`` runs ``reduction_row`` or ``reduction_column``. Differences from XLA:

- small-column fusions run the column code (32×32 threads, correct for any ``c``);
- disjoint reduction groups are not split over ``blockIdx.z``: every hero is reduced in one
  pass (the same results, one kernel-wide loop);
- what the emitter cannot do falls back to the loop emitter (one thread per output element),
  saying why in ``report_lines``: reductions that are not race-free (XLA first splits them
  with its tree-reduction rewrite, not done here), complex values, several reduce heroes with
  different reduction dimensions, grids beyond the launch limits.
"""
from __future__ import annotations

from ...hlo import HloInstruction
from ..fusion_analysis import (bits_of, find_hero, fusion_roots, is_race_free, is_real_reduction_hero,
                               multi_row_vector_size, reduction_dimensions)
from ..partitioner import partition
from ..target import LaunchDims
from .loop import LoopFallbackSpec, fall_back_to_loop, kernel_index_type
from .reduction_column import column_geometry
from .reduction_common import ReductionKernelSpec
from .reduction_row import multi_row_geometry, row_geometry


def _vector_size_fn(heroes: list[HloInstruction]):
    """XLA's ``GetVectorSizeForMlir`` over the heroes' inputs."""
    types = [x.shape.element_type for h in heroes for x in h.operands[:len(h.operands) // 2]]
    bits = max(bits_of(t) for t in types)
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
    vsize = _vector_size_fn(heroes)
    notes = []
    if rd.is_row:
        mv = multi_row_vector_size(rd, analysis.smallest_input_bits, analysis.smallest_output_bits, device)
        if analysis.variant == "multi-row" and mv:
            variant, geo = "multi-row", multi_row_geometry(rd, mv)
        else:
            variant, geo = "row", row_geometry(rd, vsize)
        grid, block = (geo["blocks"], 1, 1), (geo["threads"], 1, 1)
        assert geo["reduced_blocks"] == 1, geo  # race-free rows fit one block
    else:
        variant, geo = "column", column_geometry(rd, vsize)
        if analysis.variant == "small-column":
            notes.append("small-column reduction emitted by the column code (32x32 threads)")
        grid, block = (geo["blocks"][0], geo["blocks"][1], 1), (geo["threads"], 1, 1)
    if grid[1] > device.block_dim_limit[1] or grid[0] > device.block_dim_limit[0]:
        return _decline(fusion, analysis, device, kernel_name, f"grid {grid} exceeds the launch limits")
    if len(heroes) > 1:
        notes.append(f"{len(heroes)} heroes reduced in one pass (XLA may split disjoint groups over blockIdx.z)")
    launch = LaunchDims(grid, block)
    return ReductionKernelSpec(kernel_name, fusion, partition(comp), variant, analysis.variant, rd, heroes,
                               reduce_roots, side_roots, launch, kernel_index_type(fusion, launch), geo, notes)
