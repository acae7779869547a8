"""The concatenate emitter: threads enumerate the largest operand, not the output.

XLA (notes/xla.md §b.3, ``concatenate.cc``, ``concatenate_kernel_emitter.cc``): the launch
covers the operand with the largest extent along the concatenation dim; the thread at index
``i`` of that shape computes, for every operand whose extent along the dim covers ``i``, that
operand's element, runs the epilogue (the intermediate ops between the concatenate hero and
the root) on it and stores the result at ``i`` shifted by the operand's offset. No thread
chooses between operands at run time, unlike the loop emitter's elemental concatenate.

Unroll: the loop emitter's heuristics on the largest operand's shape, then the gcd with every
operand's concat-dim size (a thread's consecutive elements never straddle two operands).

The epilogue maps a hero index to a root index: the identity when every op on the way is
elementwise on the same shape, else (bitcasts, reshapes and transposes that are bitcasts)
the physical offset in the hero's layout delinearised in the root's layout. Anything else
(tiled layouts, elementwise ops that change the layout) goes to the loop emitter.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import gcd

from llvmlite import ir

from ...hlo import HloInstruction
from ...indexing.indexing_map import IndexingMap, compose
from ...indexing.layout_maps import linear_index_map
from ...indexing.simplifier import simplify
from ..elemental.affine import AffineEmitter
from ...gpu.device_info import DeviceInfo
from ..analysis.fusion_analysis import FusionAnalysis, is_elementwise
from ..kernel_builder import NO_WRAP
from ..kernel import Declined, KernelSpec, kernel_index_type, open_kernel, output_leaves
from ..launch import LoopConfig, loop_fusion_config, loop_launch_dims, thread_to_output_map
from ..elemental.partitioner import partition
from ..target import Target
from ..model.thread_maps import WORK_ITEM_DIM_NAMES


@dataclass(frozen=True, kw_only=True)
class ConcatenateKernelSpec(KernelSpec):
    hero: HloInstruction
    root: HloInstruction
    largest: int               # operand whose shape the threads enumerate
    epilogue: str              # "identity" | "physical"
    thread_map: IndexingMap    # work item -> index in the largest operand
    unroll: int

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap:
        """The thread map restricted to operand ``operand``'s extent along the concatenation
        dim (XLA's ``ConcatenateFusion``; ``hero`` is the concatenate, the only one; the
        default operand is the largest, the one the threads enumerate). Where
        the thread writes is the operand's offset added along that dim: not one affine map
        for all operands, so there is no thread -> output map (as in XLA)."""
        m, dim = self.thread_map, self.hero.dimensions[0]
        operand = self.largest if operand is None else operand
        extent = self.hero.operands[operand].shape.dimensions[dim]
        cons = dict(m.constraints)
        lo, hi = cons.get(m.exprs[dim], (0, extent - 1))
        cons[m.exprs[dim]] = (lo, min(hi, extent - 1))
        return IndexingMap(m.exprs, m.dims, m.ranges, m.rts, tuple(cons.items()), m.rt_sources,
                           dim_names=WORK_ITEM_DIM_NAMES)

    def report_lines(self) -> list[str]:
        shape = self.hero.operands[self.largest].shape.to_text(print_layout=False)
        return [f"concatenate %{self.hero.name} of {len(self.hero.operands)} operands along dim "
                f"{self.hero.dimensions[0]}: threads over operand {self.largest} ({shape}), unroll {self.unroll}, "
                f"index type {self.index_type}, epilogue {self.epilogue}",
                f"thread -> operand index: {self.thread_map.to_text()}",
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        return {"unroll": self.unroll, "index_type": str(self.index_type)}


def _epilogue_ops(hero: HloInstruction, root: HloInstruction) -> list[HloInstruction]:
    """The ops on paths from ``hero`` (exclusive) to ``root`` (inclusive)."""
    seen, stack, out = set(), [u for u in hero.users], []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        if node is not root:
            stack.extend(node.users)
    return out


def _same_layout(a, b) -> bool:
    return a.dimensions == b.dimensions and tuple(a.minor_to_major) == tuple(b.minor_to_major)


def _epilogue_kind(hero: HloInstruction, root: HloInstruction) -> str | None:
    ops = _epilogue_ops(hero, root)
    if any(s.layout is not None and s.layout.tiles for s in (hero.shape, root.shape)):
        return None
    if all(is_elementwise(op) and _same_layout(op.shape, hero.shape) for op in ops):
        return "identity"
    for op in ops:
        if is_elementwise(op):
            if any(o.shape.rank == op.shape.rank and not _same_layout(o.shape, op.shape) for o in op.operands):
                return None
        elif op.opcode not in ("bitcast", "reshape", "transpose", "tuple"):
            return None
        if op.shape.is_array and op.shape.layout is not None and op.shape.layout.tiles:
            return None
    return "physical"


def plan_concatenate_kernel(fusion: HloInstruction, analysis: FusionAnalysis, device: DeviceInfo,
                            kernel_name: str) -> ConcatenateKernelSpec:
    root, hero = analysis.roots[0], analysis.heroes[0]
    if hero.opcode != "concatenate" or root.shape.is_tuple:
        raise Declined("no concatenate hero")
    epilogue = _epilogue_kind(hero, root)
    if epilogue is None:
        raise Declined("epilogue changes layouts or uses tiled layouts")
    dim = hero.dimensions[0]
    largest = 0
    for k, op in enumerate(hero.operands):
        if op.shape.dimensions[dim] > hero.operands[largest].shape.dimensions[dim]:
            largest = k
    shape = hero.operands[largest].shape
    config = loop_fusion_config(analysis, device, shape=shape)
    unroll = config.unroll_factor
    for op in hero.operands:
        unroll = gcd(unroll, op.shape.dimensions[dim])
    unroll = max(unroll, 1)
    if unroll != config.unroll_factor:
        config = LoopConfig(unroll, loop_launch_dims(shape.element_count(), unroll, device), shape)
    thread_map = thread_to_output_map(shape, config)
    return ConcatenateKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation),
                                 hero=hero, root=root, largest=largest, epilogue=epilogue, thread_map=thread_map,
                                 launch=config.launch, unroll=unroll,
                                 index_type=kernel_index_type(fusion, config.launch, unroll))


def emit_concatenate_kernel(target: Target, spec: ConcatenateKernelSpec) -> ir.Module:
    kernel = open_kernel(target, spec, inline=True)
    kb, b, fe = kernel.kb, kernel.b, kernel.fe
    fe.prefetch_moves = True
    out_ptr = kernel.outputs[0]
    (_, out_shape), = output_leaves(spec.fusion)
    hero, root = spec.hero, spec.root
    dim = hero.dimensions[0]
    offsets = list(itertools.accumulate([0] + [op.shape.dimensions[dim] for op in hero.operands]))
    largest_extent = hero.operands[spec.largest].shape.dimensions[dim]
    m = spec.thread_map
    ids = kb.work_item_ids()
    # untiled output: a thread's offset in operand i's slot is its offset for the first slot
    # plus a constant (offsets[i] x the concat dim's stride), as XLA stores them; the first
    # slot's offset is the thread map composed with the hero's layout, simplified. A physical
    # epilogue (bitcasts) keeps the hero's physical offset, so it holds for the root too: the
    # operands' stores of one thread are then adjacent from one base (one vector store of a
    # [n, 4] concatenate read as [n * 4 / k, k]).
    linear = None
    if not (out_shape.layout is not None and out_shape.layout.tiles) and not (
            hero.shape.layout is not None and hero.shape.layout.tiles):
        linear = simplify(compose(m, linear_index_map(hero.shape))).exprs[0]
        stride = 1
        for d in hero.shape.minor_to_major:
            if d == dim:
                break
            stride *= hero.shape.dimensions[d]
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in m.ranges)):
        ae = AffineEmitter(kb, ids, [kb.index(s) for s in point], bounds=lambda v: m.bound(v))
        with kb.if_all(ae.in_bounds(m.constraints)):
            index = ae.emit_all(m.exprs)
            base = ae.emit(linear) if linear is not None else None
            for i, op in enumerate(hero.operands):
                extent = op.shape.dimensions[dim]
                if extent == 0:
                    continue
                cond = [] if extent >= largest_extent else [b.icmp_unsigned("<", index[dim], kb.index(extent))]
                with kb.if_all(cond), fe.scope():
                    fe.prefetch(op, index)
                    v = fe.value(op, index)
                    hero_index = list(index)
                    if offsets[i]:
                        hero_index[dim] = b.add(index[dim], kb.index(offsets[i]), flags=NO_WRAP)
                    fe.injected[hero] = lambda _idx, v=v: v
                    if spec.epilogue == "identity":
                        root_index = hero_index
                    else:
                        root_index = kb.delinearize(fe.offset(hero.shape, hero_index), root.shape.dimensions,
                                                    root.shape.minor_to_major, wrap=True)
                    offset = None
                    if base is not None and hero.shape.element_count() == out_shape.element_count():
                        offset = b.add(base, kb.index(offsets[i] * stride), flags=NO_WRAP) if offsets[i] else base
                    fe.store(out_shape, out_ptr, root_index, fe.value(root, root_index), offset)
    return kernel.finish()
