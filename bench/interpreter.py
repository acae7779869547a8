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
    ns = p.parse_args(argv)
    root = _corpus(ns.corpus)
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
