#!/usr/bin/env python3
"""Time the reference interpreter on every JAX corpus case (primary_hlo), and, when jax is
importable, XLA:CPU on the same module and inputs through ../shared/tools/xla_ref.py's run
path; prints a table with the ratio (interpreter / XLA:CPU) and the median ratio.

    python bench/interpreter.py [--corpus DIR] [--repeat N] [--case SUBSTR ...] [--all-hlo]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import hlo_compile  # noqa: E402
from hlo_compile.interpreter import evaluate_module  # noqa: E402
from hlo_compile.runtime import literals  # noqa: E402


def _corpus(arg: str | None) -> Path | None:
    for c in [arg, os.environ.get("HLO_CORPUS"), str(REPO.parent / "shared" / "corpus")]:
        if c and (Path(c) / "jax").is_dir():
            return Path(c) / "jax"
        if c and Path(c).is_dir() and (Path(c) / "index.json").is_file():
            return Path(c)
    return None


def _xla_ref(corpus: Path):
    """The xla_ref module if jax is importable, else None."""
    if importlib.util.find_spec("jax") is None:
        return None
    path = corpus.parents[1] / "tools" / "xla_ref.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("xla_ref", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _best(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def time_interpreter(path: Path, inputs: Path, repeat: int) -> float:
    module = hlo_compile.parse_module(path.read_text(), str(path))
    args = literals.load_inputs(inputs, module)
    return _best(lambda: evaluate_module(module, args), repeat)


MIN_LIVE = 1 << 20  # ratios of modules with less live data are printed but not summarised


def live_buffers(module) -> int:
    """The module's live buffers: entry inputs + ``interpreter_live_peak`` of the entry."""
    from hlo_compile.runtime.memory_estimate import input_bytes, interpreter_live_peak
    return input_bytes(module) + interpreter_live_peak(module.entry)


def measure_memory(module, args) -> tuple[int, int, float]:
    """(live buffers, the interpreter's peak, seconds): peak = inputs + tracemalloc's peak."""
    import tracemalloc
    from hlo_compile.runtime.memory_estimate import input_bytes
    live = live_buffers(module)
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        out = evaluate_module(module, args)
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del out
    return live, input_bytes(module) + peak, seconds


def _memory_modules(ns, root: Path | None) -> list[tuple[str, Path, Path]]:
    mods = []
    if root is not None:
        for case in sorted(d for d in root.iterdir() if (d / "case.json").is_file()):
            info = json.loads((case / "case.json").read_text())
            mods.append((f"jax/{case.name}", case / info["primary_hlo"], case / "inputs.npz"))
    xg = Path(ns.xla_gpu_corpus) if ns.xla_gpu_corpus else REPO.parent / "xla-gpu-corpus"
    if xg.is_dir() and ns.every > 0:
        cases = sorted(d for d in xg.glob("*/sm_90/*") if (d / "optimized_gpu.hlo").is_file()
                       and (d / "inputs.npz").is_file())
        mods += [(f"{d.parts[-3]}/{d.name}", d / "optimized_gpu.hlo", d / "inputs.npz") for d in cases[::ns.every]]
    for f in ns.files:
        f = Path(f)
        mods.append((str(f), f, f.parent / "inputs.npz"))
    if ns.case:
        mods = [m for m in mods if any(s in m[0] for s in ns.case)]
    return mods


def memory_main(ns, root: Path | None) -> int:
    from hlo_compile.runtime.memory_estimate import interpreter_live_peak
    rows = []
    for name, path, inputs in _memory_modules(ns, root):
        try:
            module = hlo_compile.parse_module(path.read_text(), str(path))
            if interpreter_live_peak(module.entry) > ns.max_live_mb * (1 << 20):
                print(f"{name}: skipped (over --max-live-mb)", file=sys.stderr)
                continue
            args = literals.load_inputs(inputs, module) if inputs.is_file() else \
                literals.random_inputs(module)
            live, peak, seconds = measure_memory(module, args)
        except Exception as e:  # report and go on: a benchmark, not a test
            print(f"{name}: failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            continue
        del args
        rows.append((name, live, peak, seconds))
        print(f"{name:<70} live {live / 2**20:9.2f} MB  peak {peak / 2**20:9.2f} MB  "
              f"ratio {peak / live if live else float('inf'):6.2f}  {seconds:7.2f} s", flush=True)
    big = [(peak / live, name) for name, live, peak, _ in rows if live >= MIN_LIVE]
    if big:
        ratios = sorted(r for r, _ in big)
        worst = max(big)
        print(f"peak / live over {len(big)} modules of >= 1 MB live ({len(rows)} measured): "
              f"median {statistics.median(ratios):.2f}, worst {worst[0]:.2f} ({worst[1]})")
    return 0


def time_xla(xr, path: Path, inputs: Path, repeat: int) -> float:
    import jax
    text = path.read_text()
    if "fusion(" in text and ("kInput" in text or "kOutput" in text or "is_scheduled" in text):
        text = xr.inline_fusions(text)
        text, _ = xr.bitcasts_to_reshapes(text)
    exe, comp, dev = xr.compile_hlo_text(text)
    specs = xr.parameter_specs(comp)
    raw = xr.load_npz_inputs(str(inputs))
    args = [xr.coerce_input(a, dt, dims, f"arg{i}") for i, (a, (dt, dims)) in enumerate(zip(raw, specs))]
    bufs = [jax.device_put(a, dev) for a in args]

    def run():
        res = exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
        return [np.asarray(r[0]) for r in res]
    return _best(run, repeat)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default=None, help="the corpus directory (or its jax/ folder)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--case", action="append", default=[], help="only cases whose name contains this")
    p.add_argument("--all-hlo", action="store_true", help="every .hlo of a case, not only primary_hlo")
    p.add_argument("--memory", action="store_true", help="peak memory / live buffers per module (docstring)")
    p.add_argument("--xla-gpu-corpus", default=None, help="--memory: the XLA:GPU corpus (default ../xla-gpu-corpus)")
    p.add_argument("--every", type=int, default=10, help="--memory: every K-th XLA:GPU corpus case (0: none)")
    p.add_argument("--max-live-mb", type=float, default=1500, help="--memory: skip modules of more live buffers")
    p.add_argument("files", nargs="*", help="--memory: more .hlo files (inputs.npz beside them, else zeros)")
    ns = p.parse_args(argv)
    root = _corpus(ns.corpus)
    if ns.memory:
        return memory_main(ns, root)
    if root is None:
        print("no corpus found (give --corpus or set HLO_CORPUS)", file=sys.stderr)
        return 2
    xr = _xla_ref(root)
    if xr is None:
        print("jax not importable: timing the interpreter only", file=sys.stderr)
    rows = []
    for case in sorted(d for d in root.iterdir() if (d / "case.json").is_file()):
        if ns.case and not any(s in case.name for s in ns.case):
            continue
        info = json.loads((case / "case.json").read_text())
        files = sorted(case.glob("*.hlo")) if ns.all_hlo else [case / info["primary_hlo"]]
        for f in files:
            name = f"{case.name}/{f.name}"
            try:
                t_int = time_interpreter(f, case / "inputs.npz", ns.repeat)
            except Exception as e:  # report and go on: a benchmark, not a test
                print(f"{name}: interpreter failed: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            t_xla = None
            if xr is not None:
                try:
                    t_xla = time_xla(xr, f, case / "inputs.npz", ns.repeat)
                except (Exception, SystemExit) as e:
                    print(f"{name}: XLA:CPU failed: {type(e).__name__}: {e}", file=sys.stderr)
            rows.append((name, t_int, t_xla))
    width = max([len(r[0]) for r in rows] + [4])
    header = f"{'case':<{width}}  {'interp ms':>10}"
    if xr is not None:
        header += f"  {'XLA:CPU ms':>10}  {'ratio':>8}"
    print(header)
    ratios = []
    for name, ti, tx in rows:
        line = f"{name:<{width}}  {ti * 1e3:>10.3f}"
        if xr is not None:
            if tx:
                ratios.append(ti / tx)
                line += f"  {tx * 1e3:>10.3f}  {ti / tx:>8.2f}"
            else:
                line += f"  {'-':>10}  {'-':>8}"
        print(line)
    times = [r[1] for r in rows]
    if times:
        print(f"median interpreter time: {statistics.median(times) * 1e3:.3f} ms over {len(times)} modules")
    if ratios:
        print(f"median ratio interpreter / XLA:CPU: {statistics.median(ratios):.2f} "
              f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
