"""Prepare the computations that ``while`` and ``conditional`` run, as ENTRY is prepared.

The runtime runs a ``while``'s condition and body and a ``conditional``'s branches as
sub-executables of their own (DESIGN §4): each is a thunk sequence over fusions, exactly like
ENTRY. So each such computation goes through the same rewrites as ENTRY: its ``call``s are
inlined (``inline_calls``), its lone instructions fused and the rest wrapped as fusions
(``fuse_and_wrap``). This is done recursively, for a ``while`` inside a branch or a
``conditional`` inside a body (inlining a ``call`` may bring in new ones too).

Fusion names then have to be unique over every computation the runtime executes, since
kernels are named after their fusion: a fusion of a sub-computation whose name is taken
elsewhere becomes ``name.1``, ``name.2``... (ENTRY's fusions keep theirs).

A computation called by control flow and also by something else (a ``reduce``'s ``to_apply``,
a fusion's ``calls``) would be rewritten for both; XLA never produces that and we do not handle
it (the reducer would then see a fusion).
"""
from __future__ import annotations

from hlo_compile.hlo.ir import HloComputation, HloModule
from hlo_compile.hlo.rewrite import NameScope, rename

from .inline_calls import inline_calls
from .wrap_fusions import fuse_and_wrap

# attribute names of the computations each control-flow opcode runs on the host side
CONTROL_FLOW_ATTRIBUTES = {
    "while": ("condition", "body"),
    "conditional": ("true_computation", "false_computation", "branch_computations"),
    "async-start": ("calls",),  # the wrapped computation: a program of its own (runtime/async_steps.py)
}


def control_flow_callees(comp: HloComputation) -> list[HloComputation]:
    """The computations ``comp``'s while and conditional instructions run, in order, once each."""
    out: list[HloComputation] = []
    for inst in comp.instructions:
        for name in CONTROL_FLOW_ATTRIBUTES.get(inst.opcode, ()):
            value = inst.attr(name, None)
            for c in (value if isinstance(value, tuple) else (value,)):
                if isinstance(c, HloComputation) and all(c is not o for o in out):
                    out.append(c)
    return out


def executed_computations(module: HloModule) -> list[HloComputation]:
    """ENTRY first, then every computation reached from it through while/conditional
    (transitively), each once: the computations the runtime runs as thunk sequences."""
    out = [module.entry]
    seen = {id(module.entry)}
    i = 0
    while i < len(out):
        for c in control_flow_callees(out[i]):
            if id(c) not in seen:
                seen.add(id(c))
                out.append(c)
        i += 1
    return out


def prepare_control_flow(module: HloModule, fusion: bool = True) -> HloModule:
    """Inline calls, fuse (unless ``fusion`` is false) and wrap lone instructions in every
    computation reached from ENTRY through while/conditional (ENTRY itself is expected to be
    prepared already); rewrites in place and returns the module."""
    entry = module.entry
    done = {id(entry)}
    pending = control_flow_callees(entry)
    prepared: list[HloComputation] = []
    while pending:
        comp = pending.pop(0)
        if id(comp) in done:
            continue
        done.add(id(comp))
        fuse_and_wrap(inline_calls(comp), fusion)
        prepared.append(comp)
        pending.extend(c for c in control_flow_callees(comp) if id(c) not in done)
    if prepared:
        _unique_fusion_names([entry] + prepared)
    return module


def _unique_fusion_names(comps: list[HloComputation]) -> None:
    names = NameScope.of_instructions(comps)
    seen: set[str] = set()
    for comp in comps:
        for inst in comp.instructions:
            if inst.opcode != "fusion":
                continue
            if inst.name in seen:
                rename(inst, names.fresh(inst.name))
            seen.add(inst.name)
