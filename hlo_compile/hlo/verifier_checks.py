"""Opcode-specific verifier rules that shape inference cannot express: ops with a declared
result shape (reshape, broadcast, convert, iota...) and the signatures of called
computations (reducers, comparators, loop bodies, branches, fused computations).

Each rule is ``check(inst) -> None`` registered in ``CHECKS``; it raises ``VerifyProblem``
(a message without the instruction's name, which the verifier adds).
"""
from __future__ import annotations

from typing import Callable, Sequence

from .element_types import bit_width
from .ir import HloComputation, HloInstruction
from .shape import UNBOUNDED_DIM, Shape
from .shape_inference_base import kind

CHECKS: dict[str, Callable[[HloInstruction], None]] = {}

# opcode -> (minimum operand count, message or "" for the generic one)
MIN_OPERANDS: dict[str, tuple[int, str]] = {
    "conditional": (1, "conditional expects at least one operand (the branch index)"),
    "dynamic-reshape": (1, "DynamicReshape requires at least one operand."),
    "async-update": (1, "No operand found for AsyncUpdate and AsyncDone"),
    "reduce": (2, ""), "reduce-window": (2, ""), "sort": (1, ""), "concatenate": (1, ""), "map": (1, ""),
    "dynamic-slice": (2, ""), "dynamic-update-slice": (3, ""), "scatter": (3, ""), "all-reduce": (1, ""),
    "all-gather": (1, ""), "reduce-scatter": (1, ""), "all-to-all": (1, ""), "convolution": (2, ""),
}


class VerifyProblem(Exception):
    """One verification failure, in words."""


def check(*opcodes: str) -> Callable[[Callable[[HloInstruction], None]], Callable[[HloInstruction], None]]:
    def register(fn: Callable[[HloInstruction], None]) -> Callable[[HloInstruction], None]:
        for op in opcodes:
            CHECKS[op] = fn
        return fn
    return register


def text(shape: Shape) -> str:
    return shape.to_text(print_layout=False)


def compatible(a: Shape, b: Shape) -> bool:
    """Equal ignoring layouts and dynamic-dimension flags; an unbounded ``?`` matches any size."""
    if a.is_tuple or b.is_tuple:
        return (a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(compatible(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes)))
    if a.element_type != b.element_type or a.rank != b.rank:
        return False
    return all(x == y or UNBOUNDED_DIM in (x, y) for x, y in zip(a.dimensions, b.dimensions))


def _elements(shape: Shape) -> int | None:
    """Element count using dynamic bounds; None when a dimension is unbounded."""
    if UNBOUNDED_DIM in shape.dimensions:
        return None
    return shape.element_count()


def _is_scalar(shape: Shape) -> bool:
    return shape.is_array and shape.rank == 0


# ---- declared-shape ops ------------------------------------------------------------------

@check("reshape")
def _reshape(inst: HloInstruction) -> None:
    src, dst = inst.operands[0].shape, inst.shape
    _expect_array_of_type(inst, src.element_type)
    _expect_same_element_count(src, dst, "reshape ")


@check("dynamic-reshape")
def _dynamic_reshape(inst: HloInstruction) -> None:
    src, dst = inst.operands[0].shape, inst.shape
    sizes = inst.operands[1:]
    if len(sizes) != dst.rank:
        raise VerifyProblem(f"expects one dim size operand per result dimension; got {len(sizes)} for "
                            f"{dst.rank} result dimensions")
    for s in sizes:
        if not _is_scalar(s.shape) or kind(s.shape.element_type) not in ("signed", "unsigned"):
            raise VerifyProblem(f"dim size operand {s.name} must be an integer scalar, got {text(s.shape)}")
    _expect_same_element_count(src, dst)


def _expect_same_element_count(src, dst, prefix: str = "") -> None:
    """XLA's message for a reshape whose result and operand hold different element counts."""
    a, b = _elements(dst), _elements(src)
    if a is not None and b is not None and a != b:
        raise VerifyProblem(f"{prefix}expects the same number of elements in result shape {text(dst)} and "
                            f"operand shape {text(src)}")


@check("broadcast")
def _broadcast(inst: HloInstruction) -> None:
    src, dst = inst.operands[0].shape, inst.shape
    _expect_array_of_type(inst, src.element_type)
    dims = inst.attr("dimensions", ())
    if len(dims) != src.rank:
        raise VerifyProblem(f"broadcast dimensions {{{','.join(map(str, dims))}}} must name one result dimension "
                            f"per operand dimension of {text(src)} (add a dimensions= attribute)")
    for i, d in enumerate(dims):
        if not 0 <= d < dst.rank:
            raise VerifyProblem(f"broadcast dimension {d} is out of range for result {text(dst)}")
        if src.dimensions[i] != dst.dimensions[d] and UNBOUNDED_DIM not in (src.dimensions[i], dst.dimensions[d]):
            raise VerifyProblem(f"broadcast maps operand dimension {i} of {text(src)} to result dimension {d} "
                                f"of {text(dst)}, which has another size")


@check("convert")
def _convert(inst: HloInstruction) -> None:
    src, dst = inst.operands[0].shape, inst.shape
    if not (src.is_array and dst.is_array) or not _same_dims(src, dst):
        raise VerifyProblem(f"convert from {text(src)} to {text(dst)} must keep the dimensions")
    if kind(src.element_type) == "complex" and kind(dst.element_type) != "complex":
        raise VerifyProblem(f"conversion from complex to real type {text(src)} => {dst.element_type} is not "
                            "implemented in XLA (its shape inference refuses it); use real or imag")


@check("compare")
def _compare(inst: HloInstruction) -> None:
    et = inst.operands[0].shape.element_type if inst.operands else ""
    if kind(et) == "complex" and inst.attr("type", None) not in (None, "FLOAT"):
        raise VerifyProblem(f"compare of {et} values has type {inst.attr('type')}: XLA expects comparison type "
                            "FLOAT on complex values")


@check("bitcast-convert")
def _bitcast_convert(inst: HloInstruction) -> None:
    src, dst = inst.operands[0].shape, inst.shape
    if not (src.is_array and dst.is_array):
        raise VerifyProblem(f"bitcast-convert needs arrays, got {text(src)} to {text(dst)}")
    a, b = bit_width(src.element_type), bit_width(dst.element_type)
    if a == b:
        expected = list(src.dimensions)
    elif a > b and a % b == 0:
        expected = list(src.dimensions) + [a // b]
    elif a < b and b % a == 0 and src.rank and src.dimensions[-1] == b // a:
        expected = list(src.dimensions[:-1])
    else:
        raise VerifyProblem(f"bitcast-convert from {text(src)} to {text(dst)}: the bit widths do not fit")
    if not _same_dims(dst, Shape.array(dst.element_type, expected)):
        raise VerifyProblem(f"bitcast-convert from {text(src)} must give dimensions {expected}, got {text(dst)}")


@check("iota")
def _iota(inst: HloInstruction) -> None:
    s = inst.shape
    d = inst.attr("iota_dimension", None)
    if not s.is_array:
        raise VerifyProblem(f"iota must produce an array, got {text(s)}")
    if d is not None and not 0 <= d < max(s.rank, 1):
        raise VerifyProblem(f"iota_dimension {d} is out of range for {text(s)}")


@check("infeed")
def _infeed(inst: HloInstruction) -> None:
    s = inst.shape
    if not s.is_tuple or len(s.tuple_shapes) != 2 or not s.tuple_shapes[1].is_token:
        raise VerifyProblem(f"infeed must have a non-empty tuple shape (data, token[]), got {text(s)}")


@check("recv")
def _recv(inst: HloInstruction) -> None:
    s = inst.shape
    if not s.is_tuple or len(s.tuple_shapes) != 3 or not s.tuple_shapes[2].is_token:
        raise VerifyProblem(f"recv must have the shape (data, u32[], token[]), got {text(s)}")


@check("rng-bit-generator")
def _rng_bit_generator(inst: HloInstruction) -> None:
    s, state = inst.shape, inst.operands[0].shape
    if not s.is_tuple or len(s.tuple_shapes) != 2 or not compatible(s.tuple_shapes[0], state):
        raise VerifyProblem(f"rng-bit-generator must return (state {text(state)}, values), got {text(s)}")


@check("all-gather", "all-gather-start", "reduce-scatter")
def _gather_scatter_dimension(inst: HloInstruction) -> None:
    dims = inst.attr("dimensions", ())
    if len(dims) != 1:
        raise VerifyProblem(f"{inst.opcode} needs exactly one dimension in dimensions=, got {list(dims)}")
    rank = inst.operands[0].shape.rank if inst.operands[0].shape.is_array else None
    if rank is not None and not 0 <= dims[0] < rank:
        raise VerifyProblem(f"{inst.opcode} dimension {dims[0]} is out of range for rank {rank}")
    if inst.opcode == "reduce-scatter":
        _reducer(inst, inst.attr("to_apply"), len(inst.operands))


def _expect_array_of_type(inst: HloInstruction, element_type: str) -> None:
    if not inst.shape.is_array or inst.shape.element_type != element_type:
        raise VerifyProblem(f"result {text(inst.shape)} must be an array of the operand's element type "
                            f"{element_type}")


def _same_dims(a: Shape, b: Shape) -> bool:
    return a.rank == b.rank and all(x == y or UNBOUNDED_DIM in (x, y) for x, y in zip(a.dimensions, b.dimensions))


# ---- called computations -----------------------------------------------------------------

def _params(comp: HloComputation) -> list[Shape]:
    return [p.shape for p in comp.parameters]


def _expect_params(comp: HloComputation, expected: Sequence[Shape], role: str) -> None:
    got = _params(comp)
    if len(got) != len(expected):
        raise VerifyProblem(f"{role} {comp.name} takes {len(got)} parameter(s) but is given {len(expected)}")
    for i, (g, e) in enumerate(zip(got, expected)):
        if not compatible(g, e):
            raise VerifyProblem(f"{role} {comp.name} parameter {i} has shape {text(g)} but is given {text(e)}")


def _reducer(inst: HloInstruction, comp: HloComputation | None, n: int, count_only: bool = False) -> None:
    """A reducer takes 2n scalars and returns n scalars (a tuple if n > 1)."""
    if comp is None:
        return
    params = _params(comp)
    if len(params) != 2 * n:
        raise VerifyProblem(f"reduction computation {comp.name} must take {2 * n} parameters, "
                            f"takes {len(params)}")
    for i, p in enumerate(params):
        if not _is_scalar(p):
            raise VerifyProblem(f"reduction computation {comp.name} parameter {i} must be a scalar, got {text(p)}")
    root = comp.root.shape
    outs = list(root.tuple_shapes) if root.is_tuple else [root]
    if len(outs) != n or not all(_is_scalar(o) for o in outs):
        raise VerifyProblem(f"reduction computation {comp.name} must return {n} scalar(s), returns {text(root)}")
    if count_only:
        return
    for i, o in enumerate(outs):
        if params[i].element_type != o.element_type or params[n + i].element_type != o.element_type:
            raise VerifyProblem(f"reduction computation {comp.name}: accumulator {i} has type {o.element_type} "
                                f"but its parameters are {text(params[i])} and {text(params[n + i])}")


@check("reduce", "reduce-window")
def _reduce(inst: HloInstruction) -> None:
    n = len(inst.operands) // 2
    _reducer(inst, inst.attr("to_apply", None), n)
    for i in range(n):
        init, acc = inst.operands[n + i].shape, inst.shape
        acc = acc.tuple_shapes[i] if acc.is_tuple else acc
        if init.element_type != acc.element_type:
            raise VerifyProblem(f"initial value {i} {text(init)} and result {text(acc)} differ in element type")


@check("all-reduce", "all-reduce-start")
def _all_reduce(inst: HloInstruction) -> None:
    _reducer(inst, inst.attr("to_apply", None), 1, count_only=True)


@check("scatter")
def _scatter(inst: HloInstruction) -> None:
    _reducer(inst, inst.attr("to_apply", None), len(inst.operands) // 2, count_only=True)


@check("select-and-scatter")
def _select_and_scatter(inst: HloInstruction) -> None:
    elem = Shape.array(inst.operands[0].shape.element_type, ())
    select = inst.attr("select", None)
    if select is not None:
        _expect_params(select, [elem, elem], "select computation")
        if not compatible(select.root.shape, Shape.array("pred", ())):
            raise VerifyProblem(f"select computation {select.name} must return pred[], returns "
                                f"{text(select.root.shape)}")
    _reducer(inst, inst.attr("scatter", None), 1, count_only=True)


@check("sort")
def _sort(inst: HloInstruction) -> None:
    comp = inst.attr("to_apply", None)
    if comp is None:
        return
    expected = []
    for o in inst.operands:
        s = Shape.array(o.shape.element_type, ())
        expected += [s, s]
    _expect_params(comp, expected, "sort comparator")
    if not compatible(comp.root.shape, Shape.array("pred", ())):
        raise VerifyProblem(f"sort comparator {comp.name} must return pred[], returns {text(comp.root.shape)}")


@check("map")
def _map(inst: HloInstruction) -> None:
    comp = inst.attr("to_apply", None)
    if comp is not None:
        _expect_params(comp, [Shape.array(o.shape.element_type, ()) for o in inst.operands], "map computation")


@check("call")
def _call(inst: HloInstruction) -> None:
    comp = inst.attr("to_apply", None)
    if comp is not None:
        _expect_params(comp, [o.shape for o in inst.operands], "called computation")


@check("fusion")
def _fusion(inst: HloInstruction) -> None:
    comp = inst.attr("calls", None)
    if comp is not None:
        _expect_params(comp, [o.shape for o in inst.operands], "fused computation")


@check("while")
def _while(inst: HloInstruction) -> None:
    state = inst.operands[0].shape
    body, cond = inst.attr("body", None), inst.attr("condition", None)
    if body is not None:
        _expect_params(body, [state], "while body")
        if not compatible(body.root.shape, state):
            raise VerifyProblem(f"while body {body.name} returns {text(body.root.shape)} but the loop state is "
                                f"{text(state)}")
    if cond is not None:
        _expect_params(cond, [state], "while condition")
        if not compatible(cond.root.shape, Shape.array("pred", ())):
            raise VerifyProblem(f"while condition {cond.name} must return pred[], returns {text(cond.root.shape)}")


@check("conditional")
def _conditional(inst: HloInstruction) -> None:
    index = inst.operands[0].shape
    if not (_is_scalar(index) and index.element_type in ("pred", "s32")):
        raise VerifyProblem(f"The first operand must be a scalar of PRED or S32, got {text(index)}")
    branches = inst.attr("branch_computations", None)
    if branches is None:
        branches = tuple(c for c in (inst.attr("true_computation", None), inst.attr("false_computation", None)) if c)
        if index.element_type != "pred" or len(branches) != 2:
            raise VerifyProblem("a conditional with a pred index needs true_computation and false_computation")
    elif index.element_type == "pred":
        raise VerifyProblem("a conditional with a pred index takes true_computation and false_computation, "
                            "not branch_computations")
    if len(inst.operands) != len(branches) + 1:
        raise VerifyProblem(f"conditional has {len(branches)} branches but {len(inst.operands) - 1} branch operands")
    for comp, operand in zip(branches, inst.operands[1:]):
        _expect_params(comp, [operand.shape], "branch computation")
        if not compatible(comp.root.shape, inst.shape):
            raise VerifyProblem(f"branch computation {comp.name} returns {text(comp.root.shape)} but the "
                                f"conditional's shape is {text(inst.shape)}")
