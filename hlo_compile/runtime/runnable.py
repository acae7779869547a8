"""What the runtime runs outside kernels, known before anything is emitted.

``hlo-compile`` and ``hlo-run`` both refuse, right after fusion planning, an instruction of a
computation the runtime executes that is neither a kernel nor one of the steps below (a
collective, a custom call that is no library call...): compiling the rest would drop it
silently. ``program.STEP_TYPES`` has a builder for exactly these opcodes (a test keeps the two
equal). Kept free of runtime imports so the compile stages can use it without the runtime.
"""
from __future__ import annotations

from typing import Iterable

from ..hlo import HloComputation, HloInstruction
from ..hlo.errors import HloUnsupportedError
from ..hlo.library_targets import library_family

RUNNABLE_OPCODES = frozenset({"parameter", "constant", "bitcast", "opt-barrier", "get-tuple-element", "tuple",
                              "fusion", "while", "conditional", "custom-call", "fft",
                              # collective_steps.py
                              "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                              "collective-broadcast", "ragged-all-to-all", "all-reduce-start", "all-gather-start",
                              "collective-permute-start", "all-reduce-done", "all-gather-done",
                              "collective-permute-done", "partition-id", "replica-id",
                              # async_steps.py
                              "copy-start", "copy-done", "async-start", "async-update", "async-done", "after-all",
                              "rng-get-and-update-state", "send", "recv", "send-done", "recv-done"})
SUPPORTED = ("fusions, parameters, constants, bitcasts, tuples, while, conditional, fft, library calls, "
             "collectives, async pairs with calls=, send/recv and tokens")


def unsupported(inst: HloInstruction, platform: str | None) -> HloUnsupportedError:
    """The refusal of ``inst`` on ``platform`` (None: on any)."""
    where = f" (line {inst.location.line})" if inst.location else ""
    who = f"platform '{platform}' cannot" if platform else "no platform can"
    return HloUnsupportedError(f"{who} run {inst.opcode} '%{inst.name}'{where}: "
                               f"only {SUPPORTED} are supported so far", inst.location)


def check_runnable(computations: Iterable[HloComputation], generated: frozenset[str] = frozenset()) -> None:
    """Refuse the first instruction of ``computations`` that no runtime step runs;
    ``generated``: the library-call families that were to be lowered to kernels
    (``CompileOptions.generated_call_families``), so a call of theirs left is not run either."""
    for comp in computations:
        for inst in comp.instructions:
            if not is_runnable(inst, generated):
                raise unsupported(inst, None)


def is_runnable(inst: HloInstruction, generated: frozenset[str] = frozenset()) -> bool:
    """Whether some runtime step runs ``inst`` (a custom-call only when it is a library call
    kept as a call: ``CompileOptions.gemm``/``conv`` = "library")."""
    if inst.opcode == "custom-call":
        family = library_family(inst.attr("custom_call_target", ""))
        return family is not None and family not in generated
    return inst.opcode in RUNNABLE_OPCODES
