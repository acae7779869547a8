"""Compiling at model scale (issue 17): ``hlo-compile --emit=ptx`` as a user runs it, cold (an
empty cache directory) and warm (the same command again), with the process's peak RSS.

- Llama 3.1 8B (``xla/tools/benchmarks/hlo/hlo_llama31_8b_bf16_1x8.hlo``, 7,313 fusions with its
  64 TransformerEngine attention calls lowered);
- ResNet-50 (``xla/backends/cpu/benchmarks/hlo/resnet50_keras_jax_f32.hlo``);
- gelu (``examples/gelu.hlo``): one CLI call, cold and warm (the start-up bar: ≤ 0.4 s).

Bars (2-core machine): Llama ≤ 60 s cold, ≤ 3 s warm, ≤ 1.5 GB; ResNet-50 ≤ 5 s cold, ≤ 1 s
warm; gelu ≤ 0.4 s. ``--quick`` runs gelu only.
"""
from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LLAMA = "xla/repo/xla/tools/benchmarks/hlo/hlo_llama31_8b_bf16_1x8.hlo"
RESNET = "xla/repo/xla/backends/cpu/benchmarks/hlo/resnet50_keras_jax_f32.hlo"
GELU = REPO / "examples" / "gelu.hlo"

def snapshot(tmp: Path) -> dict:
    """A copy of the package under ``tmp`` and the environment that imports it: the cache keys
    on the package's files (sizes, mtimes), which other work in this checkout may change between
    a cold and a warm run; an installed package does not change."""
    shutil.copytree(REPO / "hlo_compile", tmp / "snapshot" / "hlo_compile",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if (REPO / "grammars").is_dir():  # the parser's grammar, beside the package in a checkout
        shutil.copytree(REPO / "grammars", tmp / "snapshot" / "grammars")
    compileall.compile_dir(tmp / "snapshot", quiet=1)  # bytecode made now, not in the timed cold run
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp / "snapshot"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_cli(args: list[str], env: dict | None = None) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in MB, exit status, stderr's last line) of ``hlo-compile args``."""
    cmd = [sys.executable, "-m", "hlo_compile.cli.compile", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            cwd=env and Path(env["PYTHONPATH"].split(os.pathsep)[0]).parent or REPO)
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return wall, usage.ru_maxrss / 1024, proc.returncode, lines[-1] if lines else ""


def cold_warm(name: str, path: Path, cache: Path, env: dict | None = None, extra: list[str] = ()) -> list[dict]:
    rows = []
    for phase in ("cold", "warm"):
        wall, rss, code, last = run_cli([str(path), "--emit=ptx", "--cache-dir", str(cache), "-o", os.devnull,
                                         *extra], env)
        rows.append({"name": f"{name} {phase}", "value": wall if code == 0 else None, "unit": "s",
                     "extra": {"rss_mb": round(rss), "exit": code, "stderr": last[:300]}})
    return rows


def model_scale_section(ns, corpus: Path | None) -> dict:
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="hlo-bench-") as tmp:
        tmp = Path(tmp)
        env = snapshot(tmp)
        rows += cold_warm("gelu CLI", GELU, tmp / "cache-gelu", env)
        if not ns.quick:
            if corpus is None or not (corpus / LLAMA).is_file():
                notes.append("Llama 8B and ResNet-50: no corpus (../shared/corpus or $HLO_CORPUS)")
            else:
                resnet = corpus / RESNET
                if resnet.is_file():
                    rows += cold_warm("ResNet-50", resnet, tmp / "cache-resnet", env)
                rows += cold_warm("Llama 3.1 8B", corpus / LLAMA, tmp / "cache-llama", env)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"method": "hlo-compile --emit=ptx in a fresh process (a snapshot of the package, as installed), cold "
                      "(empty --cache-dir) then warm (the same command again); wall clock and peak RSS (wait4); "
                      + "; ".join(notes),
            "rows": rows, "load_average_1min": load, "cpus": os.cpu_count()}
