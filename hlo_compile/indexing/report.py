"""``--emit=indexing`` / ``--emit=indexing-json`` (DESIGN §5).

For the ENTRY root and every fusion in ENTRY: the maps between each output and each operand,
output→input and input→output, as de-duplicated sets (or "unknown"); as a whole, or one
record at a time (``*_pieces``: ``--dump-to`` writes them as they are made). ``only``: a
compiled regex; the subjects whose name it finds (``re.search``, as XLA's ``--xla_dump_*_re``)
alone are reported (``--dump-indexing=REGEX``), the maps of the others never made.
"""
from __future__ import annotations

import json
from typing import Iterator

from .fusion import instruction_input_to_output, instruction_output_to_input
from .op_maps import Entry, result_shapes


def _subjects(module) -> list:
    entry = module.entry
    out = [i for i in entry.instructions if i.opcode == "fusion"]
    if entry.root not in out:
        out.append(entry.root)
    return out


def _selected(module, only=None) -> list:
    """The subjects whose name ``only`` finds (all of them without it)."""
    subjects = _subjects(module)
    return subjects if only is None else [i for i in subjects if only.search(i.name)]


def _iter_records(inst) -> Iterator[tuple[int, int, str, Entry]]:
    """(operand, output, direction, entry) for every pair, each made when asked for."""
    n_out = len(result_shapes(inst))
    for k in range(n_out):
        per_op = instruction_output_to_input(inst, k)
        for i, entry in enumerate(per_op):
            yield i, k, "output_to_input", entry
    for i in range(len(inst.operands)):
        per_out = instruction_input_to_output(inst, i)
        for k, entry in enumerate(per_out):
            yield i, k, "input_to_output", entry


def _records(inst) -> list[tuple[int, int, str, Entry]]:
    """(operand, output, direction, entry) for every pair."""
    return list(_iter_records(inst))


def _record_json(record: tuple[int, int, str, Entry]) -> dict:
    i, k, d, e = record
    return {"operand": i, "output": k, "direction": d, "maps": "unknown" if e is None else [m.to_json() for m in e]}


def _instruction_json(inst) -> dict:
    return {"name": inst.name, "opcode": inst.opcode, "indexing": [_record_json(r) for r in _records(inst)]}


def indexing_report_json(module) -> dict:
    return {"instructions": [_instruction_json(inst) for inst in _subjects(module)]}


# ``json.dumps(..., indent=1)`` writes a value nested ``n`` deep with ``n`` more spaces on each
# line but its first (strings hold no newline: ``json`` escapes them), so the document is made
# one record at a time: a large model's maps are hundreds of MB as objects (Llama 8B's ENTRY
# root, a tuple of 883, has 1.56 million records), a record's a few hundred bytes.

def _nested(value, depth: int) -> str:
    return json.dumps(value, indent=1).replace("\n", "\n" + " " * depth)


def indexing_report_json_pieces(module, only=None) -> Iterator[str]:
    """``json.dumps(indexing_report_json(module), indent=1)`` in pieces, one record at a time."""
    subjects = _selected(module, only)
    if not subjects:
        yield json.dumps({"instructions": []}, indent=1)
        return
    yield '{\n "instructions": ['
    for n, inst in enumerate(subjects):
        yield (",\n  {\n" if n else "\n  {\n") + f'   "name": {json.dumps(inst.name)},\n' \
            f'   "opcode": {json.dumps(inst.opcode)},\n   "indexing": ['
        records = _iter_records(inst)
        first = next(records, None)
        if first is None:
            yield "]\n  }"
            continue
        yield "\n    " + _nested(_record_json(first), 4)
        for record in records:
            yield ",\n    " + _nested(_record_json(record), 4)
        yield "\n   ]\n  }"
    yield "\n ]\n}"


def indexing_report_text_pieces(module, only=None) -> Iterator[str]:
    """``indexing_report_text`` in pieces, one record at a time."""
    for n, inst in enumerate(_selected(module, only)):
        yield ("\n" if n else "") + f"{inst.name} = {inst.opcode}\n"
        for i, k, d, e in _iter_records(inst):
            arrow = f"output {k} -> operand {i}" if d == "output_to_input" else f"operand {i} -> output {k}"
            if e is None:
                yield f"  {arrow}: unknown indexing\n"
                continue
            yield f"  {arrow}:" + ("" if e else " (none)") + "\n" + "".join(f"    {m.to_text()}\n" for m in e)


def indexing_report_text(module) -> str:
    return "".join(indexing_report_text_pieces(module))
