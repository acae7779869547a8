"""XLA's tree-reduction rewrite where the reduce sits inside a fusion XLA already formed.

The input is a module after XLA's optimisations: its fusions arrive formed, and a reduce that
is not race-free (``tree_reduction.needs_split``) may sit inside one, e.g. a loss
``f32[8192,32000] -> f32[]`` in a ``kInput`` fusion. XLA runs ``TreeReductionRewriter`` before
fusion, so it never emits such a fusion; we emit what it would have built instead: the fusion
is taken apart (its instructions inlined), each such reduce is split as a lone one would be
(``tree_reduction.split_reduce``: pad, bitcast, inner reduce, outer reduce; again while the
parts are not race-free), and the instructions are fused again by *stage*, one kernel per
stage: stage 0 holds the inner reduce with its fused producers, stage k the reduce that reads
stage k-1's partial results with the ops that follow it (the consumers of the original reduce,
down to the fusion's roots). A value one stage computes and a later one reads is an output of
the earlier fusion. In stage 0, roots and values read later that are not the inner reduces
(side outputs, full-size producers) get a loop fusion of their own (their producers are
recomputed there): the padded reduce could not write them as a reduction fusion's side output.
The fusion's value is rebuilt from the stages' outputs under its name.

Every new fusion carries ``frontend_attributes={tree_reduction="..."}`` saying which split it
is part of (``fusion_builder.add_note``); the fusion analysis puts that in its reason
(``--emit=fusions``, summary.json).
The split changes the order of the summation, as XLA's does.
"""
from __future__ import annotations

from hlo_compile.gpu.archs import device_for_arch
from hlo_compile.gpu.device_info import DeviceInfo
from hlo_compile.gpu.reductions import reduction_dimensions
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule, clone_instruction
from hlo_compile.hlo.rewrite import (NameScope, add_computation, control_predecessors, insert_instructions,
                                     new_instruction, remove_computations, remove_instructions, replace_instructions,
                                     replace_uses, set_control_predecessors)

from .fusion_builder import add_note, build_fusion_of_outputs, output_readers
from .prepare_control_flow import executed_computations
from .tree_reduction import needs_split, rewrite_tree_reductions, split_reduce


def rewrite_tree_reductions_everywhere(module: HloModule, device: DeviceInfo | None) -> HloModule:
    """XLA's tree-reduction rewrite on every computation the runtime runs (ENTRY, while and
    conditional bodies): lone reduces (``rewrite_tree_reductions``) and reduces inside formed
    fusions (split into one fusion per stage); in place, returns ``module``."""
    names = NameScope.of_instructions(module.computations)
    comp_names = NameScope.of_computations(module)
    split_bodies = []
    for comp in executed_computations(module):
        rewrite_tree_reductions(comp, device)
        for fusion in [i for i in comp.instructions if i.opcode == "fusion"]:
            if _splittable(fusion, device):
                split_bodies.append(fusion.fused_computation)
                _split_fusion(module, comp, fusion, device, names, comp_names)
        comp.rebuild_users()
    called = {id(c) for comp in module.computations for i in comp.instructions for c in i.called_computations()}
    remove_computations(module, [c for c in split_bodies if id(c) not in called])
    return module


def rewrite_tree_reductions_for_arch(module: HloModule, arch: str) -> HloModule:
    """``rewrite_tree_reductions_everywhere`` for the device ``arch`` names (the tree-reduction
    pass of ``passes.PASSES``)."""
    return rewrite_tree_reductions_everywhere(module, device_for_arch(arch))


def _splittable(fusion: HloInstruction, device: DeviceInfo | None) -> bool:
    if fusion.attr("kind", "") == "kCustom":
        return False
    body = fusion.fused_computation
    root = body.root
    if root.opcode == "tuple" and any(op.shape.is_tuple for op in root.operands):
        return False
    return any(i.opcode == "reduce" and needs_split(i, device) for i in body.instructions)


def _split_fusion(module: HloModule, comp: HloComputation, fusion: HloInstruction, device: DeviceInfo | None,
                  names: NameScope, comp_names: NameScope) -> None:
    body = fusion.fused_computation
    before = {id(i) for i in comp.instructions}
    copies = _inline(comp, fusion, names)
    roots = body.root.operands if body.root.opcode == "tuple" else [body.root]
    root_values = [copies[id(r)] for r in roots]
    # split every reduce that needs it, again while the parts need it; ``cut`` are the reduces
    # whose result the next stage reads (every inner one; an outer one standing for an inner),
    # ``finals`` the outer ones standing for a reduce of the fusion
    cut: set[int] = set()
    finals: set[int] = set()
    described: list[str] = []
    for red in body.instructions:
        if red.opcode == "reduce" and needs_split(red, device):
            rd = reduction_dimensions(red)
            described.append(f"%{red.name} ({'row' if rd.is_row else 'column'} "
                             f"[{', '.join(map(str, rd.dimensions))}])")
    work = [c for c in copies.values() if c.opcode == "reduce" and needs_split(c, device)]
    while work:
        red = work.pop(0)
        parts = split_reduce(comp, red, device, names)
        if not parts:
            continue
        inner, outer = parts
        cut.add(id(inner))
        if id(red) in cut:
            cut.discard(id(red))
            cut.add(id(outer))
        else:
            finals.discard(id(red))
            finals.add(id(outer))
        replacement = next(i for i in comp.instructions if i.name == red.name)
        root_values = [replacement if v is red else v for v in root_values]
        work.extend(parts)
    comp.rebuild_users()
    inlined = [i for i in comp.instructions if id(i) not in before]
    root_values = _drop_tuple_reads(comp, inlined, root_values)
    inlined = [i for i in comp.instructions if id(i) not in before]
    # a reduce whose result is broadcast back (softmax: x - max(x)) ends its kernel: in the
    # same kernel as the broadcast, every output element would add all the partial results again
    cut |= {id(i) for i in inlined if id(i) in finals and _broadcast_after(i, {id(j) for j in inlined})}
    stages = _stages(inlined, cut)
    what = f"XLA's tree-reduction split of {', '.join(described)} from fusion %{fusion.name}"
    groups = _groups(inlined, stages, root_values)
    replaced: dict[int, HloInstruction] = {}
    built: list[HloInstruction] = []
    for k, (members, outputs, label) in enumerate(groups):
        note = f"{what}: {label}, kernel {k + 1} of {len(groups)}"
        built.append(_fuse(module, comp, fusion, members, outputs, note, names, comp_names, replaced))
    values = [replaced.get(id(v), v) for v in root_values]
    if fusion.shape.is_tuple:
        final = new_instruction(names.fresh(fusion.name + ".tree"), "tuple", fusion.shape, values, like=fusion)
        insert_instructions(comp, [final], before=fusion)
    else:
        final = values[0]
    preds = control_predecessors(fusion)
    replace_instructions(comp, {fusion: final})
    for f in built:
        if preds:
            set_control_predecessors(f, control_predecessors(f) + preds)
    remove_instructions(comp, [i for i in inlined if i is not final])
    if final.parent is comp and id(final) not in before:   # the value keeps the fusion's name
        names.release(final.name)
        final.name = fusion.name


def _drop_tuple_reads(comp: HloComputation, inlined: list[HloInstruction],
                      root_values: list[HloInstruction]) -> list[HloInstruction]:
    """``get-tuple-element(tuple(a, b), 1)`` read as ``b`` (the split of a variadic reduce
    rebuilds its tuple); returns ``root_values`` so rewritten. Unread tuples are dropped."""
    direct = {}
    for i in inlined:
        if i.opcode == "get-tuple-element" and i.operands[0].opcode == "tuple":
            src = i.operands[0].operands[i.tuple_index]
            direct[i] = direct.get(src, src)
    if direct:
        replace_uses(comp, direct)
    root_values = [direct.get(v, v) for v in root_values]
    kept = {id(v) for v in root_values}
    read = {id(op) for i in comp.instructions for op in i.operands}
    dead = [i for i in inlined if i in direct or (i.opcode == "tuple" and id(i) not in read and id(i) not in kept)]
    remove_instructions(comp, dead)
    return root_values


def _broadcast_after(inst: HloInstruction, inside: set[int]) -> bool:
    """Whether a broadcast reads ``inst`` (through any ops of ``inside``)."""
    seen: set[int] = set()
    todo = list(inst.users)
    while todo:
        u = todo.pop()
        if id(u) in seen or id(u) not in inside:
            continue
        seen.add(id(u))
        if u.opcode == "broadcast":
            return True
        todo.extend(u.users)
    return False


def _crosses(inst: HloInstruction, cut: set[int]) -> bool:
    """Whether ``inst`` is a partial result the next stage reads: a split's inner reduce, or
    an element of a variadic one."""
    if id(inst) in cut:
        return not inst.shape.is_tuple
    return inst.opcode == "get-tuple-element" and id(inst.operands[0]) in cut


def _stages(inlined: list[HloInstruction], cut: set[int]) -> dict[int, int]:
    """The kernel (stage) of each inlined instruction: the latest of its operands', plus one
    past every partial result it reads."""
    stage: dict[int, int] = {}
    for inst in inlined:
        stage[id(inst)] = max((stage[id(op)] + _crosses(op, cut) for op in inst.operands if id(op) in stage),
                              default=0)
    return stage


def _free(inst: HloInstruction) -> bool:
    """A value every kernel makes for itself rather than reading it (a constant, an iota)."""
    return not inst.operands and inst.opcode != "parameter"


def _groups(inlined: list[HloInstruction], stage: dict[int, int],
            root_values: list[HloInstruction]) -> list[tuple[list[HloInstruction], list[HloInstruction], str]]:
    """``(members, outputs, what)`` per new fusion, in the order they run: per stage, the
    fusion of its reduces (with the ops they feed), then a loop fusion of the outputs that
    need no reduce of the stage (side outputs, full-size values a later stage reads)."""
    position = {id(i): k for k, i in enumerate(inlined)}
    roots = {id(v) for v in root_values}
    read_later: set[int] = set()
    for inst in inlined:
        for op in inst.operands:
            if id(op) in stage and stage[id(op)] < stage[id(inst)] and not _free(op):
                read_later.add(id(op))
    out = []
    for s in range(max(stage.values(), default=-1) + 1):
        outputs = [i for i in inlined if stage[id(i)] == s and (id(i) in read_later or id(i) in roots)
                   and not (_free(i) and id(i) not in roots)]
        reducing, plain = [], []
        for o in outputs:
            (reducing if any(m.opcode == "reduce" for m in _closure([o], stage, s)) else plain).append(o)
        for outs, what in ((reducing, f"stage {s}: partial reductions" if s == 0 else f"stage {s}"),
                           (plain, f"stage {s}: outputs that need no reduce")):
            if outs:
                members = sorted(_closure(outs, stage, s), key=lambda m: position[id(m)])
                out.append((members, outs, what))
    return out


def _closure(outputs: list[HloInstruction], stage: dict[int, int], s: int) -> list[HloInstruction]:
    """``outputs`` and the instructions of stage ``s`` they read (transitively), plus the free
    values (constants) they read from any stage."""
    seen: dict[int, HloInstruction] = {}
    todo = list(outputs)
    while todo:
        inst = todo.pop()
        if id(inst) in seen:
            continue
        seen[id(inst)] = inst
        for op in inst.operands:
            if id(op) in stage and (stage[id(op)] == s or _free(op)):
                todo.append(op)
    return list(seen.values())


def _fuse(module: HloModule, comp: HloComputation, fusion: HloInstruction, members: list[HloInstruction],
          outputs: list[HloInstruction], note: str, names: NameScope, comp_names: NameScope,
          replaced: dict[int, HloInstruction]) -> HloInstruction:
    """One new fusion of ``members`` writing ``outputs``, placed before ``fusion``; later
    readers of the outputs read the new fusion (``replaced`` records it)."""
    kind = "kInput" if any(m.opcode == "reduce" for m in members) else "kLoop"
    new = build_fusion_of_outputs(members, outputs, comp_names.fresh(f"{fusion.fused_computation.name}.tree"), kind,
                                  f"{fusion.name}.tree", names, like=fusion)
    add_note(new, "tree_reduction", note)
    add_computation(module, new.fused_computation, before=comp)
    insert_instructions(comp, [new], before=fusion)
    values = output_readers(new, len(outputs), names)
    if values[0] is not new:
        insert_instructions(comp, values, before=fusion)
    mapping = dict(zip(outputs, values))
    replace_uses(comp, mapping)
    replaced.update({id(o): v for o, v in mapping.items()})
    return new


def _inline(comp: HloComputation, fusion: HloInstruction, names: NameScope) -> dict[int, HloInstruction]:
    """Copies of the fused computation's instructions before ``fusion`` in ``comp`` (parameters
    are the fusion's operands; the ROOT tuple is not copied); by id of the original."""
    body = fusion.fused_computation
    copies: dict[int, HloInstruction] = {}
    new: list[HloInstruction] = []
    for inst in body.instructions:
        if inst.opcode == "parameter":
            copies[id(inst)] = fusion.operands[inst.parameter_number]
            continue
        if inst is body.root and inst.opcode == "tuple":
            continue
        copy = clone_instruction(inst, [copies[id(o)] for o in inst.operands])
        set_control_predecessors(copy, ())
        copy.name = names.fresh(inst.name)
        copies[id(inst)] = copy
        new.append(copy)
    insert_instructions(comp, new, before=fusion)
    return copies
