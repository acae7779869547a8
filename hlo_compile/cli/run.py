"""``hlo-run``: run HLO modules on a platform and compare with a reference (DESIGN.md §5).

run_hlo_module's flags work as written in XLA (``--platform=CUDA``, ``--reference_platform=``,
``--abs_error_bound=``, ``--print_literals``, ``--use_large_float_range=true``,
``--random_init_input_literals=false``, ``--different_random_seeds``, ``--input_format=hlo``,
``--xla_dump_to=DIR``, several files); our dash spellings are the documented ones.

Exit status: 0 results match (or no reference), 1 mismatch, 2 bad input or unsupported
feature, or a run estimated not to fit in memory (message on stderr, no traceback), 124 the
--timeout expired (as timeout(1)); the verdict line is also on stdout (``run_watch``)."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from ..driver.dump import DumpDirectory
from ..hlo.errors import HloError
from . import common, run_watch
from .common import EXIT_ERROR, EXIT_MISMATCH, EXIT_OK, UserError

PROG = "hlo-run"
PLATFORMS = ("interpreter", "host", "cuda")
# run_hlo_module's platform names (any case) → ours
PLATFORM_NAMES = {"interpreter": "interpreter", "host": "host", "cpu": "host", "cuda": "cuda", "gpu": "cuda"}
REFERENCE_NAMES = {**PLATFORM_NAMES, "default": "interpreter", "none": "none", "": "none"}
RULES = ("allclose", "xla")

class PlatformType(click.ParamType):
    name = "platform"

    def __init__(self, names: dict[str, str], shown: str):
        self.names = names
        self.shown = shown

    def get_metavar(self, param, ctx=None):  # noqa: D401 - click's signature
        return self.shown

    def convert(self, value, param, ctx):
        key = str(value).strip().lower()
        if key in self.names:
            return self.names[key]
        self.fail(f"'{value}' is not a platform here; use {self.shown} (run_hlo_module's "
                  f"{', '.join(sorted(k for k in self.names if k))} are accepted in any case)", param, ctx)


_VALUES = {"platform": "--platform", "reference_platform": "--reference", "abs_error_bound": "--abs-error-bound",
           "rel_error_bound": "--rel-error-bound", "iterations": "--iterations", "input_format": "--input-format",
           "error_rule": "--error-rule"}
_BOOLEANS = {
    "print_literals": ("--print-literals", "--no-print-literals"),
    "use_large_float_range": ("--use-large-float-range", "--no-use-large-float-range"),
    "random_init_input_literals": ("--random-inputs", "--zero-inputs"),
    "different_random_seeds": ("--different-random-seeds", "--no-different-random-seeds"),
    "isolate_instructions": ("--isolate-instructions", "--no-isolate-instructions"),
}
_IGNORED = {
    "run_test_hlo_passes": "hlo-run always runs its own passes (never XLA's) before code generation",
    "run_reference_hlo_passes": "the reference runs the module as written",
    "force_use_cpu_thunk_runtime_for_test": "there is no XLA:CPU runtime here",
}
_REFUSED = {
    "input_literals_file": "hlo-run reads npz literals: --input-literals IN.npz (arg0, arg1, ...)",
    "output_literals_file": "hlo-run writes npz literals: --output-literals OUT.npz (out0, out1, ...)",
    "force_fake_data": "generated inputs are the default; --input-literals reads given ones",
    "debug_options_file": "a file of XLA's debug options is not read here; give the --xla_* flags themselves "
                          "(those that change what runs are honoured or refused)",
}


def _translate(argv: list[str]) -> list[str]:
    # run_hlo_module's --input_module=FILE is the positional FILE
    argv = [a.split("=", 1)[1] if a.startswith("--input_module=") else a for a in argv]
    return common.translate_xla_flags(argv, main, values=_VALUES, booleans=_BOOLEANS, ignored=_IGNORED,
                                      refused=_REFUSED, prog=PROG)


def _runner(platform: str, module, seed, tensor_cores: bool = False, graph: bool = False, fusion: bool = True,
            dump: tuple[DumpDirectory, int] | None = None, gemm: str = "library", conv: str = "library",
            skip_passes: tuple[str, ...] = (), pass_re=None, overrides=None):
    """A function running ``module`` on ``platform`` (compiled once, run many times); with
    ``graph``, (graph runner, plain runner) when the module can be one CUDA graph; with
    ``dump`` (directory, module number), the compilation's stages are dumped as hlo-compile's."""
    if platform == "interpreter":
        from ..interpreter import evaluate_module
        return lambda args: evaluate_module(module, args, seed=seed)
    from ..options import CompileOptions
    from ..runtime import executable
    options = CompileOptions(arch=common.default_arch(), dot_tensor_cores=tensor_cores, fusion=fusion, gemm=gemm,
                             conv=conv, skip_passes=skip_passes)
    where = {} if dump is None else {"dump_to": dump[0], "module_index": dump[1]}
    where["progress"] = run_watch.compile_progress(platform)
    if overrides is not None:  # (OverrideSpec, module number): kernels' code from files (overrides.py)
        from ..runtime.overridden import compile_executable as compile_overridden
        exe = compile_overridden(module, platform, options, overrides[0], module_index=overrides[1], **where)
    else:
        exe = executable.compile_executable(module, platform, options, **where)
    for note in getattr(exe.platform, "notes", ()):
        click.echo(f"{module.name}: note: {note}", err=True)
    if dump is not None:
        _dump_notes(module, exe.pipeline)
        if pass_re is not None and exe.pipeline.writer is not None:  # --xla_dump_hlo_pass_re
            from .pass_list import dump_after_passes
            dump_after_passes(module, exe.pipeline.options, exe.pipeline.writer, pass_re)
    if not graph:
        return exe.run
    from ..runtime.graph import ModuleGraph, unsupported_reason
    why = unsupported_reason(exe)
    if why:
        click.echo(f"{module.name}: CUDA graph not used ({why}); running plain launches", err=True)
        return exe.run
    return ModuleGraph(exe), exe.run


def _dump_notes(module, result) -> None:
    """What the dump could not hold: stages that cannot run here, stages that failed (the run
    goes on: it did not need them)."""
    for stage_name, why in result.skipped.items():
        common.note(PROG, f"dump of {module.name}: stage '{stage_name}' skipped: {why}")
    for stage_name, message in result.dump_errors.items():
        common.note(PROG, f"the dump of {module.name} is incomplete: stage '{stage_name}': {message}")


def _is_own_reference(platform: str, reference: str) -> bool:
    """Comparing a platform with itself proves nothing: skip it."""
    return platform == reference


def _print_literals(label: str, leaves) -> None:
    for i, a in enumerate(leaves):
        click.echo(f"{label}{i}: {a.dtype.name}{list(a.shape)}")
        with np.printoptions(threshold=200, edgeitems=4):
            click.echo(np.array2string(np.asarray(a).astype(np.float64) if a.dtype.name == "bfloat16" or
                                       a.dtype.name.startswith("float8") else a))


@dataclass(frozen=True)
class RunSettings:
    """Everything a module's run reads from the command line (checked before any work)."""

    platform: str
    reference: str
    input_literals: str | None
    output_literals: str | None
    seed: int | None
    iterations: int
    abs_error_bound: float | None
    rel_error_bound: float | None
    error_rule: str
    print_literals: bool
    random_inputs: bool
    large_float_range: bool
    different_seeds: bool
    tensor_cores: bool
    use_cuda_graph: bool
    fusion: bool
    dump_to: Path | None
    gemm: str = "library"
    conv: str = "library"
    num_replicas: int | None = None  # None: the module header's replica_count
    num_partitions: int | None = None
    skip_passes: tuple[str, ...] = ()  # --xla_disable_hlo_passes/--xla_enable_hlo_passes_only
    dump_pass_re: object = None         # --xla_dump_hlo_pass_re, compiled
    isolate: str | None = None          # --isolate=NAME (isolate.py)
    isolate_instructions: bool = False  # --isolate-instructions (isolate.py)
    memory_limit: object = "auto"       # --memory-limit: "auto", bytes, or None (no check)
    expected_literals: str | None = None  # --expected-literals OUT.npz
    overrides: object = None            # --override-dir, --xla_gpu_llvm_ir_file/--xla_gpu_ptx_file (overrides.py)


def _library_flags(s: RunSettings) -> dict:
    """--gemm/--conv (and the passes skipped) where they differ from _runner's defaults."""
    return {**{k: v for k, v in (("gemm", s.gemm), ("conv", s.conv)) if v != "library"},
            **({"skip_passes": s.skip_passes} if s.skip_passes else {})}


def rule_text(s: RunSettings, leaves) -> str:
    """Which comparison rule was used, with the bounds it used."""
    if s.error_rule == "xla":
        from ..runtime.compare_xla import DEFAULT_ABS_BOUND, DEFAULT_REL_BOUND
        a = DEFAULT_ABS_BOUND if s.abs_error_bound is None else s.abs_error_bound
        r = DEFAULT_REL_BOUND if s.rel_error_bound is None else s.rel_error_bound
        return f"rule xla: an element fails only when |a-e| > {a:g} and |a-e|/|e| > {r:g}"
    from ..runtime.compare import default_tolerance, is_exact
    bounds = []
    for dt in sorted({np.dtype(a.dtype) for a in leaves if not is_exact(a.dtype)}, key=lambda d: d.name):
        d_rtol, d_atol = default_tolerance(dt, "accumulate")
        atol = d_atol if s.abs_error_bound is None else s.abs_error_bound
        rtol = d_rtol if s.rel_error_bound is None else s.rel_error_bound
        bounds.append(f"{dt.name} atol={atol:g} rtol={rtol:g}")
    defaults = "" if s.abs_error_bound is not None and s.rel_error_bound is not None else ", per-type defaults"
    body = "; ".join(bounds) if bounds else "exact types only"
    return f"rule allclose: an element fails when |a-e| > atol + rtol*|e| ({body}{defaults if bounds else ''})"


def _compare(s: RunSettings, expected, leaves):
    if s.error_rule == "xla":
        from ..runtime.compare_xla import compare_results_xla
        return compare_results_xla(expected, leaves, abs_bound=s.abs_error_bound, rel_bound=s.rel_error_bound)
    from ..runtime import compare
    tol = [(s.rel_error_bound, s.abs_error_bound)] * len(expected)
    return compare.compare_results(expected, leaves, tolerances=tol)


def _inputs(module, s: RunSettings, iteration: int):
    from ..runtime import literals
    if s.input_literals:
        return literals.load_inputs(s.input_literals, module)
    if not s.random_inputs:
        return literals.zero_inputs(module)
    return literals.random_inputs(module, s.seed if s.seed is not None else 0, iteration=iteration,
                                  large_float_range=s.large_float_range)


def _rng_seed(s: RunSettings, iteration: int) -> int | None:
    """The seed of the module's rng ops: ``--seed``; with ``--different-random-seeds`` a new one
    each iteration (run_hlo_module's i+1, shifted by ``--seed``)."""
    if s.different_seeds:
        return (s.seed or 0) + iteration + 1
    return s.seed


def _run_one(module, s: RunSettings, *, index: int | None = None, dump: DumpDirectory | None = None,
             dump_index: int = 0) -> int:
    if s.isolate is not None or s.isolate_instructions:  # one instruction alone, or each (isolate.py)
        from .isolate import RunHooks, run_isolated, run_isolated_instructions
        hooks = RunHooks(_inputs, _rng_seed, _run_one, _is_own_reference)
        return (run_isolated(module, s, hooks, index=index, dump=dump, dump_index=dump_index)
                if s.isolate is not None else run_isolated_instructions(module, s, hooks))
    from ..runtime import literals, memory_estimate
    from ..hlo.collective_groups import world_of
    world = world_of(module, s.num_replicas, s.num_partitions)
    memory_estimate.check_run(module, memory_estimate.RunRequest(s.platform, s.reference, world.size, s.iterations,
                                                                 bool(s.expected_literals)),
                              s.memory_limit, generated_inputs=not s.input_literals and s.random_inputs)
    if world.size > 1:
        if s.expected_literals:
            raise UserError(f"--expected-literals: not supported yet for a run of {world.size} participants")
        if s.overrides is not None:
            raise UserError(f"--override-dir/--xla_gpu_llvm_ir_file/--xla_gpu_ptx_file: not supported yet for a run "
                            f"of {world.size} participants")
        if s.skip_passes:
            raise UserError(f"--xla_disable_hlo_passes/--xla_enable_hlo_passes_only: not supported yet for a run of "
                            f"{world.size} participants")
        from .run_spmd import run_spmd
        return run_spmd(module, s, world, _compare, rule_text, _rng_seed)
    if dump is not None and s.platform == "interpreter":  # compiles nothing: only the input
        from ..driver.pipeline import dump_source
        dump_source(module, dump, dump_index, common.default_arch())
    # only what differs from _runner's defaults is passed (tests stand in for _runner)
    extra = {**({"tensor_cores": True} if s.tensor_cores else {}), **({"graph": True} if s.use_cuda_graph else {}),
             **({} if s.fusion else {"fusion": False}), **_library_flags(s),
             **({"dump": (dump, dump_index)} if dump is not None and s.platform != "interpreter" else {}),
             **({"pass_re": s.dump_pass_re} if dump is not None and s.dump_pass_re is not None
                and s.platform != "interpreter" else {}),
             **({"overrides": (s.overrides, dump_index)} if s.overrides is not None else {})}
    run_watch.phase("prepare" if s.platform == "interpreter" else f"compile for {s.platform}", module.name)
    compiled = None if s.platform == "interpreter" else _runner(s.platform, module, s.seed, **extra)
    graph, plain = (compiled if isinstance(compiled, tuple) else (None, compiled))
    ov = _override_text(s, dump_index)
    compare_with = "none" if s.reference == "none" or _is_own_reference(s.platform, s.reference) else s.reference
    reference_run = None
    if compare_with in ("host", "cuda"):
        run_watch.phase(f"compile for the {compare_with} reference")
        reference_run = _runner(compare_with, module, s.seed, **({} if s.fusion else {"fusion": False}),
                                **_library_flags(s))
    times, failures, compared, rule = [], 0, 0, ""
    x_failures, x_compared, x_rule = 0, 0, ""  # --expected-literals
    result, args = None, None
    for i in range(s.iterations):
        if s.iterations > 1:
            click.echo(f"=== {module.name}: iteration {i + 1} of {s.iterations}", err=True)
        run_watch.phase("inputs")
        args = _inputs(module, s, i)
        seed = _rng_seed(s, i)
        if s.print_literals:
            _print_literals("arg", literals.flatten(args))
        run = graph.run if graph is not None else plain if plain is not None else _runner(s.platform, module, seed)
        run_watch.phase(f"run on {s.platform}")
        t0 = time.perf_counter()
        result = run(args)
        times.append(time.perf_counter() - t0)
        leaves = literals.flatten(result)
        if s.print_literals:
            _print_literals("out", leaves)
        if s.expected_literals:
            run_watch.phase("compare with the expected literals")
            stored = run_watch.load_expected(s.expected_literals, leaves)
            x_rule, cmp = rule_text(s, stored), _compare(s, stored, leaves)
            x_compared += 1
            if not cmp.ok:
                x_failures += 1
                run_watch.clear_line()
                click.echo(cmp.report(), err=True)
        if compare_with == "none":
            continue
        run_watch.phase(f"reference on {compare_with}")
        if compare_with == "interpreter":
            from ..interpreter import evaluate_module
            expected = literals.flatten(evaluate_module(module, args, seed=seed))
        else:
            expected = literals.flatten(reference_run(args))
        run_watch.phase("compare")
        rule = rule_text(s, expected)
        cmp = _compare(s, expected, leaves)
        compared += 1
        if not cmp.ok:
            failures += 1
            run_watch.clear_line()
            click.echo(cmp.report(), err=True)
    if graph is not None:
        _report_graph(module, graph, plain, args, times, s.iterations)
    elif s.iterations > 1:
        click.echo(f"{module.name}: {s.platform} {s.iterations} iterations, median {np.median(times) * 1e3:.3f} ms, "
                   f"min {min(times) * 1e3:.3f} ms", err=True)
    if s.output_literals:
        path = Path(s.output_literals)
        if index is not None:
            path = path.with_name(f"{path.stem}.{index}{path.suffix or '.npz'}")
        try:
            literals.save_outputs(path, result)
        except OSError as e:
            raise UserError(f"cannot write output literals {path}: {e.strerror or e}") from None
    run_watch.clear_line()
    x_status = EXIT_OK
    if s.expected_literals:
        x_status = EXIT_MISMATCH if x_failures else EXIT_OK
        run_watch.verdict(f"{module.name}: results {'differ from' if x_failures else 'match'} the expected literals "
                          f"{s.expected_literals}" + (f" in {x_failures}/{x_compared} runs" if s.iterations > 1 else "")
                          + f" ({x_rule})")
    if compare_with == "none" and s.expected_literals:
        return x_status
    if compare_with == "none":
        shapes = ", ".join(f"{a.dtype.name}{list(a.shape)}" for a in literals.flatten(result))
        why = ("no reference requested" if s.reference == "none"
               else f"the {s.platform} platform is its own reference")
        run_watch.verdict(f"{module.name}: ran on {s.platform}, outputs {shapes}; not compared ({why}){ov}")
        return EXIT_OK
    if s.iterations > 1:
        click.echo(f"{module.name}: {failures}/{compared} runs miscompared ({rule})", err=True)
    if failures:
        run_watch.verdict(f"{module.name}: results differ from the {compare_with} reference ({rule}){ov}")
        return EXIT_MISMATCH
    run_watch.verdict(f"{module.name}: results match the {compare_with} reference ({rule}){ov}")
    return x_status


def _override_text(s: RunSettings, index: int) -> str:
    """``; kernel fusion: from override /path/...`` for the verdict (empty without overrides)."""
    if s.overrides is None:
        return ""
    from ..driver.overrides import describe
    text = describe(s.overrides.sources(index))
    return f"; {text}" if text else ""


def _report_graph(module, graph, plain, args, times, iterations: int) -> None:
    """The first run recorded and captured the graph; with iterations > 1, time plain launches
    the same number of times and report the gain."""
    click.echo(f"{module.name}: CUDA graph: {graph.describe()}; first run (capture) "
               f"{times[0] * 1e3:.3f} ms", err=True)
    if iterations > 1:
        plain_times = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            plain(args)
            plain_times.append(time.perf_counter() - t0)
        g, p = np.median(times[1:]), np.median(plain_times[1:])
        click.echo(f"{module.name}: {iterations - 1} replays, median {g * 1e3:.3f} ms with the graph, "
                   f"{p * 1e3:.3f} ms with plain launches ({p / g:.2f}x), transfers included", err=True)
    graph.close()


@click.command(name=PROG, cls=common.Command, translate=_translate,
               context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
               epilog="run_hlo_module's spellings are accepted as written: --platform=CUDA|GPU|CPU|Interpreter, "
                      "--reference_platform=, --abs_error_bound=, --rel_error_bound=, --iterations=, "
                      "--print_literals[=true|false], --use_large_float_range, --random_init_input_literals=false, "
                      "--different_random_seeds, --input_format=hlo, --input_module=FILE, --xla_dump_to=DIR "
                      "(--run_test_hlo_passes is ignored with a note); XLA's --xla_disable_hlo_passes, "
                      "--xla_enable_hlo_passes_only and --xla_dump_hlo_pass_re are honoured, its dump/log/autotuning "
                      "flags accepted with a note, any other --xla_* flag refused.\n\n"
                      + common.environment_help())
@click.argument("files", nargs=-1, required=True, metavar="FILE...|-")
@click.option("--platform", type=PlatformType(PLATFORM_NAMES, "interpreter|host|cuda"), default="interpreter",
              show_default=True, help="Where the module runs (cpu = host, gpu = cuda).")
@click.option("--reference", "--reference-platform", "reference",
              type=PlatformType(REFERENCE_NAMES, "interpreter|host|cuda|none"), default="interpreter",
              show_default=True, help="What the results are compared with (default = interpreter; none or an "
                                      "empty value: not compared).")
@click.option("--input-literals", type=click.Path(dir_okay=False), default=None,
              help="npz with arg0, arg1, ... (default: generated inputs).")
@click.option("--output-literals", type=click.Path(dir_okay=False), default=None,
              help="Write the results here as out0, out1, ... (the last iteration's).")
@click.option("--seed", type=int, default=None, help="Seed of generated inputs and of rng ops.")
@click.option("--iterations", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs, each on newly generated inputs (as run_hlo_module), each compared; timed.")
@click.option("--error-rule", type=click.Choice(RULES, case_sensitive=False), default="allclose",
              show_default=True,
              help="allclose: an element fails when |a-e| > atol + rtol*|e| (defaults per element type). "
                   "xla: run_hlo_module's rule, an element fails only when |a-e| > abs bound AND "
                   "|a-e|/|e| > rel bound (defaults 1e-3 each).")
@click.option("--abs-error-bound", type=click.FloatRange(min=0), default=None,
              help="Absolute bound (atol for allclose; default per type, or 1e-3 for xla).")
@click.option("--rel-error-bound", type=click.FloatRange(min=0), default=None,
              help="Relative bound (rtol for allclose; default per type, or 1e-3 for xla).")
@click.option("--print-literals/--no-print-literals", default=False, help="Print inputs and outputs.")
@click.option("--random-inputs/--zero-inputs", "random_inputs", default=True, show_default=True,
              help="Generated inputs: random (floats uniform in [-0.1, 0.2], indices in range) or all zeros.")
@click.option("--use-large-float-range/--no-use-large-float-range", default=False, show_default=True,
              help="Random floats log-uniform over the type's whole range, with rare ±0, ±1, ±inf, NaN.")
@click.option("--different-random-seeds/--no-different-random-seeds", default=False, show_default=True,
              help="A new seed for rng ops in each iteration (seed + i + 1; run_hlo_module's i + 1).")
@click.option("--input-format", default="hlo", show_default=True, metavar="hlo",
              help="Format of the files: HLO text (the only one read here).")
@click.option("--dump-to", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Dump each module as hlo-compile --dump-to does (XLA's names; the interpreter compiles "
                   "nothing: only the input). XLA_FLAGS=--xla_dump_to=DIR does the same.")
@click.option("--tensor-cores/--no-tensor-cores", "tensor_cores", default=False, show_default=True,
              envvar="HLO_COMPILE_TENSOR_CORES",
              help="f16/bf16 dots through mma.sync tensor cores on sm_80+ (experimental).")
@click.option("--fusion/--no-fusion", "fusion", default=True, show_default=True,
              help="Group lone instructions into fusions (--no-fusion: one kernel per instruction).")
@click.option("--use-cuda-graph", is_flag=True,
              help="cuda: capture the module's launches once in a CUDA graph and replay it (with "
                   "--iterations N, also times plain launches and prints the gain).")
@click.option("--split-input-file", is_flag=True, help="Each file holds modules separated by '// -----'.")
@click.option("--as-fusion", is_flag=True,
              help="The files are bare fused computations (XLA's emitter test files): run each as one fusion.")
@click.option("--num-replicas", type=click.IntRange(min=1), default=None,
              help="Replicas R (default: the module's replica_count, else 1); R x P participants.")
@click.option("--num-partitions", type=click.IntRange(min=1), default=None,
              help="Partitions P (default: the module's num_partitions, else 1). Participant k reads "
                   "p{k}.arg{i} (else arg{i}) and writes p{k}.out{j}.")
@click.option("--memory-limit", default="auto", show_default=True, metavar="BYTES|auto|none",
              help="Refuse (exit 2) a run whose estimated host memory (inputs per participant, outputs, the "
                   "interpreter's live values, the reference) exceeds this: auto = what is available now, "
                   "BYTES (16G, 500MB, ...), none = no check.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop the run after SECONDS, naming the phase it was in; exit status 124 (as timeout(1)).")
@click.option("--expected-literals", type=click.Path(dir_okay=False), default=None,
              help="Compare the results with stored outputs out0, out1, ... (e.g. XLA's), by the same rule, "
                   "besides the reference (--reference=none: instead of it).")
@click.option("--isolate", default=None, metavar="NAME",
              help="Run only instruction NAME (an instruction, fusion or kernel name, as hlo-compile --extract): "
                   "its operands are captured from an interpreter run of the whole module (an instruction "
                   "of a loop body or fused computation: its first execution), saved as inputs.npz (arg0, ...) "
                   "in --dump-to's directory or the current one, and the instruction alone is run and compared.")
@click.option("--isolate-instructions/--no-isolate-instructions", default=False, show_default=True,
              help="run_hlo_module's --isolate_instructions: run each instruction of the module alone (ENTRY "
                   "and control-flow bodies; identical ones once) on generated inputs, compare each, and print a "
                   "verdict per instruction, naming the first that fails.")
@common.library_call_options
@common.pass_options
@common.override_options
@common.version_option(PROG)
def main(files, platform, reference, input_literals, output_literals, seed, iterations, error_rule,
         abs_error_bound, rel_error_bound, print_literals, random_inputs, use_large_float_range,
         different_random_seeds, input_format, dump_to, tensor_cores, fusion, use_cuda_graph, split_input_file,
         as_fusion, num_replicas, num_partitions, gemm, conv, disable_passes=(), enable_passes_only=(),
         dump_pass_re=None, memory_limit="auto", timeout=None, expected_literals=None, isolate=None,
         isolate_instructions=False, override_dir=None, llvm_ir_files=(), ptx_files=()):
    """Run the HLO modules in FILE... (- reads standard input) and compare their results with a
    reference."""
    try:
        settings = RunSettings(
            platform=platform, reference=reference, input_literals=input_literals, output_literals=output_literals,
            seed=seed, iterations=iterations, abs_error_bound=abs_error_bound, rel_error_bound=rel_error_bound,
            error_rule=error_rule.lower(), print_literals=print_literals, random_inputs=random_inputs,
            large_float_range=use_large_float_range, different_seeds=different_random_seeds,
            tensor_cores=tensor_cores, use_cuda_graph=use_cuda_graph, fusion=fusion,
            dump_to=common.dump_dir(dump_to), gemm=gemm, conv=conv, num_replicas=num_replicas,
            num_partitions=num_partitions, memory_limit=run_watch.memory_limit(memory_limit),
            expected_literals=expected_literals,
            overrides=_overrides(override_dir, llvm_ir_files, ptx_files, platform, isolate, isolate_instructions),
            **_pass_settings(disable_passes, enable_passes_only, dump_pass_re, dump_to))
        from .isolate import check_flags as check_isolation, with_isolation
        settings = with_isolation(settings, isolate, isolate_instructions)
        check_isolation(settings)
        _check_flags(settings, input_format, files)
        with run_watch.watching(timeout):
            status = _run_files(files, settings, split_input_file, as_fusion)
        sys.exit(status)
    except run_watch.RunTimeout:
        click.echo(run_watch.timeout_message(timeout), err=True)
        sys.exit(run_watch.EXIT_TIMEOUT)
    except UserError as e:
        click.echo(f"{PROG}: error: {e}", err=True)
        sys.exit(e.code)
    except KeyboardInterrupt:
        click.echo(f"{PROG}: error: interrupted", err=True)
        sys.exit(130)


def _overrides(override_dir, llvm_ir_files, ptx_files, platform: str, isolate, isolate_instructions):
    """RunSettings' overrides (``common.override_spec``), refused where nothing compiles them."""
    spec = common.override_spec(override_dir, llvm_ir_files, ptx_files, platform)
    if spec is not None and (platform == "interpreter" or isolate is not None or isolate_instructions):
        why = ("the interpreter compiles no kernel" if platform == "interpreter"
               else "they are not supported yet with --isolate/--isolate-instructions")
        raise UserError(f"--override-dir/--xla_gpu_llvm_ir_file/--xla_gpu_ptx_file replace kernels' code, but {why}; "
                        "run on --platform=host or cuda")
    return spec


def _pass_settings(disable_passes, enable_passes_only, dump_pass_re, dump_to) -> dict:
    """RunSettings' skip_passes and dump_pass_re, checked (``pass_list.skipped_passes``)."""
    out: dict = {"dump_pass_re": common.check_dump_pass_re(dump_pass_re, common.dump_dir(dump_to))}
    if disable_passes or enable_passes_only:
        from .pass_list import skipped_passes
        out["skip_passes"] = skipped_passes(disable_passes, enable_passes_only)
    return out


def _check_flags(s: RunSettings, input_format: str, files) -> None:
    """Every flag checked before any work."""
    if s.use_cuda_graph and s.platform != "cuda":
        raise UserError(f"--use-cuda-graph needs --platform=cuda (got --platform={s.platform})")
    if input_format.strip().lower() not in ("hlo", "txt"):
        raise UserError(f"--input-format={input_format}: only HLO text is read here (hlo); convert other formats "
                        "to HLO text first (XLA's hlo-opt or hlo-translate)")
    if s.input_literals and not Path(s.input_literals).is_file():
        raise UserError(f"cannot read input literals {s.input_literals}: no such file")
    if s.expected_literals and not Path(s.expected_literals).is_file():
        raise UserError(f"cannot read expected literals {s.expected_literals}: no such file")
    if s.input_literals and not s.random_inputs:
        raise UserError("--zero-inputs (random_init_input_literals=false) and --input-literals exclude each other")
    if s.output_literals:
        parent = Path(s.output_literals).parent
        if not parent.is_dir():
            raise UserError(f"--output-literals {s.output_literals}: the directory {parent} does not exist")
    if list(files).count(common.STDIN) > 1:
        raise UserError("standard input (-) can be read once")
    if "host" in (s.platform, s.reference) or "cuda" in (s.platform, s.reference) or s.dump_to is not None:
        common.check_llvmlite()
        common.default_arch()  # HLO_COMPILE_ARCH, checked before any work
    common.prepare_dump_dir(s.dump_to)


def _run_files(files, s: RunSettings, split_input_file: bool, as_fusion: bool) -> int:
    status = EXIT_OK
    index = 0
    modules_total = 0
    dump = DumpDirectory(s.dump_to) if s.dump_to is not None else None
    for path in files:
        if len(files) > 1:
            click.echo(f"== {path}", err=True)
        try:
            run_watch.phase("parse", str(path))
            modules = common.read_modules(path, split_input_file, as_fusion)
        except UserError as e:
            click.echo(f"{PROG}: error: {e}", err=True)
            status = max(status, e.code)
            continue
        except HloError as e:
            common.echo_error(PROG, e)
            status = max(status, EXIT_ERROR)
            continue
        modules_total += len(modules)
        several = len(modules) > 1 or len(files) > 1
        for module in modules:
            status = max(status, _guarded_run(module, s, index if several else None, dump, index, path))
            index += 1
    if s.overrides is not None and status != EXIT_ERROR:  # a file no module used: never silently
        try:
            s.overrides.finish()
        except HloError as e:
            common.echo_error(PROG, e)
            status = EXIT_ERROR
    return status


def _guarded_run(module, s: RunSettings, index: int | None, dump: DumpDirectory | None, dump_index: int,
                 path: str) -> int:
    try:
        return _run_one(module, s, index=index, dump=dump, dump_index=dump_index)
    except UserError as e:
        click.echo(f"{PROG}: error: {e}", err=True)
        return e.code
    except HloError as e:
        common.echo_error(PROG, e)
        return EXIT_ERROR
    except MemoryError as e:
        click.echo(f"{PROG}: error: {module.name}: out of memory ({e})", err=True)
        return EXIT_ERROR
    except (RecursionError, ValueError, KeyError, IndexError, TypeError, NotImplementedError, ArithmeticError,
            AssertionError, AttributeError, RuntimeError, OSError) as e:
        # an input the front end let through but the platform cannot handle: still no traceback
        if common.traceback_wanted():  # unless asked for
            raise
        click.echo(common.bug_text(PROG, f"running {module.name} from {path}", e), err=True)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    main()
