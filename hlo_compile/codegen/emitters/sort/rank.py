"""The rank sort: one thread per element counts the elements that go before it.

See ``__init__.py`` for the algorithm and the HLO semantics.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from llvmlite import ir

from ....hlo import HloInstruction
from ....indexing import affine as A
from ....indexing.indexing_map import IndexingMap
from ....gpu.device_info import DeviceInfo
from ...elemental.arith import total_order_key
from ...elemental.fused_emitter import FusedEmitter
from ...kernel import KernelSpec, kernel_index_type, open_kernel, output_leaves
from ...kernel_builder import KernelBuilder
from ...launch import loop_launch_dims
from ...llvm_types import I1, storage_type
from ...elemental.partitioner import partition
from ...target import Target
from ...model.thread_maps import expr_delinearize, work_item_map
from .common import SortAlgorithm, comparator_before, store_at_position
from .vectors import chunk, group_size, load_group, params_at_operand_index

UNROLL = 4  # adjacent elements of the row each iteration of a thread's walk reads (one vector)


@dataclass(frozen=True, kw_only=True)
class SortKernelSpec(KernelSpec):
    """A rank-sort kernel for one fusion whose root is a ``sort`` or a ``topk``."""

    hero: HloInstruction            # the sort or topk
    leaf_outputs: tuple[int, ...]   # fusion output buffer k holds hero output leaf_outputs[k]
    dims: tuple[int, ...]           # the operands' (keys') logical dims
    sort_dim: int
    not_bitonic: str = ""           # why the bitonic kernel did not take this sort (report)
    algorithm: ClassVar[SortAlgorithm] = SortAlgorithm.RANK

    @property
    def is_topk(self) -> bool:
        return self.hero.opcode == "topk"

    @property
    def row_length(self) -> int:
        return self.dims[self.sort_dim]

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap:
        """Element ``bl·128 + th`` of every operand of the sort, row-major: the element the
        thread ranks. Where it writes it depends on the data (its rank): no output map."""
        block = A.add(A.dim(3), A.mul(A.dim(4), self.launch.grid[0]))
        linear = A.add(A.dim(0), A.mul(block, self.launch.num_threads))
        return work_item_map(expr_delinearize(linear, self.dims), self.launch, [],
                             [(linear, 0, self.num_elements - 1)])

    def report_lines(self) -> list[str]:
        n, rows = self.row_length, self.num_elements // max(self.row_length, 1)
        what = (f"topk k={self.hero.attr('k')} largest={self.hero.attr('largest', True)}" if self.is_topk
                else f"sort of {len(self.hero.operands)} operand(s), stable={self.hero.attr('is_stable', False)}")
        cmp_per_pair = 1 if self.is_topk else 2
        why = [f"not the bitonic sort: {self.not_bitonic}"] if self.not_bitonic else []
        return [f"rank sort: {what} along dim {self.sort_dim}, {rows} row(s) of {n}",
                *why,
                f"one thread per element, {n} x {cmp_per_pair} comparisons per thread "
                f"({self.num_elements * n * cmp_per_pair} in all: O(n^2) per row; rows too long for the "
                "shared-memory bitonic sort would want a global merge)",
                f"index type {self.index_type}",
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        return {"algorithm": self.algorithm, "row_length": self.row_length, "sort_dim": self.sort_dim,
                "comparisons_per_thread": self.row_length * (1 if self.is_topk else 2),
                "index_type": str(self.index_type)}


def plan_rank_sort(fusion: HloInstruction, device: DeviceInfo, kernel_name: str, hero: HloInstruction,
                   leaves: tuple[int, ...], dims: tuple[int, ...], sort_dim: int, declined: str = "") -> SortKernelSpec:
    """One thread per element of the keys, 128 per block (the loop emitter's launch);
    ``declined`` says why the bitonic sort did not take the fusion."""
    launch = loop_launch_dims(math.prod(dims), 1, device)
    return SortKernelSpec(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation), hero=hero,
                          leaf_outputs=leaves, dims=dims, sort_dim=sort_dim, launch=launch,
                          index_type=kernel_index_type(fusion, launch), not_bitonic=declined)


# ---- emission ------------------------------------------------------------------------------------

def emit_rank_sort(target: Target, spec: SortKernelSpec) -> ir.Module:
    # the walk along the row reads UNROLL adjacent elements per iteration, as vectors from the
    # parameters the operands read at their own index (``vectors.py``), where the layout allows
    group = group_size(spec.row_length, UNROLL)
    vector_params = [(p, k) for p in params_at_operand_index(spec.hero, spec.dims)
                     if (k := chunk(p.shape, spec.sort_dim, group)) > 1]
    if not vector_params:
        group = 1
    # seeded vector lanes are looked up in the kernel body: the prologue is emitted inline
    kernel = open_kernel(target, spec, inline=bool(vector_params))
    kb, b, fe = kernel.kb, kernel.b, kernel.fe
    counter = b.alloca(spec.index_type, name="rank")  # entry block: promoted to a register by O3
    outputs = [(shape, ptr) for (_, shape), ptr in zip(output_leaves(spec.fusion), kernel.outputs)]

    block = kb.linear_block_id(spec.launch.grid)
    t = b.add(b.mul(block, kb.index(spec.launch.num_threads)), kb.thread_id(0), name="element")
    if spec.num_elements > 0:
        with kb.if_(b.icmp_signed("<", t, kb.index(spec.num_elements))):
            index = kb.delinearize(t, spec.dims)
            i = index[spec.sort_dim]
            mine = [fe.value(op, index) for op in spec.hero.operands]
            b.store(kb.index(0), counter)
            with kb.loop(0, spec.row_length // group, name="j") as jg, fe.scope():
                js = [jg] if group == 1 else [b.add(b.mul(jg, kb.index(group)), kb.index(q), name="j.item")
                                              for q in range(group)]
                others = []
                for j in js:
                    other_index = list(index)
                    other_index[spec.sort_dim] = j
                    others.append(other_index)
                for param, k in vector_params:
                    for other_index, v in zip(others, load_group(fe, param, others, k)):
                        fe.seed(param, other_index, v)
                for j, other_index in zip(js, others):
                    other = [fe.value(op, other_index) for op in spec.hero.operands]
                    before = _goes_before(kb, spec, other, mine, b.icmp_signed("<", j, i))
                    b.store(b.add(b.load(counter), b.zext(before, spec.index_type)), counter)
            rank = b.load(counter, name="rank")
            _store_results(kb, fe, spec, outputs, index, rank, mine)
    return kernel.finish()


def _goes_before(kb: KernelBuilder, spec: SortKernelSpec, other, mine, index_lower: ir.Value) -> ir.Value:
    """Whether the row's element ``j`` (values ``other``) lands before ``i`` (``mine``)."""
    b = kb.b
    if spec.is_topk:
        (x_j,), (x_i,) = other, mine
        et = spec.hero.operands[0].shape.element_type
        greater, equal = _topk_order(b, et, x_j, x_i)
        if not spec.hero.attr("largest", True):
            greater = b.and_(b.not_(greater), b.not_(equal))
        return b.or_(greater, b.and_(equal, index_lower))
    return comparator_before(b, kb.target, spec.hero.to_apply, other, mine, index_lower)


def _topk_order(b: ir.IRBuilder, et: str, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(x > y, x == y) in the order ``topk`` ranks by: floats in total order (NaN above
    +inf, -NaN below -inf, -0 below +0), integers by their signedness, pred as 0 < 1."""
    if isinstance(x.type, ir.IntType) and x.type != I1:
        signed = et.startswith("s")
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        return cmp(">", x, y), b.icmp_unsigned("==", x, y)
    if x.type == I1:
        return b.and_(x, b.not_(y)), b.icmp_unsigned("==", x, y)
    kx, ky = total_order_key(b, x), total_order_key(b, y)
    return b.icmp_signed(">", kx, ky), b.icmp_signed("==", kx, ky)


def _store_results(kb: KernelBuilder, fe: FusedEmitter, spec: SortKernelSpec, outputs, index, rank, mine) -> None:
    b = kb.b
    if spec.is_topk:
        k = spec.hero.attr("k")
        values = [mine[0], None]  # output 1: the element's index along the last dim
        with kb.if_(b.icmp_signed("<", rank, kb.index(k))):
            for (shape, ptr), which in zip(outputs, spec.leaf_outputs):
                v = values[which]
                if v is None:
                    v = kb.cast_int(index[spec.sort_dim], storage_type(shape.element_type))
                store_at_position(fe, shape, ptr, index, rank, spec.sort_dim, v)
        return
    for (shape, ptr), which in zip(outputs, spec.leaf_outputs):
        store_at_position(fe, shape, ptr, index, rank, spec.sort_dim, mine[which])
