"""What the runtime runs outside kernels, known before anything is emitted.

``hlo-compile`` and ``hlo-run`` both refuse, right after fusion planning, an instruction of a
computation the runtime executes that is neither a kernel nor one of the steps below (a
collective, a custom call that is no library call...): compiling the rest would drop it
silently. ``STEP_KINDS`` is the one list of those opcodes; ``program.STEP_TYPES`` is built
from it. Kept free of runtime imports so the compile stages can use it without the runtime.
"""
from __future__ import annotations

import re
from typing import Iterable

from ..hlo import HloComputation, HloInstruction
from ..hlo.collective_groups import ragged_form_refusal
from ..hlo.errors import HloUnsupportedError
from ..hlo.calls.library_targets import library_family

# The one list of what runs outside kernels: opcode -> the kind of step that runs it.
# ``program.STEP_TYPES`` is built from it (a builder per kind, in program.py, collective_steps.py
# and async_steps.py), so an opcode is added here or nowhere.
STEP_KINDS: dict[str, str] = {
    "parameter": "parameter", "constant": "constant", "bitcast": "bitcast", "opt-barrier": "pass-through",
    "get-tuple-element": "get-tuple-element", "tuple": "tuple", "fusion": "kernel", "while": "while",
    "conditional": "conditional", "custom-call": "library-call", "fft": "fft",
    # collective_steps.py
    **{op: "collective" for op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                                   "collective-broadcast", "ragged-all-to-all", "all-reduce-start",
                                   "all-gather-start", "collective-permute-start")},
    **{op: "collective-done" for op in ("all-reduce-done", "all-gather-done", "collective-permute-done")},
    "partition-id": "logical-id", "replica-id": "logical-id",
    # async_steps.py
    **{op: op for op in ("copy-start", "copy-done", "async-start", "async-update", "async-done", "after-all",
                         "rng-get-and-update-state", "send", "recv", "send-done", "recv-done")},
}
RUNNABLE_OPCODES = frozenset(STEP_KINDS)
SUPPORTED = ("fusions, parameters, constants, bitcasts, tuples, while, conditional, fft, library calls, "
             "collectives, async pairs with calls=, send/recv and tokens")


def unsupported(inst: HloInstruction, platform: str | None) -> HloUnsupportedError:
    """The refusal of ``inst`` on ``platform`` (None: on any): ``where(inst)``, so a custom
    call names its target and an instruction our passes made the user's own."""
    who = f"platform '{platform}' cannot" if platform else "no platform can"
    return HloUnsupportedError(f"{who} run {where(inst)}: "
                               f"only {SUPPORTED} are supported so far", inst.location)


def check_runnable(computations: Iterable[HloComputation], generated: frozenset[str] = frozenset()) -> None:
    """Refuse the first instruction of ``computations`` that no runtime step runs, or whose
    step would refuse it when built (a collective's form or reducer: ``collective_refusal``);
    ``generated``: the library-call families that were to be lowered to kernels
    (``CompileOptions.generated_call_families``), so a call of theirs left is not run either."""
    for comp in computations:
        for inst in comp.instructions:
            if not is_runnable(inst, generated):
                raise unsupported(inst, None)
            why = collective_refusal(inst)
            if why is not None:
                raise HloUnsupportedError(f"{where(inst)}: {why}", inst.location)


def where(inst: HloInstruction) -> str:
    """``opcode '%name' (line N)``, as refusals name an instruction; a custom call with its
    ``custom_call_target``, and an instruction our passes made (``%wrapped_start1``, a name not
    in the user's file) with the name of the user's instruction it was made from."""
    text = f"{inst.opcode} '%{inst.name}'" + (f" (line {inst.location.line})" if inst.location else "")
    origin = source_name(inst)
    if origin is not None:
        text += f", made from the input's '%{origin}'"
    target = inst.attr("custom_call_target", None) if inst.opcode == "custom-call" else None
    if target is not None:
        text += f', custom_call_target="{target}"'
    return text


_DEFINED_NAME = re.compile(r"\s*(?:ROOT\s+)?%?([A-Za-z_$][\w.\-$]*)\s*=")


def source_name(inst: HloInstruction) -> str | None:
    """The name the user's file gives the instruction ``inst`` stands for, when our passes made
    or renamed ``inst`` (it keeps the source location of what it was made from: the line that
    defines that instruction); None when the names agree or the line defines none."""
    line = inst.location.source_line if inst.location else ""
    m = _DEFINED_NAME.match(line or "")
    if m is None or m.group(1) == inst.name:
        return None
    return m.group(1)


# an all-reduce's (reduce-scatter's) to_apply root → its elementwise kind (XLA's MatchReductionComputation)
REDUCTION_KINDS = frozenset({"add", "multiply", "minimum", "maximum", "and", "or"})


def reduction_kind(inst: HloInstruction) -> str | None:
    """The kind of an all-reduce's or reduce-scatter's ``to_apply`` (``add``, ``multiply``,
    ``minimum``, ``maximum`` of its two parameters; ``and``, ``or`` of pred only: XLA's
    ``MatchReductionInstruction`` runs them as min/max, and/or of integers are bitwise and it
    refuses them), None for any other."""
    comp = inst.attr("to_apply", None)
    if not isinstance(comp, HloComputation):
        return None
    root = comp.root
    params = {id(p) for p in comp.parameters}
    if (root.opcode in REDUCTION_KINDS and len(root.operands) == 2 and len(comp.parameters) == 2
            and {id(o) for o in root.operands} == params
            and (root.opcode not in ("and", "or") or root.shape.element_type == "pred")):
        return root.opcode
    return None


def collective_refusal(inst: HloInstruction) -> str | None:
    """Why the collective step (``collective_steps.Collective``) refuses ``inst``, else None."""
    op = inst.opcode
    base = op[:-len("-start")] if op.endswith("-start") else op
    if base in ("all-reduce", "reduce-scatter") and op in RUNNABLE_OPCODES and reduction_kind(inst) is None:
        comp = inst.attr("to_apply", None)
        name = comp.name if isinstance(comp, HloComputation) else "?"
        return (f"its reduction computation {name} is not add, multiply, minimum, maximum (or and, or of pred) of "
                "its two parameters")
    if base == "collective-permute" and len(inst.operands) == 4 and inst.has_attr("slice_sizes"):
        return "the in-place form (offsets, slice_sizes) is not supported"
    if base == "collective-broadcast" and inst.attr("has_dynamic_root", False):
        return "dynamic roots are not supported"
    if op == "ragged-all-to-all":
        return ragged_form_refusal(inst)
    return None


def is_runnable(inst: HloInstruction, generated: frozenset[str] = frozenset()) -> bool:
    """Whether some runtime step runs ``inst`` (a custom-call only when it is a library call
    kept as a call: ``CompileOptions.gemm``/``conv`` = "library")."""
    if inst.opcode == "custom-call":
        family = library_family(inst.attr("custom_call_target", ""))
        return family is not None and family not in generated
    return inst.opcode in RUNNABLE_OPCODES
