"""Data movement: parameter-free producers (constant, iota), broadcast, reshape, bitcast
(layout-aware), transpose, slice, dynamic-slice, dynamic-update-slice, pad, concatenate,
reverse, copy, tuple and get-tuple-element."""
from __future__ import annotations

import numpy as np

from ..hlo.errors import HloUnsupportedError
from .numerics import dtype_of, int_limits
from .registry import op
from .elementwise import bitcast_convert


def _dims(inst) -> tuple[int, ...]:
    return tuple(inst.shape.dimensions)


@op("constant")
def _constant(ev, inst, ops):
    lit = inst.literal
    return _as_values(lit, inst.shape)


def _as_values(lit, shape):
    if shape.is_tuple:
        return tuple(_as_values(v, s) for v, s in zip(lit, shape.tuple_shapes))
    return np.asarray(lit).astype(dtype_of(shape.element_type), copy=False).reshape(shape.dimensions)


@op("iota")
def _iota(ev, inst, ops):
    dims = _dims(inst)
    d = inst.attr("iota_dimension")
    dt = dtype_of(inst.shape.element_type)
    if dt.kind in "iu" and dims[d] - 1 <= np.iinfo(dt).max:
        r = np.arange(dims[d], dtype=dt)  # exact in the type itself: no int64 copy
    else:
        r = np.arange(dims[d], dtype=np.int64).astype(dt)
    shape = [1] * len(dims)
    shape[d] = dims[d]
    return np.broadcast_to(r.reshape(shape), dims)


@op("broadcast")
def _broadcast(ev, inst, ops):
    dims = _dims(inst)
    x = np.asarray(ops[0])
    bdims = inst.dimensions
    shape = [1] * len(dims)
    for i, d in enumerate(bdims):
        shape[d] = x.shape[i]
    # Keep operand dims in increasing order of the target dims before reshaping.
    order = sorted(range(len(bdims)), key=lambda i: bdims[i])
    x = np.transpose(x, order) if order != list(range(len(bdims))) else x
    return np.broadcast_to(x.reshape(shape), dims)


@op("reshape", "dynamic-reshape")
def _reshape(ev, inst, ops):
    return np.reshape(ops[0], _dims(inst))


def _physical(x: np.ndarray, shape) -> np.ndarray:
    """The array's elements in memory order (major to minor) for its layout."""
    mtm = shape.minor_to_major
    major_to_minor = list(reversed(mtm))
    return np.transpose(x, major_to_minor).reshape(-1) if x.ndim else x.reshape(-1)


def _from_physical(flat: np.ndarray, shape) -> np.ndarray:
    mtm = shape.minor_to_major
    major_to_minor = list(reversed(mtm))
    dims = shape.dimensions
    phys = flat.reshape([dims[d] for d in major_to_minor])
    return np.transpose(phys, np.argsort(major_to_minor))


def _has_tiles(shape) -> bool:
    return shape.layout is not None and bool(shape.layout.tiles)


@op("bitcast")
def _bitcast(ev, inst, ops):
    src, dst = inst.operands[0].shape, inst.shape
    if _has_tiles(src) or _has_tiles(dst):
        raise HloUnsupportedError("bitcast between tiled layouts is not supported by the interpreter",
                                  inst.location)
    x = np.asarray(ops[0])
    if src.dimensions == dst.dimensions and src.minor_to_major == dst.minor_to_major:
        # same physical order: only the element type may change (also batched scalars)
        if src.element_type == dst.element_type:
            return x
        return np.asarray(x, order="C").view(dtype_of(dst.element_type))
    flat = _physical(x, src)
    if src.element_type != dst.element_type:
        flat = np.asarray(flat, order="C").view(np.uint8).view(dtype_of(dst.element_type))
    return _from_physical(flat, dst)


@op("transpose")
def _transpose(ev, inst, ops):
    return np.transpose(ops[0], inst.dimensions)


@op("copy", "domain", "opt-barrier")
def _identity(ev, inst, ops):
    return ops[0]


@op("slice")
def _slice(ev, inst, ops):
    return np.asarray(ops[0])[tuple(slice(s.start, s.limit, s.stride) for s in inst.attr("slice"))]


def _clamped_starts(inst, index_ops, operand_dims, sizes) -> list[int]:
    starts = []
    for v, dim, size in zip(index_ops, operand_dims, sizes):
        s = int(np.asarray(v).reshape(()))  # python int: no overflow for u64 values
        starts.append(min(max(s, 0), dim - size))
    return starts


@op("dynamic-slice")
def _dynamic_slice(ev, inst, ops):
    x = np.asarray(ops[0])
    sizes = inst.attr("dynamic_slice_sizes")
    idx = _index_operands(ops[1:], x.ndim)
    starts = _clamped_starts(inst, idx, x.shape, sizes)
    return x[tuple(slice(s, s + n) for s, n in zip(starts, sizes))]


def _index_operands(ops, rank):
    if len(ops) == 1 and rank != 1 and np.ndim(ops[0]) == 1:  # old form: one index vector
        return list(np.asarray(ops[0]))
    return ops


@op("dynamic-update-slice")
def _dynamic_update_slice(ev, inst, ops):
    x = np.array(ops[0], copy=True)
    upd = np.asarray(ops[1])
    idx = _index_operands(ops[2:], x.ndim)
    starts = _clamped_starts(inst, idx, x.shape, upd.shape)
    x[tuple(slice(s, s + n) for s, n in zip(starts, upd.shape))] = upd
    return x


def pad_array(x: np.ndarray, value, padding) -> np.ndarray:
    """XLA pad: low/high may be negative (cropping), interior inserts between elements."""
    x = np.asarray(x)
    out_dims = []
    for n, p in zip(x.shape, padding):
        core = n + max(n - 1, 0) * p.interior if n else 0
        out_dims.append(p.low + core + p.high)
    out = np.full(out_dims, value, dtype=x.dtype)
    if any(d <= 0 for d in out_dims) or x.size == 0:
        return out.reshape([max(d, 0) for d in out_dims])
    src, dst = [], []
    for n, p, od in zip(x.shape, padding, out_dims):
        step = p.interior + 1
        # operand index i lands at p.low + i*step; keep 0 <= pos < od
        i0 = max(0, (-p.low + step - 1) // step)
        i1 = min(n, (od - p.low + step - 1) // step)
        if i1 <= i0:
            return out
        src.append(slice(i0, i1))
        dst.append(slice(p.low + i0 * step, p.low + (i1 - 1) * step + 1, step))
    out[tuple(dst)] = x[tuple(src)]
    return out


@op("pad")
def _pad(ev, inst, ops):
    return pad_array(ops[0], np.asarray(ops[1]).reshape(()), inst.attr("padding"))


@op("concatenate")
def _concatenate(ev, inst, ops):
    return np.concatenate([np.asarray(o) for o in ops], axis=inst.dimensions[0])


@op("reverse")
def _reverse(ev, inst, ops):
    x = np.asarray(ops[0])
    return np.flip(x, axis=inst.dimensions) if inst.dimensions else x


@op("tuple")
def _tuple(ev, inst, ops):
    return tuple(ops)


@op("get-tuple-element")
def _gte(ev, inst, ops):
    return ops[0][inst.attr("index")]


@op("get-dimension-size")
def _get_dimension_size(ev, inst, ops):
    return np.asarray(np.shape(ops[0])[inst.dimensions[0]], dtype=np.int32)


@op("set-dimension-size")
def _set_dimension_size(ev, inst, ops):
    return ops[0]


__all__ = ["pad_array", "bitcast_convert", "int_limits"]
