"""``hlo-compile --extract=NAME`` and ``--fusion=NAME``: one instruction or one fusion's kernel
of a module, instead of the whole.

``--extract=NAME`` prints the module computing just that instruction (``hlo/extract.py``: its
operands as parameters, the computations it calls copied along); NAME may be a kernel's name
as ``--emit=fusions`` prints it. ``--fusion=NAME --emit=STAGE`` prints STAGE for that one
fusion's kernel: its block of the fusions report; the indexing maps of that fusion alone (of
the extracted module: the same maps); the kernel's LLVM IR, optimised IR, PTX or cubin alone,
made by the same stage functions from the module's plan cut down to that kernel (a fusion that
launches another's kernel gets that kernel). ``hlo`` is refused (``--extract`` prints it), and so
are ``--passes``, ``--dump-to`` and ``--split-input-file``.
"""
from __future__ import annotations

import dataclasses

from ..options import CompileOptions
from .common import UserError

# --fusion=NAME: the stages it limits
FUSION_STAGES = ("fusions", "indexing", "indexing-json", "llvm", "llvm-opt", "ptx", "cubin")


def fusion_argv(argv: list[str]) -> list[str]:
    """``--fusion=NAME`` (a value: the boolean ``--fusion`` takes none) as ``--fusion-name NAME``."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + argv[i:]
        if arg.startswith("--fusion=") or arg.startswith("--fusion_name=") or arg.startswith("--fusion-name="):
            out += ["--fusion-name", arg.partition("=")[2]]
        else:
            out.append(arg)
    return out


def check_selection(extract: str | None, fusion_name: str | None, stage_name: str | None, passes: str | None,
                    dump_to, split_input_file: bool) -> None:
    """The combinations ``--extract`` and ``--fusion=NAME`` take, before any work."""
    if extract is None and fusion_name is None:
        return
    flag = "--extract" if extract is not None else "--fusion=NAME"
    if extract is not None and fusion_name is not None:
        raise UserError("--extract and --fusion=NAME cannot be combined: --extract prints the HLO of one "
                        "instruction, --fusion=NAME one stage of one fusion's kernel")
    for value in (extract, fusion_name):
        if value is not None and not value.strip().lstrip("%"):
            raise UserError(f"{flag} takes an instruction or kernel name")
    if passes is not None:
        raise UserError(f"{flag} cannot be combined with --passes")
    if dump_to is not None:
        raise UserError(f"{flag} prints one instruction or kernel; it does not dump (drop --dump-to)")
    if split_input_file:
        raise UserError(f"{flag} reads one module: it cannot be combined with --split-input-file")
    if extract is not None and stage_name not in (None, "hlo"):
        raise UserError(f"--extract prints HLO; for stage '{stage_name}' of one fusion use --fusion=NAME "
                        f"--emit={stage_name}")
    if fusion_name is not None and stage_name not in FUSION_STAGES:
        raise UserError(f"--fusion=NAME needs --emit= one of {', '.join(FUSION_STAGES)}"
                        + (" (the fusion's HLO: --extract=NAME)" if stage_name in (None, "hlo") else ""))


def extract_text(module, name: str, options: CompileOptions, short_form: bool = False) -> str:
    """The extracted module's text, checked to parse back and verify."""
    from ..hlo import parse_module
    from ..hlo.errors import HloError
    from ..hlo.extract import ExtractError, extract_instruction
    from ..driver.pipeline import fusions_plan
    out = extract_instruction(module, name, plan_of=lambda m: fusions_plan(m, options))
    text = out.to_text("short" if short_form else "long")
    try:
        parse_module(text, f"<{name} extracted>")
    except HloError as e:
        raise ExtractError(f"the module extracted for '{name}' does not parse back ({e.message}); this is a bug "
                           "in hlo-compile, please report it with the input") from None
    return text


def fusion_stage_text(module, name: str, stage_name: str, options: CompileOptions, cache=None,
                      jobs: int = 1) -> str | bytes:
    """Stage ``stage_name`` of the kernel of fusion (or kernel) ``name`` alone."""
    if stage_name in ("indexing", "indexing-json"):
        return _indexing_text(module, name, stage_name, options)
    from ..hlo.extract import find_kernel, kernel_not_found
    from ..driver.pipeline import run_kernel_stages, run_pipeline
    from ..driver.stages import text_of
    result = run_pipeline(module, options, emit="fusions", cache=cache, jobs=jobs)
    plan = result.plan
    k = find_kernel(plan, name)
    if k is None:
        raise kernel_not_found(name, plan)
    if stage_name == "fusions":
        return report_block(result.artifacts["fusions"], k.fusion.name)
    owner = k if k.reuses is None else next(p for p in plan.kernels if p.fusion.name == k.reuses)
    one = dataclasses.replace(plan, kernels=[owner], _by_fusion={})
    return text_of(run_kernel_stages(one, stage_name, options, cache, jobs))


def report_block(report: str, fusion: str) -> str:
    """The fusions report's header (its ``//`` lines before the first block) and the block of
    ``fusion``; the module's other blocks and closing summary are left out."""
    out, inside, header = [], False, True
    head = f"fusion %{fusion} -> kernel "
    for line in report.splitlines(keepends=True):
        header = header and line.startswith("//")
        if header:
            out.append(line)
            continue
        if line.startswith("//"):
            inside = False
            continue
        if not line.startswith(" "):
            inside = line.startswith(head)
        if inside:
            out.append(line)
    return "".join(out)


def _indexing_text(module, name: str, stage_name: str, options: CompileOptions) -> str:
    """The maps of the fusion alone: those of the module extracted for it, whose only subject
    it is (the maps depend on its fused computation and operand shapes only)."""
    from ..hlo.extract import extract_instruction
    from ..driver.pipeline import fusions_plan
    from ..indexing.report import indexing_report_json_pieces, indexing_report_text_pieces
    one = extract_instruction(module, name, plan_of=lambda m: fusions_plan(m, options))
    if stage_name == "indexing":
        return "".join(indexing_report_text_pieces(one))
    return "".join(indexing_report_json_pieces(one)) + "\n"
