"""The HLO IR: modules, computations and instructions.

Instructions keep every attribute (decoded value plus verbatim text) so that printing
reproduces what was parsed; analyses read typed values through ``HloInstruction.attr``
and the named properties below. Copies are made here (``clone_instruction``,
``clone_computation``, ``clone_module``); edits in place are in ``rewrite.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from .attributes import (Attribute, ConvDimensionNumbers, DotDimensionNumbers, GatherDimensionNumbers,
                         ScatterDimensionNumbers)
from .errors import SourceLocation
from .literal import parse_literal, scalar_value
from .printer import module_to_text
from .shape import Shape

_MISSING = object()


class HloInstruction:
    __slots__ = ("name", "opcode", "shape", "operands", "attributes", "literal_text", "parameter_number",
                 "location", "parent", "users", "_literal", "declared_operand_shapes")

    def __init__(self, name: str, opcode: str, shape: Shape, operands: Sequence["HloInstruction"] = (),
                 attributes: dict[str, Attribute] | None = None, *, literal_text: str | None = None,
                 parameter_number: int | None = None, location: SourceLocation | None = None):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands: list[HloInstruction] = list(operands)
        self.attributes: dict[str, Attribute] = dict(attributes or {})
        self.literal_text = literal_text  # constant: the literal exactly as written
        self.parameter_number = parameter_number
        self.location = location
        self.parent: HloComputation | None = None
        self.users: list[HloInstruction] = []
        self._literal: Any = None
        self.declared_operand_shapes: list[Shape | None] = []

    # ---- attributes ---------------------------------------------------------------
    def has_attr(self, name: str) -> bool:
        return name in self.attributes

    def attr(self, name: str, default: Any = _MISSING) -> Any:
        """The decoded value of attribute ``name`` (``default`` if absent; KeyError if no default)."""
        a = self.attributes.get(name)
        if a is None:
            if default is _MISSING:
                raise KeyError(f"{self.opcode} '{self.name}' has no attribute '{name}'")
            return default
        return a.value

    def set_attr(self, name: str, raw: str, value: Any) -> None:
        self.attributes[name] = Attribute(name, raw, value)

    @property
    def dimensions(self) -> tuple[int, ...]:
        return self.attr("dimensions", ())

    @property
    def to_apply(self) -> "HloComputation":
        return self.attr("to_apply")

    @property
    def fused_computation(self) -> "HloComputation":
        return self.attr("calls")

    @property
    def tuple_index(self) -> int:
        return self.attr("index")

    @property
    def comparison_direction(self) -> str:
        return self.attr("direction")

    @property
    def comparison_type(self) -> str | None:
        return self.attr("type", None)

    @property
    def dot_dimension_numbers(self) -> DotDimensionNumbers:
        return DotDimensionNumbers(self.attr("lhs_batch_dims", ()), self.attr("rhs_batch_dims", ()),
                                   self.attr("lhs_contracting_dims", ()), self.attr("rhs_contracting_dims", ()))

    @property
    def gather_dimension_numbers(self) -> GatherDimensionNumbers:
        return GatherDimensionNumbers(self.attr("offset_dims"), self.attr("collapsed_slice_dims"),
                                      self.attr("start_index_map"), self.attr("index_vector_dim"),
                                      self.attr("operand_batching_dims", ()),
                                      self.attr("start_indices_batching_dims", ()))

    @property
    def scatter_dimension_numbers(self) -> ScatterDimensionNumbers:
        return ScatterDimensionNumbers(self.attr("update_window_dims"), self.attr("inserted_window_dims"),
                                       self.attr("scatter_dims_to_operand_dims"), self.attr("index_vector_dim"),
                                       self.attr("input_batching_dims", ()),
                                       self.attr("scatter_indices_batching_dims", ()))

    @property
    def convolution_dimension_numbers(self) -> ConvDimensionNumbers:
        return self.attr("dim_labels")

    @property
    def literal(self) -> Any:
        """A constant's value: a numpy array (logical order) or a tuple of them."""
        if self._literal is None:
            self._literal = parse_literal(self.literal_text or "", self.shape)
        return self._literal

    def plain_scalar(self) -> bool | int | float | None:
        """A constant's one element as a Python number, read from its text without numpy,
        when its element type is plain (``literal.PLAIN_TYPES``: the value ``literal``'s
        array holds, f32 exactly); None otherwise (``literal`` then has it)."""
        if self.literal_text is None:
            return None
        return scalar_value(self.literal_text, self.shape)

    def called_computations(self) -> list["HloComputation"]:
        out: list[HloComputation] = []
        for a in self.attributes.values():
            v = a.value
            if isinstance(v, HloComputation):
                out.append(v)
            elif isinstance(v, tuple) and v and all(isinstance(c, HloComputation) for c in v):
                out.extend(v)
        return out

    @property
    def is_root(self) -> bool:
        return self.parent is not None and self.parent.root is self

    def operand(self, i: int) -> "HloInstruction":
        return self.operands[i]

    def __repr__(self) -> str:
        return f"<HloInstruction {self.name} = {self.shape} {self.opcode}>"


class HloComputation:
    def __init__(self, name: str, instructions: Sequence[HloInstruction], root: HloInstruction,
                 *, is_entry: bool = False, has_signature: bool = True,
                 attributes: dict[str, Attribute] | None = None, location: SourceLocation | None = None):
        self.name = name
        self.instructions: list[HloInstruction] = list(instructions)
        self.root = root
        self.is_entry = is_entry
        self.has_signature = has_signature
        self.attributes: dict[str, Attribute] = dict(attributes or {})
        self.location = location
        self.parent: HloModule | None = None
        for inst in self.instructions:
            inst.parent = self
        self.rebuild_users()

    def rebuild_users(self) -> None:
        """Each instruction's ``users``: the instructions reading it, once each, in order.
        Linear in the computation's size (a value read by thousands costs no more per use)."""
        for inst in self.instructions:
            inst.users = []
        for inst in self.instructions:
            ops = inst.operands
            if len(ops) == 1:
                ops[0].users.append(inst)
                continue
            seen: set[int] = set()
            for op in ops:
                if id(op) not in seen:
                    seen.add(id(op))
                    op.users.append(inst)

    @property
    def parameters(self) -> list[HloInstruction]:
        """Parameters ordered by parameter number."""
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: i.parameter_number)

    def parameter(self, n: int) -> HloInstruction:
        for i in self.instructions:
            if i.opcode == "parameter" and i.parameter_number == n:
                return i
        raise IndexError(f"computation {self.name} has no parameter({n})")

    @property
    def result_shape(self) -> Shape:
        return self.root.shape

    def instruction(self, name: str) -> HloInstruction:
        for i in self.instructions:
            if i.name == name:
                return i
        raise KeyError(f"computation {self.name} has no instruction '{name}'")

    def post_order(self) -> list[HloInstruction]:
        """Instructions with every operand before its users (the text order already is one)."""
        return list(self.instructions)

    def __iter__(self) -> Iterator[HloInstruction]:
        return iter(self.instructions)

    def __repr__(self) -> str:
        return f"<HloComputation {self.name}: {len(self.instructions)} instructions>"


@dataclass
class HloModule:
    name: str
    computations: list[HloComputation]
    entry: HloComputation
    attributes: dict[str, Attribute] = field(default_factory=dict)
    stack_frames: str = ""  # the FileNames/FunctionNames/FileLocations/StackFrames tables, verbatim
    has_header: bool = True

    def __post_init__(self) -> None:
        for c in self.computations:
            c.parent = self

    def computation(self, name: str) -> HloComputation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(f"module {self.name} has no computation '{name}'")

    def to_text(self, form: str = "long") -> str:
        """The module as HLO text; ``form`` is ``"long"`` (XLA's default print with operand
        shapes) or ``"short"`` (ShortParsable: no %, operand shapes, signatures, metadata)."""
        return module_to_text(self, form)

    def __str__(self) -> str:
        return self.to_text()


def clone_instruction(inst: HloInstruction, operands: Sequence[HloInstruction], *,
                      name: str | None = None) -> HloInstruction:
    """A copy of ``inst`` reading ``operands``, named ``name`` (default: ``inst``'s name).
    Attributes, literal, location and declared operand shapes are shared or copied as they
    are (attribute values naming other instructions are not remapped); no parent or users yet."""
    c = HloInstruction(inst.name if name is None else name, inst.opcode, inst.shape, operands, inst.attributes,
                       literal_text=inst.literal_text, parameter_number=inst.parameter_number,
                       location=inst.location)
    c._literal = inst._literal
    c.declared_operand_shapes = list(inst.declared_operand_shapes)
    return c


def clone_computation(comp: HloComputation, name: str | None = None,
                      instruction_map: dict[int, HloInstruction] | None = None) -> HloComputation:
    """A copy of ``comp`` (named ``name``, default ``comp``'s) whose instructions are clones;
    attribute values that name instructions of ``comp`` (control predecessors) name the clones.
    Called computations stay shared. ``instruction_map``, when given, receives
    ``id(original) -> clone`` for every instruction."""
    inst_map = {} if instruction_map is None else instruction_map
    insts = []
    for i in comp.instructions:
        inst_map[id(i)] = clone_instruction(i, [inst_map[id(o)] for o in i.operands])
        insts.append(inst_map[id(i)])
    for c in insts:
        remap_attributes(c, lambda v: inst_map.get(id(v), v), HloInstruction)
    return HloComputation(comp.name if name is None else name, insts, inst_map[id(comp.root)],
                          is_entry=comp.is_entry, has_signature=comp.has_signature, attributes=comp.attributes,
                          location=comp.location)


def clone_module(module: HloModule) -> HloModule:
    """A copy of ``module`` that rewrites may change freely (shapes, literals and attribute
    values other than computations and instructions are immutable and shared). Iterative, so
    very long instruction chains do not hit Python's recursion limit as ``copy.deepcopy`` does."""
    comp_map: dict[int, HloComputation] = {id(c): clone_computation(c) for c in module.computations}
    for comp in comp_map.values():
        for inst in comp.instructions:
            remap_attributes(inst, lambda v: comp_map.get(id(v), v), HloComputation)
    return HloModule(module.name, list(comp_map.values()), comp_map[id(module.entry)], dict(module.attributes),
                     module.stack_frames, module.has_header)


def remap_attributes(inst: HloInstruction, remap: Any, kind: type) -> None:
    """Replace the attributes of ``inst`` whose value is a ``kind`` object (or a non-empty
    list/tuple of them) by ones holding ``remap`` of each; the others stay shared."""
    def new_value(v: Any) -> Any:
        if isinstance(v, kind):
            return remap(v)
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, kind) for x in v):
            return type(v)(remap(x) for x in v)
        return v
    changed = {}
    for k, a in inst.attributes.items():
        v = new_value(a.value)
        if v is not a.value:
            changed[k] = replace(a, value=v)
    if changed:
        inst.attributes = {k: changed.get(k, a) for k, a in inst.attributes.items()}


def called_closure(inst: HloInstruction) -> list[HloComputation]:
    """The computations ``inst`` calls, and those they call, each once."""
    out: list[HloComputation] = []
    seen: set[int] = set()
    todo = list(inst.called_computations())
    while todo:
        comp = todo.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        out.append(comp)
        for i in comp.instructions:
            todo.extend(i.called_computations())
    return out
