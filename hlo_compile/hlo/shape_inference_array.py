"""Shape rules of data-movement ops: transpose, slices, pad, concatenate, reverse, gather,
scatter."""
from __future__ import annotations

from typing import Any

from .shape import UNBOUNDED_DIM, Shape
from .shape_inference_base import (ShapeInferenceError, array, dims_equal, expect_array,
                                   expect_count, expect_dims_in_rank, expect_distinct, human, is_int_type, like,
                                   require, rule)


@rule("transpose")
def _transpose(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1)
    s = expect_array(shapes[0], "transpose's operand")
    perm = require(attrs, "dimensions", opcode)
    if sorted(perm) != list(range(s.rank)):
        raise ShapeInferenceError(f"transpose dimensions {list(perm)} are not a permutation of the "
                                  f"operand dimensions of {human(s)}")
    return array(s.element_type, [s.dimensions[p] for p in perm], [s.dynamic_dimensions[p] for p in perm])


@rule("reverse")
def _reverse(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1)
    s = expect_array(shapes[0], "reverse's operand")
    dims = attrs.get("dimensions", ())
    expect_dims_in_rank(dims, s.rank, "reverse")
    expect_distinct(dims, "reverse dimensions")
    return like(s)


@rule("slice")
def _slice(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1)
    s = expect_array(shapes[0], "slice's operand")
    ranges = require(attrs, "slice", opcode)
    if len(ranges) != s.rank:
        raise ShapeInferenceError(f"slice has {len(ranges)} ranges for operand {human(s)} of rank {s.rank}")
    dims = []
    for i, (r, d) in enumerate(zip(ranges, s.dimensions)):
        if r.stride <= 0:
            raise ShapeInferenceError(f"slice stride {r.stride} in dimension {i} must be positive")
        if r.start < 0 or r.start > r.limit or (d != UNBOUNDED_DIM and r.limit > d):
            raise ShapeInferenceError(f"slice range [{r.start}:{r.limit}] in dimension {i} is out of bounds "
                                      f"for operand {human(s)}")
        dims.append(-(-(r.limit - r.start) // r.stride))
    return array(s.element_type, dims)


def _start_indices(opcode: str, operand: Shape, indices: list[Shape]) -> None:
    """Start indices are one integer scalar per dimension, or (older form) one rank-1 array."""
    if all(i.is_array and i.rank == 0 for i in indices):
        if len(indices) != operand.rank:
            raise ShapeInferenceError(f"{opcode} has {len(indices)} start indices for operand "
                                      f"{human(operand)} of rank {operand.rank}")
    elif not (len(indices) == 1 and indices[0].is_array and indices[0].rank == 1
              and indices[0].dimensions[0] == operand.rank):
        raise ShapeInferenceError(f"{opcode} start indices must be {operand.rank} integer scalars")
    if not all(is_int_type(i.element_type) for i in indices):
        raise ShapeInferenceError(f"{opcode} start indices must be integers")
    types = {i.element_type for i in indices}
    if len(types) > 1:
        raise ShapeInferenceError(f"{opcode} start indices have different element types {sorted(types)}")


@rule("dynamic-slice")
def _dynamic_slice(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1, at_least=True)
    s = expect_array(shapes[0], "dynamic-slice's operand")
    _start_indices(opcode, s, shapes[1:])
    sizes = require(attrs, "dynamic_slice_sizes", opcode)
    if len(sizes) != s.rank:
        raise ShapeInferenceError(f"dynamic-slice has {len(sizes)} slice sizes for operand {human(s)}")
    for i, (n, d) in enumerate(zip(sizes, s.dimensions)):
        if n < 0 or (d != UNBOUNDED_DIM and n > d):
            raise ShapeInferenceError(f"dynamic-slice size {n} in dimension {i} does not fit operand {human(s)}")
    return array(s.element_type, sizes)


@rule("dynamic-update-slice")
def _dynamic_update_slice(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 2, at_least=True)
    s = expect_array(shapes[0], "dynamic-update-slice's operand")
    u = expect_array(shapes[1], "dynamic-update-slice's update")
    _start_indices(opcode, s, shapes[2:])
    if u.rank != s.rank:
        raise ShapeInferenceError(f"dynamic-update-slice update {human(u)} and operand {human(s)} differ in rank")
    if u.element_type != s.element_type:
        raise ShapeInferenceError(f"dynamic-update-slice update {human(u)} and operand {human(s)} differ in type")
    for i, (n, d) in enumerate(zip(u.dimensions, s.dimensions)):
        if d != UNBOUNDED_DIM and n > d:
            raise ShapeInferenceError(f"dynamic-update-slice update {human(u)} is larger than operand "
                                      f"{human(s)} in dimension {i}")
    return like(s)


@rule("pad")
def _pad(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 2)
    s = expect_array(shapes[0], "pad's operand")
    v = expect_array(shapes[1], "pad's padding value")
    if v.rank != 0 or v.element_type != s.element_type:
        raise ShapeInferenceError(f"pad value must be a scalar of the operand's type, got {human(v)}")
    config = require(attrs, "padding", opcode)
    if len(config) != s.rank:
        raise ShapeInferenceError(f"pad has {len(config)} padding dimensions for operand {human(s)}")
    dims = []
    for i, (p, d) in enumerate(zip(config, s.dimensions)):
        if p.interior < 0:
            raise ShapeInferenceError(f"pad interior padding {p.interior} in dimension {i} is negative")
        if d == UNBOUNDED_DIM:
            dims.append(UNBOUNDED_DIM)
            continue
        n = p.low + p.high + d + max(d - 1, 0) * p.interior
        if n < 0:
            raise ShapeInferenceError(f"pad makes dimension {i} of {human(s)} negative")
        dims.append(n)
    return array(s.element_type, dims, s.dynamic_dimensions)


@rule("concatenate")
def _concatenate(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1, at_least=True)
    dims_attr = require(attrs, "dimensions", opcode)
    if len(dims_attr) != 1:
        raise ShapeInferenceError(f"concatenate needs exactly one dimension, got {list(dims_attr)}")
    d = dims_attr[0]
    first = expect_array(shapes[0], "concatenate operand 0")
    expect_dims_in_rank([d], first.rank, "concatenate")
    total = 0
    for i, s in enumerate(shapes):
        expect_array(s, f"concatenate operand {i}")
        if s.rank != first.rank or s.element_type != first.element_type:
            raise ShapeInferenceError(f"concatenate operands {human(first)} and {human(s)} differ in rank or type")
        for j, (a, b) in enumerate(zip(s.dimensions, first.dimensions)):
            if j != d and not dims_equal(a, b):
                raise ShapeInferenceError(f"concatenate operands {human(first)} and {human(s)} differ in "
                                          f"dimension {j}, which is not the concatenated dimension {d}")
        total = UNBOUNDED_DIM if UNBOUNDED_DIM in (total, s.dimensions[d]) else total + s.dimensions[d]
    out = list(first.dimensions)
    out[d] = total
    return array(first.element_type, out)


@rule("gather")
def _gather(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 2)
    operand = expect_array(shapes[0], "gather's operand")
    idx = expect_array(shapes[1], "gather's start indices")
    if not is_int_type(idx.element_type):
        raise ShapeInferenceError(f"gather start indices must be integers, got {human(idx)}")
    offset_dims = require(attrs, "offset_dims", opcode)
    collapsed = require(attrs, "collapsed_slice_dims", opcode)
    start_map = require(attrs, "start_index_map", opcode)
    ivd = require(attrs, "index_vector_dim", opcode)
    slice_sizes = require(attrs, "slice_sizes", opcode)
    op_batching = attrs.get("operand_batching_dims", ())
    idx_batching = attrs.get("start_indices_batching_dims", ())
    if not 0 <= ivd <= idx.rank:
        raise ShapeInferenceError(f"gather index_vector_dim {ivd} is out of range for indices {human(idx)}")
    index_vector_size = idx.dimensions[ivd] if ivd < idx.rank else 1
    if len(start_map) != index_vector_size:
        raise ShapeInferenceError(f"gather start_index_map has {len(start_map)} entries but the index vector "
                                  f"has {index_vector_size}")
    if len(slice_sizes) != operand.rank:
        raise ShapeInferenceError(f"gather slice_sizes has {len(slice_sizes)} entries for operand {human(operand)}")
    expect_dims_in_rank(collapsed, operand.rank, "gather collapsed_slice_dims")
    expect_dims_in_rank(start_map, operand.rank, "gather start_index_map")
    expect_dims_in_rank(op_batching, operand.rank, "gather operand_batching_dims")
    if len(op_batching) != len(idx_batching):
        raise ShapeInferenceError("gather operand_batching_dims and start_indices_batching_dims differ in size")
    for i, (n, d) in enumerate(zip(slice_sizes, operand.dimensions)):
        if n < 0 or (d != UNBOUNDED_DIM and n > d):
            raise ShapeInferenceError(f"gather slice size {n} in dimension {i} does not fit operand {human(operand)}")
    for d in tuple(collapsed) + tuple(op_batching):
        if slice_sizes[d] > 1:
            raise ShapeInferenceError(f"gather collapses or batches dimension {d}, whose slice size is "
                                      f"{slice_sizes[d]}, not 1")
    offset_sizes = [n for i, n in enumerate(slice_sizes) if i not in collapsed and i not in op_batching]
    if len(offset_sizes) != len(offset_dims):
        raise ShapeInferenceError(f"gather offset_dims has {len(offset_dims)} entries but {len(offset_sizes)} "
                                  "slice dimensions are not collapsed")
    batch_sizes = [n for i, n in enumerate(idx.dimensions) if i != ivd]
    rank = len(batch_sizes) + len(offset_dims)
    expect_dims_in_rank(offset_dims, rank, "gather offset_dims")
    if list(offset_dims) != sorted(set(offset_dims)):
        raise ShapeInferenceError(f"gather offset_dims {list(offset_dims)} must be sorted and distinct")
    out, oi, bi = [], 0, 0
    for i in range(rank):
        if i in offset_dims:
            out.append(offset_sizes[oi])
            oi += 1
        else:
            out.append(batch_sizes[bi])
            bi += 1
    return array(operand.element_type, out)


@rule("scatter")
def _scatter(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    if len(shapes) < 3 or len(shapes) % 2 == 0:
        raise ShapeInferenceError(f"scatter expects N operands, the indices and N updates, got {len(shapes)} operands")
    n = len(shapes) // 2
    operands, idx, updates = shapes[:n], shapes[n], shapes[n + 1:]
    expect_array(idx, "scatter's indices")
    if not is_int_type(idx.element_type):
        raise ShapeInferenceError(f"scatter indices must be integers, got {human(idx)}")
    window_dims = require(attrs, "update_window_dims", opcode)
    inserted = require(attrs, "inserted_window_dims", opcode)
    to_operand = require(attrs, "scatter_dims_to_operand_dims", opcode)
    ivd = require(attrs, "index_vector_dim", opcode)
    in_batching = attrs.get("input_batching_dims", ())
    if not 0 <= ivd <= idx.rank:
        raise ShapeInferenceError(f"scatter index_vector_dim {ivd} is out of range for indices {human(idx)}")
    index_vector_size = idx.dimensions[ivd] if ivd < idx.rank else 1
    if len(to_operand) != index_vector_size:
        raise ShapeInferenceError(f"scatter_dims_to_operand_dims has {len(to_operand)} entries but the index "
                                  f"vector has {index_vector_size}")
    scatter_rank = idx.rank - (1 if ivd < idx.rank else 0)
    for i, (o, u) in enumerate(zip(operands, updates)):
        expect_array(o, f"scatter operand {i}")
        expect_array(u, f"scatter update {i}")
        if u.element_type != o.element_type:
            raise ShapeInferenceError(f"scatter update {human(u)} and operand {human(o)} differ in element type")
        if o.dimensions != operands[0].dimensions:
            raise ShapeInferenceError(f"scatter operands {human(operands[0])} and {human(o)} differ in dimensions")
        if u.rank != len(window_dims) + scatter_rank:
            raise ShapeInferenceError(f"scatter update {human(u)} must have rank {len(window_dims) + scatter_rank} "
                                      "(update_window_dims plus the scatter dimensions of the indices)")
        if len(window_dims) + len(inserted) + len(in_batching) != o.rank:
            raise ShapeInferenceError(f"scatter window dims, inserted dims and batching dims must add up to the "
                                      f"operand rank of {human(o)}")
        expect_dims_in_rank(window_dims, u.rank, "scatter update_window_dims")
        expect_dims_in_rank(tuple(inserted) + tuple(to_operand) + tuple(in_batching), o.rank, "scatter")
    result = [like(o) for o in operands]
    return result[0] if n == 1 else Shape.tuple_of(result)

