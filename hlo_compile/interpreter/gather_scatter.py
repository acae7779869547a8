"""Gather and scatter in XLA's general form (batching dims included). Gather clamps each
slice start into the operand; scatter skips any update window that is not fully in bounds."""
from __future__ import annotations

import numpy as np

from .combine import combine_at
from .registry import op


def _index_matrix(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Indices with the index vector as the last dim (added if index_vector_dim == rank)."""
    idx = np.asarray(indices).astype(np.int64)
    if index_vector_dim == idx.ndim:
        return idx[..., None]
    return np.moveaxis(idx, index_vector_dim, -1)


def _arange_at(n: int, axis: int, rank: int) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = n
    return np.arange(n, dtype=np.int64).reshape(shape)


def _batch_pos(idx_dim: int, index_vector_dim: int) -> int:
    """Position among the batch dims of the index array for index dim ``idx_dim``."""
    return idx_dim if idx_dim < index_vector_dim else idx_dim - 1


@op("gather")
def _gather(ev, inst, ops):
    operand = np.asarray(ops[0])
    dn = inst.gather_dimension_numbers
    sizes = inst.attr("slice_sizes")
    out_dims = tuple(inst.shape.dimensions)
    rank = len(out_dims)
    idx = _index_matrix(ops[1], dn.index_vector_dim)
    batch_out = [d for d in range(rank) if d not in dn.offset_dims]
    window_operand = [d for d in range(operand.ndim)
                      if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    full = [None] * operand.ndim
    for k, od in enumerate(dn.start_index_map):
        start = np.expand_dims(idx[..., k], tuple(dn.offset_dims)) if dn.offset_dims else idx[..., k]
        full[od] = np.clip(start, 0, operand.shape[od] - sizes[od])
    for ob, sb in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
        full[ob] = _arange_at(out_dims[batch_out[_batch_pos(sb, dn.index_vector_dim)]],
                              batch_out[_batch_pos(sb, dn.index_vector_dim)], rank)
    for i, od in enumerate(window_operand):
        off = _arange_at(out_dims[dn.offset_dims[i]], dn.offset_dims[i], rank)
        full[od] = off if full[od] is None else full[od] + off
    full = [np.zeros((1,) * rank, np.int64) if f is None else f for f in full]
    return np.broadcast_to(operand[tuple(full)], out_dims)


@op("scatter")
def _scatter(ev, inst, ops):
    n = (len(ops) - 1) // 2
    operands = [np.asarray(o) for o in ops[:n]]
    indices = ops[n]
    updates = [np.asarray(u) for u in ops[n + 1:]]
    dn = inst.scatter_dimension_numbers
    shape = operands[0].shape
    urank = updates[0].ndim
    udims = updates[0].shape
    idx = _index_matrix(indices, dn.index_vector_dim)
    scatter_dims = [d for d in range(urank) if d not in dn.update_window_dims]
    window_operand = [d for d in range(len(shape))
                      if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]

    def at_scatter(a: np.ndarray) -> np.ndarray:  # index-array batch dims placed at scatter dims
        return np.expand_dims(a, tuple(dn.update_window_dims)) if dn.update_window_dims else a

    full = [np.zeros((1,) * urank, np.int64) for _ in shape]
    in_bounds = np.ones((1,) * urank, dtype=bool)
    for k, od in enumerate(dn.scatter_dims_to_operand_dims):
        start = at_scatter(idx[..., k])
        size = udims[dn.update_window_dims[window_operand.index(od)]] if od in window_operand else 1
        in_bounds = in_bounds & (start >= 0) & (start <= shape[od] - size)
        full[od] = full[od] + start
    for ob, sb in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
        d = scatter_dims[_batch_pos(sb, dn.index_vector_dim)]
        full[ob] = full[ob] + _arange_at(udims[d], d, urank)
    for i, od in enumerate(window_operand):
        d = dn.update_window_dims[i]
        full[od] = full[od] + _arange_at(udims[d], d, urank)
    # the flat operand position of every update element, summed from the per-dim index arrays
    # (small, broadcastable) in int32 where the operand allows: one index array of the updates'
    # size, and no selection copies when every window is in bounds (out-of-bounds ones wrap
    # harmlessly here: they are left out below)
    it = np.int32 if int(np.prod(shape, dtype=np.int64)) < np.iinfo(np.int32).max else np.int64
    flat: np.ndarray = np.zeros((1,) * urank, it)
    stride = 1
    for d in reversed(range(len(shape))):
        flat = flat + full[d].astype(it) * it(stride)
        stride *= shape[d]
    flat = np.broadcast_to(flat, udims)
    types = [s.element_type for s in inst.shape.tuple_shapes] if inst.shape.is_tuple else [inst.shape.element_type]
    if in_bounds.all():
        out = combine_at(ev, inst.to_apply, operands, flat.reshape(-1), [u.reshape(-1) for u in updates], types)
    else:
        ok = np.broadcast_to(in_bounds, udims)
        out = combine_at(ev, inst.to_apply, operands, flat[ok], [u[ok] for u in updates], types)
    return tuple(out) if inst.shape.is_tuple else out[0]
