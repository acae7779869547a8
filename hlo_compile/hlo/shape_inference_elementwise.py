"""Shape rules of elementwise ops and of ops whose result is (part of) an operand's shape:
tuples, tokens, barriers, copies, collectives on one device."""
from __future__ import annotations

from typing import Any

from .element_types import is_float
from .shape import Shape
from .shape_inference_base import (NotInferable, ShapeInferenceError, array, dims_equal, expect_array, expect_count,
                                   expect_scalar, higher_precision, human, is_int_type, kind, like, merge_dim,
                                   real_type_of, require, rule, same_type_ignoring_fp)

# Ops whose result cannot be derived from operands and attributes: the text must declare it.
DECLARED_ONLY = frozenset({
    "parameter", "constant", "iota", "convert", "bitcast", "bitcast-convert", "reshape", "dynamic-reshape",
    "broadcast", "custom-call", "rng", "rng-bit-generator", "rng-get-and-update-state", "infeed", "recv",
    "stochastic-convert", "async-start", "async-update", "async-done", "all-gather", "all-gather-start",
    "reduce-scatter", "all-to-all", "ragged-all-to-all", "fft", "triangular-solve", "cholesky", "scan",
    "ragged-dot", "scaled-dot", "copy-start", "recv-done", "domain", "collective-permute-start",
    "all-reduce-start", "all-reduce-done",  # bare results or (operand, result) tuples, by producer
})


@rule(*DECLARED_ONLY)
def _declared_only(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    raise NotInferable(f"the shape of {opcode} cannot be inferred from its operands; "
                              "the instruction must declare it")


# ---- unary -------------------------------------------------------------------------------

_UNARY_SAME = ("abs", "acos", "acosh", "asin", "asinh", "atanh", "cbrt", "ceil", "cosh", "cosine",
               "count-leading-zeros", "erf", "exponential", "exponential-minus-one", "floor", "log",
               "log-plus-one", "logistic", "negate", "not", "popcnt", "round-nearest-afz",
               "round-nearest-even", "rsqrt", "sign", "sine", "sinh", "sqrt", "tan", "tanh",
               "reduce-precision")

_UNARY_KINDS = {  # opcode -> element kinds it accepts (None: any array type)
    "not": ("pred", "signed", "unsigned"), "popcnt": ("signed", "unsigned"),
    "count-leading-zeros": ("signed", "unsigned"), "reduce-precision": ("float",),
    "round-nearest-afz": ("float",), "round-nearest-even": ("float",),
    "ceil": ("float",), "floor": ("float",),
    # XLA's shape inference: "Expected element type in shape to be floating for cbrt operation"
    # (real floats only; the ops taking complex values too are the others of _UNARY_SAME)
    "cbrt": ("float",), "erf": ("float",),
}


@rule(*_UNARY_SAME)
def _unary(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1)
    s = expect_array(shapes[0], "the operand")
    if opcode == "abs":
        return like(s, real_type_of(s.element_type))
    allowed = _UNARY_KINDS.get(opcode)
    if allowed and kind(s.element_type) not in allowed:
        raise ShapeInferenceError(f"{opcode} does not accept element type {s.element_type}"
                                  + (" (XLA defines it on real floats only)" if kind(s.element_type) == "complex"
                                     else ""))
    return like(s)


@rule("real", "imag")
def _real_imag(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("real/imag", shapes, 1)
    s = expect_array(shapes[0], "the operand")
    return like(s, real_type_of(s.element_type))


@rule("is-finite")
def _is_finite(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("is-finite", shapes, 1)
    s = expect_array(shapes[0], "the operand")
    if kind(s.element_type) != "float":
        raise ShapeInferenceError(f"is-finite expects a floating-point operand, got {human(s)}")
    return like(s, "pred")


# ---- binary ------------------------------------------------------------------------------

def _broadcast_pair(opcode: str, a: Shape, b: Shape) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """Result dims of a binary elementwise op: equal dims, a scalar against an array, or
    (same rank) size-1 dims that stretch."""
    if a.rank == 0:
        return b.dimensions, b.dynamic_dimensions
    if b.rank == 0:
        return a.dimensions, a.dynamic_dimensions
    if a.rank != b.rank:
        raise ShapeInferenceError(f"{opcode} operands have incompatible shapes {human(a)} and {human(b)}")
    dims, dyn = [], []
    for x, y, dx, dy in zip(a.dimensions, b.dimensions, a.dynamic_dimensions, b.dynamic_dimensions):
        if dims_equal(x, y):
            dims.append(merge_dim(x, y))
            dyn.append(dx and dy if x == y else (dx if x != -1 else dy))
        elif x == 1 or y == 1:
            dims.append(y if x == 1 else x)
            dyn.append(dy if x == 1 else dx)
        else:
            raise ShapeInferenceError(f"{opcode} operands have incompatible shapes {human(a)} and {human(b)}")
    return tuple(dims), tuple(dyn)


def _binary_operands(opcode: str, shapes: list[Shape]) -> tuple[Shape, Shape]:
    expect_count(opcode, shapes, 2)
    a = expect_array(shapes[0], f"{opcode} operand 0")
    b = expect_array(shapes[1], f"{opcode} operand 1")
    return a, b


@rule("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2",
      "and", "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical", "mulhi")
def _binary(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    a, b = _binary_operands(opcode, shapes)
    if not same_type_ignoring_fp(a.element_type, b.element_type):
        raise ShapeInferenceError(f"{opcode} operands have different element types: {human(a)} and {human(b)}")
    dims, dyn = _broadcast_pair(opcode, a, b)
    return array(higher_precision(a.element_type, b.element_type), dims, dyn)


@rule("compare")
def _compare(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    a, b = _binary_operands("compare", shapes)
    if not same_type_ignoring_fp(a.element_type, b.element_type):
        raise ShapeInferenceError(f"compare operands have different element types: {human(a)} and {human(b)}")
    dims, dyn = _broadcast_pair("compare", a, b)
    return array("pred", dims, dyn)


@rule("complex")
def _complex(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    a, b = _binary_operands("complex", shapes)
    result = {"f32": "c64", "f64": "c128"}.get(a.element_type)
    if result is None or a.element_type != b.element_type:
        raise ShapeInferenceError(f"complex expects two f32 or two f64 operands, got {human(a)} and {human(b)}")
    dims, dyn = _broadcast_pair("complex", a, b)
    return array(result, dims, dyn)


# ---- ternary -----------------------------------------------------------------------------

@rule("select")
def _select(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("select", shapes, 3)
    pred, on_true, on_false = (expect_array(s, f"select operand {i}") for i, s in enumerate(shapes))
    if pred.element_type != "pred":
        raise ShapeInferenceError(f"select's predicate must be of type pred, got {human(pred)}")
    if on_true.element_type != on_false.element_type or not _same_dims(on_true, on_false):
        raise ShapeInferenceError(f"select's branches have different shapes: {human(on_true)} and {human(on_false)}")
    if pred.rank != 0 and not _same_dims(pred, on_true):
        raise ShapeInferenceError(f"select's predicate {human(pred)} does not match its operands {human(on_true)}")
    return like(on_true)


@rule("clamp")
def _clamp(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("clamp", shapes, 3)
    lo, x, hi = (expect_array(s, f"clamp operand {i}") for i, s in enumerate(shapes))
    for bound in (lo, hi):
        if not same_type_ignoring_fp(bound.element_type, x.element_type):
            raise ShapeInferenceError(f"clamp bound {human(bound)} has another element type than {human(x)}")
        if bound.rank != 0 and not _same_dims(bound, x):
            raise ShapeInferenceError(f"clamp bound {human(bound)} must be a scalar or match {human(x)}")
    return like(x)


def _same_dims(a: Shape, b: Shape) -> bool:
    return a.rank == b.rank and all(dims_equal(x, y) for x, y in zip(a.dimensions, b.dimensions))


# ---- tuples, tokens, pass-through --------------------------------------------------------

@rule("tuple")
def _tuple(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    return Shape.tuple_of([like(s) for s in shapes])


@rule("get-tuple-element")
def _gte(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("get-tuple-element", shapes, 1)
    index = require(attrs, "index", "get-tuple-element")
    t = shapes[0]
    if not t.is_tuple:
        raise ShapeInferenceError(f"get-tuple-element's operand must be a tuple, got {human(t)}")
    if not 0 <= index < len(t.tuple_shapes):
        raise ShapeInferenceError(f"tuple index {index} is out of range for {human(t)}")
    return like(t.tuple_shapes[index])


@rule("after-all")
def _after_all(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    # XLA's verifier does not look at the operands (they only order side effects).
    return Shape.array("token", ())


@rule("add-dependency")
def _add_dependency(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("add-dependency", shapes, 2)
    if not shapes[1].is_token:
        raise ShapeInferenceError(f"add-dependency's second operand must be a token, got {human(shapes[1])}")
    return like(shapes[0])


@rule("copy", "opt-barrier")
def _pass_through(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1)
    return like(shapes[0])


@rule("collective-permute", "collective-broadcast")
def _one_device_collective(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1, at_least=True)
    if len(shapes) == 1 or (opcode == "collective-broadcast" and "has_dynamic_root" in attrs):
        return like(shapes[0])
    # Several operands: a combined collective (a tuple) or the in-place form with output
    # buffers and offsets; the text says which.
    raise NotInferable(f"the shape of {opcode} with {len(shapes)} operands must be declared")


@rule("collective-permute-done", "all-gather-done")
def _async_collective_done(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 1)
    s = shapes[0]
    # The start op yields (operand, result[, context...]) or, in older text, just the result.
    return like(s.tuple_shapes[1] if s.is_tuple and len(s.tuple_shapes) >= 2 else s)


@rule("all-reduce")
def _all_reduce(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    if not shapes:
        raise ShapeInferenceError("all-reduce needs at least one operand")
    for s in shapes:
        expect_array(s, "all-reduce operand")
    if len(shapes) == 1:
        return like(shapes[0])
    return Shape.tuple_of([like(s) for s in shapes])


@rule("copy-done")
def _copy_done(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("copy-done", shapes, 1)
    s = shapes[0]
    if not s.is_tuple or len(s.tuple_shapes) < 2:
        raise ShapeInferenceError(f"copy-done's operand must be the tuple of a copy-start, got {human(s)}")
    return like(s.tuple_shapes[0])


@rule("partition-id", "replica-id")
def _device_id(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count(opcode, shapes, 0)
    return array("u32", ())


@rule("get-dimension-size")
def _get_dimension_size(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("get-dimension-size", shapes, 1)
    s = expect_array(shapes[0], "the operand")
    dims = require(attrs, "dimensions", "get-dimension-size")
    if len(dims) != 1 or not 0 <= dims[0] < s.rank:
        raise ShapeInferenceError(f"get-dimension-size needs one dimension within rank {s.rank}, got {list(dims)}")
    return array("s32", ())


@rule("set-dimension-size")
def _set_dimension_size(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("set-dimension-size", shapes, 2)
    s = expect_array(shapes[0], "the operand")
    expect_scalar(shapes[1], "set-dimension-size's size operand")
    if not is_int_type(shapes[1].element_type):
        raise ShapeInferenceError("set-dimension-size's size operand must be an integer")
    dims = require(attrs, "dimensions", "set-dimension-size")
    if len(dims) != 1 or not 0 <= dims[0] < s.rank:
        raise ShapeInferenceError(f"set-dimension-size needs one dimension within rank {s.rank}, got {list(dims)}")
    dyn = list(s.dynamic_dimensions)
    dyn[dims[0]] = True
    return array(s.element_type, s.dimensions, dyn)


@rule("send")
def _send(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("send", shapes, 2)
    if not shapes[1].is_token:
        raise ShapeInferenceError(f"send's second operand must be a token, got {human(shapes[1])}")
    return Shape.tuple_of([like(shapes[0]), array("u32", ()), Shape.array("token", ())])


@rule("send-done", "outfeed")
def _token_result(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    return Shape.array("token", ())


@rule("batch-norm-inference")
def _bn_inference(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    expect_count("batch-norm-inference", shapes, 5)
    return like(_batch_norm_operand(opcode, shapes, attrs))


@rule("batch-norm-training", "batch-norm-grad")
def _bn_with_statistics(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    """(result, per-feature statistic, per-feature statistic): training returns mean and
    variance, grad returns the gradients of scale and offset."""
    expect_count(opcode, shapes, 3 if opcode == "batch-norm-training" else 5)
    x = _batch_norm_operand(opcode, shapes, attrs)
    stat = array(x.element_type, (x.dimensions[require(attrs, "feature_index", opcode)],))
    return Shape.tuple_of([like(x), stat, stat])


def _batch_norm_operand(opcode: str, shapes: list[Shape], attrs: dict[str, Any]) -> Shape:
    """The operand of a batch-norm op, checked as XLA's shape inference does: floating point,
    ``feature_index`` one of its dimensions, every per-feature operand a vector of that
    dimension's size in the operand's type (the activation-shaped ``grad_output`` of
    ``batch-norm-grad`` the operand's shape)."""
    x = expect_array(shapes[0], "the operand")
    if not is_float(x.element_type):
        raise ShapeInferenceError(f"{opcode} needs a floating-point operand, got {human(x)}")
    fi = require(attrs, "feature_index", opcode)
    if not 0 <= fi < x.rank:
        raise ShapeInferenceError(f"feature_index {fi} is out of range for {human(x)}")
    for i, s in enumerate(shapes[1:], 1):
        want = x.dimensions if (opcode == "batch-norm-grad" and i == 4) else (x.dimensions[fi],)
        if not s.is_array or s.element_type != x.element_type or tuple(s.dimensions) != tuple(want):
            raise ShapeInferenceError(f"{opcode} operand {i} must be {x.element_type}{list(want)}, got {human(s)}")
    return x
