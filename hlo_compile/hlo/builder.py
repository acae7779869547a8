"""The one builder of new instructions for passes that lower an instruction into others
(library calls, attention, ``rng-bit-generator``...), their result shapes from shape inference.

``HloBuilder(comp, like)`` makes instructions for ``like`` (the instruction being lowered), in
order: each is named ``<like>.<what>`` by a ``NameScope`` (``what`` is the opcode unless a
method is given ``name=``), carries ``like``'s source location (its metadata), and is kept in
``new`` until ``insert()`` puts them all into ``comp`` before ``like`` (or ``before=``), in one
step. A pass that makes a fusion hands ``new`` to ``build_fusion`` instead; a loop body is made
by a ``fork()`` (its own ``new``, the same names and reducers) and becomes a computation.

Every method takes its operands first, then what the result shape needs that the operands
do not say, then attributes. The result shape is computed by shape inference
(``shape_inference.py``) wherever it follows from the operands and attributes, which also
refuses operands that do not fit (``ShapeInferenceError``); a method asks for the rest
explicitly: a constant's type, a convert's element type, a broadcast's, reshape's or iota's
dimensions, a dot's or convolution's accumulation type (``et=``, as XLA's
``preferred_element_type``). Layouts: a tuple, a ``get-tuple-element`` and a ``while`` have
exactly their operands' shapes, layouts included; other results have the default layout
(as shape inference gives them), unless the builder was made with ``keep_layout`` (then an
elementwise result, a convert or a reverse takes the layout of its first operand of the same
dimensions: a pass that computes in the layout of the value it lowers) or a method is given
``layout=`` (minor_to_major, or a ``Layout``).
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from .attributes import Attribute, ConvDimensionNumbers, WindowDim, decode
from .ir import HloComputation, HloInstruction, HloModule
from .layout import Layout
from .rewrite import NameScope, add_computation, insert_instructions, module_of, new_instruction
from .shape import Shape
from .shape_inference import ShapeInferenceError, infer_shape

__all__ = ["HloBuilder", "braces", "window_text", "dim_labels_text"]

LayoutLike = Layout | Sequence[int]

# ops whose result is an operand's shape itself, layout and all (XLA's shape inference keeps it)
_STRUCTURAL = frozenset({"tuple", "get-tuple-element", "while"})
# ops whose result has the dimensions of an operand and, with keep_layout, its layout
_SAME_LAYOUT = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "bitcast-convert",
    "cosine", "divide", "exponential", "exponential-minus-one", "floor", "imag", "is-finite", "log",
    "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "power", "real",
    "remainder", "reverse", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sqrt", "subtract",
    "tan", "tanh", "xor",
})


def braces(values: Sequence[int]) -> str:
    """``{0,1,2}``: a list of integers as attribute text."""
    return "{" + ",".join(str(v) for v in values) + "}"


class HloBuilder:
    """New instructions for ``like``, an instruction of ``comp``, in order (see the module's
    docstring); reduction computations are added to the module before ``comp``."""

    def __init__(self, comp: HloComputation, like: HloInstruction, *, names: NameScope | None = None,
                 before: HloInstruction | None = None, keep_layout: bool = False):
        self.comp, self.like = comp, like
        self.before = before if before is not None else like
        self.keep_layout = keep_layout
        self.names = names if names is not None else NameScope.of_instructions(self.module.computations)
        self.new: list[HloInstruction] = []
        self._reducers: dict[tuple[str, str], HloComputation] = {}

    @property
    def module(self) -> HloModule:
        return module_of(self.comp)

    def fork(self) -> HloBuilder:
        """A builder for another computation (a loop's body or condition) of the same ``like``:
        its own ``new``; names and reduction computations shared."""
        other = copy.copy(self)
        other.new = []
        return other

    def insert(self) -> list[HloInstruction]:
        """Put the instructions made so far into ``comp`` before ``before``; returns them."""
        made, self.new = self.new, []
        insert_instructions(self.comp, made, before=self.before)
        return made

    # ---- the one way an instruction is made ------------------------------------------------

    def instruction(self, opcode: str, operands: Sequence[HloInstruction] = (),
                    attributes: Mapping[str, str | Attribute] | None = None, *, shape: Shape | None = None,
                    et: str | None = None, layout: LayoutLike | None = None, literal: str | None = None,
                    name: str | None = None) -> HloInstruction:
        """``opcode`` of ``operands`` with ``attributes`` (attribute text, or an ``Attribute``
        for a computation): of ``shape`` where given, else of the inferred shape (in element
        type ``et`` where given); in ``layout`` where given. ShapeInferenceError where the
        operands and attributes do not fit."""
        attrs = {k: v if isinstance(v, Attribute) else Attribute(k, v, decode(k, v))
                 for k, v in (attributes or {}).items()}
        if shape is None:
            shape = infer_shape(opcode, [o.shape for o in operands], {k: a.value for k, a in attrs.items()})
            if et is not None:
                shape = shape.with_element_type(et)
            shape = self._laid_out(opcode, shape, operands, attrs)
        if layout is not None:
            shape = shape.with_layout(layout)
        inst = new_instruction(self.names.fresh(f"{self.like.name}.{name or opcode}"), opcode, shape, operands,
                               attrs, like=self.like, literal_text=literal)
        self.new.append(inst)
        return inst

    def _laid_out(self, opcode: str, shape: Shape, operands: Sequence[HloInstruction],
                  attrs: Mapping[str, Attribute]) -> Shape:
        if opcode == "tuple":
            return Shape.tuple_of([o.shape for o in operands])
        if opcode == "get-tuple-element":
            return operands[0].shape.tuple_shapes[attrs["index"].value]
        if opcode in _STRUCTURAL:
            return operands[0].shape
        if self.keep_layout and opcode in _SAME_LAYOUT:
            return self._operand_layout(shape, operands)
        return shape

    def _operand_layout(self, shape: Shape, operands: Sequence[HloInstruction]) -> Shape:
        """``shape`` in the layout of the first operand of its dimensions (if any)."""
        for o in operands:
            if o.shape.is_array and tuple(o.shape.dimensions) == tuple(shape.dimensions) and o.shape.layout is not None:
                return shape.with_layout(o.shape.layout)
        return shape

    # ---- values without operands ------------------------------------------------------------

    def constant(self, et: str, text: str, *, name: str | None = None) -> HloInstruction:
        """A scalar ``et`` constant whose literal is ``text``."""
        return self.instruction("constant", shape=Shape.array(et, ()), literal=text, name=name)

    def iota(self, dims: Sequence[int], axis: int, et: str = "s32", *, name: str | None = None) -> HloInstruction:
        """``et[dims]`` counting along ``axis``."""
        if not 0 <= axis < len(dims):
            raise ShapeInferenceError(f"iota dimension {axis} is out of range for rank {len(dims)}")
        return self.instruction("iota", (), {"iota_dimension": str(axis)}, shape=Shape.array(et, dims), name=name)

    def parameter(self, number: int, shape: Shape, *, name: str | None = None) -> HloInstruction:
        """Parameter ``number`` of a computation being built (a fork's)."""
        inst = new_instruction(self.names.fresh(f"{self.like.name}.{name or 'parameter'}"), "parameter", shape,
                               like=self.like, parameter_number=number)
        self.new.append(inst)
        return inst

    # ---- shapes and layouts -----------------------------------------------------------------

    def broadcast(self, x: HloInstruction, dims: Sequence[int] | Shape, kept: Sequence[int] = (), *,
                  name: str | None = None) -> HloInstruction:
        """``x`` broadcast to ``dims`` (or to a ``Shape``'s dimensions and layout, of ``x``'s
        type), its dimension ``i`` becoming dimension ``kept[i]``."""
        if isinstance(dims, Shape):
            if dims.element_type != x.shape.element_type:
                raise ShapeInferenceError(f"broadcast of {x.shape.element_type} to {dims.to_text(False)}")
            shape = dims
        else:
            shape = Shape.array(x.shape.element_type, dims)
        kept = tuple(kept)
        if len(kept) != x.shape.rank or any(not 0 <= k < shape.rank or shape.dimensions[k] != n
                                            for k, n in zip(kept, x.shape.dimensions)):
            raise ShapeInferenceError(f"broadcast of {x.shape.to_text(False)} to {shape.to_text(False)} "
                                      f"with dimensions {braces(kept)}")
        return self.instruction("broadcast", [x], {"dimensions": braces(kept)}, shape=shape, name=name)

    def reshape(self, x: HloInstruction, dims: Sequence[int], *, name: str | None = None) -> HloInstruction:
        """``x`` with dimensions ``dims`` (``x`` itself when they are its own)."""
        if tuple(x.shape.dimensions) == tuple(dims):
            return x
        shape = Shape.array(x.shape.element_type, dims)
        if shape.element_count() != x.shape.element_count():
            raise ShapeInferenceError(f"reshape of {x.shape.to_text(False)} to {shape.to_text(False)}")
        return self.instruction("reshape", [x], shape=shape, name=name)

    def transpose(self, x: HloInstruction, perm: Sequence[int], *, name: str | None = None) -> HloInstruction:
        return self.instruction("transpose", [x], {"dimensions": braces(perm)}, name=name)

    def relayout(self, x: HloInstruction, shape: Shape, *, name: str | None = None) -> HloInstruction:
        """``x`` (of ``shape``'s dimensions and type) as ``shape`` (a ``copy`` where its layout
        differs; ``x`` itself where it does not)."""
        if x.shape == shape:
            return x
        if x.shape.without_layout() != shape.without_layout():
            raise ShapeInferenceError(f"copy of {x.shape.to_text(False)} as {shape.to_text(False)}")
        return self.instruction("copy", [x], shape=shape, name=name)

    def convert(self, x: HloInstruction, et: str, *, layout: LayoutLike | None = None,
                name: str | None = None) -> HloInstruction:
        """``x`` converted to ``et`` (``x`` itself when it is of ``et`` already)."""
        return self._retyped("convert", x, et, layout, name)

    def bitcast_convert(self, x: HloInstruction, et: str, *, name: str | None = None) -> HloInstruction:
        """``x``'s bits as ``et`` of the same width (``x`` itself when it is of ``et``)."""
        return self._retyped("bitcast-convert", x, et, None, name)

    def _retyped(self, opcode: str, x: HloInstruction, et: str, layout: LayoutLike | None,
                 name: str | None) -> HloInstruction:
        if x.shape.element_type == et:
            return x
        if not x.shape.is_array:
            raise ShapeInferenceError(f"{opcode} of {x.shape.to_text(False)}")
        shape = Shape.array(et, x.shape.dimensions)
        if layout is None and self.keep_layout:
            shape = self._operand_layout(shape, [x])
        return self.instruction(opcode, [x], shape=shape, layout=layout, name=name)

    # ---- elementwise ------------------------------------------------------------------------

    def unary(self, opcode: str, x: HloInstruction, *, name: str | None = None) -> HloInstruction:
        return self.instruction(opcode, [x], name=name)

    def binary(self, opcode: str, x: HloInstruction, y: HloInstruction, *, layout: LayoutLike | None = None,
               name: str | None = None) -> HloInstruction:
        return self.instruction(opcode, [x, y], layout=layout, name=name)

    def compare(self, x: HloInstruction, y: HloInstruction, direction: str, *,
                name: str | None = None) -> HloInstruction:
        return self.instruction("compare", [x, y], {"direction": direction}, name=name)

    def select(self, p: HloInstruction, x: HloInstruction, y: HloInstruction, *,
               name: str | None = None) -> HloInstruction:
        return self.instruction("select", [p, x, y], name=name)

    def clamp(self, lo: HloInstruction, x: HloInstruction, hi: HloInstruction, *,
              name: str | None = None) -> HloInstruction:
        return self.instruction("clamp", [lo, x, hi], name=name)

    # ---- data movement ----------------------------------------------------------------------

    def slice(self, x: HloInstruction, starts: Sequence[int], limits: Sequence[int],
              strides: Sequence[int] | None = None, *, name: str | None = None) -> HloInstruction:
        steps = strides if strides is not None else [1] * len(starts)
        text = "{" + ", ".join(f"[{s}:{n}]" if k == 1 else f"[{s}:{n}:{k}]"
                               for s, n, k in zip(starts, limits, steps)) + "}"
        return self.instruction("slice", [x], {"slice": text}, name=name)

    def concatenate(self, parts: Sequence[HloInstruction], axis: int, *, name: str | None = None) -> HloInstruction:
        return self.instruction("concatenate", parts, {"dimensions": braces([axis])}, name=name)

    def pad(self, x: HloInstruction, value: HloInstruction, config: Sequence[Sequence[int]], *,
            name: str | None = None) -> HloInstruction:
        """``x`` padded with ``value``: ``config`` is (low, high[, interior]) per dimension."""
        text = "x".join("_".join(str(v) for v in c) for c in config)
        return self.instruction("pad", [x, value], {"padding": text}, name=name)

    def dynamic_slice(self, x: HloInstruction, starts: Sequence[HloInstruction], sizes: Sequence[int], *,
                      name: str | None = None) -> HloInstruction:
        return self.instruction("dynamic-slice", [x, *starts], {"dynamic_slice_sizes": braces(sizes)}, name=name)

    def dynamic_update_slice(self, x: HloInstruction, update: HloInstruction, starts: Sequence[HloInstruction],
                             *, name: str | None = None) -> HloInstruction:
        return self.instruction("dynamic-update-slice", [x, update, *starts], name=name)

    def reverse(self, x: HloInstruction, dims: Sequence[int], *, name: str | None = None) -> HloInstruction:
        return self.instruction("reverse", [x], {"dimensions": braces(dims)}, name=name)

    # ---- tuples and loops -------------------------------------------------------------------

    def tuple_of(self, values: Sequence[HloInstruction], *, name: str | None = None) -> HloInstruction:
        return self.instruction("tuple", values, name=name)

    def get_tuple_element(self, t: HloInstruction, index: int, *, name: str | None = None) -> HloInstruction:
        return self.instruction("get-tuple-element", [t], {"index": str(index)}, name=name)

    def while_loop(self, init: HloInstruction, condition: HloComputation, body: HloComputation, *,
                   name: str | None = None) -> HloInstruction:
        return self.instruction("while", [init], {"condition": Attribute("condition", f"%{condition.name}", condition),
                                                  "body": Attribute("body", f"%{body.name}", body)}, name=name)

    # ---- contractions and reductions --------------------------------------------------------

    def dot(self, lhs: HloInstruction, rhs: HloInstruction, lhs_contracting: Sequence[int],
            rhs_contracting: Sequence[int], lhs_batch: Sequence[int] = (), rhs_batch: Sequence[int] = (), *,
            et: str | None = None, layout: LayoutLike | None = None, name: str | None = None) -> HloInstruction:
        """``dot`` (batch dimension lists written where not empty), accumulating in ``et``
        (default: what shape inference says of the operand types)."""
        attrs: dict[str, str] = {}
        if lhs_batch or rhs_batch:
            attrs["lhs_batch_dims"], attrs["rhs_batch_dims"] = braces(lhs_batch), braces(rhs_batch)
        attrs["lhs_contracting_dims"] = braces(lhs_contracting)
        attrs["rhs_contracting_dims"] = braces(rhs_contracting)
        return self.instruction("dot", [lhs, rhs], attrs, et=et, layout=layout, name=name)

    def convolution(self, lhs: HloInstruction, rhs: HloInstruction, window: Sequence[WindowDim],
                    dnums: ConvDimensionNumbers, feature_groups: int = 1, batch_groups: int = 1, *,
                    et: str | None = None, layout: LayoutLike | None = None,
                    name: str | None = None) -> HloInstruction:
        attrs = {"window": window_text(window)} if window else {}
        attrs["dim_labels"] = dim_labels_text(dnums)
        if feature_groups != 1:
            attrs["feature_group_count"] = str(feature_groups)
        if batch_groups != 1:
            attrs["batch_group_count"] = str(batch_groups)
        return self.instruction("convolution", [lhs, rhs], attrs, et=et, layout=layout, name=name)

    def reduce(self, x: HloInstruction, init: HloInstruction, axes: Sequence[int], kind: str | HloComputation, *,
               name: str | None = None) -> HloInstruction:
        """``x`` reduced over ``axes`` from ``init`` by the ``kind`` reducer (``add``,
        ``maximum``... of ``init``'s type: ``reducer``) or by a computation."""
        comp = kind if isinstance(kind, HloComputation) else self.reducer(kind, init.shape.element_type)
        return self.instruction("reduce", [x, init], {"dimensions": braces(axes),
                                                      "to_apply": Attribute("to_apply", f"%{comp.name}", comp)},
                                name=name)

    def reducer(self, kind: str, et: str = "f32", *, name: str | None = None,
                scalar_names: tuple[str, str, str] | None = None) -> HloComputation:
        """The ``(et, et) -> et`` computation applying binary ``kind``, made once per builder
        (and its forks) for each kind and type, added to the module before ``comp``. Named
        ``<like>.<kind>_computation`` (``name``: another base) with fresh instruction names
        ``<like>.<kind>.lhs``, ``.rhs``, ``<like>.<kind>`` (``scalar_names``: these names as they are)."""
        key = (kind, et)
        if key not in self._reducers:
            scalar = Shape.array(et, ())
            base = f"{self.like.name}.{kind}"
            lhs, rhs, root = scalar_names or (self.names.fresh(f"{base}.lhs"), self.names.fresh(f"{base}.rhs"),
                                              self.names.fresh(base))
            x = new_instruction(lhs, "parameter", scalar, parameter_number=0)
            y = new_instruction(rhs, "parameter", scalar, parameter_number=1)
            r = new_instruction(root, kind, infer_shape(kind, [scalar, scalar], {}), [x, y])
            module = self.module
            comp_name = NameScope.of_computations(module).fresh(name or f"{base}_computation")
            comp = HloComputation(comp_name, [x, y, r], r)
            add_computation(module, comp, before=self.comp)
            self._reducers[key] = comp
        return self._reducers[key]


# ---- attribute text ----------------------------------------------------------------------------

def window_text(window: Sequence[WindowDim]) -> str:
    """``{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}``,
    fields at their defaults left out (``size`` always written)."""
    def row(values) -> str:
        return "x".join(str(v) for v in values)
    parts = [f"size={row(w.size for w in window)}"]
    if any(w.stride != 1 for w in window):
        parts.append(f"stride={row(w.stride for w in window)}")
    if any(w.padding_low or w.padding_high for w in window):
        parts.append("pad=" + "x".join(f"{w.padding_low}_{w.padding_high}" for w in window))
    if any(w.base_dilation != 1 for w in window):
        parts.append(f"lhs_dilate={row(w.base_dilation for w in window)}")
    if any(w.window_dilation != 1 for w in window):
        parts.append(f"rhs_dilate={row(w.window_dilation for w in window)}")
    if any(w.window_reversal for w in window):
        parts.append(f"rhs_reversal={row(int(w.window_reversal) for w in window)}")
    return "{" + " ".join(parts) + "}"


def dim_labels_text(dn: ConvDimensionNumbers) -> str:
    """``b01f_01io->b01f`` for ``dn``."""
    def part(rank: int, first: tuple[int, str], second: tuple[int, str], spatial: Sequence[int]) -> str:
        chars = [""] * rank
        chars[first[0]], chars[second[0]] = first[1], second[1]
        for k, d in enumerate(spatial):
            chars[d] = str(k)
        return "".join(chars)
    rank = len(dn.input_spatial_dimensions) + 2
    lhs = part(rank, (dn.input_batch_dimension, "b"), (dn.input_feature_dimension, "f"), dn.input_spatial_dimensions)
    rhs = part(rank, (dn.kernel_input_feature_dimension, "i"), (dn.kernel_output_feature_dimension, "o"),
               dn.kernel_spatial_dimensions)
    out = part(rank, (dn.output_batch_dimension, "b"), (dn.output_feature_dimension, "f"),
               dn.output_spatial_dimensions)
    return f"{lhs}_{rhs}->{out}"
