"""A scatter fusion whose scatter operand is computed inside it, as XLA:GPU runs it: two kernels.

XLA's scatter fusions often compute the operand they scatter into (a scatter-add into a
fused zero broadcast: the gradient of every embedding lookup, every segment sum). The scatter
kernel updates its output in place, one thread per update element, so the output buffer must
hold the operand before it starts; XLA's scatter emitter first runs an initialiser kernel that
writes the operand, then the scatter kernel. We do the same as a rewrite: the operand's
computation becomes a loop fusion of its own (several operands of a variadic scatter: one
multi-output loop fusion), and the scatter fusion reads it as a parameter (the runtime then
hands that buffer to the scatter kernel: no copy). The indices and updates stay computed
inside the scatter fusion. Operands that already are parameters are left as they are.
"""
from __future__ import annotations

from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.hlo.rewrite import (NameScope, add_computation, insert_instructions, remove_computations,
                                     replace_instructions)

from .fusion_builder import add_note, build_fusion, build_fusion_of_outputs, output_readers


def split_scatter_operands(module: HloModule) -> HloModule:
    """Every fusion whose ROOT is a scatter with an operand computed inside is split into a
    loop fusion writing the operand(s) and the scatter fusion reading them; in place."""
    names = NameScope.of_instructions(module.computations)
    comp_names = NameScope.of_computations(module)
    old_bodies = []
    for comp in list(module.computations):
        for fusion in [i for i in comp.instructions if i.opcode == "fusion"]:
            if _computed_operands(fusion):
                old_bodies.append(fusion.fused_computation)
                _split(module, comp, fusion, names, comp_names)
    called = {id(c) for comp in module.computations for i in comp.instructions for c in i.called_computations()}
    remove_computations(module, [c for c in old_bodies if id(c) not in called])
    return module


def _computed_operands(fusion: HloInstruction) -> list[int]:
    if fusion.attr("kind", "") == "kCustom":
        return []
    root = fusion.fused_computation.root
    if root.opcode != "scatter":
        return []
    n = (len(root.operands) - 1) // 2
    return [k for k in range(n) if root.operands[k].opcode != "parameter"]


def _closure(outputs: list[HloInstruction], stop: set[int]) -> list[HloInstruction]:
    """``outputs`` and what they read inside the fused computation, not entering parameters or
    the instructions of ``stop``; in the computation's order."""
    seen: dict[int, HloInstruction] = {}
    todo = list(outputs)
    while todo:
        inst = todo.pop()
        if id(inst) in seen or inst.opcode == "parameter":
            continue
        seen[id(inst)] = inst
        todo.extend(op for op in inst.operands if id(op) not in stop)
    body = outputs[0].parent
    order = {id(i): k for k, i in enumerate(body.instructions)} if body is not None else {}
    return sorted(seen.values(), key=lambda i: order.get(id(i), 0))


def _outer_operands(new: HloInstruction, fusion: HloInstruction, outside: dict[int, HloInstruction]) -> None:
    """``new``'s operands are instructions of ``fusion``'s computation (its parameters, or
    values another new fusion computes): point them at what stands for them outside."""
    ops = []
    for op in new.operands:
        if op.opcode == "parameter" and op.parent is fusion.fused_computation:
            ops.append(fusion.operands[op.parameter_number])
        else:
            ops.append(outside[id(op)])
    new.operands = ops
    new.declared_operand_shapes = [o.shape for o in ops]


def _split(module: HloModule, comp: HloComputation, fusion: HloInstruction, names: NameScope,
           comp_names: NameScope) -> None:
    body = fusion.fused_computation
    scatter = body.root
    targets = [scatter.operands[k] for k in _computed_operands(fusion)]
    targets = list({id(t): t for t in targets}.values())
    # the operand-writing loop fusion
    init = build_fusion_of_outputs(_closure(targets, set()), targets, comp_names.fresh(f"{body.name}.operand"),
                                   "kLoop", f"{fusion.name}.operand", names, like=fusion)
    _outer_operands(init, fusion, {})
    what = ", ".join(f"%{t.name}" for t in targets)
    add_note(init, "scatter_operand", f"the operand ({what}) of scatter %{scatter.name} in fusion %{fusion.name}, "
             "written before the scatter updates it in place (XLA's scatter initialiser kernel)")
    add_computation(module, init.fused_computation, before=comp)
    insert_instructions(comp, [init], before=fusion)
    readers = output_readers(init, len(targets), names)
    if readers[0] is not init:
        insert_instructions(comp, readers, before=fusion)
    outside = {id(t): r for t, r in zip(targets, readers)}
    # the scatter fusion, reading the operands as parameters
    scatter_members = _closure([scatter], {id(t) for t in targets})
    new = build_fusion(scatter_members, scatter, comp_names.fresh(f"{body.name}.scatter"),
                       fusion.attr("kind", "kInput"))
    _outer_operands(new, fusion, outside)
    for key in ("frontend_attributes", "metadata", "backend_config"):
        if key in fusion.attributes and key not in new.attributes:
            new.attributes[key] = fusion.attributes[key]
    new.name = fusion.name
    add_note(new, "scatter_operand", f"scatter of fusion %{fusion.name}; its operand ({what}) is written by "
             f"%{init.name} first")
    add_computation(module, new.fused_computation, before=comp)
    replace_instructions(comp, {fusion: new})
