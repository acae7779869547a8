"""The loop emitter: one thread computes ``unroll`` consecutive output elements.

The kernel evaluates the thread→output indexing map (XLA's default work-item map, built in
``codegen/launch.py``) at the thread's ids for every value of the unroll symbol, calls the
root subgraph's function at each output index and stores every fusion output at its physical
offset. All values are computed before any store, so the loads of one thread's elements sit
together and LLVM's load/store vectorizer can merge them into vector loads.

Bounds: when the element count is a multiple of the unroll factor, a thread's elements are
either all in range or all out of it, so one check (the constraint at unroll index 0) guards
them all; otherwise every element checks its own linear index.

The loop emitter also runs every fusion another emitter's planner declines
(``Declined``): the plan then says which emitter declined and why.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from llvmlite import ir

from ...hlo import HloInstruction
from ...hlo.shape import Shape
from ...indexing import affine as A
from ...indexing.indexing_map import IndexingMap, compose
from ...indexing.layout_maps import linear_index_map
from ...indexing.op_maps import output_to_input
from ...indexing.simplifier import simplify
from ..elemental.affine import AffineEmitter
from ...gpu.device_info import DeviceInfo
from ..analysis.emitter_kind import EmitterKind
from ..elemental.fused_emitter import FusedEmitter
from ..analysis.fusion_analysis import FusionAnalysis
from ..kernel import KernelSpec, kernel_index_type, open_kernel, output_leaves, root_per_leaf
from ..kernel_builder import KernelBuilder
from ..launch import loop_fusion_config, thread_to_output_map
from ..llvm_types import I32, storage_type
from ..elemental.partitioner import fusion_roots, partition
from ..target import LaunchDims, Target
from ..model.thread_maps import on_work_items


_SYMBOL = A.sym(0).kind


@dataclass(frozen=True, kw_only=True)
class LoopKernelSpec(KernelSpec):
    """Everything the loop emitter needs to build one kernel."""

    thread_map: IndexingMap        # (th_x, th_y, th_z, bl_x, bl_y, bl_z)[symbols] -> output index
    root_maps: dict                # root name -> its own thread map (roots of other dims)
    unroll: int
    declined_by: EmitterKind | None = None   # the emitter whose planner declined the fusion
    declined_why: str = ""

    def thread_to_output_map(self, leaf: int | None = None) -> IndexingMap:
        root, _ = root_per_leaf(self.fusion)[leaf or 0]
        return self.root_maps.get(root.name, self.thread_map)

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap | None:
        """Root ``hero``'s operand ``operand`` (the loop emitter's heroes are the roots): the
        thread -> output map composed with the root's output -> operand map."""
        root = fusion_roots(self.fusion.fused_computation)[hero]
        maps = output_to_input(root, 0)[operand or 0]
        if maps is None or len(maps) != 1:
            return None
        out = self.root_maps.get(root.name, self.thread_map)
        return on_work_items(compose(out, maps[0])).remove_unused_symbols()

    def report_lines(self) -> list[str]:
        """What ``--emit=fusions`` shows about this kernel beyond the launch dims."""
        declined = ([f"{self.declined_by} emitter declined ({self.declined_why}): loop emitter, one thread per "
                     "output element"] if self.declined_by is not None else [])
        return [*declined, f"unroll {self.unroll}, index type {self.index_type}",
                f"thread -> output: {self.thread_map.to_text()}",
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        out = {"unroll": self.unroll, "index_type": str(self.index_type)}
        if self.declined_by is not None:
            out.update(emitter=EmitterKind.LOOP, variant=None, fallback=self.declined_why)
        return out


def plan_loop_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                     kernel_name: str) -> LoopKernelSpec:
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
    return LoopKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation),
                          thread_map=thread_map, root_maps=root_maps, launch=config.launch,
                          unroll=config.unroll_factor,
                          index_type=kernel_index_type(fusion, config.launch, config.unroll_factor))


def plan_loop_instead(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo, kernel_name: str,
                      declined_by: EmitterKind, why: str) -> LoopKernelSpec:
    """The loop emitter's plan for a fusion ``declined_by``'s planner declined, saying why."""
    return replace(plan_loop_kernel(fusion, analysis, device, kernel_name), declined_by=declined_by,
                   declined_why=why)


def reference_shape(fusion: HloInstruction) -> Shape:
    """The output shape that sets a loop kernel's launch: the one with the most elements (the
    others then need at most the unroll symbols to cover theirs)."""
    shapes = [shape for _, shape in output_leaves(fusion) if shape.element_count() > 0]
    return max(shapes, key=lambda s: s.element_count())


# ---- emission ------------------------------------------------------------------------------------

def emit_loop_kernel(target: Target, spec: LoopKernelSpec) -> ir.Module:
    kernel = open_kernel(target, spec)
    kb, fe = kernel.kb, kernel.fe
    fe.prefetch_moves = True   # an element's parameter reads first, where they can merge
    outputs = [o for o in zip(root_per_leaf(spec.fusion), output_leaves(spec.fusion), kernel.outputs)
               if o[1][1].element_count() > 0]  # an empty output (e.g. a [2:2] slice) is never written

    m = spec.thread_map
    ids = kb.work_item_ids()
    points = list(itertools.product(*(range(lo, hi + 1) for lo, hi in m.ranges)))
    n_elements = reference_shape(spec.fusion).element_count()
    # outputs with another element count walk their own thread map (other symbol ranges)
    outputs, others = _split_by_size(spec, outputs, n_elements)

    def emitter(point) -> AffineEmitter:
        return AffineEmitter(kb, ids, [kb.index(s) for s in point], bounds=lambda v: m.bound(v))

    offsets = [_offset_expr(spec, root, leaf, shape) for (root, leaf), (_, shape), _ in outputs]

    if n_elements % spec.unroll == 0:
        # a thread's elements are all in range or all out of it: one check at unroll index 0
        zero = tuple(lo for lo, _ in m.ranges)
        with kb.if_all(emitter(zero).in_bounds(m.constraints)):
            aes = [emitter(p) for p in points]
            indices = [_output_indices(spec, outputs, ae) for ae in aes]
            for idx in indices:
                for ((root, _), _, _), index in zip(outputs, idx):
                    fe.preload(root, index)
            bases = _element_zero_pointers(kb, outputs, offsets, aes[0] if points and points[0] == zero else None)
            pending = [_compute_point(fe, *_at_point(kb, outputs, offsets, bases, ae, p, zero), idx)
                       for idx, ae, p in zip(indices, aes, points)]
            for stores in pending:
                _store_all(fe, stores)
    else:
        for p in points:
            ae = emitter(p)
            with kb.if_all(ae.in_bounds(m.constraints)), fe.scope():
                _store_all(fe, _compute_point(fe, outputs, _output_offsets(offsets, ae),
                                              _output_indices(spec, outputs, ae)))
    for out in others:
        _emit_other_size(kb, fe, ids, m, spec.root_maps[out[0][0].name], out)
    return kernel.finish()


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
            with kb.if_all(narrower + ae.in_bounds(om.constraints)), fe.scope():
                _store_all(fe, _compute_point(fe, [out], [None], [ae.emit_all(om.exprs)]))
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


def _output_indices(spec: LoopKernelSpec, outputs, ae: AffineEmitter) -> list[list[ir.Value]]:
    """Each output's index at one point of the thread map."""
    return [ae.emit_all(spec.root_maps.get(root.name, spec.thread_map).exprs) for (root, _), _, _ in outputs]


def _offset_expr(spec: LoopKernelSpec, root: HloInstruction, leaf: int | None, shape: Shape):
    """The output's physical offset as one expression of the work-item ids and the unroll
    symbols: its thread map composed with its layout's linearisation and simplified, as XLA
    composes them (``block·128 + thread``, where emitting the index and then linearising it
    gives a div/mod chain and its inverse that LLVM does not fold);
    None where the map does not index ``shape`` itself (a root read through a bitcast of
    another rank, a scalar leaf): the store then linearises the emitted index."""
    m = spec.root_maps.get(root.name, spec.thread_map)
    value = root.shape if leaf is None else root.shape.tuple_shapes[leaf]
    if not shape.rank or len(m.exprs) != shape.rank or tuple(value.dimensions) != tuple(shape.dimensions):
        return None
    return simplify(compose(m, linear_index_map(shape))).exprs[0]


def _output_offsets(offsets, ae: AffineEmitter) -> list[ir.Value | None]:
    return [None if e is None else ae.emit(e) for e in offsets]


def _symbol_steps(e) -> dict[int, int] | None:
    """{symbol: coefficient} where the unroll symbols enter offset expression ``e`` only as
    added terms (the offset at another point is the offset at point 0 plus a constant), else
    None."""
    terms, _ = A.linear_parts(e)
    steps: dict[int, int] = {}
    for t, k in terms.items():
        if isinstance(t, A.Var) and t.kind == _SYMBOL:
            steps[t.index] = k
        elif any(v.kind == _SYMBOL for v in A.variables(t)):
            return None
    return steps


def _element_zero_pointers(kb: KernelBuilder, outputs, offsets, ae0: AffineEmitter | None) -> list:
    """Per output, (element 0's pointer, symbol steps) where its offset is element 0's plus a
    constant at every point: the other elements are then addressed from that pointer, so LLVM
    sees a thread's stores at constant distances and merges them into one vector store (offsets
    emitted one by one from a mod/div chain over a dim like 35 are not recognised), else None."""
    out: list = []
    for (_, (_, shape), ptr), e in zip(outputs, offsets):
        steps = None if e is None or ae0 is None else _symbol_steps(e)
        if steps is None:
            out.append(None)
            continue
        base = kb.b.gep(ptr, [ae0.emit(e)], inbounds=True, source_etype=storage_type(shape.element_type))
        out.append((base, steps))
    return out


def _at_point(kb: KernelBuilder, outputs, offsets, bases, ae: AffineEmitter, point, zero) -> tuple[list, list]:
    """(outputs, offsets) for one point: outputs with an element-0 pointer store at its constant
    distance from it, the others at their own offsets."""
    outs, offs = [], []
    for out, e, base in zip(outputs, offsets, bases):
        if base is None:
            outs.append(out)
            offs.append(None if e is None else ae.emit(e))
            continue
        ptr, steps = base
        delta = sum(k * (point[i] - zero[i]) for i, k in steps.items())
        outs.append((out[0], out[1], ptr))
        offs.append(kb.index(delta))
    return outs, offs


def _compute_point(fe: FusedEmitter, outputs, offsets, indices) -> list:
    """(shape, pointer, index, value, offset or None) of every output element one point produces."""
    result = []
    if fe.inline and fe.prefetch_moves:
        for ((root, _), _, _), index in zip(outputs, indices):
            fe.prefetch(root, index)
    for ((root, leaf), (_, shape), ptr), index, offset in zip(outputs, indices, offsets):
        v = fe.root_value(root, index)
        result.append((shape, ptr, index, v[leaf] if leaf is not None else v, offset))
    return result


def _store_all(fe: FusedEmitter, stores) -> None:
    for shape, ptr, index, v, offset in stores:
        fe.store(shape, ptr, index, v, offset)


# ---- fusions without elements --------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class EmptyKernelSpec(KernelSpec):
    """A fusion whose outputs have no elements: an empty kernel that is never launched."""

    launch: LaunchDims = LaunchDims((0, 1, 1), (1, 1, 1))

    def report_lines(self) -> list[str]:
        return ["every output is empty: no launch"]

    def summary_fields(self) -> dict:
        return {"launch": False}


def plan_empty_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                      kernel_name: str) -> EmptyKernelSpec:
    return EmptyKernelSpec(name=kernel_name, fusion=fusion, index_type=I32)


def emit_empty_kernel(target: Target, spec: EmptyKernelSpec) -> ir.Module:
    return open_kernel(target, spec).finish()


__all__ = ["EmptyKernelSpec", "LoopKernelSpec", "emit_empty_kernel", "emit_loop_kernel", "plan_empty_kernel",
           "plan_loop_instead", "plan_loop_kernel", "reference_shape"]
