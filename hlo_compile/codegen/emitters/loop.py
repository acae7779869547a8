"""The loop emitter: one thread computes ``unroll`` consecutive output elements.

The kernel evaluates the thread→output indexing map (XLA's default work-item map, built in
``codegen/launch.py``) at the thread's ids for every value of the unroll symbol, calls the
root subgraph's function at each output index and stores every fusion output at its physical
offset. All values are computed before any store, so the loads of one thread's elements sit
together and LLVM's load/store vectorizer can merge them into vector loads.

Bounds: when the element count is a multiple of the unroll factor, a thread's elements are
either all in range or all out of it, so one check (the constraint at unroll index 0) guards
them all; otherwise every element checks its own linear index.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir

from ...hlo import HloInstruction
from ...indexing.indexing_map import IndexingMap
from ..affine_emitter import AffineEmitter
from ..fused_emitter import FusedEmitter, to_storage
from ..kernel_builder import KernelBuilder
from ..llvm_types import storage_type
from ...hlo.tiling import physical_size
from ..kernel_builder import index_type_for
from ..launch import loop_fusion_config, thread_to_output_map
from ..partitioner import PartitionedComputation, fusion_roots, partition
from ..target import KernelParam, LaunchDims, Target


@dataclass(frozen=True)
class LoopKernelSpec:
    """Everything the loop emitter needs to build one kernel."""

    kernel_name: str
    fusion: HloInstruction
    partitioned: PartitionedComputation
    thread_map: IndexingMap        # (th_x, th_y, th_z, bl_x, bl_y, bl_z)[symbols] -> output index
    root_maps: dict                # root name -> its own thread map (roots of other dims)
    launch: LaunchDims
    unroll: int
    index_type: ir.IntType

    @property
    def params(self) -> list[KernelParam]:
        return fusion_params(self.fusion)

    def emit(self, target: Target) -> ir.Module:
        return emit_loop_kernel(target, self)

    def report_lines(self) -> list[str]:
        """What ``--emit=fusions`` shows about this kernel beyond the launch dims."""
        return [f"unroll {self.unroll}, index type {self.index_type}",
                f"thread -> output: {self.thread_map.to_text()}",
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        return {"unroll": self.unroll, "index_type": str(self.index_type)}


def fusion_params(fusion: HloInstruction, donated: dict[int, int] | None = None) -> list[KernelParam]:
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


def output_leaves(fusion: HloInstruction) -> list[tuple[HloInstruction, object]]:
    """(root, array shape) for each output buffer of the fusion, depth-first (a tuple-shaped
    root such as a variadic reduce gives one buffer per element)."""
    out = []
    for r in fusion_roots(fusion.fused_computation):
        out += [(r, s) for s in r.shape.tuple_shapes] if r.shape.is_tuple else [(r, r.shape)]
    return out


def emit_loop_kernel(target: Target, spec: LoopKernelSpec) -> ir.Module:
    module = target.new_module(spec.kernel_name)
    kf = target.begin_kernel(module, spec.kernel_name, spec.params)
    kb = KernelBuilder(kf.builder, target, spec.index_type)
    comp = spec.fusion.fused_computation
    n_in = len(comp.parameters)
    fe = FusedEmitter(target, module, spec.kernel_name, spec.partitioned, spec.index_type)
    fe.bind(kb, kf.args[:n_in])
    outputs = [o for o in zip(_root_per_leaf(spec.fusion), output_leaves(spec.fusion), kf.args[n_in:])
               if o[1][1].element_count() > 0]  # an empty output (e.g. a [2:2] slice) is never written

    m = spec.thread_map
    ids = [kb.thread_id(a) for a in range(3)] + [kb.block_id(a) for a in range(3)]
    points = list(itertools.product(*(range(lo, hi + 1) for lo, hi in m.ranges)))
    n_elements = reference_shape(spec.fusion).element_count()
    # outputs with another element count walk their own thread map (other symbol ranges)
    outputs, others = _split_by_size(spec, outputs, n_elements)

    def emitter(point) -> AffineEmitter:
        return AffineEmitter(kb, ids, [kb.index(s) for s in point], bounds=lambda v: m.bound(v))

    if n_elements % spec.unroll == 0:
        # a thread's elements are all in range or all out of it: one check at unroll index 0
        zero = tuple(lo for lo, _ in m.ranges)
        with maybe_if(kb, emitter(zero).in_bounds(m.constraints)):
            indices = [_output_indices(spec, outputs, emitter(p)) for p in points]
            for idx in indices:
                for ((root, _), _, _), index in zip(outputs, idx):
                    fe.preload(root, index)
            pending = [_compute_point(fe, outputs, idx) for idx in indices]
            for stores in pending:
                _store_all(kb, fe, stores)
    else:
        for p in points:
            ae = emitter(p)
            with maybe_if(kb, ae.in_bounds(m.constraints)), fe.scope():
                _store_all(kb, fe, _compute_point(fe, outputs, _output_indices(spec, outputs, ae)))
    for out in others:
        _emit_other_size(kb, fe, ids, m, spec.root_maps[out[0][0].name], out)
    target.end_kernel(kb.b)
    return module


def reference_shape(fusion: HloInstruction):
    """The output shape that sets a loop kernel's launch: the one with the most elements (the
    others then need at most the unroll symbols to cover theirs)."""
    shapes = [shape for _, shape in output_leaves(fusion) if shape.element_count() > 0]
    return max(shapes, key=lambda s: s.element_count())


def _emit_other_size(kb: KernelBuilder, fe: FusedEmitter, ids, m: IndexingMap, om: IndexingMap, out) -> None:
    """Store one output whose element count differs from the launch's, over its own thread map
    ``om``: its domain may be narrower than the launch's, and its symbols (elements per thread)
    are loops at run time, not unrolled, when they have more than a few values."""
    b = kb.b
    narrower = [c for i, ((lo, hi), (mlo, mhi)) in enumerate(zip(om.dims, m.dims))
                for c in ([b.icmp_signed(">=", ids[i], kb.index(lo))] if lo > mlo else []) +
                ([b.icmp_signed("<=", ids[i], kb.index(hi))] if hi < mhi else [])]
    syms: list = [None] * len(om.ranges)

    def nest(k: int) -> None:
        if k == len(om.ranges):
            ae = AffineEmitter(kb, ids, list(syms), bounds=lambda v: om.bound(v))
            with maybe_if(kb, narrower + ae.in_bounds(om.constraints)), fe.scope():
                _store_all(kb, fe, _compute_point(fe, [out], [ae.emit_all(om.exprs)]))
            return
        lo, hi = om.ranges[k]
        if hi - lo < 4:
            for s in range(lo, hi + 1):
                syms[k] = kb.index(s)
                nest(k + 1)
            return
        with kb.loop(lo, hi + 1, name=f"other.s{k}") as iv:
            syms[k] = iv
            nest(k + 1)
    nest(0)


def _split_by_size(spec: LoopKernelSpec, outputs, n_elements: int) -> tuple[list, list]:
    """(outputs of the launch's element count, the others): a multi-output fusion may have roots
    of other sizes, whose own thread maps (``root_maps``) have other symbol ranges."""
    same, others = [], []
    for out in outputs:
        (root, _), (_, shape), _ = out
        if shape.element_count() == n_elements or root.name not in spec.root_maps:
            same.append(out)
        else:
            others.append(out)
    return same, others


def _root_per_leaf(fusion: HloInstruction) -> list[tuple[HloInstruction, int | None]]:
    out = []
    for r in fusion_roots(fusion.fused_computation):
        out += [(r, k) for k in range(len(r.shape.tuple_shapes))] if r.shape.is_tuple else [(r, None)]
    return out


def _output_indices(spec: LoopKernelSpec, outputs, ae: AffineEmitter) -> list[list[ir.Value]]:
    """Each output's index at one point of the thread map."""
    return [ae.emit_all(spec.root_maps.get(root.name, spec.thread_map).exprs) for (root, _), _, _ in outputs]


def _compute_point(fe: FusedEmitter, outputs, indices) -> list:
    """(shape, pointer, index, value) of every output element one point produces."""
    result = []
    for ((root, leaf), (_, shape), ptr), index in zip(outputs, indices):
        v = fe.root_value(root, index)
        result.append((shape, ptr, index, v[leaf] if leaf is not None else v))
    return result


class maybe_if:
    """``kb.if_(all of conds)``, or nothing when there is no condition."""

    def __init__(self, kb: KernelBuilder, conds: Sequence[ir.Value]):
        self.kb, self.conds, self.ctx = kb, conds, None

    def __enter__(self):
        if self.conds:
            self.ctx = self.kb.if_(self.kb.all_of(list(self.conds)))
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            return self.ctx.__exit__(*exc)
        return False


def _store_all(kb: KernelBuilder, fe: FusedEmitter, stores) -> None:
    b = kb.b
    for shape, ptr, index, v in stores:
        et = shape.element_type
        dst = b.gep(ptr, [fe.offset(shape, index)], inbounds=True, source_etype=storage_type(et))
        b.store(to_storage(b, v, et), dst)


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


def plan_loop_kernel(fusion: HloInstruction, analysis, device, kernel_name: str) -> LoopKernelSpec:
    """XLA's loop-fusion launch config, thread map per output and partition for one fusion."""
    # the largest output sets the launch (empty outputs are never written)
    ref = reference_shape(fusion)
    config = loop_fusion_config(analysis, device, shape=ref)
    thread_map = thread_to_output_map(ref, config)
    root_maps = {}
    for r in fusion_roots(fusion.fused_computation):
        shape = r.shape.tuple_shapes[0] if r.shape.is_tuple else r.shape
        if shape.element_count() == 0:
            continue
        if tuple(shape.dimensions) != tuple(ref.dimensions) or shape.layout != ref.layout:
            root_maps[r.name] = thread_to_output_map(shape, config)
    part = partition(fusion.fused_computation)
    return LoopKernelSpec(kernel_name, fusion, part, thread_map, root_maps, config.launch, config.unroll_factor,
                          kernel_index_type(fusion, config.launch, config.unroll_factor))


@dataclass(frozen=True)
class LoopFallbackSpec:
    """The loop emitter's plan for a fusion another emitter declined, and why."""

    loop: LoopKernelSpec
    declined_by: str
    why: str

    @property
    def launch(self) -> LaunchDims:
        return self.loop.launch

    def emit(self, target: Target) -> ir.Module:
        return self.loop.emit(target)

    def report_lines(self) -> list[str]:
        return [f"{self.declined_by} emitter declined ({self.why}): loop emitter, one thread per output element",
                *self.loop.report_lines()]

    def summary_fields(self) -> dict:
        return {**self.loop.summary_fields(), "emitter": "loop", "variant": None, "fallback": self.why}


def fall_back_to_loop(fusion: HloInstruction, analysis, device, kernel_name: str, declined_by: str,
                      why: str) -> LoopFallbackSpec:
    """Plan ``fusion`` with the loop emitter because ``declined_by`` cannot emit it; the
    analysis then says so (emitter, variant and reason agree with what is emitted)."""
    analysis.emitter, analysis.variant = "loop", None
    analysis.reason += f"; {declined_by} emitter declined ({why}), using the loop emitter"
    return LoopFallbackSpec(plan_loop_kernel(fusion, analysis, device, kernel_name), declined_by, why)


@dataclass(frozen=True)
class EmptyKernelSpec:
    """A fusion whose outputs have no elements: an empty kernel that is never launched."""

    kernel_name: str
    fusion: HloInstruction
    launch: LaunchDims = LaunchDims((0, 1, 1), (1, 1, 1))

    @property
    def params(self) -> list[KernelParam]:
        return fusion_params(self.fusion)

    def emit(self, target: Target) -> ir.Module:
        module = target.new_module(self.kernel_name)
        kf = target.begin_kernel(module, self.kernel_name, self.params)
        target.end_kernel(kf.builder)
        return module

    def report_lines(self) -> list[str]:
        return ["every output is empty: no launch"]

    def summary_fields(self) -> dict:
        return {"launch": False}
