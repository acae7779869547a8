"""sort (multi-operand, any comparator, stable) and topk.

The comparator is evaluated on whole arrays: a bottom-up merge sort whose merge step places
each element by a binary search in the neighbouring run, every search step one vectorised
comparator evaluation over all rows and positions. log2(n)^2 comparator calls per sort."""
from __future__ import annotations

import numpy as np

from ..hlo.element_types import is_float
from .numerics import dtype_of, total_order_key
from .registry import op


def _less(ev, comp, a: list[np.ndarray], b: list[np.ndarray]) -> np.ndarray:
    args = []
    for x, y in zip(a, b):
        args += [x, y]
    return np.asarray(ev.call(comp, *args), dtype=bool)


def merge_sort_permutation(ev, comp, keys: list[np.ndarray]) -> np.ndarray:
    """Per row (last axis sorted) the stable permutation that sorts ``keys`` by ``comp``."""
    rows, n = keys[0].shape
    perm = np.broadcast_to(np.arange(n, dtype=np.int64), (rows, n)).copy()
    pos = np.arange(n, dtype=np.int64)
    width = 1
    while width < n:
        cur = [np.take_along_axis(k, perm, axis=1) for k in keys]
        run = pos // width
        is_left = (run % 2) == 0
        own_start = run * width
        partner_start = np.where(is_left, own_start + width, own_start - width)
        partner_len = np.clip(n - partner_start, 0, width)
        lo = np.zeros((rows, n), dtype=np.int64)
        hi = np.broadcast_to(partner_len, (rows, n)).copy()
        steps = int(np.ceil(np.log2(width + 1))) + 1
        for _ in range(steps):
            active = lo < hi
            if not active.any():
                break
            mid = (lo + hi) // 2
            j = np.clip(partner_start + mid, 0, n - 1)
            other = [np.take_along_axis(c, j, axis=1) for c in cur]
            # left element x: count partner (right-run) y with y < x (strictly before x).
            # right element y: count partner (left-run) x with not (y < x), i.e. x <= y.
            a = [np.where(is_left, o, c) for o, c in zip(other, cur)]
            b = [np.where(is_left, c, o) for o, c in zip(other, cur)]
            less = _less(ev, comp, a, b)
            before = np.where(is_left, less, ~less)
            go_right = active & before
            lo = np.where(go_right, mid + 1, lo)
            hi = np.where(active & ~before, mid, hi)
        pair_start = (run // 2) * 2 * width
        new_pos = pair_start + (pos - own_start) + lo
        new_perm = np.empty_like(perm)
        np.put_along_axis(new_perm, new_pos, perm, axis=1)
        perm = new_perm
        width *= 2
    return perm


@op("sort")
def _sort(ev, inst, ops):
    dim = inst.dimensions[0]
    xs = [np.moveaxis(np.asarray(o), dim, -1) for o in ops]
    lead = xs[0].shape[:-1]
    n = xs[0].shape[-1]
    flat = [x.reshape(int(np.prod(lead, dtype=np.int64)), n) for x in xs]
    if flat[0].shape[0] == 0 or n <= 1:
        perm = np.broadcast_to(np.arange(n), flat[0].shape)
    else:
        perm = merge_sort_permutation(ev, inst.to_apply, flat)
    out = [np.moveaxis(np.take_along_axis(f, perm, axis=1).reshape(lead + (n,)), -1, dim) for f in flat]
    return tuple(out) if inst.shape.is_tuple else out[0]


def top_k(x: np.ndarray, et: str, k: int, largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The k largest (smallest) along the last axis, ties to the lower index; floats in
    total order (NaN above +inf)."""
    if is_float(et):
        key = total_order_key(x, et).astype(np.int64)
    elif x.dtype == np.bool_:
        key = x.astype(np.int64)
    else:
        key = x
    if largest:
        key = ~key if key.dtype.kind == "i" else (np.iinfo(key.dtype).max - key) if key.dtype.kind == "u" else -key
    idx = np.argsort(key, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)


@op("topk")
def _topk(ev, inst, ops):
    x = np.asarray(ops[0])
    v, i = top_k(x, inst.operands[0].shape.element_type, inst.attr("k"), inst.attr("largest", True))
    return v, i.astype(dtype_of(inst.shape.tuple_shapes[1].element_type))
