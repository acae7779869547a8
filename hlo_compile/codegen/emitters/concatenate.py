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
from ...indexing.indexing_map import IndexingMap
from ..affine_emitter import AffineEmitter
from ..fused_emitter import FusedEmitter, to_storage
from ..fusion_analysis import is_elementwise
from ..kernel_builder import KernelBuilder
from ..launch import LoopConfig, loop_fusion_config, loop_launch_dims, thread_to_output_map
from ..llvm_types import storage_type
from ..partitioner import PartitionedComputation, partition
from ..target import KernelParam, LaunchDims, Target
from .loop import maybe_if, fall_back_to_loop, fusion_params, kernel_index_type, output_leaves


@dataclass(frozen=True)
class ConcatenateKernelSpec:
    kernel_name: str
    fusion: HloInstruction
    partitioned: PartitionedComputation
    hero: HloInstruction
    root: HloInstruction
    largest: int               # operand whose shape the threads enumerate
    epilogue: str              # "identity" | "physical"
    thread_map: IndexingMap    # work item -> index in the largest operand
    launch: LaunchDims
    unroll: int
    index_type: ir.IntType

    @property
    def params(self) -> list[KernelParam]:
        return fusion_params(self.fusion)

    def emit(self, target: Target) -> ir.Module:
        return emit_concatenate_kernel(target, self)

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


def plan_concatenate_kernel(fusion: HloInstruction, analysis, device, kernel_name: str):
    root, hero = analysis.roots[0], analysis.heroes[0]
    if hero.opcode != "concatenate" or root.shape.is_tuple:
        return fall_back_to_loop(fusion, analysis, device, kernel_name, "concatenate", "no concatenate hero")
    epilogue = _epilogue_kind(hero, root)
    if epilogue is None:
        return fall_back_to_loop(fusion, analysis, device, kernel_name, "concatenate",
                                 "epilogue changes layouts or uses tiled layouts")
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
    return ConcatenateKernelSpec(kernel_name, fusion, partition(fusion.fused_computation), hero, root, largest,
                                 epilogue, thread_map, config.launch, unroll,
                                 kernel_index_type(fusion, config.launch, unroll))


def _delinearize(kb: KernelBuilder, offset: ir.Value, shape) -> list[ir.Value]:
    b = kb.b
    index = [kb.index(0)] * shape.rank
    divisor = 1
    for d in shape.minor_to_major:
        n = shape.dimensions[d]
        q = b.udiv(offset, kb.index(divisor)) if divisor != 1 else offset
        index[d] = b.urem(q, kb.index(n)) if n != 1 else kb.index(0)
        divisor *= n
    return index


def emit_concatenate_kernel(target: Target, spec: ConcatenateKernelSpec) -> ir.Module:
    module = target.new_module(spec.kernel_name)
    kf = target.begin_kernel(module, spec.kernel_name, spec.params)
    kb = KernelBuilder(kf.builder, target, spec.index_type)
    b = kb.b
    n_in = len(spec.fusion.fused_computation.parameters)
    fe = FusedEmitter(target, module, spec.kernel_name, spec.partitioned, spec.index_type, inline=True)
    fe.bind(kb, kf.args[:n_in])
    out_ptr = kf.args[n_in]
    (_, out_shape), = output_leaves(spec.fusion)
    hero, root = spec.hero, spec.root
    dim = hero.dimensions[0]
    offsets = list(itertools.accumulate([0] + [op.shape.dimensions[dim] for op in hero.operands]))
    largest_extent = hero.operands[spec.largest].shape.dimensions[dim]
    m = spec.thread_map
    ids = [kb.thread_id(a) for a in range(3)] + [kb.block_id(a) for a in range(3)]
    et = out_shape.element_type
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in m.ranges)):
        ae = AffineEmitter(kb, ids, [kb.index(s) for s in point], bounds=lambda v: m.bound(v))
        with maybe_if(kb, ae.in_bounds(m.constraints)):
            index = ae.emit_all(m.exprs)
            for k, op in enumerate(hero.operands):
                extent = op.shape.dimensions[dim]
                if extent == 0:
                    continue
                cond = [] if extent >= largest_extent else [b.icmp_unsigned("<", index[dim], kb.index(extent))]
                with maybe_if(kb, cond), fe.scope():
                    v = fe.value(op, index)
                    hero_index = list(index)
                    if offsets[k]:
                        hero_index[dim] = b.add(index[dim], kb.index(offsets[k]), flags=("nuw", "nsw"))
                    fe.injected[hero] = lambda _idx, v=v: v
                    if spec.epilogue == "identity":
                        root_index = hero_index
                    else:
                        root_index = _delinearize(kb, fe.offset(hero.shape, hero_index), root.shape)
                    rv = fe.value(root, root_index)
                    dst = b.gep(out_ptr, [fe.offset(out_shape, root_index)], inbounds=True,
                                source_etype=storage_type(et))
                    b.store(to_storage(b, rv, et), dst)
    target.end_kernel(b)
    return module
