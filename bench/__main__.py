"""python -m bench [--suite gpu|cpu|all] [--json OUT] [--chart OUT.png] [--quick] [--only NAME ...]
   python -m bench --fuzz N [--seed S] [--jobs J] [--out DIR] [--xla]   (the differential fuzzer)
   python -m bench --xla-gpu-corpus DIR... [--jobs J] [--json F]         (XLA:GPU's modules end to end)
   python -m bench --xla-parity DIR... [--json F]                        (our kernels beside XLA:GPU's)

Runs the GPU suite (``bench/gpu_suite.py``: every module of ``bench/modules`` on the GPU, against
the device-to-device copy roofline and XLA) and the CPU suite (``bench/cpu_suite.py``: parse
throughput, compile time per stage, the interpreter against XLA:CPU, the host target), prints a
compact table, and writes every figure as JSON (``--json``) and a bar chart (``--chart``, needs
matplotlib). Without a GPU the GPU suite prints one line saying why and is skipped; the exit
status is 0 unless a suite could not run at all.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/__main__.py`: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"


def _versions() -> dict:
    out = {"python": sys.version.split()[0], "machine": platform.machine()}
    for name in ("numpy", "llvmlite", "lark", "cuda-bindings", "jax", "jaxlib"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return "-" if v is None else str(v)
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


_TABLE_EXTRA = {  # the extras worth a column, per section; the rest is in the JSON
    "gpu kernels": ["kernels", "gbs", "pct_copy_roofline", "tflops", "module_us", "module_graph_us", "graph_gain",
                    "xla_us", "ours_over_xla"],
    "parse": ["module_mb", "xla_mb_s", "ours_over_xla"],
    "compile": ["kernels"],
    "pass scaling": ["ratio_to_1x"],
    "interpreter": ["xla_cpu_ms", "ratio"],
    "host": ["first_parameter", "kernels", "time_over_copy"],
    "compile vs XLA": ["ours_process", "xla_process", "ours_compile", "xla_compile", "ours_cpu", "xla_cpu"],
}


def print_table(report: dict) -> None:
    for suite, res in report["suites"].items():
        if not res.get("ran"):
            continue
        for section, sec in res["sections"].items():
            print(f"\n[{suite}: {section}]" + (f" {sec['method']}" if sec.get("method") else ""))
            if sec.get("skipped"):
                print(f"  skipped: {sec['skipped']}")
            if sec.get("error"):
                print(f"  failed: {sec['error']}")
            rows = sec.get("rows", [])
            if rows:
                cols = _TABLE_EXTRA.get(section, [])
                width = max(len(r["name"]) for r in rows)
                print(f"  {'':<{width}}  {'value':>10}  " + "  ".join(f"{c:>14}" for c in cols))
                for r in rows:
                    value = _fmt(r["value"]) + " " + r["unit"] if r["value"] is not None else r.get("error", "-")
                    line = f"  {r['name']:<{width}}  {value:>10}  " + \
                        "  ".join(f"{_fmt(r['extra'].get(c)):>14}" for c in cols)
                    print(line.rstrip())
                    if section == "compile":
                        st = r["extra"]["stage_seconds"]
                        print("    " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in st.items()))
                    if r.get("error") and r["value"] is not None:
                        print(f"    {r['error']}")
            for e in sec.get("errors", []):
                print(f"  ! {e}")
            if "median_ratio_interpreter_over_xla_cpu" in sec:
                print(f"  median ratio interpreter / XLA:CPU: {sec['median_ratio_interpreter_over_xla_cpu']:.2f}")


def write_chart(report: dict, path: Path) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"--chart: matplotlib is not installed (pip install matplotlib); no chart written to {path}"
    panels = [(f"{suite}: {name}", sec["rows"]) for suite, res in report["suites"].items() if res.get("ran")
              for name, sec in res["sections"].items() if any(r["value"] is not None for r in sec.get("rows", []))]
    if not panels:
        return "--chart: no figures to chart"
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.2 + 0.35 * sum(len(r) for _, r in panels)),
                             squeeze=False)
    for ax, (title, rows) in zip(axes[:, 0], panels):
        rows = [r for r in rows if r["value"] is not None]
        gpu = title.startswith("gpu")
        vals = [r["extra"].get("pct_copy_roofline") or 0 for r in rows] if gpu else [r["value"] for r in rows]
        ax.barh([r["name"] for r in rows], vals)
        ax.invert_yaxis()
        ax.set_title(title + (" (% of the copy roofline)" if gpu else f" ({rows[0]['unit']})"), fontsize=9)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return f"wrote {path}"


# sub-commands that take over the whole command line (their own --json, --jobs, ...)
SUBCOMMANDS = {
    "--xla-gpu-corpus": ("bench.xla_gpu_corpus.check", "check a corpus made by xla_gpu_dump.py"),
    "--xla-parity": ("bench.xla_parity", "our kernels against XLA:GPU's, kernel by kernel"),
}


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    for flag, (module, _) in SUBCOMMANDS.items():
        if flag in args:
            rest = [a for a in args if a != flag]
            return importlib.import_module(module).main(rest)
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=["gpu", "cpu", "all"], default="all")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--chart", type=Path, default=None, help="a bar chart (PNG; needs matplotlib)")
    ap.add_argument("--quick", action="store_true", help="small sizes, few iterations, no XLA: seconds, for CI")
    ap.add_argument("--only", action="append", default=[],
                    help="GPU and host benchmarks: only modules whose name contains this")
    ap.add_argument("--no-xla", dest="xla", action="store_false", help="do not measure XLA through jax")
    ap.add_argument("--xla-ref", default=None, help="path of xla_ref.py (default: $HLO_XLA_REF, ../shared/tools)")
    ap.add_argument("--fuzz", type=int, default=None, metavar="N",
                    help="instead of the suites, run the differential fuzzer on N modules (python -m "
                         "hlo_compile.fuzz; options it does not know here, e.g. --seed S --jobs J --out DIR --xla, "
                         "are passed on)")
    for flag, (module, what) in SUBCOMMANDS.items():
        ap.add_argument(flag, action="store_true", help=f"instead of the suites, {what} (python -m {module} "
                        "DIR... --help: its options)")
    ns, rest = ap.parse_known_args(argv)
    if ns.fuzz is not None:
        from hlo_compile.fuzz.__main__ import main as fuzz_main  # noqa: PLC0415
        return fuzz_main(["--count", str(ns.fuzz), *rest])
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    from . import cpu_suite, gpu_suite  # noqa: PLC0415 (after argparse: --help stays fast)
    t0 = time.perf_counter()
    report: dict = {"argv": sys.argv[1:] if argv is None else list(argv), "quick": ns.quick,
                    "versions": _versions(), "suites": {}}
    if ns.suite in ("gpu", "all"):  # first: jax, when it times XLA:GPU, must start on the GPU
        report["suites"]["gpu"] = gpu_suite.run_gpu_suite(ns)
        if not report["suites"]["gpu"]["ran"]:
            print(report["suites"]["gpu"]["skipped"], flush=True)
    if ns.suite in ("cpu", "all"):
        report["suites"]["cpu"] = cpu_suite.run_cpu_suite(ns)
    report["seconds"] = time.perf_counter() - t0
    print_table(report)
    print(f"\ntotal {report['seconds']:.1f} s")
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"wrote {ns.json}")
    if ns.chart:
        print(write_chart(report, ns.chart))
    return 0


if __name__ == "__main__":
    sys.exit(main())
