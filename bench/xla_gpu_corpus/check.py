"""Check a corpus of XLA:GPU modules (made by ``make.py`` / ``xla_gpu_dump.py``) end to end.

    python -m bench --xla-gpu-corpus DIR... [--jobs J] [--json F] [--only REGEX] [--limit N]
                                   [--platforms host,interpreter] [--compile-timeout S] [--run-timeout S]

For every case (a folder with ``case.json`` and ``optimized_gpu.hlo``) it runs, as a user would,
each in its own process:
  compile       ``hlo-compile optimized_gpu.hlo --arch <the case's> --emit cubin`` (``--emit ptx``
                when no ptxas is found): exit 0 = a cubin ptxas accepted; exit 2 = refused by name
                before any PTX; anything else (a ptxas refusal after our checks, an internal
                error, a timeout) is a failure. Wall time and peak memory (the process's maximum
                resident set) are recorded against the issue's bounds (30 s, 1.5 GB).
  host, interpreter
                ``hlo-run optimized_gpu.hlo --platform P --reference none --input-literals
                inputs.npz --output-literals F``: the module with XLA:CPU's own inputs; F is
                compared with XLA:CPU's outputs (SPMD cases per participant), each output with
                the tolerance its case states (the tool's case.json, else the source case's
                ``outputs[i].rtol/atol``), else the "model" class of tolerances per type: XLA:GPU's
                fusions round where XLA:CPU's do not, so results agree only to that.

One summary line, a table per group (the folder under DIR: jax, models, xla, programs,
spmd4, ... and their ``-cublas`` variants) and arch, and with ``--json`` every case's record.
Exit status 0 when every case compiles (or is refused by name) and no run ends in an internal
error; 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .layout import find_cases, group_of

COMPILE_SECONDS = 30.0
COMPILE_BYTES = 1.5e9
BUG = re.compile(r"unexpected failure|this is a bug|internal error|Traceback \(most recent call last\)")


@dataclass
class Step:
    status: str            # ok | diverges | refused | mismatch | failed | internal | timeout | skipped | checker
    seconds: float = 0.0
    peak_bytes: int = 0
    message: str = ""


@dataclass
class CaseResult:
    case: str
    group: str
    arch: str
    steps: dict[str, Step] = field(default_factory=dict)


def _tool(name: str) -> list[str]:
    """The command of ``hlo-compile``/``hlo-run`` from the package beside this checker (see
    ``CHILD_ENV``), not whichever is first on PATH."""
    module = {"hlo-compile": "hlo_compile.cli.compile", "hlo-run": "hlo_compile.cli.run"}[name]
    return [sys.executable, "-m", module]


REPO = Path(__file__).resolve().parents[2]
CHILD_ENV = dict(os.environ, HLO_COMPILE_TRACEBACK="0",
                 PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))


def run_measured(cmd: list[str], timeout: float, cwd: Path) -> tuple[int, float, int, str]:
    """(exit status, seconds, peak resident bytes, the output's last lines) of one process."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=CHILD_ENV)
        deadline = t0 + timeout
        status, usage = None, None
        while status is None:
            pid, raw, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status = os.waitstatus_to_exitcode(raw)
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _, raw, usage = os.wait4(proc.pid, 0)
                status = 124
                break
            time.sleep(0.05)
        proc.returncode = status  # reaped above: keep Popen from waiting again
        seconds = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    peak = int(usage.ru_maxrss) * 1024 if usage is not None else 0
    return status, seconds, peak, text


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[:600]


def classify(status: int, text: str, *, compile_step: bool) -> str:
    if status == 124:
        return "timeout"
    if BUG.search(text):
        return "internal"
    if status == 0:
        return "ok"
    if status == 1 and not compile_step:
        return "mismatch"
    if status == 2:
        # hlo-compile's exit 2 after writing PTX (ptxas refused it) is a failure, not a refusal
        return "failed" if compile_step and "ptxas" in text else "refused"
    return "failed"


def check_case(case: Path, group: str, ns: argparse.Namespace, ptxas: bool) -> CaseResult:
    meta = json.loads((case / "case.json").read_text())
    arch = meta.get("arch_requested") or "sm_90"
    res = CaseResult(str(case), group, arch)
    hlo = case / "optimized_gpu.hlo"
    with tempfile.TemporaryDirectory(prefix="xla-gpu-corpus-") as tmp:
        emit = "cubin" if ptxas else "ptx"
        cmd = [*_tool("hlo-compile"), str(hlo), "--arch", arch, "--emit", emit, "-o",
               str(Path(tmp) / f"module.{emit}"), "--no-cache", "-q"]
        status, secs, peak, text = run_measured(cmd, ns.compile_timeout, Path(tmp))
        res.steps["compile"] = Step(classify(status, text, compile_step=True), secs, peak,
                                    "" if status == 0 else _last_lines(text))
        inputs, expected = case / "inputs.npz", case / "outputs_cpu.npz"
        for platform in ns.platforms:
            if not (inputs.exists() and expected.exists()):
                res.steps[platform] = Step("skipped", message="no inputs.npz/outputs_cpu.npz")
                continue
            out = Path(tmp) / f"{platform}.npz"
            cmd = [*_tool("hlo-run"), str(hlo), f"--platform={platform}", "--reference=none",
                   "--input-literals", str(inputs), "--output-literals", str(out),
                   "--memory-limit", "none"]
            status, secs, peak, text = run_measured(cmd, ns.run_timeout, Path(tmp))
            verdict = classify(status, text, compile_step=False)
            message = "" if status == 0 else _last_lines(text)
            if verdict == "ok":
                message = compare_outputs(expected, out, tolerances(meta))
                verdict = "mismatch" if message else "ok"
            res.steps[platform] = Step(verdict, secs, peak, message)
        mismatched = all(res.steps[p].status == "mismatch" for p in ns.platforms)
        why = explain_divergence(case, Path(tmp), ns, meta) if mismatched else ""
        if why:
            for p in ns.platforms:
                res.steps[p] = Step("diverges", res.steps[p].seconds, res.steps[p].peak_bytes,
                                    f"{why}; {res.steps[p].message}")
    return res


def explain_divergence(case: Path, tmp: Path, ns: argparse.Namespace, meta: dict) -> str:
    """Why every platform's results, which all differ from XLA:CPU's, are right, or ''.

    XLA:GPU may compute another function than the program XLA:CPU ran (``xla_allow_excess_precision``
    drops an f32->f16->f32 round trip; its simplifier reassociates): then our platforms agree
    with each other on the GPU module, and the interpreter on the unoptimized module (the program
    itself) agrees with XLA:CPU. Both are checked here; any other mismatch stays a mismatch."""
    unopt = case / "unoptimized.hlo"
    if not unopt.exists() or any(p not in ns.platforms for p in ("host", "interpreter")):
        return ""
    outs = {p: tmp / f"{p}.npz" for p in ns.platforms}
    if not all(o.exists() for o in outs.values()):
        return ""
    expected = case / "outputs_cpu.npz"
    tols = tolerances(meta)
    if compare_outputs(outs["interpreter"], outs["host"], tols):
        return ""  # the platforms disagree with each other: a real mismatch
    out = tmp / "unoptimized.npz"
    cmd = [*_tool("hlo-run"), str(unopt), "--platform=interpreter", "--reference=none",
           "--input-literals", str(case / "inputs.npz"), "--output-literals", str(out), "--memory-limit", "none"]
    status, _, _, _ = run_measured(cmd, ns.run_timeout, tmp)
    if status != 0 or compare_outputs(expected, out, tols):
        return ""
    return ("XLA:GPU's module computes another function than XLA:CPU's program: host and interpreter "
            "agree on it, and the interpreter on unoptimized.hlo matches XLA:CPU")


Tolerance = tuple[float | None, float | None, str | None]  # rtol, atol, HLO element type


def tolerances(meta: dict) -> list[Tolerance]:
    """(rtol, atol, type) per output: tolerances from the tool's case.json, else from the source
    case's, else None (the per-type default); types from the tool's case.json."""
    outs = meta.get("outputs") or []
    tols = outs
    if not any("rtol" in o for o in outs) and meta.get("source_file"):
        src = Path(meta["source_file"]).parent / "case.json"
        if src.exists():
            tols = json.loads(src.read_text()).get("outputs") or outs
    n = max(len(outs), len(tols))
    pick = lambda seq, i, k: seq[i].get(k) if i < len(seq) else None  # noqa: E731
    return [(pick(tols, i, "rtol"), pick(tols, i, "atol"), pick(outs, i, "dtype")) for i in range(n)]


def _typed(x, dtype: str | None):
    """Raw 2-byte (``|V2``) arrays, as np.savez writes bf16 and the f8 types, in their type."""
    import ml_dtypes  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415
    from hlo_compile.hlo.dtypes import numpy_dtype  # noqa: PLC0415
    if x.dtype.kind != "V" or not dtype:
        return x
    try:
        return x.view(numpy_dtype(dtype))  # an HLO name (bf16, f8e4m3fn)
    except KeyError:
        return x.view(np.dtype(getattr(ml_dtypes, dtype)))  # numpy's (bfloat16, float8_e4m3fn)


def compare_outputs(expected: Path, actual: Path, tols: list[Tolerance]) -> str:
    """'' when every output (out{j}, or p{k}.out{j} per participant) matches, else why not."""
    import numpy as np  # noqa: PLC0415
    from hlo_compile.runtime.compare import compare_arrays  # noqa: PLC0415
    with np.load(expected, allow_pickle=False) as e, np.load(actual, allow_pickle=False) as a:
        want = sorted(k for k in e.files if re.fullmatch(r"(p\d+\.)?out\d+", k))
        missing = [k for k in want if k not in a.files]
        if not want and not any(re.fullmatch(r"(p\d+\.)?out\d+", k) for k in a.files):
            return ""  # a module without outputs (an empty tuple): nothing to compare, nothing wrong
        if missing or not want:
            return f"outputs {missing or 'none'} not written (have {sorted(a.files)[:8]})"
        bad = []
        for k in want:
            j = int(k.rsplit("out", 1)[1])
            rtol, atol, dtype = tols[j] if j < len(tols) else (None, None, None)
            leaf = compare_arrays(_typed(e[k], dtype), _typed(a[k], dtype), rtol=rtol, atol=atol,
                                  name=k, klass="model")
            if not leaf.ok:
                bad.append(f"{k}: {leaf.mismatches}/{leaf.count} outside rtol={leaf.rtol:g} atol={leaf.atol:g} "
                           f"(max abs {leaf.max_abs:.3g}, max rel {leaf.max_rel:.3g}){' ' + leaf.message if leaf.message else ''}")
        return "; ".join(bad)[:600]


def has_ptxas() -> bool:
    try:
        from hlo_compile.targets.nvptx.toolkit import find_ptxas  # noqa: PLC0415
    except ImportError:
        return shutil.which("ptxas") is not None
    try:
        return find_ptxas() is not None
    except Exception:  # noqa: BLE001 - "not found" in whatever form
        return False


def summarize(results: list[CaseResult], platforms: list[str]) -> tuple[str, list[str]]:
    def count(rs, step, *statuses):
        return sum(1 for r in rs if r.steps.get(step) and r.steps[step].status in statuses)

    rows = []
    keys = sorted({(r.group, r.arch) for r in results})
    header = (f"{'group':<18} {'arch':<6} {'cases':>5} {'cubin':>6} {'refused':>7} {'fail':>5}"
              + "".join(f" {p[:6]:>7}" for p in platforms) + f" {'max s':>6} {'max GB':>6}")
    rows.append(header)
    for g, a in keys + [("all", "")]:
        rs = results if g == "all" else [r for r in results if (r.group, r.arch) == (g, a)]
        comp = [r.steps["compile"] for r in rs]
        runs = "".join(f" {count(rs, p, 'ok'):>3}/{sum(1 for r in rs if r.steps[p].status != 'skipped'):<3}"
                       for p in platforms)
        rows.append(f"{g:<18} {a:<6} {len(rs):>5} {count(rs, 'compile', 'ok'):>6} "
                    f"{count(rs, 'compile', 'refused'):>7} "
                    f"{count(rs, 'compile', 'failed', 'internal', 'timeout', 'checker'):>5}{runs} "
                    f"{max((s.seconds for s in comp), default=0):>6.1f} "
                    f"{max((s.peak_bytes for s in comp), default=0) / 1e9:>6.2f}")
    n = len(results)
    compiled = count(results, "compile", "ok", "refused")
    internal = sum(1 for r in results for s in r.steps.values() if s.status == "internal")
    slow = sum(1 for r in results if r.steps["compile"].seconds > COMPILE_SECONDS
               or r.steps["compile"].peak_bytes > COMPILE_BYTES)
    parts = [f"{n} cases: {compiled}/{n} compile to a cubin or are refused by name",
             f"{internal} internal errors", f"{slow} over {COMPILE_SECONDS:g} s or {COMPILE_BYTES / 1e9:g} GB"]
    for p in platforms:
        ran = [r for r in results if r.steps[p].status != "skipped"]
        ok, div = count(ran, p, "ok"), count(ran, p, "diverges")
        parts.append(f"{p} {ok}/{len(ran)} match XLA:CPU ({100.0 * ok / max(1, len(ran)):.1f}%)"
                     + (f", {div} more where XLA:GPU's module computes another function" if div else ""))
    return "; ".join(parts), rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench --xla-gpu-corpus", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--jobs", "-j", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--only", default=None, help="cases whose path this regex finds")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--platforms", default="host,interpreter")
    ap.add_argument("--compile-timeout", type=float, default=300.0)
    ap.add_argument("--run-timeout", type=float, default=600.0)
    ap.add_argument("--failures", action="store_true", help="print every failing step's message")
    ap.add_argument("--resume", action="store_true",
                    help="keep the results of cases already in the --json file's .jsonl log (one line per case, "
                         "written as each case ends) and check only the others")
    ns = ap.parse_args(argv)
    ns.platforms = [p for p in ns.platforms.split(",") if p]
    roots = [d.resolve() for d in ns.dirs]
    missing = [str(d) for d in roots if not d.exists()]
    if missing:
        print(f"no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    cases = [c for c in find_cases(roots) if (c / "optimized_gpu.hlo").exists()]
    if ns.only:
        cases = [c for c in cases if re.search(ns.only, str(c))]
    if ns.limit:
        cases = cases[: ns.limit]
    if not cases:
        print("no case (a folder with case.json and optimized_gpu.hlo) found", file=sys.stderr)
        return 2
    ptxas = has_ptxas()
    t0 = time.perf_counter()
    done = 0

    log = ns.json.with_suffix(".jsonl") if ns.json else None
    previous: dict[str, CaseResult] = {}
    if log is not None and ns.resume and log.exists():
        for line in log.read_text().splitlines():
            d = json.loads(line)
            previous[d["case"]] = CaseResult(d["case"], d["group"], d["arch"],
                                             {k: Step(**v) for k, v in d["steps"].items()})
    elif log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
    lock = threading.Lock()

    def one(case: Path) -> CaseResult:
        nonlocal done
        if str(case) in previous:
            done += 1
            return previous[str(case)]
        try:
            r = check_case(case, group_of(case), ns, ptxas)
        except Exception as e:  # noqa: BLE001 - the checker's own failure: recorded, the run goes on
            r = CaseResult(str(case), group_of(case), "?",
                           {"compile": Step("checker", message=f"{type(e).__name__}: {e}")})
            for p in ns.platforms:
                r.steps[p] = Step("checker")
        if log is not None:
            with lock, log.open("a") as f:
                f.write(json.dumps(asdict(r)) + "\n")
        done += 1
        bad = {k: s.status for k, s in r.steps.items() if s.status not in ("ok", "skipped")}
        print(f"[{done}/{len(cases)}] {Path(r.case).name} ({r.group}/{r.arch}) "
              f"compile {r.steps['compile'].seconds:.1f} s {r.steps['compile'].peak_bytes / 1e9:.2f} GB"
              + (f"  {bad}" if bad else ""), flush=True)
        return r

    with ThreadPoolExecutor(max_workers=ns.jobs) as pool:
        results = list(pool.map(one, cases))
    line, rows = summarize(results, ns.platforms)
    print()
    print("\n".join(rows))
    if ns.failures:
        for r in results:
            for k, s in r.steps.items():
                if s.status not in ("ok", "skipped"):
                    print(f"{r.group}/{r.arch}/{Path(r.case).name} {k}: {s.status}: {s.message}")
    print(f"\n{line}{'' if ptxas else ' (no ptxas: compiled to PTX only)'}; {time.perf_counter() - t0:.0f} s")
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps({"summary": line, "ptxas": ptxas,
                                       "cases": [asdict(r) for r in results]}, indent=1) + "\n")
    failed = any(r.steps["compile"].status not in ("ok", "refused") for r in results) or any(
        s.status == "internal" for r in results for s in r.steps.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
