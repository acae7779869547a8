"""IR → HLO text, in XLA's long form (operand shapes, ``%`` names, signatures, metadata) or
its short form (``HloPrintOptions::ShortParsable``). Attributes print exactly as they were
written (they are kept verbatim), so canonical input prints back byte for byte.

``HloModule.to_text`` calls into this module, so it reads the IR classes for annotations only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ir import HloComputation, HloInstruction, HloModule

_SHORT_DROPPED = frozenset({"metadata"})


def _name(name: str, long: bool) -> str:
    return "%" + name if long else name


def operand_text(inst: HloInstruction, long: bool) -> str:
    parts = []
    for i, op in enumerate(inst.operands):
        prefix = f"/*index={i}*/" if long and i and i % 5 == 0 else ""
        parts.append(prefix + (f"{op.shape.to_text()} %{op.name}" if long else op.name))
    return ", ".join(parts)


def instruction_to_text(inst: HloInstruction, long: bool = True, is_root: bool = False) -> str:
    head = ("ROOT " if is_root else "") + f"{_name(inst.name, long)} = {inst.shape.to_text()} {inst.opcode}("
    if inst.opcode == "constant":
        head += inst.literal_text if inst.literal_text is not None else ""
    elif inst.opcode == "parameter":
        head += str(inst.parameter_number)
    else:
        head += operand_text(inst, long)
    head += ")"
    attrs = [f"{a.name}={a.raw}" for a in inst.attributes.values() if long or a.name not in _SHORT_DROPPED]
    return head + "".join(", " + a for a in attrs)


def signature_text(comp: HloComputation) -> str:
    params = ", ".join(f"{p.name}: {p.shape.to_text(print_layout=False)}" for p in comp.parameters)
    return f"({params}) -> {comp.root.shape.to_text(print_layout=False)}"


def computation_to_text(comp: HloComputation, long: bool = True) -> str:
    head = ("ENTRY " if comp.is_entry else "") + _name(comp.name, long)
    if long:
        head += " " + signature_text(comp)
    lines = [head + " {"]
    for inst in comp.instructions:
        lines.append("  " + instruction_to_text(inst, long, inst is comp.root))
    tail = "}"
    for a in comp.attributes.values():
        if a.name != "inline":
            tail += f", {a.name}={a.raw}"
    lines.append(tail)
    return "\n".join(lines)


def entry_layout_text(module: HloModule) -> str:
    entry = module.entry
    params = ", ".join((f"/*index={i}*/" if i and i % 5 == 0 else "") + p.shape.to_text()
                       for i, p in enumerate(entry.parameters))
    return "{(" + params + ")->" + entry.root.shape.to_text() + "}"


def header_text(module: HloModule) -> str:
    attrs = [(a.name, a.raw) for a in module.attributes.values()]
    if "entry_computation_layout" not in module.attributes:
        at = 1 if attrs and attrs[0][0] == "is_scheduled" else 0
        attrs.insert(at, ("entry_computation_layout", entry_layout_text(module)))
    # XLA's printer starts debug_attributes on a line of its own.
    return f"HloModule {module.name}" + "".join((",\n" if k == "debug_attributes" else ", ") + f"{k}={v}"
                                               for k, v in attrs)


def module_to_text(module: HloModule, form: str = "long") -> str:
    if form not in ("long", "short"):
        raise ValueError(f"unknown print form '{form}' (expected 'long' or 'short')")
    long = form == "long"
    out = header_text(module) + "\n\n"
    if "origin_recovery_table" in module.attributes:
        out += "\n"  # XLA leaves an extra blank line after a multi-line recovery table
    if module.stack_frames:
        out += module.stack_frames.rstrip() + "\n\n\n"
    for comp in module.computations:
        if "inline" in comp.attributes:
            continue
        out += computation_to_text(comp, long) + "\n\n"
    return out
