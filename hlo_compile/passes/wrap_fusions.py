"""Wrap lone instructions (of ENTRY, or of a computation control flow runs) into
single-instruction fusions, as XLA's ``FusionWrapper``.

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

from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.hlo.rewrite import (NameScope, Target, add_computation, add_computations, computation_of,
                                     module_of, new_instruction, replace_instructions, set_entry)

from .fusion import fuse_instructions
from .fusion_builder import build_fusion, fusion_attributes
from .scatter_layouts import align_scatter_operand_layouts

# Opcodes that never get a kernel of their own.
_NO_KERNEL = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "fusion", "domain",
    "while", "conditional", "call", "after-all", "add-dependency", "opt-barrier", "custom-call", "fft",
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


def wrap_lone_instructions(target: Target) -> Target:
    """Wrap every instruction of ``target`` (a computation, or a module's ENTRY) that needs a
    kernel into a ``kind=kLoop`` fusion.

    Rewrites in place and returns ``target``. Each wrapped instruction moves into a new
    computation ``fused_<name>`` (placed before the computation) whose parameters stand for its
    distinct operands; a ``fusion`` of the same name, shape and (distinct) operands replaces
    it. Control predecessors move to the fusion, since the wrapped instruction no longer
    lives beside them.
    """
    comp = computation_of(target)
    module = module_of(comp)
    names = NameScope.of_computations(module)
    replaced: dict[HloInstruction, HloInstruction] = {}
    for inst in comp.instructions:
        if needs_kernel(inst):
            replaced[inst] = build_fusion([inst], inst, names.fresh(f"fused_{inst.name}"), "kLoop")
    add_computations(module, [f.fused_computation for f in replaced.values()], before=comp)
    replace_instructions(comp, replaced)
    return target


def fuse_and_wrap(target: Target, fusion: bool = True) -> Target:
    """``target``'s lone instructions grouped into fusions (skipped with ``fusion=False``),
    scatter operands given their outputs' layouts, then the rest wrapped one per fusion."""
    return wrap_lone_instructions(align_scatter_operand_layouts(fuse_instructions(target) if fusion else target))


def wrap_entry_as_fusion(module: HloModule, kind: str = "kLoop") -> HloModule:
    """Turn a module whose ENTRY is a bare fused computation (XLA's emitter test files) into
    one whose new ENTRY ``main`` passes its parameters to a ``fusion`` calling it. Modules whose
    ENTRY already holds a fusion are returned unchanged. Rewrites in place and returns it."""
    body = module.entry
    if any(i.opcode == "fusion" for i in body.instructions):
        return module
    params = [new_instruction(p.name, "parameter", p.shape, parameter_number=p.parameter_number)
              for p in body.parameters]
    fusion = new_instruction("fusion", "fusion", body.root.shape, params, fusion_attributes(body, kind))
    entry = HloComputation(NameScope.of_computations(module).fresh("main"), params + [fusion], fusion)
    add_computation(module, entry, after=body)
    set_entry(module, entry)
    return module
