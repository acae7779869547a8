"""Wrap lone ENTRY instructions into single-instruction fusions, as XLA's ``FusionWrapper``.

Code generation works on fusions only: one fusion is one kernel. After fusion, XLA wraps every
instruction left outside a fusion that still needs a kernel (an ``add`` between two custom
calls, a lone ``reduce``...) into a fusion of its own, so that the emitters (and their hero
analysis) see a single kind of thing. We do the same, with stable names: the fusion keeps the
wrapped instruction's name (dumps, ``summary.json`` and error messages then name what the user
wrote) and calls a new computation ``fused_<name>``.

Instructions that need no kernel are left alone: parameters, constants, tuples and
get-tuple-element and bitcasts (buffer aliasing), and control flow, host and communication ops
(the runtime handles or rejects them).

``wrap_entry_as_fusion`` is the reverse situation: XLA's emitter test files are header-less
modules whose last computation *is* the fused computation; it builds the ENTRY that calls it.
"""
from __future__ import annotations

from hlo_compile.hlo.attributes import Attribute
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule

# Opcodes that never get a kernel of their own.
_NO_KERNEL = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "fusion", "domain",
    "while", "conditional", "call", "after-all", "add-dependency", "opt-barrier", "custom-call",
    "infeed", "outfeed", "send", "send-done", "recv", "recv-done", "partition-id", "replica-id",
    "rng-get-and-update-state", "all-reduce", "all-gather", "all-to-all", "ragged-all-to-all",
    "reduce-scatter", "collective-permute", "collective-broadcast", "async-start", "async-update",
    "async-done", "copy-start", "copy-done",
})
_ASYNC_SUFFIXES = ("-start", "-update", "-done")


def needs_kernel(inst: HloInstruction) -> bool:
    """Whether ``inst`` (in ENTRY, not a fusion) is computed by a kernel of its own."""
    if inst.opcode in _NO_KERNEL:
        return False
    return not inst.opcode.endswith(_ASYNC_SUFFIXES)


def wrap_lone_instructions(module: HloModule) -> HloModule:
    """Wrap every ENTRY instruction that needs a kernel into a ``kind=kLoop`` fusion.

    The module is rewritten in place and returned. Each wrapped instruction moves into a new
    computation ``fused_<name>`` (placed before ENTRY) whose parameters stand for its distinct
    operands; in ENTRY a ``fusion`` of the same name, shape and (distinct) operands replaces
    it. Control predecessors move to the fusion, since the wrapped instruction no longer
    lives beside them.
    """
    entry = module.entry
    taken = {c.name for c in module.computations}
    replaced: dict[int, HloInstruction] = {}
    for inst in list(entry.instructions):
        if not needs_kernel(inst):
            continue
        name = _fresh(f"fused_{inst.name}", taken)
        fusion = _wrap(inst, name)
        comp = fusion.fused_computation
        comp.parent = module
        module.computations.insert(module.computations.index(entry), comp)
        entry.instructions[entry.instructions.index(inst)] = fusion
        fusion.parent = entry
        if entry.root is inst:
            entry.root = fusion
        replaced[id(inst)] = fusion
    if replaced:
        _redirect_uses(entry, replaced)
    return module


def wrap_entry_as_fusion(module: HloModule, kind: str = "kLoop") -> HloModule:
    """Turn a module whose ENTRY is a bare fused computation (XLA's emitter test files) into
    one whose new ENTRY ``main`` passes its parameters to a ``fusion`` calling it. Modules whose
    ENTRY already holds a fusion are returned unchanged. Rewrites in place and returns it."""
    body = module.entry
    if any(i.opcode == "fusion" for i in body.instructions):
        return module
    params = [HloInstruction(p.name, "parameter", p.shape, parameter_number=p.parameter_number)
              for p in body.parameters]
    fusion = HloInstruction("fusion", "fusion", body.root.shape, params, _fusion_attrs(body, kind))
    taken = {c.name for c in module.computations}
    entry = HloComputation(_fresh("main", taken), params + [fusion], fusion, is_entry=True)
    body.is_entry = False
    entry.parent = module
    module.computations.insert(module.computations.index(body) + 1, entry)
    module.entry = entry
    return module


# ---- helpers --------------------------------------------------------------------------------

def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}.{i}"
    taken.add(name)
    return name


def _fusion_attrs(comp: HloComputation, kind: str) -> dict[str, Attribute]:
    return {"kind": Attribute("kind", kind, kind), "calls": Attribute("calls", f"%{comp.name}", comp)}


def fusion_parameters(members: list[HloInstruction], location) -> tuple[list[HloInstruction], list[HloInstruction]]:
    """(the distinct operands the ``members`` of a new fusion read from outside it, in first-use
    order; a ``param_<i>`` parameter for each, named apart from the members)."""
    inside = {id(m) for m in members}
    operands: list[HloInstruction] = []
    for m in members:
        for op in m.operands:
            if id(op) not in inside and all(op is not o for o in operands):
                operands.append(op)
    used = {m.name for m in members}
    params = [HloInstruction(_fresh(f"param_{i}", used), "parameter", op.shape, parameter_number=i,
                             location=location) for i, op in enumerate(operands)]
    return operands, params


def _wrap(inst: HloInstruction, comp_name: str) -> HloInstruction:
    """Move ``inst`` into a new computation and return the fusion instruction that calls it."""
    operands, params = fusion_parameters([inst], inst.location)
    by_id = {id(op): p for op, p in zip(operands, params)}
    attrs = dict(inst.attributes)
    control = attrs.pop("control-predecessors", None)
    inst.attributes = attrs
    inst.operands = [by_id[id(op)] for op in inst.operands]
    comp = HloComputation(comp_name, params + [inst], inst)
    fusion_attrs = _fusion_attrs(comp, "kLoop")
    if control is not None:
        fusion_attrs["control-predecessors"] = control
    fusion = HloInstruction(inst.name, "fusion", inst.shape, operands, fusion_attrs, location=inst.location)
    fusion.declared_operand_shapes = [op.shape for op in operands]
    return fusion


def _redirect_uses(entry: HloComputation, replaced: dict[int, HloInstruction]) -> None:
    """Point operands and control predecessors that named a wrapped instruction at its fusion."""
    for inst in entry.instructions:
        inst.operands = [replaced.get(id(op), op) for op in inst.operands]
        control = inst.attributes.get("control-predecessors")
        if control is not None and isinstance(control.value, tuple):
            control.value = tuple(replaced.get(id(p), p) for p in control.value)
    entry.rebuild_users()
