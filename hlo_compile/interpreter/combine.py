"""Applying reducer/combiner computations to whole arrays: recognising the common binary
reducers (add, max, ...) as numpy ufuncs, the vectorised generic path through the evaluator,
and scatter-style accumulation of updates into positions that may repeat."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..hlo.element_types import is_float
from .numerics import is_narrow_float

_UFUNCS = {
    "add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}
_BOOL_UFUNCS = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor,
                "maximum": np.logical_or, "minimum": np.logical_and}
# Reducers whose result does not depend on rounding between steps (safe on narrow floats).
_EXACT = {"maximum", "minimum", "and", "or", "xor"}


def binary_ufunc(comp, element_type: str):
    """The numpy ufunc equal to ``comp`` if it is ``op(p0, p1)`` of one of the common
    binary ops on a single array type, else None. Narrow-float add/multiply return None so
    that the generic path rounds after every step."""
    root = comp.root
    params = comp.parameters
    if len(params) != 2 or len(comp.instructions) != 3 or root.opcode not in _UFUNCS:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params} or len(root.operands) != 2:
        return None
    if root.shape.is_tuple or root.shape.element_type != element_type:
        return None
    if element_type == "pred":
        if root.opcode not in _BOOL_UFUNCS:
            return None
        return _BOOL_UFUNCS[root.opcode]
    if is_float(element_type) and root.opcode in ("and", "or", "xor"):
        return None
    if is_narrow_float(element_type) and root.opcode not in _EXACT:
        return None
    if element_type in ("c64", "c128") and root.opcode in ("maximum", "minimum"):
        return None
    return _UFUNCS[root.opcode]


def as_list(v: Any) -> list:
    return list(v) if isinstance(v, tuple) else [v]


def apply(ev, comp, accs: Sequence[np.ndarray], xs: Sequence[np.ndarray], types: Sequence[str]) -> list:
    """``comp(acc..., x...)`` elementwise on whole arrays, results cast to ``types``."""
    out = as_list(ev.call(comp, *accs, *xs))
    from .numerics import result
    return [result(o, t) for o, t in zip(out, types)]


def tree_reduce_last(ev, comp, xs: list[np.ndarray], inits: list, types: list[str]) -> list[np.ndarray]:
    """Reduce the last axis of every array in ``xs`` with ``comp`` (variadic), pairing
    neighbours level by level (a reduction order XLA allows), then combine with ``inits``."""
    lead = xs[0].shape[:-1]
    if xs[0].shape[-1] == 0:
        return [np.broadcast_to(np.asarray(i), lead).copy() for i in inits]
    if len(xs) == 1:
        uf = binary_ufunc(comp, types[0])
        if uf is not None:
            r = uf.reduce(xs[0], axis=-1)
            return [np.asarray(uf(np.asarray(inits[0]), r)).astype(xs[0].dtype)]
    while xs[0].shape[-1] > 1:
        n = xs[0].shape[-1]
        h = n // 2
        left = [x[..., 0:2 * h:2] for x in xs]
        right = [x[..., 1:2 * h:2] for x in xs]
        comb = apply(ev, comp, left, right, types)
        if n % 2:
            comb = [np.concatenate([c, x[..., n - 1:]], axis=-1) for c, x in zip(comb, xs)]
        xs = [np.broadcast_to(c, x[..., :h + n % 2].shape) for c, x in zip(comb, xs)]
    last = [x[..., 0] for x in xs]
    inits_b = [np.broadcast_to(np.asarray(i), lead) for i in inits]
    return [np.broadcast_to(r, lead).copy() for r in apply(ev, comp, inits_b, last, types)]


def combine_at(ev, comp, targets: list[np.ndarray], flat_index: np.ndarray, updates: list[np.ndarray],
               types: list[str]) -> list[np.ndarray]:
    """targets.flat[i] = comp(targets.flat[i], update) for every (i, update), in update
    order; repeated positions are applied in rounds, each round vectorised."""
    flat_index = np.asarray(flat_index).reshape(-1)
    updates = [np.asarray(u).reshape(-1) for u in updates]
    outs = [np.array(t, copy=True).reshape(-1) for t in targets]
    if flat_index.size == 0:
        return [o.reshape(t.shape) for o, t in zip(outs, targets)]
    uf = binary_ufunc(comp, types[0]) if len(targets) == 1 else None
    if uf is not None and uf in (np.add, np.multiply, np.maximum, np.minimum) and outs[0].dtype.kind in "iufcb" \
            and outs[0].dtype != np.bool_:
        uf.at(outs[0], flat_index, updates[0])
        return [outs[0].reshape(targets[0].shape)]
    order = np.argsort(flat_index, kind="stable")
    sorted_idx = flat_index[order]
    starts = np.r_[True, sorted_idx[1:] != sorted_idx[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(sorted_idx.size), 0))
    rank = np.empty_like(order)
    rank[order] = np.arange(sorted_idx.size) - group_start
    for r in range(int(rank.max()) + 1):
        sel = rank == r
        pos = flat_index[sel]
        cur = [o[pos] for o in outs]
        new = apply(ev, comp, cur, [u[sel] for u in updates], types)
        for o, n in zip(outs, new):
            o[pos] = n
    return [o.reshape(t.shape) for o, t in zip(outs, targets)]
