"""Thread -> data indexing maps: the affine form of the index arithmetic kernels run.

Every emitter states which element each thread reads and writes as an ``IndexingMap`` over
XLA's work-item dimensions ``(th_x, th_y, th_z, bl_x, bl_y, bl_z)`` (``KernelSpec``'s
``thread_to_input_map``/``thread_to_output_map``, as XLA's ``KernelFusionInterface``). The
helpers here build those maps: (de)linearisation as affine expressions, mirroring
``KernelBuilder.linearize``/``delinearize`` on IR values, and the map over a launch.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from ...indexing import affine as A
from ...indexing.indexing_map import IndexingMap
from ...indexing.simplifier import simplify
from ..target import LaunchDims

WORK_ITEM_DIM_NAMES = ("th_x", "th_y", "th_z", "bl_x", "bl_y", "bl_z")


def expr_delinearize(linear: A.ExprLike, dims: Sequence[int],
                     minor_to_major: Sequence[int] | None = None) -> list[A.Expr]:
    """The index of position ``linear`` in ``dims`` ordered by ``minor_to_major`` (row-major
    when None), as affine expressions; size-1 dims are 0."""
    order = list(minor_to_major) if minor_to_major is not None else list(range(len(dims) - 1, -1, -1))
    out: list[A.Expr] = [A.const(0)] * len(dims)
    stride, total = 1, math.prod(dims)
    for d in order:
        n = dims[d]
        if n != 1:
            q = A.floordiv(linear, stride) if stride != 1 else A.as_expr(linear)
            out[d] = q if stride * n == total else A.mod(q, n)
        stride *= n
    return out


def expr_linearize(index: Sequence[A.ExprLike], dims: Sequence[int],
                   minor_to_major: Sequence[int] | None = None) -> A.Expr:
    """The position of ``index`` in ``dims`` ordered by ``minor_to_major`` (row-major when None)."""
    order = list(minor_to_major) if minor_to_major is not None else list(range(len(dims) - 1, -1, -1))
    out, stride = A.const(0), 1
    for d in order:
        if dims[d] != 1:
            out = A.add(out, A.mul(index[d], stride))
        stride *= dims[d]
    return out


def work_item_map(exprs: Sequence[A.Expr], launch: LaunchDims, ranges: Sequence[tuple[int, int]],
                  constraints: Sequence[tuple[A.Expr, int, int]]) -> IndexingMap:
    """An IndexingMap over the work items of ``launch``, symbols ``ranges``, simplified;
    constraints are ``(expr, lo, hi)``."""
    dims = [(0, n - 1) for n in launch.block] + [(0, n - 1) for n in launch.grid]
    return on_work_items(IndexingMap.make(exprs, dims, ranges, (), [(e, (lo, hi)) for e, lo, hi in constraints]))


def on_work_items(m: IndexingMap) -> IndexingMap:
    """``m`` (over the six work-item dims) simplified, its dims named as XLA prints them."""
    return replace(simplify(replace(m, dim_names=WORK_ITEM_DIM_NAMES)), dim_names=WORK_ITEM_DIM_NAMES)
