"""The module passes by name, for ``hlo-compile --list-passes`` and ``--passes=a,b,c`` (hlo-opt's
spellings): ``passes.PASSES``, the table ``passes.run_passes`` runs, in its order, each runnable
alone. A pass is added to that table only; this file names XLA's aliases and nothing else.
"""
from __future__ import annotations

from ..hlo import HloModule
from ..options import CompileOptions
from ..passes import PASSES, REQUIRED_PASSES, Pass, PassContext

# XLA's names of the passes that do the same job
ALIASES = {"call-inliner": "inline-calls", "tree-reduction-rewriter": "tree-reduction",
           "tree_reduction_rewriter": "tree-reduction", "layout-assignment": "layout-boundaries"}


def all_passes() -> list[Pass]:
    """Every pass, in the order a compilation runs them."""
    return list(PASSES)


def resolve(names: list[str]) -> list[Pass]:
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


def run_chosen(module: HloModule, chosen: list[Pass], options: CompileOptions) -> HloModule:
    """``module`` (a copy) after ``chosen`` passes only, in order."""
    from ..hlo.ir import clone_module
    context = PassContext(options.generated_call_families(), options.fusion, options.arch)
    out = clone_module(module)
    for p in chosen:
        out = p.run(out, context)
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
