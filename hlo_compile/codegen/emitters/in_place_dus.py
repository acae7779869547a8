"""The in-place dynamic-update-slice emitter: only the updated window is written.

XLA (notes/xla.md §b.3, ``in_place_dynamic_update_slice.cc``) emits a fusion whose roots are
all dynamic-update-slices (possibly through bitcasts) of a parameter as a kernel over the
*update* shape: the output buffer already holds the updated operand (XLA aliases the two, and so
do we when ``plan_module`` can donate the operand's buffer, ``donated``; otherwise the runtime
copies the operand into the output first, ``in_place``) and each thread
writes its update element at ``update index + clamp(start, 0, dim - update_dim)``.

Launch and unroll follow the loop emitter's heuristics on the update shape. Bitcasts between
a DUS and its root (or between the parameter and the DUS operand) keep every element's
physical position, so the offset in the DUS shape is the offset in the output buffer.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from llvmlite import ir

from ...hlo import HloInstruction
from ...hlo.tiling import physical_size
from ...indexing.indexing_map import IndexingMap, compose
from ...indexing.layout_maps import linear_index_map
from ...indexing.simplifier import simplify
from ..elemental.affine import AffineEmitter
from ...gpu.device_info import DeviceInfo
from ..analysis.fusion_analysis import FusionAnalysis
from ..elemental.index_ops import start_index
from ..kernel_builder import NO_WRAP
from ..kernel import Declined, KernelSpec, kernel_index_type, open_kernel, output_leaves
from ..launch import loop_fusion_config, thread_to_output_map
from ..elemental.partitioner import partition
from ..target import Target


@dataclass(frozen=True, kw_only=True)
class InPlaceDusKernelSpec(KernelSpec):
    updates: tuple            # the DUS of each output leaf
    thread_map: IndexingMap   # work item -> update index
    unroll: int

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap | None:
        """The update (operand 1, the default) of the dynamic-update-slice of output ``hero``: the thread
        map (XLA's ``InPlaceDynamicUpdateSliceFusion``). Where it is written depends on the
        start indices (data), so there is no thread -> output map; the other operands are not
        read per element."""
        return self.thread_map if operand in (None, 1) else None

    def report_lines(self) -> list[str]:
        upd = self.updates[0].operands[1].shape.to_text(print_layout=False)
        return [f"in place: {len(self.updates)} dynamic-update-slice(s) over update shape {upd}, "
                f"unroll {self.unroll}, index type {self.index_type}",
                f"outputs start as operands: {dict(self.in_place)}"
                + (f", donated (in place): {dict(self.donated)}" if self.donated else ", copied"),
                f"thread -> update: {self.thread_map.to_text()}",
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        return {"unroll": self.unroll, "index_type": str(self.index_type)}


def _through_bitcasts(inst: HloInstruction) -> HloInstruction:
    while inst.opcode == "bitcast":
        inst = inst.operands[0]
    return inst


def _why_not(fusion: HloInstruction, leaves) -> str | None:
    """Why this emitter cannot emit ``fusion`` in place (None when it can)."""
    dus_list = [_through_bitcasts(r) for r, _ in leaves]
    if any(d.opcode != "dynamic-update-slice" for d in dus_list):
        return "a root is not a dynamic-update-slice"
    upd = dus_list[0].operands[1].shape
    for (root, shape), dus in zip(leaves, dus_list):
        param = _through_bitcasts(dus.operands[0])
        if param.opcode != "parameter":
            return f"the operand of %{dus.name} is not a fusion parameter"
        if dus.operands[1].shape.dimensions != upd.dimensions:
            return "the updates have different shapes"
        if dus.operands[0].shape.layout != dus.shape.layout:
            # the output starts as a byte copy of the operand: both must order elements alike
            return f"the operand of %{dus.name} has another layout than its result"
        for s in (shape, dus.shape, param.shape):
            if s.layout is not None and s.layout.tiles:
                return "tiled layouts"
        if physical_size(param.shape) != physical_size(shape) or \
                param.shape.element_type != shape.element_type:
            return f"the output of %{root.name} and its operand differ in size or element type"
    if upd.element_count() == 0:
        return "empty update"
    return None


def plan_in_place_dus_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                             kernel_name: str) -> InPlaceDusKernelSpec:
    leaves = output_leaves(fusion)
    why = _why_not(fusion, leaves)
    if why is not None:
        raise Declined(why)
    dus_list = tuple(_through_bitcasts(r) for r, _ in leaves)
    update_shape = dus_list[0].operands[1].shape
    config = loop_fusion_config(analysis, device, shape=update_shape)
    thread_map = thread_to_output_map(update_shape, config)
    init = {i: _through_bitcasts(d.operands[0]).parameter_number for i, d in enumerate(dus_list)}
    return InPlaceDusKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation),
                                updates=dus_list, thread_map=thread_map, launch=config.launch,
                                unroll=config.unroll_factor,
                                index_type=kernel_index_type(fusion, config.launch, config.unroll_factor),
                                in_place=init)


def emit_in_place_dus_kernel(target: Target, spec: InPlaceDusKernelSpec) -> ir.Module:
    kernel = open_kernel(target, spec)
    kb, b, fe = kernel.kb, kernel.b, kernel.fe
    m = spec.thread_map
    ids = kb.work_item_ids()
    # start indices are the same for every element: load and clamp them once per thread
    starts = []
    for dus in spec.updates:
        dims, udims = dus.shape.dimensions, dus.operands[1].shape.dimensions
        starts.append([start_index(fe, dus, 2 + d, n - u) for d, (n, u) in enumerate(zip(dims, udims))])
    # untiled outputs: the offset of update element i at start s is offset(i) + offset(s) (a
    # linear layout), offset(i) the thread map composed with the layout, simplified, as XLA
    # has it (``start·48 + thread``, not the thread's index delinearised and linearised again)
    split = [None if dus.shape.layout is not None and dus.shape.layout.tiles else
             (simplify(compose(m, linear_index_map(dus.shape))).exprs[0], fe.offset(dus.shape, start))
             for dus, start in zip(spec.updates, starts)]
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in m.ranges)):
        ae = AffineEmitter(kb, ids, [kb.index(s) for s in point], bounds=lambda v: m.bound(v))
        with kb.if_all(ae.in_bounds(m.constraints)), fe.scope():
            index = ae.emit_all(m.exprs)
            stores = []
            for dus, start, ptr, sp in zip(spec.updates, starts, kernel.outputs, split):
                v = fe.value(dus.operands[1], index)
                out_index = [b.add(i, s) for i, s in zip(index, start)]
                off = fe.offset(dus.shape, out_index) if sp is None else b.add(ae.emit(sp[0]), sp[1], flags=NO_WRAP)
                stores.append((dus.shape, ptr, out_index, off, v))
            for shape, ptr, out_index, off, v in stores:
                fe.store(shape, ptr, out_index, v, offset=off)
    return kernel.finish()
