"""Random fusion groupings: runs of consecutive instructions moved into fused computations,
called XLA-style by ``fusion(...), kind=kLoop|kInput, calls=C`` (sometimes by ``call``).

A run of consecutive instructions (in text order, which is a topological order) is convex by
construction: its outside operands are defined before it and its outside users after it.
Members used after the run (or listed in ``keep``) become the fusion's outputs: one output
is the fusion's value, several make a tuple that ``get-tuple-element``s take apart."""
from __future__ import annotations

from .builder import Comp, Inst, Value
from .gen_core import Gen
from .ops_collective import COLLECTIVE_OPCODES
from .shapes import FTuple

_NOT_FUSED = frozenset({"parameter", "tuple", "get-tuple-element", "while", "conditional", "fusion", "call",
                        "rng-bit-generator"})
_ROOT_ONLY = frozenset({"scatter", "sort"})
_INPUT_KIND = frozenset({"reduce", "reduce-window", "scatter", "sort", "select-and-scatter"})


def _fusible(inst: Inst) -> bool:
    return inst.opcode not in _NOT_FUSED and inst.opcode not in COLLECTIVE_OPCODES and inst.value.is_array


def outline_fusions(g: Gen, comp: Comp, keep: list[Value]) -> list[Value]:
    """Outline random runs of ``comp``; returns ``keep`` with outlined values replaced by the
    fusion outputs that now carry them."""
    remap: dict[int, Value] = {}
    i = 0
    while i < len(comp.insts):
        if not _fusible(comp.insts[i]) or not g.chance(0.45):
            i += 1
            continue
        j = i + 1
        limit = g.randint(1, 8)
        # a scatter or sort can only be a fusion's root (its emitter writes the output itself)
        while j < len(comp.insts) and j - i < limit and _fusible(comp.insts[j]) and \
                comp.insts[j - 1].opcode not in _ROOT_ONLY:
            j += 1
        new_insts = _outline_run(g, comp, i, j, keep, remap)
        i += len(new_insts)
    return [remap.get(id(v), v) for v in keep]


def _outline_run(g: Gen, comp: Comp, i: int, j: int, keep: list[Value], remap: dict[int, Value]) -> list[Inst]:
    run = comp.insts[i:j]
    members = {id(x.value) for x in run}
    later = comp.insts[j:]
    used_after = {id(o) for x in later for o in x.operands} | {id(remap.get(id(v), v)) for v in keep}
    if comp.root is not None:
        used_after.add(id(comp.root))
    outputs = [x.value for x in run if id(x.value) in used_after]
    if not outputs:
        outputs = [run[-1].value]
    if run[-1].opcode in _ROOT_ONLY and outputs != [run[-1].value]:
        if len(run) == 1:
            return run
        return _outline_run(g, comp, i, j - 1, keep, remap)  # the scatter/sort stays outside
    mb = g.mb
    use_call = g.chance(0.12)
    fused = mb.comp("fused_computation" if not use_call else "called_computation", "fused")
    boundary = g.cfg.allows("boundary-layouts") and g.chance(0.3)
    # parameters for distinct outside operands, in order of first use
    params: dict[int, Value] = {}
    outside: list[Value] = []
    for x in run:
        for o in x.operands:
            if id(o) not in members and id(o) not in params:
                shape = g.relayout(o.shape) if boundary and not o.shape.is_tuple and o.shape.rank >= 2 else o.shape
                params[id(o)] = fused.param(shape, exact=o.exact, name=mb.fresh("param"))
                outside.append(o)
    for x in run:
        fused.insts.append(Inst(x.value, x.opcode, [params.get(id(o), o) for o in x.operands], x.attrs, x.payload))
    if len(outputs) == 1:
        froot = outputs[0]
    else:
        froot = fused.add("tuple", FTuple(tuple(o.shape for o in outputs)), outputs)
    mb.finish(fused, froot)
    if boundary:
        g.stats.features.add("boundary-layouts")
    kind = "kInput" if any(x.opcode in _INPUT_KIND for x in run) else "kLoop"
    if g.chance(0.1):
        kind = "kLoop" if kind == "kInput" else "kInput"
    attrs = [f"to_apply={fused.name}"] if use_call else [f"kind={kind}", f"calls={fused.name}"]
    opcode = "call" if use_call else "fusion"
    shape = froot.shape
    if boundary and len(outputs) == 1 and froot.shape.rank >= 2:
        shape = g.relayout(froot.shape)
    fv = Value(mb.fresh(opcode), shape, froot.exact)
    new = [Inst(fv, opcode, list(outside), attrs)]
    replacement: dict[int, Value] = {}
    if len(outputs) == 1:
        replacement[id(outputs[0])] = fv
    else:
        for k, o in enumerate(outputs):
            gv = Value(mb.fresh("gte"), o.shape, o.exact)
            new.append(Inst(gv, "get-tuple-element", [fv], [f"index={k}"]))
            replacement[id(o)] = gv
    for x in later:
        x.operands = [replacement.get(id(o), o) for o in x.operands]
    for k, v in list(remap.items()):
        remap[k] = replacement.get(id(v), v)
    for v in keep:
        if id(v) in replacement:
            remap[id(v)] = replacement[id(v)]
    if comp.root is not None and id(comp.root) in replacement:
        comp.root = replacement[id(comp.root)]
    # the pool of the generator (ENTRY) now sees the outputs through the fusion
    g.pool = [replacement.get(id(v), v) for v in g.pool if id(v) not in members or id(v) in replacement]
    comp.insts[i:j] = new
    g.stats.note(opcode)
    g.stats.features.add(opcode)
    return new
