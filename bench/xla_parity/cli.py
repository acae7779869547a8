"""``python -m bench --xla-parity DIR... [--json F] [--jobs J] [--arch A] [--limit N]``.

Each DIR is a case folder made by ``xla_gpu_dump.py`` (it holds ``case.json``) or a folder
searched recursively for them. Prints the per-kernel rows grouped by our emitter family, the
family table, the kernels without a counterpart, the modules we refuse, and one summary line
last; ``--json F`` writes every row and figure. Exit status 0 unless no case was found.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..xla_gpu_corpus.layout import find_cases
from .case import compare_case
from .report import (difference_kinds, family_table, kernel_lines, module_lines, register_outliers, summarize,
                     summary_line)


def _jobs_default() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _one(args: tuple) -> dict:
    case, kwargs = args
    return compare_case(str(case), **kwargs)


def run(cases: list[Path], jobs: int = 1, **kwargs) -> list[dict]:
    """``compare_case`` on each case, in ``jobs`` processes; results in the cases' order."""
    work = [(c, kwargs) for c in cases]
    if jobs <= 1 or len(cases) <= 1:
        return [_one(w) for w in work]
    with ProcessPoolExecutor(max_workers=min(jobs, len(cases))) as pool:
        return list(pool.map(_one, work))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench --xla-parity",
                                 description="Our kernels against XLA:GPU's, kernel by kernel (issue 29).")
    ap.add_argument("dirs", nargs="+", metavar="DIR", help="case folders, or folders holding them")
    ap.add_argument("--json", dest="json_out", default=None, metavar="F", help="write every row and figure here")
    ap.add_argument("--jobs", "-j", type=int, default=None, metavar="J",
                    help="cases compared at once (default: the CPUs this process may use)")
    ap.add_argument("--arch", default=None, help="compile ours for this arch (default: each case's own)")
    ap.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N cases")
    ap.add_argument("--gemm", choices=("library", "generated"), default="library",
                    help="our library-call GEMMs kept as calls (default) or generated")
    ap.add_argument("--tensor-cores", action="store_true", help="compile ours with --tensor-cores")
    ap.add_argument("--no-ptxas", action="store_true", help="do not run ptxas (registers unknown)")
    ap.add_argument("--no-cache", action="store_true", help="neither read nor write our compile cache")
    ap.add_argument("--cache-dir", default=None, help="our compile cache (default: hlo-compile's)")
    ap.add_argument("--diff-only", action="store_true", help="per-kernel rows: only those that differ")
    ap.add_argument("--quiet", "-q", action="store_true", help="only the family table and the summary line")
    ns = ap.parse_args(argv)
    cases = find_cases(ns.dirs)
    if ns.limit is not None:
        cases = cases[:ns.limit]
    if not cases:
        print(f"xla-parity: no case folder (with case.json) under {' '.join(ns.dirs)}", file=sys.stderr)
        return 2
    results = run(cases, ns.jobs or _jobs_default(), arch=ns.arch, cache_dir=ns.cache_dir,
                  use_cache=not ns.no_cache, gemm=ns.gemm, tensor_cores=ns.tensor_cores, ptxas=not ns.no_ptxas)
    summary = summarize(results)
    if not ns.quiet:
        print("\n".join(kernel_lines(results, ns.diff_only)))
        print()
    print("\n".join(family_table(summary)))
    if not ns.quiet:
        kinds = difference_kinds(results)
        if kinds:
            print("\nmost common differences:")
            for what, n in kinds.most_common(12):
                print(f"  {n:5d}  {what}")
        outliers = register_outliers(results)
        if outliers:
            print(f"\nregisters more than 10% off XLA's, or spilling where XLA's does not ({len(outliers)}):")
            for o in outliers[:40]:
                spill = f", spills {o['ours_spills']} B (XLA {o['xla_spills']})" if o["ours_spills"] else ""
                print(f"  {o['ratio']:5.2f}  [{o['family']}] {o['case']}/{o['fusion']}: ours {o['ours_registers']}, "
                      f"XLA {o['xla_registers']}{spill}")
            if len(outliers) > 40:
                print(f"  ... {len(outliers) - 40} more (--json has them all)")
    lines = module_lines(summary)
    if lines:
        print()
        print("\n".join(lines))
    for r in summary["refused"]:
        print(f"{r['status']}: {r['case']}: {r['message']}")
    for e in summary["ptxas_errors"]:
        print(f"ptxas: {e}")
    print(summary_line(summary))
    if ns.json_out:
        Path(ns.json_out).write_text(json.dumps({"summary": summary, "register_outliers": register_outliers(results),
                                                 "cases": results}, indent=1) + "\n")
    return 0
