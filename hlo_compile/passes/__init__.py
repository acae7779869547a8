"""Module rewrites before code generation (DESIGN §1).

Each pass rewrites in place with the operations of ``hlo/rewrite.py``. The ones that work on
one computation (``inline_calls``, ``fuse_instructions``, ``wrap_lone_instructions``,
``fuse_and_wrap``) take a computation, or a module for its ENTRY.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..hlo import HloModule
from ..hlo.ir import clone_module
from .async_wrapping import wrap_async_sugar
from .custom_fusions import lower_custom_fusions
from .dynamic_index_splitter import split_dynamic_indices
from .expand_rng_bit_generator import expand_rng_bit_generators
from .inline_calls import inline_calls
from .layout_boundaries import align_layouts
from .library_calls import ALL_FAMILIES, lower_library_calls
from .prepare_control_flow import prepare_control_flow
from .scatter_operands import split_scatter_operands
from .annotation_calls import rewrite_annotation_calls
from .topk_custom_call import rewrite_topk_custom_calls
from .tuple_copies import expand_tuple_copies
from .wrap_fusions import fuse_and_wrap

__all__ = ["run_passes", "module_rewrites", "fuse_and_wrap"]


def run_passes(module: HloModule, before_fusion: Sequence[Callable[[HloModule], HloModule]] = (),
               fusion: bool = True, generated_calls: frozenset[str] = ALL_FAMILIES) -> HloModule:
    """The module code generation sees: a copy of ``module`` with calls in ENTRY inlined, lone
    instructions grouped into fusions (``fusion.py``; skipped with ``fusion=False``) and the
    rest wrapped as one-instruction fusions, and the same done to every computation that a
    while or conditional runs (recursively). The input is left untouched, so the interpreter
    that checks our results never runs our own rewrites. ``before_fusion`` are rewrites the
    code generator needs on lone instructions (e.g. its tree-reduction split), run after
    call inlining and before fusion. The library calls of ``generated_calls`` (families of
    ``hlo/library_targets.py``) are lowered to plain HLO first; the others stay calls."""
    out = clone_module(module)
    for rewrite in module_rewrites():
        out = rewrite(out)
    out = lower_library_calls(out, generated_calls)
    out = inline_calls(out)
    for rewrite in before_fusion:
        out = rewrite(out)
    return prepare_control_flow(fuse_and_wrap(out, fusion), fusion)


def module_rewrites() -> list[Callable[[HloModule], HloModule]]:
    """Rewrites of every computation of the module, run first, in order, on the copy: ops that
    XLA itself expands or renames before code generation."""
    return [wrap_async_sugar, align_layouts, lower_custom_fusions, split_dynamic_indices, expand_tuple_copies,
            rewrite_topk_custom_calls, rewrite_annotation_calls, expand_rng_bit_generators, split_scatter_operands]
