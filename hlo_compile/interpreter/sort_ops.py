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


def _used_operands(comp, count: int) -> list[bool]:
    """Per sort operand, whether the comparator reads either of its two parameters."""
    read = {id(o) for inst in comp.instructions for o in inst.operands}
    params = {p.parameter_number: p for p in comp.parameters}
    return [any(id(params[q]) in read for q in (2 * i, 2 * i + 1) if q in params) or params.get(2 * i) is comp.root
            or params.get(2 * i + 1) is comp.root for i in range(count)]


def merge_sort_permutation(ev, comp, keys: list[np.ndarray]) -> np.ndarray:
    """Per row (last axis sorted) the stable permutation that sorts ``keys`` by ``comp``.
    Memory: positions are int32 where they fit, operands the comparator does not read are not
    gathered (a zero view stands for them), and each binary-search step runs over blocks of
    positions, so its temporaries (partner values, the comparator's values) are a block's."""
    rows, n = keys[0].shape
    it = np.dtype(np.int32 if 2 * n < np.iinfo(np.int32).max else np.int64)
    used = _used_operands(comp, len(keys))
    perm: np.ndarray = np.broadcast_to(np.arange(n, dtype=it), (rows, n)).copy()
    pos: np.ndarray = np.arange(n, dtype=it)
    cols = max(1, min(n, max(1 << 14, rows * n // 16) // max(rows, 1)))
    width = 1
    while width < n:
        cur = [np.take_along_axis(k, perm, axis=1) if u else np.broadcast_to(np.zeros((), k.dtype), k.shape)
               for k, u in zip(keys, used)]
        run = pos // width
        is_left = (run % 2) == 0
        partner_start = run * width  # the own run's start, then the partner's
        del run
        partner_start += np.where(is_left, width, -width).astype(it, copy=False)
        lo = np.zeros((rows, n), dtype=it)
        hi = np.broadcast_to(np.clip(n - partner_start, 0, width), (rows, n)).copy()
        steps = int(np.ceil(np.log2(width + 1))) + 1
        for c0 in range(0, n, cols):
            c = slice(c0, c0 + cols)
            _search_block(ev, comp, cur, used, lo[:, c], hi[:, c], is_left[c], partner_start[c], c, n, steps)
        del cur, hi, is_left, partner_start
        lo += pos % width  # the position within its own run
        lo += pos // (2 * width) * (2 * width)  # ... and its merged pair of runs' start
        new_perm = np.empty_like(perm)
        np.put_along_axis(new_perm, lo, perm, axis=1)
        perm = new_perm
        del lo, new_perm
        width *= 2
    return perm


def _search_block(ev, comp, cur, used, lo, hi, is_left, partner_start, c, n, steps) -> None:
    """The binary searches of the positions ``c`` (``lo`` and ``hi``: views, updated in place)."""
    for _ in range(steps):
        active = lo < hi
        if not active.any():
            return
        mid = lo + hi
        mid //= 2
        j = partner_start + mid
        np.clip(j, 0, n - 1, out=j)
        a, b = [], []
        for x, u in zip(cur, used):
            if not u:
                a.append(x[:, c])
                b.append(x[:, c])
                continue
            # left element x: count partner (right-run) y with y < x (strictly before x).
            # right element y: count partner (left-run) x with not (y < x), i.e. x <= y.
            other = np.take_along_axis(x, j, axis=1)
            own = x[:, c]
            b.append(np.where(is_left, own, other))
            np.copyto(other, own, where=~is_left)  # other becomes where(is_left, other, own)
            a.append(other)
        del j
        less = _less(ev, comp, a, b)
        del a, b
        before = np.where(is_left, less, ~less)
        del less
        mid += 1
        np.copyto(lo, mid, where=active & before)
        mid -= 1
        np.copyto(hi, mid, where=active & ~before)


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
    total order (NaN above +inf). Rows are ranked a block at a time (the key and the argsort's
    positions are temporaries of the block only)."""
    lead, n = x.shape[:-1], x.shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    flat = x.reshape(rows, n)
    vals = np.empty((rows, k), x.dtype)
    idx = np.empty((rows, k), np.int32)
    block = max(1, min(rows, max(1 << 16, rows * n // 8) // max(n, 1)))
    for r0 in range(0, rows, block):
        part = flat[r0:r0 + block]
        if is_float(et):
            key = total_order_key(part, et)
        elif part.dtype == np.bool_:
            key = part.astype(np.int8)
        else:
            key = part
        if largest:
            key = ~key if key.dtype.kind == "i" else (np.iinfo(key.dtype).max - key) if key.dtype.kind == "u" else -key
        order = np.argsort(key, axis=-1, kind="stable")
        del key
        idx[r0:r0 + block] = order[:, :k]
        del order
        vals[r0:r0 + block] = np.take_along_axis(part, idx[r0:r0 + block], axis=-1)
    return vals.reshape(lead + (k,)), idx.reshape(lead + (k,))


@op("topk")
def _topk(ev, inst, ops):
    x = np.asarray(ops[0])
    v, i = top_k(x, inst.operands[0].shape.element_type, inst.attr("k"), inst.attr("largest", True))
    return v, i.astype(dtype_of(inst.shape.tuple_shapes[1].element_type))
