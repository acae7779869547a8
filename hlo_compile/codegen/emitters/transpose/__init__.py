"""The transpose emitters (XLA's ``TransposeFusion`` and ``PackedTranspose``, notes/xla.md §b.4).

``plan_transpose_kernel`` checks what every transpose kernel needs (else the loop emitter
takes the fusion, ``Declined``), finds the hero of each output leaf and runs the planner of
the variant XLA chose (``analysis.variant``) from ``VARIANTS``; a variant that declines hands
the fusion to its ``fallback`` (packed → tiled, reported as such). ``emit_transpose_kernel``
emits a plan with the variant that made it (``spec.path``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ....hlo import HloInstruction
from ....gpu.device_info import DeviceInfo
from ...analysis.emitter_kind import TransposeVariant
from ...analysis.fusion_analysis import FusionAnalysis, is_elementwise, transpose_description
from ...kernel import Declined, KernelSpec, output_leaves
from ...target import Target
from .common import OutputLeaf
from .packed import PackedTransposeKernelSpec, emit_packed_transpose, plan_packed_transpose
from .tiled import TransposeKernelSpec, emit_tiled_transpose, plan_tiled_transpose
from .tiling import MAX_BLOCKS, TransposeTiling


@dataclass(frozen=True)
class Variant:
    """One transpose algorithm: its planner ``(fusion, analysis, device, kernel name, heroes,
    leaves, why the variant before declined) -> spec`` (may raise ``Declined``), its kernel
    emitter, and the variant that takes what it declines."""

    plan: Callable[..., KernelSpec]
    emit: Callable[[Target, KernelSpec], ir.Module]
    fallback: TransposeVariant | None = None


VARIANTS: dict[TransposeVariant, Variant] = {
    TransposeVariant.TILED: Variant(plan_tiled_transpose, emit_tiled_transpose),
    TransposeVariant.PACKED: Variant(plan_packed_transpose, emit_packed_transpose, fallback=TransposeVariant.TILED),
}


def plan_transpose_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                          kernel_name: str) -> TransposeKernelSpec | PackedTransposeKernelSpec:
    """The plan of the variant XLA chose (or of its fallback); ``Declined`` with the reason
    when no transpose kernel can take the fusion."""
    why = _refusal(fusion, analysis)
    if why is not None:
        raise Declined(why)
    leaves, heroes = [], []
    for (root, shape), hero in zip(output_leaves(fusion), _hero_per_leaf(analysis)):
        if hero is not None and hero not in heroes:
            heroes.append(hero)
        leaves.append(OutputLeaf(root, shape, hero))
    kind, declined = analysis.variant or TransposeVariant.TILED, ""
    while True:
        variant = VARIANTS[kind]
        try:
            return variant.plan(fusion, analysis, device, kernel_name, tuple(heroes), tuple(leaves), declined)
        except Declined as d:
            if variant.fallback is None:
                raise
            kind, declined = variant.fallback, d.why


def emit_transpose_kernel(target: Target, spec: TransposeKernelSpec | PackedTransposeKernelSpec) -> ir.Module:
    return VARIANTS[spec.path].emit(target, spec)


# ---- what every transpose kernel needs -------------------------------------------------------------

def _hero_per_leaf(analysis: FusionAnalysis) -> list[HloInstruction | None]:
    heroes = {id(r): h for r, h in zip(analysis.roots, analysis.heroes)}
    out = []
    for root, _ in output_leaves(analysis.fusion):
        h = heroes.get(id(root))
        out.append(h if h is not None and h.opcode == "transpose" and _same_transpose(h, analysis) else None)
    return out


def _same_transpose(hero: HloInstruction, analysis: FusionAnalysis) -> bool:
    d = transpose_description(hero)
    return d is not None and d.equivalent(analysis.transpose)


def _refusal(fusion: HloInstruction, analysis: FusionAnalysis) -> str | None:
    """Why no transpose kernel can take this fusion, or None."""
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


__all__ = ["VARIANTS", "PackedTransposeKernelSpec", "TransposeKernelSpec", "Variant", "emit_transpose_kernel",
           "plan_transpose_kernel"]
