"""PTX as text, without LLVM: its module-scope items, one module from several kernels' PTX.

``merge_ptx`` makes one PTX module of the kernels' PTX: one header, every ``.entry`` in order,
and each module-scope declaration once (the same text from two kernels: a libdevice function
both call); a name two kernels declare differently is renamed in the later kernel's text.
``ptx_items`` is the parse both it and ``stages.split_ptx`` (one file per kernel) use.
"""
from __future__ import annotations

import re
from typing import Sequence

_HEADER = re.compile(r"\s*\.(version|target|address_size)\b")
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)")
# the name a module-scope item declares: a function's (before its parameter list) or a variable's
_DECLARED = re.compile(r"\.func\s+(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)|"
                       r"\.(?:global|shared|const|local)\s+(?:\.\w+\s+(?:\d+\s+)?)*([A-Za-z_$%][\w$]*)\s*(?:\[|;|=)")


def ptx_items(ptx: str) -> tuple[list[str], list[tuple[str | None, str]], str]:
    """(header lines, module-scope items as (entry name or None, text), the text after the last)."""
    header: list[str] = []
    items: list[tuple[str | None, str]] = []
    current: list[str] = []
    depth = 0
    in_header = True  # the comments and directives before the first declaration
    for line in ptx.splitlines(keepends=True):
        code = line.split("//", 1)[0]
        if depth == 0 and not current and in_header:
            if _HEADER.match(code) or (not code.strip() and ".address_size" not in "".join(header)):
                header.append(line)
                continue
            in_header = False
        current.append(line)
        depth += code.count("{") - code.count("}")
        tail = code.rstrip()
        if depth == 0 and (tail.endswith("}") or tail.endswith(";")):
            text = "".join(current)
            m = _ENTRY.search(text)
            items.append((m.group(1) if m else None, text))
            current = []
    return header, items, "".join(current)


def _declared(text: str) -> str | None:
    code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    m = _DECLARED.search(code)
    return (m.group(1) or m.group(2)) if m else None


def _rename(text: str, old: str, new: str) -> str:
    return re.sub(rf"(?<![\w$%]){re.escape(old)}(?![\w$%])", new, text)


def merge_ptx(ptxs: Sequence[str], names: Sequence[str]) -> str:
    """One PTX module holding the ``.entry`` of each kernel (``names``, parallel to ``ptxs``)."""
    if not ptxs:
        return ""
    header = ptx_items(ptxs[0])[0]
    seen: dict[str, str] = {}  # declared name → its text
    body: list[str] = []
    for ptx, kernel in zip(ptxs, names):
        h, items, _ = ptx_items(ptx)
        if h != header:
            raise ValueError(f"kernel {kernel}: PTX header differs from the first kernel's")
        renames: dict[str, str] = {}
        for _, text in items:
            name = _declared(text) if not _ENTRY.search(text) else None
            if name is not None and name in seen and seen[name] != text:
                renames[name] = f"{name}_{kernel}"
        for old, new in renames.items():
            items = [(entry, _rename(text, old, new)) for entry, text in items]
        for entry, text in items:
            name = None if entry is not None else _declared(text)
            if name is not None:
                if seen.get(name) == text:
                    continue  # declared the same way by an earlier kernel
                seen[name] = text
            body.append(text)
    return "".join(header) + "".join(body)


