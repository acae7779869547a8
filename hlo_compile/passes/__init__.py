"""Module rewrites before code generation (DESIGN §1)."""
from __future__ import annotations

from ..hlo import HloModule
from ..hlo.ir import clone_module


def run_passes(module: HloModule) -> HloModule:
    """The module code generation sees: a copy of ``module`` with calls in ENTRY inlined and
    lone instructions wrapped as fusions. The input is left untouched, so the interpreter
    that checks our results never runs our own rewrites."""
    from .inline_calls import inline_calls
    from .wrap_fusions import wrap_lone_instructions
    out = clone_module(module)
    return wrap_lone_instructions(inline_calls(out))
