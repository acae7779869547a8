"""The rule table of shape inference and the helpers its rules share.

Each rule is a small function ``(opcode, operand_shapes, attrs) -> Shape`` registered for one or
more opcodes with ``@rule``. Rules raise ``ShapeInferenceError`` with a message in words.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from .element_types import bit_width, element_type, is_complex, is_float
from .shape import UNBOUNDED_DIM, Shape

Rule = Callable[[str, list[Shape], dict[str, Any]], Shape]
RULES: dict[str, Rule] = {}


class ShapeInferenceError(ValueError):
    """The operands and attributes of an instruction do not fit together (or the shape
    cannot be inferred at all)."""


class NotInferable(ShapeInferenceError):
    """The result shape is not determined by the operands and attributes: the instruction
    must declare it. Not a sign of invalid input (the verifier skips the comparison)."""


def rule(*opcodes: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op in opcodes:
            RULES[op] = fn
        return fn
    return register


# ---- helpers -----------------------------------------------------------------------------

def human(shape: Shape) -> str:
    """A shape as XLA's messages print it (no layout)."""
    return shape.to_text(print_layout=False)


def array(element_type: str, dims: Sequence[int], dynamic: Sequence[bool] | None = None) -> Shape:
    """An array shape with the default layout."""
    return Shape.array(element_type, dims, dynamic=dynamic)


def like(shape: Shape, element_type: str | None = None) -> Shape:
    """``shape`` with the default layout (and optionally another element type)."""
    if shape.is_tuple:
        return Shape.tuple_of([like(s) for s in shape.tuple_shapes])
    if not shape.is_array:
        return Shape.array(shape.element_type, shape.dimensions)
    return array(element_type or shape.element_type, shape.dimensions, shape.dynamic_dimensions)


def expect_count(opcode: str, shapes: Sequence[Shape], n: int, at_least: bool = False) -> None:
    if len(shapes) < n or (not at_least and len(shapes) != n):
        want = f"at least {n}" if at_least else str(n)
        raise ShapeInferenceError(f"{opcode} expects {want} operand(s), got {len(shapes)}")


def expect_array(shape: Shape, what: str) -> Shape:
    if not shape.is_array:
        raise ShapeInferenceError(f"{what} must be an array, got {human(shape)}")
    return shape


def expect_scalar(shape: Shape, what: str) -> Shape:
    if not shape.is_array or shape.rank != 0:
        raise ShapeInferenceError(f"{what} must be a scalar, got {human(shape)}")
    return shape


def expect_dims_in_rank(dims: Iterable[int], rank: int, what: str) -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise ShapeInferenceError(f"{what} dimension {d} is out of range for rank {rank}")


def expect_distinct(dims: Sequence[int], what: str) -> None:
    if len(set(dims)) != len(dims):
        raise ShapeInferenceError(f"{what} {{{','.join(map(str, dims))}}} has a repeated dimension")


def require(attrs: dict[str, Any], name: str, opcode: str) -> Any:
    if name not in attrs:
        raise ShapeInferenceError(f"{opcode} needs the attribute {name}=")
    return attrs[name]


def same_type_ignoring_fp(a: str, b: str) -> bool:
    if a == b:
        return True
    return (is_float(a) and is_float(b)) or (is_complex(a) and is_complex(b))


def higher_precision(a: str, b: str) -> str:
    return a if bit_width(a) >= bit_width(b) else b


def dims_equal(a: int, b: int) -> bool:
    """Two dimension sizes agree (an unbounded ``?`` agrees with anything)."""
    return a == b or a == UNBOUNDED_DIM or b == UNBOUNDED_DIM


def merge_dim(a: int, b: int) -> int:
    return b if a == UNBOUNDED_DIM else a


def real_type_of(name: str) -> str:
    return {"c64": "f32", "c128": "f64"}.get(name, name)


def kind(name: str) -> str:
    """The element kind ("float", "signed", ...); "tuple" or "" for non-array names."""
    try:
        return element_type(name).kind
    except KeyError:
        return name if name == "tuple" else ""


def is_int_type(name: str) -> bool:
    return kind(name) in ("signed", "unsigned")


def computation_root(comp: Any, opcode: str, attr: str) -> Shape:
    if comp is None or not hasattr(comp, "root"):
        raise ShapeInferenceError(f"{opcode} needs the computation attribute {attr}=")
    return comp.root.shape


def window_output_dim(size: int, w: Any) -> int:
    """Output size of one window dimension (reduce-window, convolution, select-and-scatter)."""
    if size == UNBOUNDED_DIM:
        return UNBOUNDED_DIM
    if w.size <= 0 or w.stride <= 0 or w.base_dilation <= 0 or w.window_dilation <= 0:
        raise ShapeInferenceError(f"window has a non-positive size, stride or dilation: {w}")
    dilated = (size - 1) * w.base_dilation + 1 if size > 0 else 0
    padded = dilated + w.padding_low + w.padding_high
    window = (w.size - 1) * w.window_dilation + 1
    if padded < window:
        return 0
    return (padded - window) // w.stride + 1
