"""One instruction taken out of a module (``hlo-compile FILE --extract=NAME``), as XLA's
``hlo-extractor`` does with a depth of one.

``extract_instruction(module, name)`` returns a new module whose ENTRY computes just that
instruction: one parameter per distinct operand (the operand's shape and layout, named after
it; a ``constant`` operand is kept as the constant, as XLA's extractor keeps constants), the
instruction cloned with its attributes (its ``control-predecessors`` dropped: they name
instructions that are not there), and every computation it calls, transitively (fused
computations, reducers, comparators, while bodies and conditions, branches, ``to_apply``...),
copied under their own names, callees before callers; ROOT the instruction. The header keeps
the module's name (with the instruction's), the attributes that say where it runs
(``replica_count``, ``num_partitions``, ``frontend_attributes``) and the stack frame tables its
metadata may refer to; ``entry_computation_layout`` is printed afresh from the new ENTRY, and
what describes the whole module's parameters and outputs (aliasing, donors, sharding
propagation flags, a schedule) is left out.

``name`` is an instruction's name (with or without ``%``; ``COMPUTATION/NAME`` where several
computations have one so named) or, failing that, a kernel's name as ``hlo-compile`` prints
it (``--emit=fusions``: ``fusion %fusion.3 -> kernel fusion_3``), looked up in the plan of the
module (``kernel_names``: a fusion's kernel is named after it, made PTX-safe and unique) that
the caller passes, or makes with the ``plan_of`` it passes (the driver's
``pipeline.fusions_plan``: this front-end module never imports the driver). A
kernel whose fusion is a fusion of the input is extracted from the input; one whose fusion our
passes made (an instruction wrapped or fused here) from the module after the passes, which is
what the kernel computes. A name that is missing or ambiguous is an ``ExtractError`` listing up
to ten near names.
"""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Callable, Iterable

from .errors import HloError
from .ir import (HloComputation, HloInstruction, HloModule, called_closure, clone_computation, clone_instruction,
                 remap_attributes)
from .rewrite import CONTROL_PREDECESSORS, NameScope, new_instruction

if TYPE_CHECKING:  # pragma: no cover
    from ..codegen.compiler import KernelPlan, ModulePlan

# Header attributes that stay true of one instruction taken out (the others describe the
# whole module's parameters and outputs, or its schedule).
KEPT_MODULE_ATTRIBUTES = ("replica_count", "num_partitions", "frontend_attributes")
NEAR_NAMES = 10


class ExtractError(HloError):
    """A name that names no instruction or kernel, or several; an instruction that cannot
    stand alone."""


# ---- naming what to extract ---------------------------------------------------------------------

def find_instructions(module: HloModule, name: str) -> list[HloInstruction]:
    """The instructions of ``module`` named ``name`` (``%`` optional; ``COMPUTATION/NAME``
    picks one computation's), in the module's order."""
    name = name.strip()
    comp_name, slash, inst_name = name.rpartition("/")
    inst_name = inst_name.lstrip("%")
    comp_name = comp_name.lstrip("%")
    return [i for c in module.computations if not slash or c.name == comp_name
            for i in c.instructions if i.name == inst_name]


def near_names(name: str, candidates: Iterable[str], n: int = NEAR_NAMES) -> list[str]:
    """Up to ``n`` of ``candidates`` closest to ``name`` (difflib), closest first."""
    pool = list(dict.fromkeys(candidates))
    return difflib.get_close_matches(name.strip().lstrip("%"), pool, n=n, cutoff=0.5)


def _qualified(inst: HloInstruction) -> str:
    return f"{inst.parent.name}/{inst.name}" if inst.parent is not None else inst.name


def _ambiguous(name: str, found: list[HloInstruction]) -> ExtractError:
    shown = ", ".join(_qualified(i) for i in found[:NEAR_NAMES])
    more = f" and {len(found) - NEAR_NAMES} more" if len(found) > NEAR_NAMES else ""
    return ExtractError(f"'{name}' names {len(found)} instructions, in different computations: {shown}{more}; "
                        f"name one as COMPUTATION/NAME")


def _missing(name: str, module: HloModule, plan: ModulePlan | None, why_no_plan: str | None) -> ExtractError:
    names = [i.name for c in module.computations for i in c.instructions]
    kernels = [k.kernel_name for k in plan.kernels] if plan is not None else []
    fusions = [k.fusion.name for k in plan.kernels] if plan is not None else []
    near = near_names(name, [*kernels, *fusions, *names])
    what = "no instruction or kernel" if plan is not None else "no instruction"
    msg = f"{what} named '{name.strip()}' in module {module.name}"
    if why_no_plan:
        msg += f" (kernel names could not be looked up: {why_no_plan})"
    if near:
        msg += "; near names: " + ", ".join(near)
    elif kernels:
        msg += "; its kernels include: " + ", ".join(list(dict.fromkeys(kernels))[:NEAR_NAMES])
    return ExtractError(msg)


def kernel_not_found(name: str, plan: ModulePlan) -> ExtractError:
    """The error for a name that is no fusion or kernel of ``plan``, with near names."""
    kernels = list(dict.fromkeys(k.kernel_name for k in plan.kernels))
    near = near_names(name, [*kernels, *(k.fusion.name for k in plan.kernels)])
    msg = f"no fusion or kernel named '{name.strip()}' in module {plan.module.name}"
    if near:
        msg += "; near names: " + ", ".join(near)
    elif kernels:
        msg += "; its kernels include: " + ", ".join(kernels[:NEAR_NAMES])
    else:
        msg += " (it has no kernel)"
    return ExtractError(msg)


def find_kernel(plan: ModulePlan, name: str) -> KernelPlan | None:
    """The plan of the fusion named ``name`` (``%`` optional), else of the kernel so named (the
    fusion that emits it, not one reusing it); None if neither."""
    key = name.strip().lstrip("%")
    for k in plan.kernels:
        if k.fusion.name == key:
            return k
    for k in plan.kernels:
        if k.kernel_name == key and k.reuses is None:
            return k
    return None


def resolve(module: HloModule, name: str, *, plan: ModulePlan | None = None,
            plan_of: Callable[[HloModule], ModulePlan] | None = None) -> HloInstruction:
    """The instruction ``name`` names in ``module``, or the fusion of the kernel it names in
    ``plan`` (``plan_of(module)`` when not given: the driver's planning, e.g.
    ``pipeline.fusions_plan``, passed in so that this front-end module never imports the
    driver; without either, kernel names are not resolved) — see the module docstring."""
    found = find_instructions(module, name)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        raise _ambiguous(name, found)
    why = None
    if plan is None and plan_of is not None and "/" not in name:
        try:
            plan = plan_of(module)
        except HloError as e:
            why = e.message
    k = find_kernel(plan, name) if plan is not None and "/" not in name else None
    if k is None:
        raise _missing(name, module, plan, why)
    same = find_instructions(module, k.fusion.name)
    if len(same) == 1 and same[0].opcode == "fusion":
        return same[0]  # a fusion of the input: the user's own
    return k.fusion


# ---- taking it out ------------------------------------------------------------------------------



def _in_text_order(comps: list[HloComputation], module: HloModule | None) -> list[HloComputation]:
    """``comps`` with each callee before its callers: the module's order where it is one."""
    position = {id(c): n for n, c in enumerate(module.computations)} if module is not None else {}
    ordered = sorted(comps, key=lambda c: position.get(id(c), len(position)))
    done: set[int] = set()
    out: list[HloComputation] = []
    members = {id(c) for c in comps}

    def visit(c: HloComputation) -> None:  # (recursion as deep as the calls nest)
        if id(c) in done:
            return
        done.add(id(c))
        for i in c.instructions:
            for callee in i.called_computations():
                if id(callee) in members:
                    visit(callee)
        out.append(c)
    for c in ordered:
        visit(c)
    return out


def _without_control(inst: HloInstruction) -> None:
    if CONTROL_PREDECESSORS in inst.attributes:
        inst.attributes = {k: a for k, a in inst.attributes.items() if k != CONTROL_PREDECESSORS}


def extract(inst: HloInstruction, module: HloModule | None = None, *, keep_constants: bool = True) -> HloModule:
    """A new module whose ENTRY computes ``inst`` alone (see the module docstring); ``module``
    is the one ``inst`` belongs to (default: its computation's)."""
    module = module or (inst.parent.parent if inst.parent is not None else None)
    callees = _in_text_order(called_closure(inst), module)
    comp_map: dict[int, HloComputation] = {}
    for c in callees:
        copy = clone_computation(c)
        copy.is_entry = False
        comp_map[id(c)] = copy
    remap = lambda v: comp_map.get(id(v), v)  # noqa: E731
    for copy in comp_map.values():
        for i in copy.instructions:
            remap_attributes(i, remap, HloComputation)

    new_of: dict[int, HloInstruction] = {}
    params: list[HloInstruction] = []
    constants: list[HloInstruction] = []
    for op in inst.operands:
        if id(op) in new_of:
            continue
        if keep_constants and op.opcode == "constant":
            new = clone_instruction(op, [])
            _without_control(new)
            constants.append(new)
        else:
            new = new_instruction(op.name, "parameter", op.shape, parameter_number=len(params), like=op)
            params.append(new)
        new_of[id(op)] = new
    root = clone_instruction(inst, [new_of[id(o)] for o in inst.operands])
    if inst.opcode == "parameter":
        root.parameter_number = 0
    _without_control(root)
    remap_attributes(root, remap, HloComputation)

    names = NameScope(c.name for c in comp_map.values())
    where = inst.parent.name if inst.parent is not None else "main"
    entry = HloComputation(names.fresh(where), [*params, *constants, root], root, is_entry=True)
    base = module.name if module is not None else "module"
    attributes = {k: a for k, a in (module.attributes.items() if module is not None else ())
                  if k in KEPT_MODULE_ATTRIBUTES}
    return HloModule(f"{base}_{inst.name}", [*(comp_map[id(c)] for c in callees), entry], entry, attributes,
                     module.stack_frames if module is not None else "", True)


def extract_instruction(module: HloModule, name: str, *, plan: ModulePlan | None = None,
                        plan_of: Callable[[HloModule], ModulePlan] | None = None, keep_constants: bool = True,
                        verify: bool = True) -> HloModule:
    """The module computing just the instruction (or kernel's fusion) ``name`` of ``module``;
    ``plan`` and ``plan_of`` as for ``resolve``. With ``verify``, the new module is checked
    (``verifier.verify_module``): an instruction that cannot stand alone (``async-done``
    without its start...) is an ``ExtractError`` saying why."""
    inst = resolve(module, name, plan=plan, plan_of=plan_of)
    owner = inst.parent.parent if inst.parent is not None else module
    out = extract(inst, owner, keep_constants=keep_constants)
    if verify:
        from .verifier import verify_module
        try:
            verify_module(out)
        except HloError as e:
            raise ExtractError(f"{inst.opcode} '{inst.name}' cannot stand alone: the extracted module does not "
                               f"verify ({e.message})") from None
    return out
