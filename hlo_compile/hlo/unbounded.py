"""Unbounded dynamic dimensions (``f32[?]``) parse, print and pass shape inference, as in XLA,
but nothing here can compile or run them: a kernel and a buffer need a size. XLA refines them
to static sizes before compiling (JAX's shape refinement); XLA:GPU never sees a ``?``. The code
generator and the interpreter refuse such a module by name and line with this check."""
from __future__ import annotations

from .errors import HloUnsupportedError
from .ir import HloInstruction, HloModule
from .shape import UNBOUNDED_DIM, Shape


def has_unbounded_dimension(shape: Shape) -> bool:
    return any(UNBOUNDED_DIM in leaf.dimensions for _, leaf in shape.leaves())


def first_unbounded_instruction(module: HloModule) -> HloInstruction | None:
    """ENTRY first: its instructions are the ones the user wrote (a fusion's parameters are not)."""
    for comp in sorted(module.computations, key=lambda c: not c.is_entry):
        for inst in comp.instructions:
            if has_unbounded_dimension(inst.shape):
                return inst
    return None


def refuse_unbounded_dimensions(module: HloModule, what: str) -> None:
    """HloUnsupportedError naming the first instruction with a ``?`` dimension, if any;
    ``what`` says what cannot be done ("compile", "run")."""
    inst = first_unbounded_instruction(module)
    if inst is not None:
        raise HloUnsupportedError(
            f"{inst.opcode} '{inst.name}' has the unbounded dynamic shape {inst.shape.to_text(False)}: cannot {what} "
            "a module with '?' dimensions (XLA refines them to static sizes before compiling)", inst.location)
