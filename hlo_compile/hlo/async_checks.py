"""XLA's rules for async-start/update/done chains (and their `<op>-start` syntax sugar)."""
from __future__ import annotations

from .ir import HloInstruction

_FORM = ("AsyncStart and AsyncUpdate expect the shape to be in the form of "
         "((operand0_shape, operand1_shape, ...), output_shape, ...)")


def _chain_attr(inst: HloInstruction, name: str, sugar: set[str], default=None):
    """An attribute of an async op, inherited from the earlier ops of its chain when absent."""
    while inst is not None:
        if name in inst.attributes:
            return inst.attr(name)
        phase = _async_phase(inst, sugar)
        if phase is None or phase[0] == "start" or not inst.operands:
            break
        inst = inst.operands[0]
    return default


def check_async(instructions: list[HloInstruction], sugar: set[str]) -> tuple[str, HloInstruction] | None:
    """The first violated async rule as (message, instruction), or None. ``sugar`` holds the
    `<op>-start/-update/-done` opcodes in use."""
    for inst in instructions:
        phase = _async_phase(inst, sugar)
        if phase is None:
            continue
        kind, wrapped = phase
        if kind in ("start", "update"):
            s = inst.shape
            if not (s.is_tuple and len(s.tuple_shapes) >= 2 and s.tuple_shapes[0].is_tuple):
                return _FORM, inst
            if kind == "start" and not wrapped:
                operands = s.tuple_shapes[0].tuple_shapes
                if len(operands) != len(inst.operands) or not all(
                        a.compatible(b.shape) for a, b in zip(operands, inst.operands)):
                    return _FORM, inst
        if kind in ("update", "done"):
            if not inst.operands:
                return "No operand found for AsyncUpdate and AsyncDone", inst
            prev = inst.operands[0]
            prev_phase = _async_phase(prev, sugar)
            if prev_phase is not None and prev_phase[0] == "done":
                return "AsyncUpdate and AsyncDone cannot have AsyncDone as operand.", inst
            if prev_phase is None:
                continue
            if wrapped and prev_phase[1] and wrapped != prev_phase[1]:
                return f"Expect async wrapped opcode to be {prev_phase[1]}, but got {wrapped}", inst
            prev_calls = _chain_attr(prev, "calls", sugar)
            calls = inst.attr("calls", None)
            if calls is not None and prev_calls is not None and calls is not prev_calls:
                return (f"Expect async_wrapped_computation to be {prev_calls.name}, but got {calls.name}", inst)
            prev_thread = _chain_attr(prev, "async_execution_thread", sugar, "main")
            thread = inst.attr("async_execution_thread", prev_thread)
            if thread != prev_thread:
                return f"Expect async_execution_thread to be {prev_thread}, but got {thread}", inst
    return None


def _async_phase(inst: HloInstruction, sugar: set[str]) -> tuple[str, str] | None:
    op = inst.opcode
    if op in ("async-start", "async-update", "async-done"):
        return op[len("async-"):], ""
    if op in sugar:
        base, _, phase = op.rpartition("-")
        return phase, base
    return None
