"""The module passes by name, for ``hlo-compile --list-passes`` and ``--passes=a,b,c`` (hlo-opt's
spellings): the passes ``passes.run_passes`` runs, in its order, each runnable alone.

The module-wide rewrites are read from ``passes.module_rewrites()`` so that a rewrite added
there is listed here without a change to this file (named after its function when it has no
entry in ``_REWRITE_NAMES``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..hlo import HloModule
from ..options import CompileOptions


@dataclass(frozen=True)
class NamedPass:
    name: str
    description: str
    run: Callable[[HloModule, CompileOptions], HloModule]


_REWRITE_NAMES = {
    "wrap_async_sugar": ("async-wrapping", "X-start/-update/-done sugar (fusion, call, custom-call, "
                                           "dynamic-update-slice...) as async-start over a wrapped computation"),
    "align_layouts": ("layout-boundaries", "copies where layouts disagree across computation boundaries "
                                           "(as XLA's layout assignment inserts them)"),
    "lower_custom_fusions": ("custom-fusions", "Triton, cuDNN and custom-kernel fusions as fusions our emitters "
                                               "compile, or calls of their computation to re-fuse"),
    "rewrite_topk_custom_calls": ("topk-custom-call", "XLA:CPU's TopK custom call as a topk instruction"),
    "rewrite_annotation_calls": ("annotation-calls", "annotation custom calls (MoveToHost/MoveToDevice, "
                                                     "LayoutConstraint, Sharding on one device) as copies"),
    "expand_rng_bit_generators": ("expand-rng-bit-generator", "rng-bit-generator expanded into integer ops"),
    "split_scatter_operands": ("scatter-operands", "a scatter fusion that computes its operand split in two: "
                                                   "a loop fusion writing the operand, then the scatter (as XLA)"),
}
# XLA's names of the passes that do the same job
ALIASES = {"call-inliner": "inline-calls", "tree-reduction-rewriter": "tree-reduction",
           "tree_reduction_rewriter": "tree-reduction", "layout-assignment": "layout-boundaries"}


def _module_rewrites() -> list[NamedPass]:
    from ..passes import module_rewrites
    out = []
    for fn in module_rewrites():
        name, description = _REWRITE_NAMES.get(fn.__name__, (fn.__name__.replace("_", "-"), fn.__doc__ or ""))
        out.append(NamedPass(name, description.strip().splitlines()[0] if description else "",
                             lambda m, o, fn=fn: fn(m)))
    return out


def _inline(m: HloModule, o: CompileOptions) -> HloModule:
    from ..passes.inline_calls import inline_calls
    return inline_calls(m)


def _tree(m: HloModule, o: CompileOptions) -> HloModule:
    from ..codegen.device_info import device_for_arch
    from ..passes.tree_reduction_fusions import rewrite_tree_reductions_everywhere
    return rewrite_tree_reductions_everywhere(m, device_for_arch(o.arch))


def _fusion(m: HloModule, o: CompileOptions) -> HloModule:
    from ..passes.fusion import fuse_instructions
    return fuse_instructions(m)


def _wrap(m: HloModule, o: CompileOptions) -> HloModule:
    from ..passes.wrap_fusions import wrap_lone_instructions
    return wrap_lone_instructions(m)


def _control_flow(m: HloModule, o: CompileOptions) -> HloModule:
    from ..passes.prepare_control_flow import prepare_control_flow
    return prepare_control_flow(m, o.fusion)


def _library_calls(m: HloModule, o: CompileOptions) -> HloModule:
    from ..passes.library_calls import lower_library_calls
    return lower_library_calls(m, o.generated_call_families())


def all_passes() -> list[NamedPass]:
    """Every pass, in the order a compilation runs them."""
    return _module_rewrites() + [
        NamedPass("library-calls", "cuBLAS/cuDNN calls lowered to plain HLO for our emitters (the families "
                                   "--gemm/--conv=generated name)", _library_calls),
        NamedPass("inline-calls", "call instructions in ENTRY inlined (XLA's call-inliner)", _inline),
        NamedPass("tree-reduction", "XLA's tree-reduction split of reductions that are not race-free, "
                                    "lone or inside a formed fusion (one kernel per stage; for --arch)", _tree),
        NamedPass("fusion", "producer-consumer fusion of lone instructions (XLA's core rules)", _fusion),
        NamedPass("wrap-fusions", "every instruction that needs a kernel and is still alone, wrapped as a "
                                  "one-instruction fusion", _wrap),
        NamedPass("prepare-control-flow", "the same passes in the computations while and conditional run",
                  _control_flow),
    ]


def resolve(names: list[str]) -> list[NamedPass]:
    """The passes named (ours or XLA's names), in the order given; an unknown name is an error
    listing the known ones."""
    from .common import UserError
    table = {p.name: p for p in all_passes()}
    chosen = []
    for raw in names:
        name = ALIASES.get(raw.strip(), raw.strip())
        if name not in table:
            raise UserError(f"--passes: unknown pass '{raw.strip()}'; passes: {', '.join(table)} "
                            f"(see --list-passes)")
        chosen.append(table[name])
    if not chosen:
        raise UserError("--passes takes a comma-separated list of passes (see --list-passes)")
    return chosen


def run_chosen(module: HloModule, chosen: list[NamedPass], options: CompileOptions) -> HloModule:
    """``module`` (a copy) after ``chosen`` passes only, in order."""
    from ..hlo.ir import clone_module
    out = clone_module(module)
    for p in chosen:
        out = p.run(out, options)
    return out


def list_text() -> str:
    passes = all_passes()
    width = max(len(p.name) for p in passes)
    lines = [f"{p.name:<{width}}  {p.description}" for p in passes]
    lines.append("")
    lines.append("XLA's names accepted: " + ", ".join(f"{a} ({b})" for a, b in sorted(ALIASES.items())))
    return "\n".join(lines) + "\n"
