"""python -m hlo_compile.fuzz --count N --seed S [--jobs J] [--out DIR] [--xla] [--shrink K] [--spmd]

Differential fuzzing of the host target against the reference interpreter (and XLA:CPU with
--xla): random valid modules, each run with and without the fusion pass; mismatches and crashes
are shrunk to reproducers under DIR. Also: --replay SEED (print one module and run it),
--check FILE (run a module file like the fuzzer does), --shrink-file FILE (shrink a failing
module file). --spmd: modules on R x P participants (R*P in 2, 4, 8) with collectives, each
participant compared (interpreter's evaluate_spmd against the host's SPMD run).
Exit status: 0 no mismatch or crash, 1 some, 2 bad usage.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .config import DEFAULT_FEATURES, KNOWN_BUG_FEATURES, FuzzConfig


def _features(items, allowed, flag: str) -> frozenset:
    out = set()
    for item in items or []:
        for name in item.split(","):
            out |= set(allowed) if name == "all" else {name}
    unknown = out - set(allowed)
    if unknown:
        raise SystemExit(f"unknown {flag} feature(s): {', '.join(sorted(unknown))} "
                         f"(have: {', '.join(sorted(allowed))}, all)")
    return frozenset(out)


def _config(ns) -> FuzzConfig:
    return FuzzConfig(max_ops=ns.max_ops, xla_compatible=ns.xla_compatible,
                      known_bugs=_features(ns.known_bugs, KNOWN_BUG_FEATURES, "--known-bugs"),
                      without=_features(ns.without, DEFAULT_FEATURES, "--without"),
                      only_ops=frozenset(ns.only_ops.split(",")) if ns.only_ops else None, spmd=ns.spmd)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hlo_compile.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100, help="modules to generate and run")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first module")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--out", type=Path, default=None, help="write summary.json/txt and reproducers here")
    ap.add_argument("--xla", action="store_true", help="also run XLA:CPU through xla_ref.py (needs jax)")
    ap.add_argument("--xla-compatible", action="store_true",
                    help="generate only what XLA can run (no bitcast, tuple parameters, ops XLA lacks)")
    ap.add_argument("--modes", default="fusion,no-fusion", help="host modes: fusion, no-fusion")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per module before it counts as a hang")
    ap.add_argument("--shrink", type=int, default=10, help="failures to shrink into reproducers (0: none)")
    ap.add_argument("--shrink-budget", type=float, default=300.0, help="seconds per shrink")
    ap.add_argument("--max-ops", type=int, default=10, help="ops drawn for ENTRY")
    ap.add_argument("--spmd", action="store_true",
                    help="SPMD modules (replica_count x num_partitions in 2, 4, 8) with collectives")
    ap.add_argument("--only-ops", default=None, help="comma-separated generator names (see registry)")
    ap.add_argument("--known-bugs", action="append", default=[], metavar="FEATURE",
                    help=f"also generate features of known open bugs: {', '.join(KNOWN_BUG_FEATURES)}, all")
    ap.add_argument("--without", action="append", default=[], metavar="FEATURE",
                    help=f"do not generate these default features: {', '.join(sorted(DEFAULT_FEATURES))}, all")
    ap.add_argument("--replay", type=int, default=None, metavar="SEED", help="print module SEED and run it")
    ap.add_argument("--check", type=Path, default=None, metavar="FILE", help="run FILE as the fuzzer does")
    ap.add_argument("--shrink-file", type=Path, default=None, metavar="FILE",
                    help="shrink FILE while its failure in --modes persists")
    ap.add_argument("--input-seed", type=int, default=0, help="inputs seed for --check / --shrink-file")
    ap.add_argument("--quiet", action="store_true")
    ns = ap.parse_args(argv)
    if ns.xla:
        from .xla_spmd import ensure_device_flag
        ensure_device_flag()
    cfg = _config(ns)
    modes = tuple(m for m in ns.modes.split(",") if m)
    if any(m not in ("fusion", "no-fusion") for m in modes):
        print(f"--modes: expected fusion and/or no-fusion, got {ns.modes}", file=sys.stderr)
        return 2
    log = (lambda s: None) if ns.quiet else (lambda s: print(s, flush=True))

    if ns.replay is not None or ns.check is not None:
        from .generator import generate
        from .runner import run_case
        if ns.replay is not None:
            text, seed = generate(ns.replay, cfg).text, ns.replay
            print(text)
        else:
            text, seed = ns.check.read_text(), ns.input_seed
        res = run_case(text, seed, modes, ns.xla)
        for o in [res.reference] + res.outcomes:
            print(f"{o.mode}: {o.status}" + (f" ({o.op})" if o.op else "") + (f"\n{o.detail}" if o.detail else ""))
        return 1 if res.failures else 0

    if ns.shrink_file is not None:
        from .campaign import Failure, write_reproducer
        from .runner import run_case
        from .worker import Worker
        text = ns.shrink_file.read_text()
        res = run_case(text, ns.input_seed, modes)
        if not res.failures:
            print(f"{ns.shrink_file}: no mismatch or crash in {', '.join(modes)}: nothing to shrink")
            return 0
        o = res.failures[0]
        f = Failure(ns.input_seed, o.mode, o.status, o.signature(), o.detail, text)
        w = Worker()
        try:
            write_reproducer(f, w, ns.out or Path("fuzz-out"), ns.shrink_budget, ns.timeout, log)
        finally:
            w.close()
        print(f.shrunk)
        return 1

    from .campaign import run_campaign
    report = run_campaign(ns.count, ns.seed, jobs=ns.jobs, cfg=cfg, modes=modes, xla=ns.xla, timeout=ns.timeout,
                          out=ns.out, shrink=ns.shrink, shrink_budget=ns.shrink_budget, log=log)
    print(report.summary())
    return 1 if report.mismatches or report.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
