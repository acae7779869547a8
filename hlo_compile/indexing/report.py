"""``--emit=indexing`` / ``--emit=indexing-json`` (DESIGN §5).

For the ENTRY root and every fusion in ENTRY: the maps between each output and each operand,
output→input and input→output, as de-duplicated sets (or "unknown").
"""
from __future__ import annotations

from .fusion import instruction_input_to_output, instruction_output_to_input
from .op_maps import Entry, result_shapes


def _subjects(module) -> list:
    entry = module.entry
    out = [i for i in entry.instructions if i.opcode == "fusion"]
    if entry.root not in out:
        out.append(entry.root)
    return out


def _records(inst) -> list[tuple[int, int, str, Entry]]:
    """(operand, output, direction, entry) for every pair."""
    recs: list[tuple[int, int, str, Entry]] = []
    n_out = len(result_shapes(inst))
    for k in range(n_out):
        per_op = instruction_output_to_input(inst, k)
        for i, entry in enumerate(per_op):
            recs.append((i, k, "output_to_input", entry))
    for i in range(len(inst.operands)):
        per_out = instruction_input_to_output(inst, i)
        for k, entry in enumerate(per_out):
            recs.append((i, k, "input_to_output", entry))
    return recs


def indexing_report_json(module) -> dict:
    insts = []
    for inst in _subjects(module):
        items = [{"operand": i, "output": k, "direction": d,
                  "maps": "unknown" if e is None else [m.to_json() for m in e]}
                 for i, k, d, e in _records(inst)]
        insts.append({"name": inst.name, "opcode": inst.opcode, "indexing": items})
    return {"instructions": insts}


def indexing_report_text(module) -> str:
    lines: list[str] = []
    for inst in _subjects(module):
        lines.append(f"{inst.name} = {inst.opcode}")
        for i, k, d, e in _records(inst):
            arrow = f"output {k} -> operand {i}" if d == "output_to_input" else f"operand {i} -> output {k}"
            if e is None:
                lines.append(f"  {arrow}: unknown indexing")
                continue
            lines.append(f"  {arrow}:" + ("" if e else " (none)"))
            for m in e:
                lines.append(f"    {m.to_text()}")
        lines.append("")
    return "\n".join(lines)
