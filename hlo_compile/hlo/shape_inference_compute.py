"""Shape rules of ops that compute across elements or call computations: reduce,
reduce-window, select-and-scatter, dot, convolution, sort, topk, map, while, conditional,
call and fusion."""
from __future__ import annotations

from typing import Any, Sequence

from .shape import UNBOUNDED_DIM, Shape
from .shape_inference_base import (ShapeInferenceError, array, computation_root, dims_equal, expect_array,
                                   expect_count, expect_dims_in_rank, expect_distinct, higher_precision, human,
                                   kind, like, require, rule, window_output_dim)


def _split_inputs_inits(opcode: str, shapes: list[Shape]) -> tuple[list[Shape], list[Shape]]:
    if not shapes or len(shapes) % 2:
        raise ShapeInferenceError(f"{opcode} expects N inputs followed by N initial values, got {len(shapes)} operands")
    n = len(shapes) // 2
    inputs, inits = shapes[:n], shapes[n:]
    for i, s in enumerate(inputs):
        expect_array(s, f"{opcode} input {i}")
        if s.dimensions != inputs[0].dimensions:
            raise ShapeInferenceError(f"{opcode} inputs {human(inputs[0])} and {human(s)} differ in dimensions")
    for i, s in enumerate(inits):
        if not s.is_array or s.rank != 0:
            raise ShapeInferenceError(f"{opcode} initial value {i} must be a scalar, got {human(s)}")
    return inputs, inits


def _maybe_tuple(shapes: Sequence[Shape]) -> Shape:
    return shapes[0] if len(shapes) == 1 else Shape.tuple_of(list(shapes))


@rule("reduce")
def _reduce(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    inputs, inits = _split_inputs_inits(opcode, shapes)
    dims = require(attrs, "dimensions", opcode)
    x = inputs[0]
    expect_dims_in_rank(dims, x.rank, "reduce")
    expect_distinct(dims, "reduce dimensions")
    kept = [i for i in range(x.rank) if i not in dims]
    out_dims = [x.dimensions[i] for i in kept]
    dyn = [x.dynamic_dimensions[i] for i in kept]
    return _maybe_tuple([array(init.element_type, out_dims, dyn) for init in inits])


@rule("reduce-window")
def _reduce_window(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    inputs, inits = _split_inputs_inits(opcode, shapes)
    x = inputs[0]
    window = attrs.get("window", ())
    if len(window) != x.rank:
        raise ShapeInferenceError(f"reduce-window's window has {len(window)} dimensions but the input "
                                  f"{human(x)} has rank {x.rank}")
    out_dims = [window_output_dim(d, w) for d, w in zip(x.dimensions, window)]
    return _maybe_tuple([array(init.element_type, out_dims) for init in inits])


@rule("select-and-scatter")
def _select_and_scatter(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 3)
    operand = expect_array(shapes[0], "select-and-scatter's operand")
    source = expect_array(shapes[1], "select-and-scatter's source")
    init = shapes[2]
    if not init.is_array or init.rank != 0 or init.element_type != source.element_type:
        raise ShapeInferenceError(f"select-and-scatter's initial value must be a scalar of the source's type, "
                                  f"got {human(init)}")
    window = attrs.get("window", ())
    if len(window) != operand.rank:
        raise ShapeInferenceError(f"select-and-scatter's window has {len(window)} dimensions for operand "
                                  f"{human(operand)}")
    expected = [window_output_dim(d, w) for d, w in zip(operand.dimensions, window)]
    if list(source.dimensions) != expected:
        raise ShapeInferenceError(f"select-and-scatter's source {human(source)} does not match the windowed "
                                  f"operand dimensions {expected}")
    return like(operand)


def _result_type(a: Shape, b: Shape) -> str:
    if a.element_type == b.element_type:
        return a.element_type
    if kind(a.element_type) == "float" or kind(b.element_type) == "float":
        floats = [t for t in (a.element_type, b.element_type) if kind(t) == "float"]
        return floats[0] if len(floats) == 1 else higher_precision(*floats)
    return higher_precision(a.element_type, b.element_type)


@rule("dot")
def _dot(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 2)
    lhs = expect_array(shapes[0], "dot's lhs")
    rhs = expect_array(shapes[1], "dot's rhs")
    lb, rb = attrs.get("lhs_batch_dims", ()), attrs.get("rhs_batch_dims", ())
    lc, rc = attrs.get("lhs_contracting_dims", ()), attrs.get("rhs_contracting_dims", ())
    for dims, s, what in ((lb, lhs, "lhs_batch_dims"), (rb, rhs, "rhs_batch_dims"),
                          (lc, lhs, "lhs_contracting_dims"), (rc, rhs, "rhs_contracting_dims")):
        expect_dims_in_rank(dims, s.rank, f"dot {what}")
        expect_distinct(dims, f"dot {what}")
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise ShapeInferenceError("dot must have as many lhs as rhs batch (and contracting) dimensions")
    if set(lb) & set(lc) or set(rb) & set(rc):
        raise ShapeInferenceError("a dot dimension cannot be both batch and contracting")
    for a, b, what in [(x, y, "batch") for x, y in zip(lb, rb)] + [(x, y, "contracting") for x, y in zip(lc, rc)]:
        if not dims_equal(lhs.dimensions[a], rhs.dimensions[b]):
            raise ShapeInferenceError(f"dot {what} dimensions differ in size: lhs {human(lhs)} dimension {a}, "
                                      f"rhs {human(rhs)} dimension {b}")
    out = [lhs.dimensions[d] for d in lb]
    out += [n for i, n in enumerate(lhs.dimensions) if i not in lb and i not in lc]
    out += [n for i, n in enumerate(rhs.dimensions) if i not in rb and i not in rc]
    return array(_result_type(lhs, rhs), out)


@rule("convolution")
def _convolution(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 2)
    lhs = expect_array(shapes[0], "convolution's input")
    rhs = expect_array(shapes[1], "convolution's kernel")
    dn = require(attrs, "dim_labels", opcode)
    window = attrs.get("window", ())
    fgc = attrs.get("feature_group_count", 1)
    bgc = attrs.get("batch_group_count", 1)
    nsp = len(dn.input_spatial_dimensions)
    if lhs.rank != nsp + 2 or rhs.rank != nsp + 2:
        raise ShapeInferenceError(f"convolution operands {human(lhs)} and {human(rhs)} must have rank {nsp + 2} "
                                  "to match dim_labels")
    if len(window) != nsp:
        raise ShapeInferenceError(f"convolution window has {len(window)} dimensions but there are {nsp} "
                                  "spatial dimensions")
    if fgc <= 0 or bgc <= 0:
        raise ShapeInferenceError("feature_group_count and batch_group_count must be positive")
    batch = lhs.dimensions[dn.input_batch_dimension]
    in_features = lhs.dimensions[dn.input_feature_dimension]
    k_in = rhs.dimensions[dn.kernel_input_feature_dimension]
    k_out = rhs.dimensions[dn.kernel_output_feature_dimension]
    if in_features % fgc or in_features // fgc != k_in:
        raise ShapeInferenceError(f"convolution input features {in_features} divided by feature_group_count {fgc} "
                                  f"must equal the kernel input features {k_in}")
    if k_out % fgc or k_out % bgc:
        raise ShapeInferenceError(f"convolution kernel output features {k_out} must be divisible by the "
                                  "feature and batch group counts")
    if batch % bgc:
        raise ShapeInferenceError(f"convolution batch {batch} is not divisible by batch_group_count {bgc}")
    for i, w in enumerate(window):
        ksize = rhs.dimensions[dn.kernel_spatial_dimensions[i]]
        if w.size != ksize:
            raise ShapeInferenceError(f"convolution window size {w.size} differs from kernel spatial size {ksize} "
                                      f"in spatial dimension {i}")
    out = [0] * (nsp + 2)
    out[dn.output_batch_dimension] = batch // bgc if batch != UNBOUNDED_DIM else batch
    out[dn.output_feature_dimension] = k_out
    for i, w in enumerate(window):
        out[dn.output_spatial_dimensions[i]] = window_output_dim(lhs.dimensions[dn.input_spatial_dimensions[i]], w)
    return array(_result_type(lhs, rhs), out)


@rule("sort")
def _sort(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1, at_least=True)
    first = expect_array(shapes[0], "sort operand 0")
    dims = require(attrs, "dimensions", opcode)
    if len(dims) != 1:
        raise ShapeInferenceError(f"sort needs exactly one dimension, got {list(dims)}")
    expect_dims_in_rank(dims, first.rank, "sort")
    for i, s in enumerate(shapes):
        expect_array(s, f"sort operand {i}")
        if s.dimensions != first.dimensions:
            raise ShapeInferenceError(f"sort operands {human(first)} and {human(s)} differ in dimensions")
    return _maybe_tuple([like(s) for s in shapes])


@rule("topk")
def _topk(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1)
    x = expect_array(shapes[0], "topk's operand")
    k = require(attrs, "k", opcode)
    if x.rank == 0:
        raise ShapeInferenceError("topk's operand must have rank at least 1")
    if not 0 <= k <= x.dimensions[-1] and x.dimensions[-1] != UNBOUNDED_DIM:
        raise ShapeInferenceError(f"topk k={k} exceeds the last dimension of {human(x)}")
    dims = list(x.dimensions[:-1]) + [k]
    return Shape.tuple_of([array(x.element_type, dims), array("s32", dims)])


@rule("map")
def _map(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1, at_least=True)
    first = expect_array(shapes[0], "map operand 0")
    for i, s in enumerate(shapes):
        expect_array(s, f"map operand {i}")
        if s.dimensions != first.dimensions:
            raise ShapeInferenceError(f"map operands {human(first)} and {human(s)} differ in dimensions")
    root = computation_root(attrs.get("to_apply"), opcode, "to_apply")
    if not root.is_array or root.rank != 0:
        raise ShapeInferenceError(f"map's computation must return a scalar, got {human(root)}")
    return array(root.element_type, first.dimensions, first.dynamic_dimensions)


@rule("while")
def _while(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1)
    return like(shapes[0])


@rule("conditional")
def _conditional(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1, at_least=True)
    branches = attrs.get("branch_computations") or (attrs.get("true_computation"),)
    return like(computation_root(branches[0], opcode, "branch_computations"))


@rule("call")
def _call(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    return like(computation_root(attrs.get("to_apply"), opcode, "to_apply"))


@rule("fusion")
def _fusion(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    return like(computation_root(attrs.get("calls"), opcode, "calls"))
