"""Module rewrites before code generation (DESIGN §1).

Each pass rewrites in place with the operations of ``hlo/rewrite.py``. The ones that work on
one computation (``inline_calls``, ``fuse_instructions``, ``wrap_lone_instructions``,
``fuse_and_wrap``) take a computation, or a module for its ENTRY.
"""
from __future__ import annotations

from typing import Callable, Collection, Sequence, Union

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
from .triangular_solve_lowering import lower_triangular_solves
from .tuple_copies import expand_tuple_copies
from .fusion import fuse_instructions
from .scatter_layouts import align_scatter_operand_layouts
from .wrap_fusions import fuse_and_wrap, wrap_lone_instructions

__all__ = ["run_passes", "module_rewrites", "fuse_and_wrap", "pass_name", "REQUIRED_PASSES"]

# The names of the module rewrites (``hlo-compile --list-passes``, --xla_disable_hlo_passes); a
# rewrite not named here is called after its function (``_`` as ``-``).
REWRITE_NAMES = {"wrap_async_sugar": "async-wrapping", "align_layouts": "layout-boundaries",
                 "lower_custom_fusions": "custom-fusions", "rewrite_topk_custom_calls": "topk-custom-call",
                 "rewrite_annotation_calls": "annotation-calls",
                 "expand_rng_bit_generators": "expand-rng-bit-generator",
                 "split_scatter_operands": "scatter-operands",
                 "lower_triangular_solves": "triangular-solve-lowering"}

# The passes code generation or the runtime cannot do without (name → why): they are never skipped.
# Only ``fusion`` may be (the same as --no-fusion).
REQUIRED_PASSES = {
    "async-wrapping": "the runtime runs async sugar (X-start/X-done) only as async-start over a wrapped computation",
    "layout-boundaries": "without its copies a computation reads a buffer with the wrong layout (wrong results)",
    "custom-fusions": "our emitters do not compile XLA:GPU's kCustom (Triton, cuDNN) fusions as they are",
    "split-dynamic-indices": "our emitters only know the scalar start-index form of dynamic-(update-)slice",
    "expand-tuple-copies": "our kernels copy arrays, not tuples",
    "topk-custom-call": "no runtime step runs XLA:CPU's TopK custom call; the sort emitter runs the topk it becomes",
    "annotation-calls": "no runtime step runs annotation custom calls; the copies they become run",
    "expand-rng-bit-generator": "no emitter compiles rng-bit-generator (XLA expands it too)",
    "triangular-solve-lowering": "no emitter or runtime step runs triangular-solve or the cuBLAS trsm call",
    "scatter-operands": "a scatter kernel updates its output in place: the operand must be written first "
                        "(wrong results otherwise)",
    "library-calls": "the library calls --gemm/--conv=generated name (all on the host platform) have no runtime "
                     "step otherwise",
    "inline-calls": "code generation needs a flat ENTRY (no call instructions)",
    "tree-reduction": "the reduction emitters only handle race-free reductions",
    "wrap-fusions": "every instruction that needs a kernel must be a fusion for code generation",
    "prepare-control-flow": "while bodies, conditions and branches must be prepared like ENTRY for code generation",
}

# a rewrite of ``before_fusion``: a function, or (its name, the function)
Rewrite = Union[Callable[[HloModule], HloModule], tuple[str, Callable[[HloModule], HloModule]]]


def pass_name(fn: Callable) -> str:
    """The name a module rewrite is listed and skipped by."""
    name = getattr(fn, "__name__", "rewrite")
    return REWRITE_NAMES.get(name, name.replace("_", "-"))


def run_passes(module: HloModule, before_fusion: Sequence[Rewrite] = (),
               fusion: bool = True, generated_calls: frozenset[str] = ALL_FAMILIES,
               skip: Collection[str] = (),
               after_pass: Callable[[str, HloModule], None] | None = None) -> HloModule:
    """The module code generation sees: a copy of ``module`` with calls in ENTRY inlined, lone
    instructions grouped into fusions (``fusion.py``; skipped with ``fusion=False``) and the
    rest wrapped as one-instruction fusions, and the same done to every computation that a
    while or conditional runs (recursively). The input is left untouched, so the interpreter
    that checks our results never runs our own rewrites. ``before_fusion`` are rewrites the
    code generator needs on lone instructions (e.g. its tree-reduction split), run after
    call inlining and before fusion. The library calls of ``generated_calls`` (families of
    ``hlo/library_targets.py``) are lowered to plain HLO first; the others stay calls.

    ``skip``: passes not run, by name (``pass_steps``); a pass of ``REQUIRED_PASSES`` cannot be
    skipped (ValueError). ``after_pass(name, module)`` is called after each pass that ran, with
    the module as it is then (it must not change it)."""
    skip = frozenset(skip)
    required = sorted(skip & REQUIRED_PASSES.keys())
    if required:
        raise ValueError(f"passes that cannot be skipped: {', '.join(required)}")
    out = clone_module(module)
    for name, step in pass_steps(before_fusion, fusion and "fusion" not in skip, generated_calls):
        if name in skip:
            continue
        out = step(out)
        if after_pass is not None:
            after_pass(name, out)
    return out


def pass_steps(before_fusion: Sequence[Rewrite] = (), fusion: bool = True,
               generated_calls: frozenset[str] = ALL_FAMILIES) -> list[tuple[str, Callable[[HloModule], HloModule]]]:
    """``run_passes``'s passes in order, each (name, function of the module); ``fusion`` false
    leaves the fusion pass out (and fusion in the control-flow computations)."""
    steps = [(pass_name(fn), fn) for fn in module_rewrites()]
    steps.append(("library-calls", lambda m: lower_library_calls(m, generated_calls)))
    steps.append(("inline-calls", inline_calls))
    for rewrite in before_fusion:
        steps.append(rewrite if isinstance(rewrite, tuple) else (pass_name(rewrite), rewrite))
    if fusion:
        steps.append(("fusion", fuse_instructions))
    steps.append(("wrap-fusions", lambda m: wrap_lone_instructions(align_scatter_operand_layouts(m))))
    steps.append(("prepare-control-flow", lambda m: prepare_control_flow(m, fusion)))
    return steps


def module_rewrites() -> list[Callable[[HloModule], HloModule]]:
    """Rewrites of every computation of the module, run first, in order, on the copy: ops that
    XLA itself expands or renames before code generation."""
    return [wrap_async_sugar, lower_triangular_solves, align_layouts, lower_custom_fusions, split_dynamic_indices,
            expand_tuple_copies, rewrite_topk_custom_calls, rewrite_annotation_calls, expand_rng_bit_generators, split_scatter_operands]
