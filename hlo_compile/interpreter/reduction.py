"""Reductions and windows: reduce (variadic, any reducer), reduce-window, select-and-scatter,
map."""
from __future__ import annotations

import itertools

import numpy as np

from ..hlo.attributes import PaddingDim
from .combine import apply, as_list, binary_ufunc, combine_at, tree_reduce_last
from .numerics import result
from .registry import op
from .shape_ops import pad_array


def _leaf_types(shape) -> list[str]:
    return [s.element_type for s in shape.tuple_shapes] if shape.is_tuple else [shape.element_type]


@op("reduce")
def _reduce(ev, inst, ops):
    n = len(ops) // 2
    xs, inits = [np.asarray(x) for x in ops[:n]], ops[n:]
    axes = sorted(inst.dimensions)
    keep = [d for d in range(xs[0].ndim) if d not in axes]
    kept_shape = tuple(xs[0].shape[d] for d in keep)
    count = int(np.prod([xs[0].shape[d] for d in axes], dtype=np.int64))
    flat = [np.transpose(x, keep + axes).reshape(kept_shape + (count,)) for x in xs]
    types = _leaf_types(inst.shape)
    out = tree_reduce_last(ev, inst.to_apply, flat, list(inits), types)
    out = [result(o, t) for o, t in zip(out, types)]
    return tuple(out) if inst.shape.is_tuple else out[0]


def _window_slices(window, out_dims):
    for pos in itertools.product(*(range(w.size) for w in window)):
        yield tuple(slice(k * w.window_dilation, k * w.window_dilation + (o - 1) * w.stride + 1, w.stride)
                    if o > 0 else slice(0, 0)
                    for k, w, o in zip(pos, window, out_dims))


def _pad_for_window(x, value, window):
    return pad_array(x, value, [PaddingDim(w.padding_low, w.padding_high, w.base_dilation - 1) for w in window])


@op("reduce-window")
def _reduce_window(ev, inst, ops):
    n = len(ops) // 2
    xs, inits = ops[:n], [np.asarray(i).reshape(()) for i in ops[n:]]
    window = inst.attr("window", ())
    types = _leaf_types(inst.shape)
    out_dims = tuple(inst.shape.tuple_shapes[0].dimensions if inst.shape.is_tuple else inst.shape.dimensions)
    padded = [_pad_for_window(np.asarray(x), i, window) for x, i in zip(xs, inits)]
    # padding and base-dilation holes are skipped, not reduced as init values (XLA's evaluator and
    # emitters do the same: with an init that is not the reducer's identity the two differ)
    valid = _pad_for_window(np.ones(np.shape(xs[0]), dtype=bool), np.asarray(False), window)
    accs = [np.full(out_dims, i, dtype=np.asarray(x).dtype) for x, i in zip(xs, inits)]
    uf = binary_ufunc(inst.to_apply, types[0]) if n == 1 else None
    if any(w.window_reversal for w in window):
        axes = [d for d, w in enumerate(window) if w.window_reversal]
        padded = [np.flip(p, axis=axes) for p in padded]
        valid = np.flip(valid, axis=axes)
    for sl in _window_slices(window, out_dims):
        vals = [p[sl] for p in padded]
        inside = valid[sl]
        if inside.size and not inside.any():
            continue
        if uf is not None:
            new = [uf(accs[0], vals[0])]
        else:
            new = apply(ev, inst.to_apply, accs, vals, types)
        accs = new if inside.all() else [np.where(inside, nv, a) for nv, a in zip(new, accs)]
    accs = [result(np.broadcast_to(a, out_dims), t) for a, t in zip(accs, types)]
    return tuple(accs) if inst.shape.is_tuple else accs[0]


@op("select-and-scatter")
def _select_and_scatter(ev, inst, ops):
    operand, source, init = np.asarray(ops[0]), np.asarray(ops[1]), np.asarray(ops[2]).reshape(())
    window = inst.attr("window", ())
    et = inst.operands[0].shape.element_type
    out_dims = source.shape
    pads = [PaddingDim(w.padding_low, w.padding_high, w.base_dilation - 1) for w in window]
    vals = pad_array(operand, np.zeros((), operand.dtype), pads)
    index = pad_array(np.arange(operand.size, dtype=np.int64).reshape(operand.shape), -1, pads)
    cur_v = cur_i = None
    select = inst.attr("select")
    for sl in _window_slices(window, out_dims):
        v, i = vals[sl], index[sl]
        if cur_v is None:
            cur_v, cur_i = v.copy(), i.copy()
            continue
        valid = i >= 0
        keep = np.asarray(ev.call(select, cur_v, v), dtype=bool)
        take = valid & ((cur_i < 0) | ~keep)
        cur_v = np.where(take, v, cur_v)
        cur_i = np.where(take, i, cur_i)
    out = np.full(operand.shape, init, dtype=operand.dtype)
    if cur_i is None:
        return out
    ok = cur_i >= 0
    return combine_at(ev, inst.attr("scatter"), [out], cur_i[ok], [source[ok]], [et])[0]


@op("map")
def _map(ev, inst, ops):
    out = as_list(ev.call(inst.to_apply, *ops))
    return result(np.broadcast_to(out[0], inst.shape.dimensions), inst.shape.element_type)
