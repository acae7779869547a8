"""XLA:GPU's library calls lowered to the plain HLO they compute, for our emitters.

A ``__cublas$*`` GEMM, a ``__cudnn$conv*`` convolution or a ``__cudnn$fmha*`` attention call is
replaced by the HLO of its exact semantics (notes/xla-gpu-calls.md §1-3): a fusion our GEMM or
convolution emitter compiles with the epilogue fused, plus whatever else the call computes.
Users of the call read its tuple through ``get-tuple-element``; those reads are redirected to
the new values, and the scratch buffer (the tuple's last leaf, contents undefined) is only
materialised when something reads the tuple as a whole.

Each family's lowering lives in its own module and registers its targets in ``LOWERINGS``:
``gemm_lowering.py``, ``conv_lowering.py``, ``fmha_lowering.py``, ``te_attention_lowering.py``
(Transformer Engine's ``te_fused_attn_*_ffi``).
"""
from __future__ import annotations

import functools
from typing import Callable

from ..hlo import HloComputation, HloInstruction, HloModule
from ..hlo.calls.library_targets import TE_ATTENTION_TARGETS, library_family

# target -> lower(computation, call): replaces ``call`` in ``computation`` by plain HLO
Lowering = Callable[[HloComputation, HloInstruction], None]


@functools.lru_cache(maxsize=None)
def lowerings() -> dict[str, Lowering]:
    """Every family's lowerings, by custom-call target. Their modules (and the call readers
    they import) are loaded on the first module that has a custom call: most compiles have none."""
    from . import conv_lowering, fmha_lowering, gemm_lowering, te_attention_lowering
    return {**gemm_lowering.LOWERINGS, **conv_lowering.LOWERINGS, **fmha_lowering.LOWERINGS,
            **te_attention_lowering.LOWERINGS}


ALL_FAMILIES = frozenset({"gemm", "conv", "fmha"})


def lower_library_calls(module: HloModule, families: frozenset[str] = ALL_FAMILIES) -> HloModule:
    """Replace, in every computation, each library call of ``families`` that has a lowering,
    and each other one its library does not take (``library_refusal``); in place. A call with no lowering stays, and is refused later by name. Transformer
    Engine's attention calls have no library step: they are always lowered."""
    if not any(inst.opcode == "custom-call" for comp in module.computations for inst in comp.instructions):
        return module  # nothing to lower (nor to check)
    from ..hlo.calls.library_limits import library_refusal
    from . import te_attention_lowering
    te_attention_lowering.check_module(module)
    lowering_of = lowerings()
    for comp in module.computations:
        for inst in list(comp.instructions):
            if inst.opcode != "custom-call":
                continue
            target = inst.attr("custom_call_target", None)
            lower = lowering_of.get(target)
            if lower is None:
                continue
            # a call its library would refuse (or compute wrongly) is lowered even where the
            # family stays a library call (hlo/calls/library_limits.py)
            if library_family(target) in families or target in TE_ATTENTION_TARGETS or library_refusal(inst):
                lower(comp, inst)
    return module
