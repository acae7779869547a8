"""The reduction emitter's planner: XLA's row, multi-row and column reductions.

``plan_reduction_kernel`` classifies the fusion's roots (reduce heroes with the analysis'
reduction dimensions, elementwise side outputs of the operand's element count), takes the
path of the variant XLA chose from ``VARIANTS`` (``row.py``: row and multi-row,
``column.py``, ``small_column.py``), fixes its launch geometry as XLA does (notes/xla.md
§b.5) and returns a ``ReductionKernelSpec``; ``emit_reduction_kernel`` runs its path.
Disjoint reduction groups (``group_disjoint_reductions``, XLA's ``GroupDisjointReductions``)
are launched on ``blockIdx.z``, each block reducing only its group's roots. Differences
from XLA:

- groups are numbered by their first root (XLA orders them by an internal instruction id);
- grids are not split with ``MaybeSplitGridDimensionX``: a grid beyond the limits falls back;
- what the emitter cannot do it declines (``Declined``): the loop emitter (one thread per
  output element) takes the fusion and its report says why: reductions that are not race-free (XLA first splits them
  with its tree-reduction rewrite, not done here), complex values, several reduce heroes with
  different reduction dimensions, grids beyond the launch limits.
"""
from __future__ import annotations

from llvmlite import ir

from ....hlo import HloInstruction
from ....gpu.device_info import DeviceInfo
from ...analysis.emitter_kind import ReductionVariant
from ...analysis.fusion_analysis import (FusionAnalysis, find_hero, fusion_roots, is_race_free, is_real_reduction_hero,
                                reduction_dimensions)
from ...kernel import Declined, kernel_index_type
from ...elemental.partitioner import partition
from ...target import LaunchDims, Target
from .column import COLUMN
from .grouping import group_disjoint_reductions
from .row import MULTI_ROW, ROW
from .small_column import SMALL_COLUMN
from .spec import ReductionKernelSpec, ReductionPath, VectorSizeFn

# XLA's reduction variant (``analysis.variant``) -> the path that emits it
VARIANTS: dict[ReductionVariant, ReductionPath] = {p.name: p for p in (ROW, MULTI_ROW, COLUMN, SMALL_COLUMN)}


def vector_size_fn(heroes: list[HloInstruction], smallest_input_bits: int) -> VectorSizeFn:
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


def plan_reduction_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                          kernel_name: str) -> ReductionKernelSpec:
    comp = fusion.fused_computation
    rd = analysis.reduction
    roots = _distinct(fusion_roots(comp))  # the get-tuple-elements of a variadic reduce name it once each
    heroes: list[HloInstruction] = []
    reduce_roots, side_roots = [], []
    for r in roots:
        h = find_hero(r)
        if h.opcode == "reduce" and is_real_reduction_hero(r, h, device):
            if reduction_dimensions(h) != rd:
                raise Declined(f"%{h.name} has other reduction dimensions")
            if not is_race_free(rd, device):
                raise Declined(f"%{h.name} is not race-free (needs XLA's tree-reduction rewrite first)")
            if h not in heroes:
                heroes.append(h)
            reduce_roots.append(r)
        else:
            side_roots.append(r)
    if not heroes:
        raise Declined("no reduce hero")
    types = [x.shape.element_type for h in heroes for x in h.operands] + \
            [s.element_type for h in heroes for s in (h.shape.tuple_shapes if h.shape.is_tuple else [h.shape])]
    if any(t.startswith("c") for t in types):
        raise Declined("complex reductions are not supported")
    for shape in [h.operands[0].shape for h in heroes] + [r.shape for r in side_roots]:
        if shape.is_tuple or (shape.layout and shape.layout.tiles):
            raise Declined("tiled or tuple side output layouts")
    path = VARIANTS[analysis.variant]
    geo = path.geometry(rd, vector_size_fn(heroes, analysis.smallest_input_bits), analysis)
    groups = group_disjoint_reductions(roots, reduce_roots, heroes)
    grid = (path.grid(geo), 1, len(groups))   # XLA: Product(num_blocks) on x, the groups on z
    if any(n > lim for n, lim in zip(grid, device.block_dim_limit)):
        raise Declined(f"grid {grid} exceeds the launch limits")
    launch = LaunchDims(grid, (geo["threads"], 1, 1))
    return ReductionKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(comp), path=path,
                               xla_variant=analysis.variant, rd=rd, heroes=heroes, reduce_roots=reduce_roots,
                               side_roots=side_roots, launch=launch, index_type=kernel_index_type(fusion, launch),
                               geometry=geo, notes=[], groups=groups)


def _distinct(insts: list[HloInstruction]) -> list[HloInstruction]:
    out: list[HloInstruction] = []
    for i in insts:
        if all(i is not o for o in out):
            out.append(i)
    return out


def emit_reduction_kernel(target: Target, spec: ReductionKernelSpec) -> ir.Module:
    return spec.path.emit(target, spec)


__all__ = ["VARIANTS", "ReductionKernelSpec", "emit_reduction_kernel", "plan_reduction_kernel", "vector_size_fn"]
