"""The kernel layer every emitter builds on.

- ``KernelSpec``: what a planner decides for one fusion and an emitter turns into a kernel:
  its name, the fusion, the launch, the index type, which outputs start as an operand (in-place
  kernels) and which of those operands' buffers the planner donated, and the thread -> data
  indexing maps (the emitter's contract, as XLA's ``KernelFusionInterface``). A planner that
  cannot take its fusion raises ``Declined``.
- The fusion's buffers as kernel parameters (``output_leaves``, ``fusion_params``) and the
  kernel's index type (``kernel_index_type``).
- ``open_kernel``: the one kernel prologue (module, entry, builder, the fused emitter bound to
  the input buffers, the output buffers); ``Kernel.finish`` is its epilogue.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from llvmlite import ir

from ..hlo import HloInstruction
from ..hlo.shape import Shape
from ..hlo.tiling import physical_size
from ..indexing.indexing_map import IndexingMap
from .elemental.fused_emitter import FusedEmitter
from .kernel_builder import KernelBuilder, index_type_for
from .elemental.partitioner import PartitionedComputation, fusion_roots
from .target import KernelParam, LaunchDims, Target


# ---- the fusion's buffers ------------------------------------------------------------------------

def output_leaves(fusion: HloInstruction) -> list[tuple[HloInstruction, Shape]]:
    """(root, array shape) for each output buffer of the fusion, depth-first (a tuple-shaped
    root such as a variadic reduce gives one buffer per element)."""
    out = []
    for r in fusion_roots(fusion.fused_computation):
        out += [(r, s) for s in r.shape.tuple_shapes] if r.shape.is_tuple else [(r, r.shape)]
    return out


def root_per_leaf(fusion: HloInstruction) -> list[tuple[HloInstruction, int | None]]:
    """(root, element of a tuple-shaped root or None) for each output buffer, as ``output_leaves``."""
    out = []
    for r in fusion_roots(fusion.fused_computation):
        out += [(r, k) for k in range(len(r.shape.tuple_shapes))] if r.shape.is_tuple else [(r, None)]
    return out


def fusion_params(fusion: HloInstruction, donated: Mapping[int, int] | None = None) -> list[KernelParam]:
    """Kernel parameters of a fusion: its operands, then one buffer per output leaf.
    ``donated`` ({output leaf: operand}, in-place kernels): those operands and outputs are the
    same buffer, so neither is ``noalias`` and the operand is not ``readonly``."""
    donated = donated or {}
    aliased = set(donated.values())
    comp = fusion.fused_computation
    ins = [KernelParam(f"in{i}.{p.name}", readonly=i not in aliased, noalias=i not in aliased)
           for i, p in enumerate(comp.parameters)]
    outs = [KernelParam(f"out{i}.{r.name}", readonly=False, noalias=i not in donated)
            for i, (r, _) in enumerate(output_leaves(fusion))]
    return ins + outs


def kernel_index_type(fusion: HloInstruction, launch: LaunchDims, unroll: int = 1) -> ir.IntType:
    """i32 when every index, physical offset and thread number of the kernel fits, else i64."""
    sizes = [launch.num_blocks * launch.num_threads * unroll]
    for op in fusion.operands:
        if op.shape.is_array:
            sizes.append(physical_size(op.shape))
    for _, shape in output_leaves(fusion):
        sizes.append(physical_size(shape))
    for inst in fusion.fused_computation.instructions:
        if inst.shape.is_array:
            sizes.append(math.prod(inst.shape.dimensions))
    return index_type_for(max(sizes) + 1)


# ---- the plan of one kernel ----------------------------------------------------------------------

class Declined(Exception):
    """Raised by a planner that cannot emit its fusion (``why`` says why): the loop emitter
    then runs it, and the fusion's analysis and report say so."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


@dataclass(frozen=True, kw_only=True)
class KernelSpec:
    """One kernel as its planner decided it; the emitter's ``emit(target, spec)`` builds it.

    ``in_place`` is ``{output leaf: fusion operand}`` for kernels that update an operand in
    place: the output starts as that operand (the runtime copies it in first, unless
    ``plan_module`` donated the operand's buffer: then it is in ``donated`` too, and neither
    parameter is ``noalias``)."""

    name: str
    fusion: HloInstruction
    launch: LaunchDims
    index_type: ir.IntType
    partitioned: PartitionedComputation | None = None
    in_place: Mapping[int, int] = field(default_factory=dict)
    donated: Mapping[int, int] = field(default_factory=dict)

    @property
    def params(self) -> list[KernelParam]:
        return fusion_params(self.fusion, self.donated)

    # ---- thread -> data maps: the emitter's contract (XLA's KernelFusionInterface) -------------
    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap | None:
        """``(th_x, th_y, th_z, bl_x, bl_y, bl_z)[symbols] -> index`` of operand ``operand`` (None:
        the one the threads walk) of the emitter's hero ``hero`` that the thread reads; None
        where no map says it (what a thread reads depends on data)."""
        return None

    def thread_to_output_map(self, leaf: int | None = None) -> IndexingMap | None:
        """``(th_x, ..., bl_z)[symbols] -> index`` of output buffer ``leaf`` (None: the
        emitter's main output) that the thread writes; None where it depends on data."""
        return None

    # ---- what --emit=fusions and summary.json show -------------------------------------------
    def report_lines(self) -> list[str]:
        return []

    def summary_fields(self) -> dict:
        return {}


# ---- the kernel prologue -------------------------------------------------------------------------

@dataclass
class Kernel:
    """A kernel being emitted: its module, the builder, the fused emitter bound to the input
    buffers (None for a spec without a partition) and the output buffers."""

    target: Target
    module: ir.Module
    kb: KernelBuilder
    fe: FusedEmitter | None
    inputs: list[ir.Value]
    outputs: list[ir.Value]

    @property
    def b(self) -> ir.IRBuilder:
        return self.kb.b

    def finish(self) -> ir.Module:
        """End the kernel at the builder's position and return its module."""
        self.target.end_kernel(self.kb.b)
        return self.module


def open_kernel(target: Target, spec: KernelSpec, *, inline: bool = False) -> Kernel:
    """The kernel entry of ``spec`` on ``target``, its builder in the spec's index type and the
    fused emitter (``inline``: every subgraph emitted in the kernel body) bound to the inputs."""
    module = target.new_module(spec.name)
    kf = target.begin_kernel(module, spec.name, spec.params, block=tuple(spec.launch.block))
    kb = KernelBuilder(kf.builder, target, spec.index_type, spec.launch)
    n_in = len(spec.fusion.fused_computation.parameters)
    fe = None
    if spec.partitioned is not None:
        fe = FusedEmitter(target, module, spec.name, spec.partitioned, spec.index_type, inline=inline)
        fe.bind(kb, kf.args[:n_in])
    return Kernel(target, module, kb, fe, list(kf.args[:n_in]), list(kf.args[n_in:]))
