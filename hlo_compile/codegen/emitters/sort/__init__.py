"""The sort emitters and the rank sort, one thread per element.

A fusion whose root is a ``sort`` (XLA semantics: any number of operands of one shape, sorted
together along ``dimensions={d}`` by the scalar comparator ``to_apply``, which takes two
scalars per operand: ``(lhs0, rhs0, lhs1, rhs1, ...)``) or a ``topk`` gets one of two kernels
(``plan_sort_kernel``, trying ``ALGORITHMS`` in order):

- the bitonic sort in shared memory (``bitonic.py``: one block per row, O(n log² n)
  comparator calls per row) for a ``sort`` whose rows have at least two elements and, padded
  to a power of two, fit the 48 KiB of static shared memory of a block together with their
  positions (up to 4096 elements for one or two 32-bit operands);
- the rank sort (``rank.py``) for everything else: ``topk``, rows of one element, and rows
  too long for shared memory. Its report says why the bitonic kernel did not take the fusion.

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
index. The walk reads 4 adjacent elements of the row per iteration, as vectors from the
parameters where the layout allows (``vectors.py``). The count is ``i``'s final position along ``d``; the thread then writes every
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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ....hlo import HloInstruction
from ....gpu.device_info import DeviceInfo
from ...errors import unsupported
from ...analysis.fusion_analysis import FusionAnalysis
from ...kernel import Declined, KernelSpec
from ...target import Target
from .bitonic import BitonicSortKernelSpec, emit_bitonic_sort, plan_bitonic_sort
from .common import SortAlgorithm, hero_and_leaves
from .rank import SortKernelSpec, emit_rank_sort, plan_rank_sort


@dataclass(frozen=True)
class Algorithm:
    """One sort kernel: its planner ``(fusion, device, kernel name, hero, leaf outputs, dims,
    sort dim, why the algorithm before declined) -> spec`` (may raise ``Declined``: the next
    algorithm takes the sort) and its kernel emitter."""

    plan: Callable[..., KernelSpec]
    emit: Callable[[Target, KernelSpec], ir.Module]


# tried in order; the rank sort takes every sort and topk
ALGORITHMS: dict[SortAlgorithm, Algorithm] = {
    SortAlgorithm.BITONIC: Algorithm(plan_bitonic_sort, emit_bitonic_sort),
    SortAlgorithm.RANK: Algorithm(plan_rank_sort, emit_rank_sort),
}


def plan_sort_kernel(fusion: HloInstruction, analysis: FusionAnalysis | None, device: DeviceInfo,
                     kernel_name: str) -> SortKernelSpec | BitonicSortKernelSpec:
    """The first algorithm of ``ALGORITHMS`` that takes the fusion's sort or topk; the rank
    sort's report says why the bitonic sort did not."""
    hero, leaves = hero_and_leaves(fusion)
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
    declined = ""
    for algorithm in ALGORITHMS.values():
        try:
            return algorithm.plan(fusion, device, kernel_name, hero, leaves, dims, sort_dim, declined)
        except Declined as d:
            declined = d.why
    raise AssertionError("the rank sort takes every sort")


def emit_sort_kernel(target: Target, spec: SortKernelSpec | BitonicSortKernelSpec) -> ir.Module:
    return ALGORITHMS[spec.algorithm].emit(target, spec)


__all__ = ["ALGORITHMS", "BitonicSortKernelSpec", "SortKernelSpec", "emit_sort_kernel", "plan_sort_kernel"]
