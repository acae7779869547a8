"""A structural fingerprint of a computation, for kernel reuse and the compile cache.

Two fused computations get the same fingerprint when they compute the same thing the same way:
the same opcodes in the same order, reading the same operand positions, with the same shapes
(layouts and tiles included), attributes and constants; names, source locations and
``metadata`` do not count. Called computations (a reduce's ``to_apply``) count by their own
fingerprint, not their name. This is XLA's rule for kernel reuse (``KernelReuseCache``: the
fused computation printed canonically, then the kernel arguments), in our own form; anything
we are unsure of (``backend_config``...) is kept in, so a difference never shares a kernel.
"""
from __future__ import annotations

import hashlib

from .ir import HloComputation, HloInstruction

# attributes that do not change what an instruction computes
_IGNORED = frozenset({"metadata", "statistics", "control-predecessors", "frontend_attributes"})


def computation_fingerprint(comp: HloComputation, _memo: dict[int, str] | None = None) -> str:
    """The hex SHA-256 of ``comp``'s canonical text (see the module docstring)."""
    memo = {} if _memo is None else _memo
    got = memo.get(id(comp))
    if got is None:
        got = memo[id(comp)] = hashlib.sha256(canonical_text(comp, memo).encode()).hexdigest()
    return got


def canonical_text(comp: HloComputation, memo: dict[int, str] | None = None) -> str:
    """``comp`` with instructions numbered instead of named, one line each."""
    memo = {} if memo is None else memo
    index = {id(inst): k for k, inst in enumerate(comp.instructions)}
    lines = []
    for k, inst in enumerate(comp.instructions):
        ops = ",".join(str(index.get(id(o), "?")) for o in inst.operands)
        parts = [f"{k}{'*' if inst is comp.root else ''}", inst.opcode, _shape_text(inst), f"({ops})"]
        if inst.parameter_number is not None:
            parts.append(f"p{inst.parameter_number}")
        if inst.opcode == "constant":
            text = inst.literal_text
            parts.append(f"={text}" if text is not None else f"=#{_literal_digest(inst.literal)}")
        for name in sorted(inst.attributes):
            if name not in _IGNORED:
                parts.append(f"{name}={_attribute_text(inst, name, memo)}")
        lines.append(" ".join(parts))
    return "\n".join(lines)


def _literal_digest(value) -> str:
    """A constant built by a pass (no text): the digest of its values."""
    import numpy as np  # (here: constants with text never need it)
    h = hashlib.sha256()
    for v in (value if isinstance(value, tuple) else (value,)):
        arr = np.ascontiguousarray(v)
        h.update(f"{arr.dtype}{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _shape_text(inst: HloInstruction) -> str:
    return str(inst.shape)  # element type, dimensions, layout and tiles as printed


def _attribute_text(inst: HloInstruction, name: str, memo: dict[int, str]) -> str:
    a = inst.attributes[name]
    v = a.value
    if isinstance(v, HloComputation):
        return "{" + computation_fingerprint(v, memo) + "}"
    if isinstance(v, (list, tuple)) and v and all(isinstance(c, HloComputation) for c in v):
        return "{" + ",".join(computation_fingerprint(c, memo) for c in v) + "}"
    return a.raw
