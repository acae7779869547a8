"""Module rewrites before code generation (DESIGN §1).

Each pass rewrites in place with the operations of ``hlo/rewrite.py``. The ones that work on
one computation (``inline_calls``, ``fuse_instructions``, ``wrap_lone_instructions``,
``fuse_and_wrap``) take a computation, or a module for its ENTRY.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection

from ..hlo import HloModule
from ..hlo.ir import clone_module
from .async_wrapping import wrap_async_sugar
from .batch_norm_expander import expand_batch_norms
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
from .fusion import fuse_instructions
from .scatter_layouts import align_scatter_operand_layouts
from .tree_reduction_fusions import rewrite_tree_reductions_for_arch
from .wrap_fusions import fuse_and_wrap, wrap_lone_instructions

__all__ = ["run_passes", "fuse_and_wrap", "PASSES", "Pass", "PassContext", "REQUIRED_PASSES"]


@dataclass(frozen=True)
class PassContext:
    """What the passes read besides the module."""
    generated_calls: frozenset[str] = ALL_FAMILIES  # library-call families lowered to plain HLO
    fusion: bool = True  # False: no fusion pass, and none in the control-flow computations
    arch: str | None = None  # the target: tree-reduction runs for it; None (tests of other passes): not run


@dataclass(frozen=True)
class Pass:
    """One module pass: ``run(module, context)`` returns the module (a copy's rewrite, in place or
    not)."""
    name: str  # --list-passes, --passes, --xla_disable_hlo_passes, per-pass dump file names
    description: str  # --list-passes
    run: Callable[[HloModule, PassContext], HloModule]
    required: str = ""  # why code generation or the runtime cannot do without it ("": it may be skipped)


def _lower_triangular_solves(module: HloModule) -> HloModule:
    """``triangular_solve_lowering.lower_triangular_solves``, whose module (and the attention
    builder it imports) is loaded only for a module that holds a triangular solve's or a
    cholesky's opcode or a custom call (the cuBLAS trsm call): it changes no other module."""
    if not any(i.opcode in ("triangular-solve", "cholesky", "custom-call") for c in module.computations
               for i in c.instructions):
        return module
    from .triangular_solve_lowering import lower_triangular_solves
    return lower_triangular_solves(module)


# Every pass, in the order a compilation runs them: the one table ``run_passes``, ``hlo-compile
# --list-passes``/``--passes`` (cli/pass_list.py) and the per-pass dumps read. A pass is added
# here and nowhere else. Only ``fusion`` may be skipped (the same as --no-fusion).
PASSES: tuple[Pass, ...] = (
    Pass("async-wrapping", "X-start/-update/-done sugar (fusion, call, custom-call, dynamic-update-slice...) as "
                           "async-start over a wrapped computation",
         lambda m, c: wrap_async_sugar(m),
         "the runtime runs async sugar (X-start/X-done) only as async-start over a wrapped computation"),
    Pass("triangular-solve-lowering", "triangular-solve and cholesky (the ops, and cuBLAS's triangularSolve call) "
                                      "outside fusions as while loops of plain HLO",
         lambda m, c: _lower_triangular_solves(m),
         "no emitter or runtime step runs triangular-solve or the cuBLAS trsm call"),
    Pass("layout-boundaries", "copies where layouts disagree across computation boundaries (as XLA's layout "
                              "assignment inserts them)",
         lambda m, c: align_layouts(m),
         "without its copies a computation reads a buffer with the wrong layout (wrong results)"),
    Pass("custom-fusions", "Triton, cuDNN and custom-kernel fusions as fusions our emitters compile, or calls of "
                           "their computation to re-fuse",
         lambda m, c: lower_custom_fusions(m),
         "our emitters do not compile XLA:GPU's kCustom (Triton, cuDNN) fusions as they are"),
    Pass("split-dynamic-indices", "Old-form dynamic-slice/-update-slice start-index vectors split into scalars "
                                  "(XLA's dynamic-index-splitter).",
         lambda m, c: split_dynamic_indices(m),
         "our emitters only know the scalar start-index form of dynamic-(update-)slice"),
    Pass("expand-tuple-copies", "Copies of tuples as tuples of leaf copies (XLA's deep copy); in place.",
         lambda m, c: expand_tuple_copies(m),
         "our kernels copy arrays, not tuples"),
    Pass("topk-custom-call", "XLA's TopK custom calls (XLA:CPU's TopK, XLA:GPU's __gpu$TopK) as a topk instruction",
         lambda m, c: rewrite_topk_custom_calls(m),
         "no runtime step runs XLA's TopK custom calls; the sort emitter runs the topk they become"),
    Pass("annotation-calls", "annotation custom calls (MoveToHost/MoveToDevice, LayoutConstraint, Sharding on "
                             "one device) as copies",
         lambda m, c: rewrite_annotation_calls(m),
         "no runtime step runs annotation custom calls; the copies they become run"),
    Pass("expand-rng-bit-generator", "rng-bit-generator expanded into integer ops",
         lambda m, c: expand_rng_bit_generators(m),
         "no emitter compiles rng-bit-generator (XLA expands it too)"),
    Pass("batch-norm-expander", "batch-norm-training/-inference/-grad as reduces, broadcasts and elementwise ops "
                                "(XLA's BatchNormExpander)",
         lambda m, c: expand_batch_norms(m),
         "no emitter compiles the batch-norm ops (XLA expands them too)"),
    Pass("scatter-operands", "a scatter fusion that computes its operand split in two: a loop fusion writing the "
                             "operand, then the scatter (as XLA)",
         lambda m, c: split_scatter_operands(m),
         "a scatter kernel updates its output in place: the operand must be written first (wrong results "
         "otherwise)"),
    Pass("library-calls", "cuBLAS/cuDNN calls lowered to plain HLO for our emitters (the families "
                          "--gemm/--conv=generated name)",
         lambda m, c: lower_library_calls(m, c.generated_calls),
         "the library calls --gemm/--conv=generated name (all on the host platform) have no runtime step "
         "otherwise"),
    Pass("inline-calls", "call instructions in ENTRY inlined (XLA's call-inliner)",
         lambda m, c: inline_calls(m),
         "code generation needs a flat ENTRY (no call instructions)"),
    Pass("tree-reduction", "XLA's tree-reduction split of reductions that are not race-free, lone or inside a "
                           "formed fusion (one kernel per stage; for --arch)",
         lambda m, c: rewrite_tree_reductions_for_arch(m, c.arch),
         "the reduction emitters only handle race-free reductions"),
    Pass("fusion", "producer-consumer fusion of lone instructions (XLA's core rules)",
         lambda m, c: fuse_instructions(m)),
    Pass("wrap-fusions", "every instruction that needs a kernel and is still alone, wrapped as a one-instruction "
                         "fusion",
         lambda m, c: wrap_lone_instructions(align_scatter_operand_layouts(m)),
         "every instruction that needs a kernel must be a fusion for code generation"),
    Pass("prepare-control-flow", "the same passes in the computations while and conditional run",
         lambda m, c: prepare_control_flow(m, c.fusion),
         "while bodies, conditions and branches must be prepared like ENTRY for code generation"),
)

# The passes code generation or the runtime cannot do without (name → why): they are never skipped.
REQUIRED_PASSES = {p.name: p.required for p in PASSES if p.required}


def run_passes(module: HloModule, fusion: bool = True, generated_calls: frozenset[str] = ALL_FAMILIES,
               skip: Collection[str] = (), after_pass: Callable[[str, HloModule], None] | None = None,
               arch: str | None = None) -> HloModule:
    """The module code generation sees: a copy of ``module`` after ``PASSES``: calls in ENTRY
    inlined, lone instructions grouped into fusions (``fusion.py``; skipped with
    ``fusion=False``) and the rest wrapped as one-instruction fusions, and the same done to every
    computation that a while or conditional runs (recursively). The input is left untouched, so
    the interpreter that checks our results never runs our own rewrites. The library calls of
    ``generated_calls`` (families of ``hlo/calls/library_targets.py``) are lowered to plain HLO first;
    the others stay calls. ``arch``: the target the tree-reduction split is made for (the code
    generator's ``prepare_module`` gives it); without one that pass is not run.

    ``skip``: passes not run, by name; a pass of ``REQUIRED_PASSES`` cannot be skipped
    (ValueError). ``after_pass(name, module)`` is called after each pass that ran, with the
    module as it is then (it must not change it)."""
    skip = frozenset(skip)
    required = sorted(skip & REQUIRED_PASSES.keys())
    if required:
        raise ValueError(f"passes that cannot be skipped: {', '.join(required)}")
    context = PassContext(generated_calls, fusion and "fusion" not in skip, arch)
    out = clone_module(module)
    for p in pass_steps(context):
        if p.name in skip:
            continue
        out = p.run(out, context)
        if after_pass is not None:
            after_pass(p.name, out)
    return out


def pass_steps(context: PassContext) -> list[Pass]:
    """The passes ``run_passes`` runs for ``context``, in order: ``PASSES`` less ``fusion`` when
    ``context.fusion`` is false and ``tree-reduction`` when it has no ``arch``."""
    return [p for p in PASSES if (p.name != "fusion" or context.fusion)
            and (p.name != "tree-reduction" or context.arch is not None)]
