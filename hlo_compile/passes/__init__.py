"""Module rewrites before code generation (DESIGN §1)."""
from __future__ import annotations

from typing import Callable, Sequence

from ..hlo import HloModule
from ..hlo.ir import clone_module


def run_passes(module: HloModule, before_fusion: Sequence[Callable[[HloModule], HloModule]] = ()) -> HloModule:
    """The module code generation sees: a copy of ``module`` with calls in ENTRY inlined and
    lone instructions wrapped as fusions, and the same done to every computation that a
    while or conditional runs (recursively). The input is left untouched, so the interpreter
    that checks our results never runs our own rewrites. ``before_fusion`` are rewrites the
    code generator needs on lone instructions (e.g. its tree-reduction split), run after
    call inlining and before fusion wrapping."""
    from .inline_calls import inline_calls
    from .prepare_control_flow import prepare_control_flow
    from .wrap_fusions import wrap_lone_instructions
    out = inline_calls(clone_module(module))
    for rewrite in before_fusion:
        out = rewrite(out)
    return prepare_control_flow(wrap_lone_instructions(out))
