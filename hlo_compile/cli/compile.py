"""`hlo-compile`: parse, analyse and emit an HLO module, printing one stage or dumping all.

hlo-opt's spellings work too: ``--stage=``/``--list-stages`` (``--emit``), ``--passes=a,b`` and
``--list-passes``, ``-o=FILE``, ``--platform=gpu``, ``--xla_dump_to=DIR`` (and in ``XLA_FLAGS``).
Every flag is checked before any work; errors read ``file:line:col: error: ...`` or
``hlo-compile: error: ...`` and exit with status 2.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..hlo.errors import HloError
from ..driver.kernel_cache import KernelCache, default_cache_dir
from ..options import CompileOptions
from ..driver.pipeline import STAGES, UNAVAILABLE_STAGES, stage
from . import common
from .common import EXIT_ERROR, STDIN, UserError, stderr_is_tty

if TYPE_CHECKING:  # pragma: no cover
    from ..driver.pipeline import CompileRecord

PROG = "hlo-compile"

# hlo-opt's flags: value flags, boolean flags, flags accepted without effect, flags refused
_VALUES = {"stage": "--stage", "format": "--input-format", "input_format": "--input-format",
           "passes": "--passes", "platform": "--platform"}
_BOOLEANS = {"list_stages": ("--list-stages", "--list-stages"), "list_passes": ("--list-passes", "--list-passes"),
             "split_input_file": ("--split-input-file", "--split-input-file")}
_IGNORED: dict[str, str] = {}
_REFUSED = {"emit_proto": "hlo-compile writes text (and the binary cubin), never HloProto",
            "debug_options_file": "a file of XLA's debug options is not read here; give the --xla_* flags "
                                  "themselves (those that change what runs are honoured or refused)"}


def _translate(argv: list[str]) -> list[str]:
    from .selection import fusion_argv  # --fusion=NAME (the boolean --fusion takes no value)
    argv = fusion_argv(argv)
    end = argv.index("--") if "--" in argv else len(argv)  # bare --dump-indexing: every instruction
    argv = [a + "=" if a == "--dump-indexing" and n < end else a for n, a in enumerate(argv)]
    return common.translate_xla_flags(argv, main, values=_VALUES, booleans=_BOOLEANS, ignored=_IGNORED,
                                      refused=_REFUSED, prog=PROG)


def _list_stages(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    width = max(len(s.name) for s in STAGES)
    for s in STAGES:
        aliases = f" (hlo-opt: {', '.join(s.xla_names)})" if s.xla_names else ""
        dump = s.dump_suffix.replace("{arch}", "sm_X.Y") + (" (with --dump-indexing)" if s.dump_on_request else "")
        click.echo(f"{s.name:<{width}}  {s.description}{aliases}; dump: module_NNNN.<module>.{dump}")
    click.echo(f"hlo-opt's 'llvm' is its IR after optimizations: here llvm-opt (or llvm-after-optimizations); "
               f"not produced here: {', '.join(sorted(UNAVAILABLE_STAGES))}")
    ctx.exit(0)


def _list_passes(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .pass_list import list_text
    click.echo(list_text(), nl=False)
    ctx.exit(0)


@click.command(name=PROG, cls=common.Command, translate=_translate,
               context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
               epilog=common.environment_help())
@click.argument("file", metavar="FILE|-")
@click.option("--dump-to", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write every stage into this directory with XLA's file names "
                   "(module_0000.<module>.ptx ...); XLA_FLAGS=--xla_dump_to=DIR does the same.")
@click.option("--dump-indexing", "dump_indexing", default=None, metavar="[=REGEX]",
              help="With a dump directory, also write the indexing maps (module_NNNN.<module>.indexing.txt and "
                   ".indexing.json; ours, not XLA's): of every fusion in ENTRY and its root, or with =REGEX of those "
                   "whose name it finds. Not written by default: on a large model they are most of the dump's "
                   "time and size.")
@click.option("--emit", "--stage", "emit", default=None, metavar="STAGE",
              help="Print this stage (default: hlo, the module after passes in XLA's long form). "
                   "Stages: " + ", ".join(s.name for s in STAGES) + "; hlo-opt's names are accepted "
                   "(--list-stages).")
@click.option("--list-stages", is_flag=True, expose_value=False, is_eager=True, callback=_list_stages,
              help="List the stages (and hlo-opt's names for them) and exit.")
@click.option("--passes", default=None, metavar="A,B,...",
              help="Run only these passes, in this order, and print the module (see --list-passes).")
@click.option("--list-passes", is_flag=True, expose_value=False, is_eager=True, callback=_list_passes,
              help="List the passes and exit.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the emitted stage to this file instead of stdout.")
@click.option("--arch", default="sm_80", show_default=True, envvar="HLO_COMPILE_ARCH",
              help=f"Target GPU architecture ({', '.join(common.supported_archs())}).")
@click.option("--platform", default="gpu", show_default=True, metavar="gpu|cuda",
              help="hlo-opt's platform: hlo-compile generates code for NVIDIA GPUs only.")
@click.option("--input-format", default="hlo", show_default=True, metavar="hlo",
              help="Format of FILE: HLO text (the only one read here).")
@click.option("--tensor-cores/--no-tensor-cores", "tensor_cores", default=False, show_default=True,
              envvar="HLO_COMPILE_TENSOR_CORES",
              help="f16/bf16 dots through mma.sync tensor cores on sm_80+ (experimental).")
@click.option("--device", "cost_device", default=None, metavar="a100|h100|h200",
              type=click.Choice(["a100", "h100", "h200", "b200"], case_sensitive=False),
              help="The GPU the cost model estimates for (default: the one --arch names: sm_80 A100, sm_90 H100).")
@click.option("--fusion/--no-fusion", "fusion", default=True, show_default=True,
              help="Group lone instructions into fusions (--no-fusion: one kernel per instruction).")
@click.option("--split-input-file", is_flag=True, help="Treat '// -----' lines as module separators.")
@click.option("--short", "short_form", is_flag=True, help="Print HLO in the short form (no operand shapes).")
@click.option("--as-fusion", is_flag=True,
              help="The file is a bare fused computation (XLA's emitter test files): compile it as one fusion.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Keep compiled kernels here (default: $HLO_COMPILE_CACHE_DIR, else "
                   "$XDG_CACHE_HOME/hlo-compile, else ~/.cache/hlo-compile).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the compile cache.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or timing lines on stderr.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Processes optimising kernels and making their PTX (default: the CPUs this process may use; "
                   "1: all in this process). The output is the same bytes whatever N.")
@click.option("--extract", default=None, metavar="NAME",
              help="Print the module computing just instruction NAME (or the fusion of kernel NAME, as "
                   "--emit=fusions names it; COMPUTATION/NAME where several computations hold a NAME): its operands "
                   "as parameters, the computations it calls copied along.")
@click.option("--fusion-name", "fusion_name", default=None, metavar="NAME",
              help="Also spelled --fusion=NAME: with --emit=fusions|indexing|indexing-json|llvm|llvm-opt|ptx|cubin, "
                   "print that stage for this one fusion's (or kernel's) kernel only.")
@common.library_call_options
@common.pass_options
@common.override_options
@common.version_option(PROG)
def main(file: str, dump_to: Path | None, emit: str | None, passes: str | None, output: Path | None, arch: str,
         platform: str, input_format: str, tensor_cores: bool, fusion: bool, split_input_file: bool,
         short_form: bool, as_fusion: bool, cache_dir: Path | None, no_cache: bool, quiet: bool, jobs: int | None,
         gemm: str, conv: str, cost_device: str | None = None, extract: str | None = None,
         fusion_name: str | None = None, disable_passes: tuple[str, ...] = (), enable_passes_only: tuple[str, ...] = (),
         dump_pass_re: str | None = None, override_dir: Path | None = None, llvm_ir_files: tuple[str, ...] = (),
         ptx_files: tuple[str, ...] = (), dump_indexing: str | None = None) -> None:
    """Compile the XLA HLO text module in FILE (- reads standard input) for an NVIDIA GPU."""
    try:
        overrides = common.override_spec(override_dir, llvm_ir_files, ptx_files)
        if overrides is not None and (passes is not None or extract is not None or fusion_name is not None):
            raise UserError("--override-dir/--xla_gpu_llvm_ir_file/--xla_gpu_ptx_file replace kernels' code: they "
                            "cannot be combined with --passes, --extract or --fusion=NAME")
        skip = ()
        if disable_passes or enable_passes_only:
            from .pass_list import skipped_passes
            if passes is not None:
                raise UserError("--passes runs the passes it names: it cannot be combined with "
                                "--xla_disable_hlo_passes/--xla_enable_hlo_passes_only")
            skip = skipped_passes(disable_passes, enable_passes_only)
        pass_re = common.check_dump_pass_re(dump_pass_re, common.dump_dir(dump_to) if passes is None else None)
        _check_dump_indexing(dump_indexing, common.dump_dir(dump_to))
        options = CompileOptions(arch=arch, dot_tensor_cores=tensor_cores, fusion=fusion, gemm=gemm, conv=conv,
                                 device=cost_device.lower() if cost_device else None, skip_passes=skip)
        cache = None if no_cache else KernelCache(cache_dir or default_cache_dir())
        checked = _check_flags(emit, passes, output, arch, platform, input_format, dump_to)
        if overrides is not None and checked[0] in (None, "hlo", "indexing", "indexing-json") \
                and common.dump_dir(dump_to) is None:
            raise UserError(f"--override-dir/--xla_gpu_llvm_ir_file/--xla_gpu_ptx_file replace kernels' code, which "
                            f"--emit={checked[0] or 'hlo'} does not show: use --emit=fusions|llvm|llvm-opt|ptx|cubin "
                            "or --dump-to")
        if extract is not None or fusion_name is not None:
            _selected(file, extract, fusion_name, checked, passes, output, options, dump_to, split_input_file,
                      short_form, as_fusion, cache, jobs or default_jobs())
            return
        source = common.read_source(file) if passes is None else None
        _main(file, dump_to, emit, passes, output, options, platform, input_format, split_input_file, short_form,
              as_fusion, cache, quiet, source=source, checked=checked, jobs=jobs or default_jobs(),
              pass_re=pass_re, overrides=overrides, dump_indexing=dump_indexing,
              key_flags=[f"pass_re={dump_pass_re}"])
    except UserError as e:
        click.echo(f"{PROG}: error: {e}", err=True)
        sys.exit(e.code)
    except HloError as e:
        common.echo_error(PROG, e)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        click.echo(f"{PROG}: error: interrupted", err=True)
        sys.exit(130)
    except (MemoryError, RecursionError, ValueError, KeyError, IndexError, TypeError, NotImplementedError,
            ArithmeticError, AssertionError, AttributeError, RuntimeError, OSError) as e:
        # a case the compiler does not handle: still a message, never a traceback (unless asked for)
        if common.traceback_wanted():
            raise
        click.echo(common.bug_text(PROG, f"compiling {file}", e), err=True)
        sys.exit(EXIT_ERROR)


def _check_dump_indexing(regex: str | None, dump: Path | None) -> None:
    """``--dump-indexing[=REGEX]``: it needs a dump directory and a valid regex."""
    if regex is None:
        return
    if dump is None:
        raise UserError("--dump-indexing writes the indexing maps into the dump: it needs --dump-to DIR or "
                        "--xla_dump_to=DIR (--emit=indexing|indexing-json prints them)")
    import re
    try:
        re.compile(regex)
    except re.error as e:
        raise UserError(f"--dump-indexing={regex}: not a regular expression ({e})") from None


def _selected(file, extract, fusion_name, checked, passes, output, options, dump_to, split_input_file, short_form,
              as_fusion, cache, jobs) -> None:
    """--extract=NAME (one instruction's module) or --fusion=NAME (one kernel's stage): selection.py."""
    from . import selection
    stage_name, arch, _ = checked
    selection.check_selection(extract, fusion_name, stage_name, passes, dump_to, split_input_file)
    options = dataclasses.replace(options, arch=arch)
    module = common.read_modules(file, False, as_fusion)[0]
    if extract is not None:
        _write_outputs([selection.extract_text(module, extract, options, short_form)], output)
    else:
        _write_outputs([selection.fusion_stage_text(module, fusion_name, stage_name, options, cache, jobs)], output)


def _check_flags(emit, passes, output, arch, platform, input_format, dump_to):
    """Every flag checked before any work: (stage name or None, arch, chosen passes or None)."""
    arch = common.check_arch(arch)
    if platform.strip().lower() not in ("gpu", "cuda"):
        raise UserError(f"--platform={platform}: hlo-compile generates code for NVIDIA GPUs (gpu or cuda); "
                        "to run a module on the CPU use hlo-run --platform=host")
    if input_format.lower() not in ("hlo", "txt"):
        raise UserError(f"--input-format={input_format}: only HLO text is read here (hlo)")
    stage_name = None
    if emit is not None:
        try:
            stage_name = stage(emit.strip()).name
        except HloError as e:
            raise UserError(f"--emit={emit}: {e.message}") from None
    chosen = None
    if passes is not None:
        from .pass_list import resolve
        chosen = resolve([p for p in passes.split(",") if p.strip()])
        if stage_name not in (None, "hlo"):
            raise UserError(f"--passes prints the module after those passes; it cannot be combined with "
                            f"--emit={emit}")
        if dump_to is not None:
            raise UserError("--passes prints the module after those passes; it does not dump (drop --dump-to)")
    if stage_name == "cubin":
        from ..targets.nvptx.toolkit import find_ptxas, ptxas_missing_reason
        if output is None or str(output) == STDIN:
            raise UserError("the cubin stage is binary: write it with -o FILE")
        if find_ptxas() is None:
            raise UserError(f"stage 'cubin' is not available: {ptxas_missing_reason()}")
    common.check_output_file(output)
    if stage_name not in ("hlo", "fusions", "indexing", "indexing-json") or common.dump_dir(dump_to):
        common.check_llvmlite()
    return stage_name, arch, chosen


def _main(file, dump_to, emit, passes, output, options: CompileOptions, platform, input_format, split_input_file,
          short_form, as_fusion, cache: KernelCache | None = None, quiet: bool = True, *,
          source: tuple[str, str] | None = None, checked: tuple | None = None, jobs: int = 1, pass_re=None,
          overrides=None, dump_indexing: str | None = None, key_flags: list[str] | None = None) -> None:
    """The compile: ``--passes`` here; otherwise the driver's ``compile_source`` (which reads
    and keeps the whole result in ``cache``), its output printed and its notes on stderr."""
    from ..driver.pipeline import ResultReplayError, compile_source
    stage_name, arch, chosen = checked or _check_flags(emit, passes, output, options.arch, platform, input_format,
                                                       dump_to)
    dump_to = common.dump_dir(dump_to) if chosen is None else None
    common.prepare_dump_dir(dump_to)
    options = dataclasses.replace(options, arch=arch)
    if chosen is not None:
        from .pass_list import run_chosen
        outputs: list[str | bytes] = [run_chosen(m, chosen, options).to_text("short" if short_form else "long")
                                      for m in common.read_modules(file, split_input_file, as_fusion)]
        _write_outputs(outputs, output)
        return
    text, name = source if source is not None else common.read_source(file)
    start = [0.0]

    def progress(module):
        start[0] = time.perf_counter()
        return None if quiet else Progress(module.name, start[0])

    def after_module(module, result) -> None:
        if not quiet:
            _timing_line(result, time.perf_counter() - start[0])
        if result.overrides:
            from ..driver.overrides import describe
            common.note(PROG, f"{module.name}: {describe(result.overrides)}")
        if pass_re is not None and result.writer is not None:  # --xla_dump_hlo_pass_re
            from .pass_list import dump_after_passes
            dump_after_passes(module, result.options, result.writer, pass_re)

    try:
        record = compile_source(text, lambda: common.modules_of_text(text, name, split_input_file, as_fusion),
                                options, emit=stage_name, short_form=short_form, dump_to=dump_to, cache=cache,
                                key_flags=[f"split={split_input_file}", f"as_fusion={as_fusion}", *(key_flags or [])],
                                jobs=jobs, progress=progress, after_module=after_module, overrides=overrides,
                                dump_indexing=dump_indexing)
    except ResultReplayError as e:
        raise UserError(str(e)) from None
    _emit(record, output, dump_to, record.dump_files)


def _emit(record: CompileRecord, output: Path | None, dump_to: Path | None, files: int) -> None:
    for skipped, why in record.notes.items():
        common.note(PROG, f"stage '{skipped}' skipped: {why}")
    _write_outputs(record.outputs, output)
    if dump_to is not None:
        click.echo(f"{PROG}: wrote {files} files of {record.modules} module(s) to {dump_to}", err=True)


TIMING_THRESHOLD_S = 1.0  # compiles shorter than this print no timing line (nor progress)


def default_jobs() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Progress:
    """The live line on stderr (a terminal only; nothing otherwise): the stage, kernels done
    of total and the time so far, from one second into a compile, redrawn at most ten
    times a second; ``clear`` removes it before the timing line."""

    INTERVAL_S = 0.1

    def __init__(self, module: str, start: float):
        self.module, self.start = module, start
        self.enabled = stderr_is_tty()
        self.shown = False
        self.last = 0.0
        self.stage = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.start < TIMING_THRESHOLD_S or (now - self.last < self.INTERVAL_S and done < total):
            return
        self.last = now
        kernels = f" {done}/{total} kernels" if total else ""
        click.echo(f"\r\033[K{PROG}: {self.module}: {stage}{kernels}, {now - self.start:.1f}s", err=True, nl=False,
                   color=True)  # (the terminal escape kept)
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            click.echo("\r\033[K", err=True, nl=False, color=True)
            self.shown = False


def _timing_line(result, seconds: float) -> None:
    """One line on stderr after a compile of over a second: the stages' times, kernels, cache."""
    if seconds < TIMING_THRESHOLD_S:
        return
    plan = result.plan
    kernels = f", {len(plan.unique_kernels)} kernels for {len(plan.kernels)} fusions" if plan is not None else ""
    stages = ", ".join(f"{name} {t:.2f}s" for name, t in result.module_seconds.items() if "." not in name)
    hits = f"; from the cache: {', '.join(result.cache_hits)}" if result.cache_hits else ""
    click.echo(f"{PROG}: {result.source.name}: {seconds:.2f}s{kernels} ({stages}){hits}", err=True)


def _write_outputs(outputs: list[str | bytes], output: Path | None) -> None:
    if any(isinstance(o, bytes) for o in outputs):
        if output is None or len(outputs) != 1:
            raise UserError("the cubin stage is binary: write one module's cubin with -o FILE")
        _write_file(output, outputs[0])
        return
    text_out = "// -----\n".join(outputs)
    if output is not None and str(output) != STDIN:
        _write_file(output, text_out)
    elif text_out:
        click.echo(text_out, nl=False)


def _write_file(path: Path, data: str | bytes) -> None:
    try:
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


if __name__ == "__main__":  # pragma: no cover
    main()
