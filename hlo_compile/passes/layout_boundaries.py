"""Make layouts agree wherever a value crosses into another computation (as XLA's layout
assignment does, by inserting copies).

The runtime gives every array value one buffer, laid out as the instruction that produced it
declares, and a kernel reads a buffer with the layout its own computation declares for it. HLO
text does not promise the two agree: JAX's unoptimized modules pass, e.g., the
``f32[4,2,3]{2,0,1}`` result of a transpose into a ``while`` whose body parameter declares
``f32[4,2,3]{2,1,0}``; XLA's layout assignment makes operand and parameter layouts equal by
inserting copies, and without that the body reads the buffer with the wrong strides. This pass
does the same, on every computation the runtime executes (ENTRY, while conditions and bodies,
conditional branches, called computations), before anything else:

- a ``fusion``, ``call``, ``while`` or ``conditional`` operand whose layout differs from the
  called computation's parameter is relaid out (a ``copy`` to the parameter's layout; tuples
  element by element, through ``get-tuple-element``/``tuple``);
- a ``while`` body whose root differs from its parameter, and a ``conditional`` branch whose
  root differs from the conditional's result, end with such a copy; a ``while`` condition whose
  parameter differs from the body's takes the body's layout and relays it out inside;
- the result of a ``tuple`` (and ``opt-barrier``) takes its operands' layouts; the result of a
  ``get-tuple-element``, ``while``, ``call`` or ``fusion`` takes the layout its buffer really
  has, and users that declared another one read a relaid-out copy.

Only physical layout counts (minor-to-major, tiles, element size); a memory space ``S(n)`` does
not. Fused computations are left alone: inside a kernel values are not buffers.
"""
from __future__ import annotations

from hlo_compile.hlo.attributes import Attribute
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.hlo.rewrite import NameScope, insert_instructions, new_instruction, replace_uses
from hlo_compile.hlo.shape import Shape


def physical_layout(shape: Shape):
    """What decides where the elements of ``shape`` lie in memory (a tree for tuples)."""
    if shape.is_tuple:
        return tuple(physical_layout(s) for s in shape.tuple_shapes)
    if not shape.is_array:
        return None
    lay = shape.layout
    return (shape.minor_to_major, lay.tiles if lay else (), lay.element_size_in_bits if lay else 0)


def same_layout(a: Shape, b: Shape) -> bool:
    return physical_layout(a) == physical_layout(b)


class _Relayout:
    """Builds relayout copies (not yet in any computation), collecting them in ``new``."""

    def __init__(self, names: NameScope):
        self.names = names
        self.new: list[HloInstruction] = []

    def add(self, name: str, opcode: str, shape: Shape, operands: list[HloInstruction],
            attributes: dict[str, Attribute] | None = None, like: HloInstruction | None = None) -> HloInstruction:
        inst = new_instruction(self.names.fresh(name), opcode, shape, operands, attributes, like=like)
        self.new.append(inst)
        return inst

    def to(self, value: HloInstruction, want: Shape, like: HloInstruction) -> HloInstruction:
        """``value`` with the layout of ``want`` (itself when it already has it)."""
        return self._to(value, value.shape, want, like)

    def _to(self, value: HloInstruction, have: Shape, want: Shape, like: HloInstruction) -> HloInstruction:
        if same_layout(have, want) or not (have.is_tuple or have.is_array):
            return value
        if have.is_tuple:
            parts = []
            for i, (h, w) in enumerate(zip(have.tuple_shapes, want.tuple_shapes)):
                g = self.add(f"{value.name}.{i}", "get-tuple-element", h, [value],
                             {"index": Attribute("index", str(i), i)}, like)
                parts.append(self._to(g, h, w, like))
            result = Shape.tuple_of([p.shape for p in parts])
            return self.add(f"{value.name}.relayout", "tuple", result, parts, None, like)
        target = have.with_layout(want.layout) if want.layout is not None else have
        return self.add(f"{value.name}.relayout", "copy", target, [value], None, like)


def _callee_parameter_shapes(inst: HloInstruction) -> dict[int, Shape]:
    """Operand index → the layout the called computation expects for it."""
    op = inst.opcode
    if op == "fusion":
        return {k: p.shape for k, p in enumerate(inst.fused_computation.parameters)}
    if op == "call":
        return {k: p.shape for k, p in enumerate(inst.to_apply.parameters)}
    if op == "while":
        return {0: inst.attr("body").parameter(0).shape}
    if op == "conditional":
        return {1 + b: c.parameter(0).shape for b, c in enumerate(_branches(inst))}
    return {}


def _branches(inst: HloInstruction) -> list[HloComputation]:
    if inst.has_attr("branch_computations"):
        return list(inst.attr("branch_computations"))
    return [inst.attr("true_computation"), inst.attr("false_computation")]


def _actual_shape(inst: HloInstruction) -> Shape:
    """The layout the buffer(s) of ``inst``'s result really have."""
    op = inst.opcode
    if op == "tuple":
        return Shape.tuple_of([o.shape for o in inst.operands])
    if op == "opt-barrier":
        return inst.operands[0].shape
    if op == "get-tuple-element":
        return inst.operands[0].shape.tuple_shapes[inst.tuple_index]
    if op == "while":
        return inst.attr("body").parameter(0).shape
    if op == "call":
        return inst.to_apply.root.shape
    if op == "fusion":
        return inst.fused_computation.root.shape
    return inst.shape


def _fix_computation(comp: HloComputation, names: NameScope) -> None:
    for inst in list(comp.instructions):
        _fix_callee_boundaries(inst, names)
        r = _Relayout(names)
        for k, want in _callee_parameter_shapes(inst).items():
            inst.operands[k] = r.to(inst.operands[k], want, inst)
        insert_instructions(comp, r.new, before=inst)
        actual = _actual_shape(inst)
        if actual is not inst.shape and not same_layout(actual, inst.shape):
            declared, inst.shape = inst.shape, actual
            if inst.opcode in ("tuple", "opt-barrier"):
                continue  # a tuple only groups buffers: it takes their layouts
            r = _Relayout(names)
            _relayout_result(comp, inst, r.to(inst, declared, inst), r.new)
    comp.rebuild_users()


def _relayout_result(comp: HloComputation, value: HloInstruction, converted: HloInstruction,
                     chain: list[HloInstruction]) -> None:
    """Users of ``value`` read ``converted`` instead, computed from it by ``chain`` (put right
    after ``value``)."""
    replace_uses(comp, {value: converted})  # before the chain, which reads value, joins comp
    insert_instructions(comp, chain, after=value)


def _fix_callee_boundaries(inst: HloInstruction, names: NameScope) -> None:
    """The ends of the computations a while or conditional runs (already fixed inside)."""
    if inst.opcode == "while":
        state = inst.attr("body").parameter(0).shape
        _end_with(inst.attr("body"), state, names)
        _retype_parameter(inst.attr("condition"), state, names)
    elif inst.opcode == "conditional":
        for c in _branches(inst):
            _end_with(c, inst.shape, names)


def _retype_parameter(comp: HloComputation, want: Shape, names: NameScope) -> None:
    """Parameter 0 of ``comp`` receives a value laid out as ``want``: relay it out inside."""
    param = comp.parameter(0)
    if same_layout(param.shape, want):
        return
    declared, param.shape = param.shape, want
    r = _Relayout(names)
    _relayout_result(comp, param, r.to(param, declared, param), r.new)


def _end_with(comp: HloComputation, want: Shape, names: NameScope) -> None:
    """Make ``comp``'s root laid out as ``want``."""
    if same_layout(comp.root.shape, want):
        return
    r = _Relayout(names)
    root = r.to(comp.root, want, comp.root)
    insert_instructions(comp, r.new)
    comp.root = root
    comp.rebuild_users()


def _executed_post_order(module: HloModule) -> list[HloComputation]:
    """Computations the runtime executes (not fused ones, not reducers), callees first."""
    order: list[HloComputation] = []
    seen: set[int] = set()

    def visit(comp: HloComputation) -> None:
        if id(comp) in seen:
            return
        seen.add(id(comp))
        for inst in comp.instructions:
            if inst.opcode == "while":
                visit(inst.attr("condition"))
                visit(inst.attr("body"))
            elif inst.opcode == "conditional":
                for c in _branches(inst):
                    visit(c)
            elif inst.opcode == "call":
                visit(inst.to_apply)
        order.append(comp)

    visit(module.entry)
    return order


def align_layouts(module: HloModule) -> HloModule:
    """Insert the copies that make layouts agree across computation boundaries; in place."""
    names = NameScope.of_instructions(module.computations)
    for comp in _executed_post_order(module):  # callees first: callers see their final layouts
        _fix_computation(comp, names)
    return module
