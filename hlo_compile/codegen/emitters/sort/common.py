"""What the sort kernels share: the sort a fusion computes, the stable comparator order and
the store of a sorted element (see ``__init__.py`` for the HLO semantics)."""
from __future__ import annotations

from enum import StrEnum
from typing import Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ....hlo.shape import Shape
from ...elemental.scalar_ops import emit_call_computation
from ...errors import unsupported
from ...elemental.fused_emitter import FusedEmitter
from ...llvm_types import I1
from ...target import Target


class SortAlgorithm(StrEnum):
    """The sort kernels, as summary.json's ``algorithm`` names them."""

    BITONIC = "bitonic"
    RANK = "rank"


def hero_and_leaves(fusion: HloInstruction) -> tuple[HloInstruction, tuple[int, ...]]:
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


def store_at_position(fe: FusedEmitter, shape: Shape, ptr: ir.Value, index: Sequence[ir.Value], position: ir.Value,
                      dim: int, v: ir.Value) -> None:
    """Store ``v`` in output buffer ``ptr`` at ``index`` with ``position`` along the sort dim."""
    out_index = list(index)
    out_index[dim] = position
    fe.store(shape, ptr, out_index, v)
