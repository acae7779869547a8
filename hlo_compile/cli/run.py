"""``hlo-run``: run an HLO module on a platform and compare with a reference (DESIGN.md §5).

Exit status: 0 results match (or no reference), 1 mismatch, 2 bad input or unsupported
feature (message on stderr, no traceback)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click
import numpy as np

from ..hlo import parse_module, parse_modules
from ..hlo.errors import HloError

EXIT_OK, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2


class _Failure(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


def _runner(platform: str, module, seed, tensor_cores: bool = False, graph: bool = False, fusion: bool = True):
    """A function running ``module`` on ``platform`` (compiled once, run many times); with
    ``graph``, (graph runner, plain runner) when the module can be one CUDA graph."""
    if platform == "interpreter":
        from ..interpreter import evaluate_module
        return lambda args: evaluate_module(module, args, seed=seed)
    from ..options import CompileOptions
    from ..runtime.executable import compile_executable
    exe = compile_executable(module, platform, CompileOptions(dot_tensor_cores=tensor_cores, fusion=fusion))
    if not graph:
        return exe.run
    from ..runtime.graph import ModuleGraph, unsupported_reason
    why = unsupported_reason(exe)
    if why:
        click.echo(f"{module.name}: CUDA graph not used ({why}); running plain launches", err=True)
        return exe.run
    return ModuleGraph(exe), exe.run


def _timed(run, args, iterations: int):
    """(last result, seconds per run)."""
    result, times = None, []
    for _ in range(max(1, iterations)):
        t0 = time.perf_counter()
        result = run(args)
        times.append(time.perf_counter() - t0)
    return result, times


def _run_graph(module, graph, plain, args, iterations: int):
    """Run through the graph (the first run records and captures it); with iterations > 1,
    time plain launches the same way and report the gain."""
    result, times = _timed(graph.run, args, iterations)
    click.echo(f"{module.name}: CUDA graph: {graph.describe()}; first run (capture) "
               f"{times[0] * 1e3:.3f} ms", err=True)
    if iterations > 1:
        _, plain_times = _timed(plain, args, iterations)
        g, p = np.median(times[1:]), np.median(plain_times[1:])
        click.echo(f"{module.name}: {iterations - 1} replays, median {g * 1e3:.3f} ms with the graph, "
                   f"{p * 1e3:.3f} ms with plain launches ({p / g:.2f}x), transfers included", err=True)
    graph.close()
    return result, times


def _is_own_reference(platform: str, reference: str) -> bool:
    """Comparing the interpreter with itself proves nothing: skip it."""
    return platform == reference


def _print_literals(label: str, leaves) -> None:
    for i, a in enumerate(leaves):
        click.echo(f"{label}{i}: {a.dtype.name}{list(a.shape)}")
        with np.printoptions(threshold=200, edgeitems=4):
            click.echo(np.array2string(np.asarray(a).astype(np.float64) if a.dtype.name == "bfloat16" or
                                       a.dtype.name.startswith("float8") else a))


def _run_one(module, *, platform, reference, input_literals, output_literals, seed, iterations,
             abs_error_bound, rel_error_bound, print_literals, index=None, tensor_cores=False,
             use_cuda_graph=False, fusion=True) -> int:
    from ..runtime import compare, literals
    if input_literals:
        args = literals.load_inputs(input_literals, module)
    else:
        args = literals.random_inputs(module, seed if seed is not None else 0)
    if print_literals:
        _print_literals("arg", literals.flatten(args))
    # keywords only when set: tests replace _runner with (platform, module, seed) functions
    extra = {**({"tensor_cores": True} if tensor_cores else {}), **({"graph": True} if use_cuda_graph else {}),
             **({} if fusion else {"fusion": False})}
    run = _runner(platform, module, seed, **extra)
    if isinstance(run, tuple):
        result, times = _run_graph(module, *run, args, iterations)
    else:
        result, times = _timed(run, args, iterations)
    leaves = literals.flatten(result)
    if iterations > 1 and not isinstance(run, tuple):
        click.echo(f"{module.name}: {platform} {iterations} iterations, median {np.median(times) * 1e3:.3f} ms, "
                   f"min {min(times) * 1e3:.3f} ms", err=True)
    if output_literals:
        path = Path(output_literals)
        if index is not None:
            path = path.with_name(f"{path.stem}.{index}{path.suffix or '.npz'}")
        literals.save_outputs(path, result)
    if print_literals:
        _print_literals("out", leaves)
    if reference == "none" or _is_own_reference(platform, reference):
        shapes = ", ".join(f"{a.dtype.name}{list(a.shape)}" for a in leaves)
        why = "no reference requested" if reference == "none" else "the interpreter is its own reference"
        click.echo(f"{module.name}: ran on {platform}, outputs {shapes}; not compared ({why})", err=True)
        return EXIT_OK
    from ..interpreter import evaluate_module
    expected = literals.flatten(evaluate_module(module, args, seed=seed))
    tol = [(rel_error_bound, abs_error_bound)] * len(expected)
    cmp = compare.compare_results(expected, leaves, tolerances=tol)
    if cmp.ok:
        click.echo(f"{module.name}: results match the {reference} reference", err=True)
        return EXIT_OK
    click.echo(cmp.report(), err=True)
    return EXIT_MISMATCH


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--platform", type=click.Choice(["interpreter", "host", "cuda"]), default="interpreter",
              show_default=True, help="where the module runs")
@click.option("--reference", type=click.Choice(["interpreter", "none"]), default="interpreter", show_default=True,
              help="what the results are compared with")
@click.option("--input-literals", type=click.Path(dir_okay=False), default=None,
              help="npz with arg0, arg1, ... (default: random inputs)")
@click.option("--output-literals", type=click.Path(dir_okay=False), default=None,
              help="write the results here as out0, out1, ...")
@click.option("--seed", type=int, default=None, help="seed of generated inputs and rng ops")
@click.option("--iterations", type=int, default=1, show_default=True, help="runs (timing)")
@click.option("--abs-error-bound", type=float, default=None, help="atol (default: per dtype)")
@click.option("--rel-error-bound", type=float, default=None, help="rtol (default: per dtype)")
@click.option("--print-literals", is_flag=True, help="print inputs and outputs")
@click.option("--tensor-cores/--no-tensor-cores", "tensor_cores", default=False, show_default=True,
              envvar="HLO_COMPILE_TENSOR_CORES",
              help="f16/bf16 dots through mma.sync tensor cores on sm_80+ (experimental)")
@click.option("--fusion/--no-fusion", "fusion", default=True, show_default=True,
              help="group lone instructions into fusions (--no-fusion: one kernel per instruction)")
@click.option("--use-cuda-graph", is_flag=True,
              help="cuda: capture the module's launches once in a CUDA graph and replay it (with "
                   "--iterations N, also times plain launches and prints the gain)")
@click.option("--split-input-file", is_flag=True, help="FILE holds modules separated by '// -----'")
@click.option("--as-fusion", is_flag=True,
              help="FILE is a bare fused computation (XLA's emitter test files): run it as one fusion")
def main(file, platform, reference, input_literals, output_literals, seed, iterations, abs_error_bound,
         rel_error_bound, print_literals, tensor_cores, fusion, use_cuda_graph, split_input_file, as_fusion):
    """Run the HLO module in FILE and compare its results with a reference."""
    try:
        if use_cuda_graph and platform != "cuda":
            raise _Failure(f"--use-cuda-graph needs --platform=cuda (got --platform={platform})")
        try:
            text = Path(file).read_text()
        except OSError as e:
            raise _Failure(f"cannot read {file}: {e.strerror or e}") from None
        modules = parse_modules(text, file) if split_input_file else [parse_module(text, file)]
        if as_fusion:
            from ..passes.wrap_fusions import wrap_entry_as_fusion
            modules = [wrap_entry_as_fusion(m) for m in modules]
        status = EXIT_OK
        for i, module in enumerate(modules):
            code = _run_one(module, platform=platform, reference=reference, input_literals=input_literals,
                            output_literals=output_literals, seed=seed, iterations=iterations,
                            abs_error_bound=abs_error_bound, rel_error_bound=rel_error_bound,
                            print_literals=print_literals, index=i if len(modules) > 1 else None,
                            tensor_cores=tensor_cores, use_cuda_graph=use_cuda_graph, fusion=fusion)
            status = max(status, code)
        sys.exit(status)
    except _Failure as e:
        click.echo(f"hlo-run: error: {e}", err=True)
        sys.exit(e.code)
    except HloError as e:
        click.echo(str(e), err=True)
        sys.exit(EXIT_ERROR)
    except (MemoryError, RecursionError, ValueError, KeyError, IndexError, TypeError, NotImplementedError,
            ArithmeticError, AssertionError, AttributeError, RuntimeError) as e:
        # an input the front end let through but the platform cannot handle: still no traceback
        click.echo(f"hlo-run: error: {type(e).__name__}: {e}", err=True)
        sys.exit(EXIT_ERROR)


if __name__ == "__main__":  # pragma: no cover
    main()
