"""The sort emitter's planner and its rank sort, one thread per element.

A fusion whose root is a ``sort`` (XLA semantics: any number of operands of one shape, sorted
together along ``dimensions={d}`` by the scalar comparator ``to_apply``, which takes two
scalars per operand: ``(lhs0, rhs0, lhs1, rhs1, ...)``) or a ``topk`` gets one of two kernels
(``plan_sort_kernel``):

- the bitonic sort in shared memory (``sort_bitonic.py``: one block per row, O(n log² n)
  comparator calls per row) for a ``sort`` whose rows have at least two elements and, padded
  to a power of two, fit the 48 KiB of static shared memory of a block together with their
  positions (up to 4096 elements for one or two 32-bit operands);
- the rank sort below for everything else: ``topk``, rows of one element, and rows too long
  for shared memory. Its report says why the bitonic kernel did not take the fusion.

Both give the same answer for a comparator that is a strict weak order: the stable sort.

The rank sort: thread ``t`` owns element ``i`` of the operands (in the keys' row-major
logical order). It walks its *row*, the 1-D slice through ``i`` along ``d``, and counts the
elements that go before it:

    j goes before i  <=>  (less(j, i) and not less(i, j))
                          or (less(j, i) == less(i, j) and j < i)

For a comparator that is a strict weak order this is ``less(j, i) or (!less(i, j) and j < i)``:
equal elements keep their original order, so the sort is stable whatever ``is_stable`` says
(a stable result is a valid unstable one). The symmetric form also gives a permutation for
comparators that answer true both ways on ties (``LE``/``GE``): such pairs fall back to the
index. The count is ``i``'s final position along ``d``; the thread then writes every
operand's element ``i`` (every output of the variadic sort) at that position. ``i`` never
counts itself, so a position is always inside the row; only a comparator whose order is not
transitive (plain ``LT`` on floats with NaNs, say) can make two elements share a position and
leave another unwritten, where XLA's answer depends on its algorithm anyway.

Operands are read through the ``FusedEmitter``, so elementwise prologues fused before the sort
(converts, negations, broadcasts...) are recomputed at each read, and the comparator is
emitted inline (``emit_call_computation``) twice per pair.

Cost: O(n) comparator evaluations per thread, O(n²) per row of length n: fine for short rows,
and what rows too long for the bitonic kernel's shared memory get today. Those want the next
step: the bitonic sort per shared-memory tile followed by global merge passes (XLA's
``SortThunk``/``EmitSortInPlace`` layout), or CUB's radix sort for plain keys.

``topk`` (XLA's op: the ``k`` largest, or smallest, elements along the last dim, values and
s32 indices, ties to the lower index, floats in total order) is the same idea: thread ``i``
computes its rank along the last dim and writes value and index when the rank is below ``k``.
The fusion analysis routes a ``topk`` root to the loop emitter today (it only names
``scatter`` and ``sort`` as single-root kinds), so ``plan_sort_kernel`` handles a ``topk``
root only when a planner is pointed at it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from ...hlo import HloInstruction
from ..elemental_arith import _total_order_key
from ..elemental_ops import emit_call_computation
from ..fused_emitter import FusedEmitter, to_storage, unsupported
from ..kernel_builder import KernelBuilder
from ..launch import loop_launch_dims
from ..llvm_types import I1, storage_type
from ..partitioner import PartitionedComputation, partition
from ..target import LaunchDims, Target
from .loop import fusion_params, kernel_index_type, output_leaves

if TYPE_CHECKING:
    from .sort_bitonic import BitonicSortKernelSpec


@dataclass(frozen=True)
class SortKernelSpec:
    """A rank-sort kernel for one fusion whose root is a ``sort`` or a ``topk``."""

    kernel_name: str
    fusion: HloInstruction
    partitioned: PartitionedComputation
    hero: HloInstruction            # the sort or topk
    leaf_outputs: tuple[int, ...]   # fusion output buffer k holds hero output leaf_outputs[k]
    dims: tuple[int, ...]           # the operands' (keys') logical dims
    sort_dim: int
    launch: LaunchDims
    index_type: ir.IntType
    not_bitonic: str = ""           # why the bitonic kernel did not take this sort (report)

    @property
    def is_topk(self) -> bool:
        return self.hero.opcode == "topk"

    @property
    def row_length(self) -> int:
        return self.dims[self.sort_dim]

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)

    def emit(self, target: Target) -> ir.Module:
        return emit_sort_kernel(target, self)

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
        return {"algorithm": "rank", "row_length": self.row_length, "sort_dim": self.sort_dim,
                "comparisons_per_thread": self.row_length * (1 if self.is_topk else 2),
                "index_type": str(self.index_type)}


def _hero_and_leaves(fusion: HloInstruction) -> tuple[HloInstruction, tuple[int, ...]]:
    """The sort/topk the fusion computes and, per fusion output buffer, which of its outputs
    it is: the root itself, or a tuple of ``get-tuple-element``s of one sort/topk."""
    root = fusion.fused_computation.root
    if root.opcode in ("sort", "topk"):
        n = len(root.shape.tuple_shapes) if root.shape.is_tuple else 1
        return root, tuple(range(n))
    if root.opcode == "tuple" and root.operands and all(o.opcode == "get-tuple-element" for o in root.operands):
        hero = root.operands[0].operands[0]
        if hero.opcode in ("sort", "topk") and all(o.operands[0] is hero for o in root.operands):
            return hero, tuple(o.tuple_index for o in root.operands)
    raise unsupported(root, "the sort emitter needs a fusion whose root is a sort or topk")


def plan_sort_kernel(fusion: HloInstruction, analysis, device,
                     kernel_name: str) -> SortKernelSpec | BitonicSortKernelSpec:
    """The bitonic sort in shared memory when the hero is a ``sort`` whose rows fit a block
    (``sort_bitonic.plan_bitonic_sort``), else the rank sort: one thread per element of the
    keys, 128 per block (the loop emitter's launch)."""
    from .sort_bitonic import plan_bitonic_sort   # it builds on this module's helpers
    hero, leaves = _hero_and_leaves(fusion)
    keys = hero.operands[0].shape
    if not keys.is_array:
        raise unsupported(hero, "the sort emitter needs array operands")
    dims = tuple(keys.dimensions)
    if hero.opcode == "topk":
        if not dims:
            raise unsupported(hero, "topk of a scalar")
        sort_dim = len(dims) - 1
    else:
        if len(hero.dimensions) != 1:
            raise unsupported(hero, "sort needs exactly one sort dimension")
        sort_dim = hero.dimensions[0]
    bitonic = plan_bitonic_sort(fusion, hero, leaves, dims, sort_dim, device, kernel_name)
    if not isinstance(bitonic, str):
        return bitonic
    launch = loop_launch_dims(math.prod(dims), 1, device)
    return SortKernelSpec(kernel_name, fusion, partition(fusion.fused_computation), hero, leaves, dims, sort_dim,
                          launch, kernel_index_type(fusion, launch), bitonic)


# ---- emission ------------------------------------------------------------------------------------

def emit_sort_kernel(target: Target, spec: SortKernelSpec) -> ir.Module:
    module = target.new_module(spec.kernel_name)
    kf = target.begin_kernel(module, spec.kernel_name, fusion_params(spec.fusion))
    b = kf.builder
    kb = KernelBuilder(b, target, spec.index_type)
    counter = b.alloca(spec.index_type, name="rank")  # entry block: promoted to a register by O3
    comp = spec.fusion.fused_computation
    n_in = len(comp.parameters)
    fe = FusedEmitter(target, module, spec.kernel_name, spec.partitioned, spec.index_type)
    fe.bind(kb, kf.args[:n_in])
    outputs = [(shape, ptr) for (_, shape), ptr in zip(output_leaves(spec.fusion), kf.args[n_in:])]

    block = linear_block_id(kb, spec.launch)
    t = b.add(b.mul(block, kb.index(spec.launch.num_threads)), kb.thread_id(0), name="element")
    if spec.num_elements > 0:
        with kb.if_(b.icmp_signed("<", t, kb.index(spec.num_elements))):
            index = _delinearize(kb, t, spec.dims)
            i = index[spec.sort_dim]
            mine = [fe.value(op, index) for op in spec.hero.operands]
            b.store(kb.index(0), counter)
            with kb.loop(0, spec.row_length, name="j") as j, fe.scope():
                other_index = list(index)
                other_index[spec.sort_dim] = j
                other = [fe.value(op, other_index) for op in spec.hero.operands]
                before = _goes_before(kb, spec, other, mine, b.icmp_signed("<", j, i))
                b.store(b.add(b.load(counter), b.zext(before, spec.index_type)), counter)
            rank = b.load(counter, name="rank")
            _store_results(kb, fe, spec, outputs, index, rank, mine)
    target.end_kernel(b)
    return module


def linear_block_id(kb: KernelBuilder, launch: LaunchDims) -> ir.Value:
    """The block's number when blocks are split over grid x and y (``blockIdx.y · gridDim.x +
    blockIdx.x``; just ``blockIdx.x`` when the grid has one row)."""
    if launch.grid[1] == 1:
        return kb.block_id(0)
    b = kb.b
    return b.add(b.mul(kb.block_id(1), kb.index(launch.grid[0])), kb.block_id(0), name="block")


def _delinearize(kb: KernelBuilder, t: ir.Value, dims) -> list[ir.Value]:
    """Row-major logical index of linear element ``t`` (the sort dim need not be minor)."""
    b, out = kb.b, []
    for k, d in enumerate(dims):
        stride = math.prod(dims[k + 1:])
        v = b.udiv(t, kb.index(stride)) if stride != 1 else t
        out.append(b.urem(v, kb.index(d)) if k else v)
    return out


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


def comparator_before(b: ir.IRBuilder, target: Target, comparator, x, y, position_lower: ir.Value) -> ir.Value:
    """Whether values ``x`` go before ``y`` in a stable sort: ``less(x, y)`` and not
    ``less(y, x)``, or the comparator answers the same both ways (a tie, or ``LE``/``GE``
    saying true both ways) and ``x``'s original position is lower."""
    lt_xy = _less(b, target, comparator, x, y)
    lt_yx = _less(b, target, comparator, y, x)
    strictly = b.and_(lt_xy, b.not_(lt_yx))
    tie = b.icmp_unsigned("==", lt_xy, lt_yx)
    return b.or_(strictly, b.and_(tie, position_lower))


def _less(b: ir.IRBuilder, target: Target, comparator, lhs, rhs) -> ir.Value:
    args = [v for pair in zip(lhs, rhs) for v in pair]
    (out,) = emit_call_computation(b, target, comparator, args)
    if out.type != I1:
        out = b.icmp_unsigned("!=", out, ir.Constant(out.type, 0))
    return out


def _topk_order(b: ir.IRBuilder, et: str, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(x > y, x == y) in the order ``topk`` ranks by: floats in total order (NaN above
    +inf, -NaN below -inf, -0 below +0), integers by their signedness, pred as 0 < 1."""
    if isinstance(x.type, ir.IntType) and x.type != I1:
        signed = et.startswith("s")
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        return cmp(">", x, y), b.icmp_unsigned("==", x, y)
    if x.type == I1:
        return b.and_(x, b.not_(y)), b.icmp_unsigned("==", x, y)
    kx, ky = _total_order_key(b, x), _total_order_key(b, y)
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
                    v = _as_int(b, index[spec.sort_dim], storage_type(shape.element_type))
                _store(kb, fe, shape, ptr, index, rank, spec.sort_dim, v)
        return
    for (shape, ptr), which in zip(outputs, spec.leaf_outputs):
        _store(kb, fe, shape, ptr, index, rank, spec.sort_dim, mine[which])


def _as_int(b: ir.IRBuilder, v: ir.Value, t: ir.IntType) -> ir.Value:
    if v.type.width == t.width:
        return v
    return b.trunc(v, t) if v.type.width > t.width else b.zext(v, t)


def _store(kb: KernelBuilder, fe: FusedEmitter, shape, ptr, index, position, dim, v) -> None:
    b = kb.b
    out_index = list(index)
    out_index[dim] = position
    et = shape.element_type
    dst = b.gep(ptr, [fe.offset(shape, out_index)], inbounds=True, source_etype=storage_type(et))
    b.store(to_storage(b, v, et), dst)

