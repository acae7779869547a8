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


# the rewrites' descriptions (their names: ``passes.pass_name``)
_REWRITE_DESCRIPTIONS = {
    "wrap_async_sugar": "X-start/-update/-done sugar (fusion, call, custom-call, dynamic-update-slice...) as "
                        "async-start over a wrapped computation",
    "align_layouts": "copies where layouts disagree across computation boundaries (as XLA's layout assignment "
                     "inserts them)",
    "lower_custom_fusions": "Triton, cuDNN and custom-kernel fusions as fusions our emitters compile, or calls of "
                            "their computation to re-fuse",
    "rewrite_topk_custom_calls": "XLA:CPU's TopK custom call as a topk instruction",
    "rewrite_annotation_calls": "annotation custom calls (MoveToHost/MoveToDevice, LayoutConstraint, Sharding on "
                                "one device) as copies",
    "expand_rng_bit_generators": "rng-bit-generator expanded into integer ops",
    "split_scatter_operands": "a scatter fusion that computes its operand split in two: a loop fusion writing the "
                              "operand, then the scatter (as XLA)",
}
# XLA's names of the passes that do the same job
ALIASES = {"call-inliner": "inline-calls", "tree-reduction-rewriter": "tree-reduction",
           "tree_reduction_rewriter": "tree-reduction", "layout-assignment": "layout-boundaries"}


def _module_rewrites() -> list[NamedPass]:
    from ..passes import module_rewrites, pass_name
    out = []
    for fn in module_rewrites():
        name, description = pass_name(fn), _REWRITE_DESCRIPTIONS.get(fn.__name__, fn.__doc__ or "")
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


def skipped_passes(disable: tuple[str, ...] = (), enable_only: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The passes ``--disable-passes``/``--xla_disable_hlo_passes`` and ``--enable-passes-only``/
    ``--xla_enable_hlo_passes_only`` (each given any number of times, comma-separated lists;
    ours or XLA's names) skip, sorted (``CompileOptions.skip_passes``). An unknown name, or a
    pass code generation needs, is an error saying so."""
    from ..passes import REQUIRED_PASSES
    from .common import UserError
    names = [p.name for p in all_passes()]

    def canonical(lists: tuple[str, ...], flag: str) -> set[str]:
        out = set()
        for raw in (n.strip() for value in lists for n in value.split(",")):
            if not raw:
                continue
            name = ALIASES.get(raw, raw)
            if name not in names:
                raise UserError(f"{flag}: unknown pass '{raw}'; passes: {', '.join(names)} (see --list-passes)")
            out.add(name)
        if lists and not out:
            raise UserError(f"{flag} takes a comma-separated list of passes (see --list-passes)")
        return out

    skip = canonical(disable, "--xla_disable_hlo_passes")
    required = [n for n in names if n in skip and n in REQUIRED_PASSES]
    if required:
        raise UserError(f"--xla_disable_hlo_passes: pass '{required[0]}' cannot be skipped: "
                        f"{REQUIRED_PASSES[required[0]]} (only {', '.join(skippable_passes())} can be)")
    if enable_only:
        enabled = canonical(enable_only, "--xla_enable_hlo_passes_only")
        missing = [n for n in names if n not in enabled and n in REQUIRED_PASSES]
        if missing:
            raise UserError(f"--xla_enable_hlo_passes_only must name every pass code generation needs; "
                            f"missing: {', '.join(missing)} (only {', '.join(skippable_passes())} can be "
                            f"skipped: --xla_disable_hlo_passes=fusion)")
        skip |= {n for n in names if n not in enabled}
    return tuple(sorted(skip))


def skippable_passes() -> list[str]:
    from ..passes import REQUIRED_PASSES
    return [p.name for p in all_passes() if p.name not in REQUIRED_PASSES]


PASS_DUMP_PIPELINE = "passes"  # the pipeline's name in per-pass dump file names


def dump_after_passes(module: HloModule, options: CompileOptions, writer, regex) -> int:
    """XLA's per-pass dumps (``--xla_dump_hlo_pass_re``): the passes run again on ``module``
    (as the compilation ran them: the same function, options and input), and the module
    between two passes, when ``regex`` matches (searches) the name of either, is written by
    ``writer`` (``dump.DumpWriter``) as ``NNNN.passes.after_<pass>.before_<next>.txt``, NNNN
    counting the files written, from ``pipeline-start`` to ``pipeline-end`` as XLA. Returns
    how many files were written."""
    from ..codegen.compiler import prepare_module
    ran = [p.name for p in all_passes()
           if p.name not in options.skip_passes and (options.fusion or p.name != "fusion")]
    order = ["pipeline-start", *ran, "pipeline-end"]
    written = [0]

    def between(i: int, m: HloModule) -> None:  # the module after order[i], before order[i + 1]
        after, before = order[i], order[i + 1]
        if regex.search(after) or regex.search(before):
            writer.write(f"{written[0]:04d}.{PASS_DUMP_PIPELINE}.after_{after}.before_{before}.txt",
                         m.to_text("long"))
            written[0] += 1

    done = [0]

    def after_pass(name: str, m: HloModule) -> None:
        done[0] += 1
        if order[done[0]] != name:  # (all_passes and passes.run_passes disagree: a bug)
            raise RuntimeError(f"pass '{name}' ran where '{order[done[0]]}' was expected")
        between(done[0], m)

    between(0, module)
    prepare_module(module, options, after_pass=after_pass)
    return written[0]


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
    skippable = ", ".join(skippable_passes())
    lines.append(f"Only {skippable} can be skipped (--xla_disable_hlo_passes); the others are needed for code "
                 "generation.")
    lines.append("XLA's names accepted: " + ", ".join(f"{a} ({b})" for a, b in sorted(ALIASES.items())))
    return "\n".join(lines) + "\n"
