"""Compile time against XLA:GPU's own compile of the same unfused module (issue 29 item 8).

For ResNet-50 and a few corpus modules, each compiled to PTX for sm_90, cold, in a fresh
process per run, ours and XLA's interleaved in the same run (the machine's load hits both):

- ours: ``hlo-compile FILE --arch sm_90 --emit=ptx`` with an empty ``--cache-dir``, from a
  snapshot of the package with its bytecode made (``model_scale.snapshot``: as installed);
- XLA:GPU: jax's CUDA PJRT plugin compiling deviceless on a compile-only H100 topology
  (``../shared/tools/xla_gpu_dump.py``'s method: HLO text → XLA's parser → StableHLO →
  ``client.compile``), without any dump flag (a dump inflates XLA's time several-fold) and
  without a persistent cache (XLA has none unless asked).

Three times each, medians of ``--runs`` runs (default 3): the process's wall clock (what a
user waits for: for us ``hlo-compile``'s whole run, start-up included; for XLA a Python process
that imports jax and compiles), the compile alone, timed inside the process (ours:
``hlo-compile``'s ``main`` after its import, reading the file to writing the PTX; XLA: parse,
conversion and ``compile``, after jax's import and the topology), and the process's CPU
seconds (user + system, every thread: on a loaded machine the wall clocks measure the load as
much as the compilers; we compile kernels in ``-j`` threads, XLA:GPU mostly in one). Rows: the
three ratios ours/XLA per module (goal ≤ 1.0) with the medians. jax comes from ``$HLO_JAXENV`` (a folder
put on PYTHONPATH, default ``/tmp/jaxenv``), never from this environment: without it the
section says so and times nothing.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .model_scale import RESNET, snapshot

# (row name, path under the corpus root)
MODULES = [
    ("ResNet-50", RESNET),
    ("mass_matrix_35", "xla/repo/xla/backends/cpu/benchmarks/hlo/bench_mass_matrix_35.hlo"),
    ("diffrax", "xla/repo/xla/backends/cpu/benchmarks/hlo/diffrax.b380012920.hlo"),
    ("ew_special_f32", "jax/ew_special_f32/unoptimized.hlo"),
    ("red_assoc_scan_f32", "jax/red_assoc_scan_f32/unoptimized.hlo"),
]
ARCH = "sm_90"

# XLA's H100 (sm_90) target config, as ../shared/tools/xla_gpu_dump.py writes it
# (xla/backends/gpu/target_config/specs/h100_sxm.txtpb's numbers).
H100_TARGET_CONFIG = """gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84942979072
  shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 minor: 0 }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 8 }
runtime_version { major: 12 minor: 8 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""

# Run with jax on PYTHONPATH: argv = HLO file, target config file; prints one JSON line.
XLA_WORKER = r"""
import os, sys, time, json
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
import jax
from jax.experimental import topologies
from jax._src.lib import xla_client as xc
from jax._src.lib.mlir import ir
from jax._src.interpreters import mlir as jmlir
topo = topologies.get_topology_desc(platform="cuda", topology_name="", topology="1x1x1",
                                    target_config=open(sys.argv[2]).read())
devices = xc.DeviceList(tuple(topo.devices[:1]))
t0 = time.perf_counter()
proto = xc.hlo.hlo_module_from_text(open(sys.argv[1]).read()).as_serialized_hlo_module_proto()
with jmlir.make_ir_context():
    module = ir.Module.parse(xc._xla.mlir.hlo_to_stablehlo(proto))
    topo.devices[0].client.compile(module, executable_devices=devices, compile_options=xc.CompileOptions())
print(json.dumps({"compile": time.perf_counter() - t0}))
"""

# Run with the snapshot on PYTHONPATH: argv = hlo-compile's arguments; prints one JSON line.
OUR_WORKER = r"""
import json, sys, time
from hlo_compile.cli.compile import main
t0 = time.perf_counter()
main(sys.argv[1:], standalone_mode=False)
print(json.dumps({"compile": time.perf_counter() - t0}), file=sys.stderr)
"""


def jax_env() -> tuple[dict | None, str]:
    """(the environment XLA's runs use, or None, and why not)."""
    path = os.environ.get("HLO_JAXENV") or "/tmp/jaxenv"
    env = dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("XLA_FLAGS", None)
    if not Path(path).is_dir():
        return None, f"XLA:GPU not timed: no jax at {path} (set $HLO_JAXENV to a folder with jax and its CUDA plugin)"
    probe = subprocess.run([sys.executable, "-c", "import jax, jax_plugins.xla_cuda12"], env=env,
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"XLA:GPU not timed: jax with its CUDA plugin does not import from {path}: {last[:200]}"
    return env, ""


def _timed(cmd: list[str], env: dict, cwd: Path | None = None) -> tuple[float, float, dict | None, str]:
    """(wall seconds, CPU seconds (user + system, its threads and children), the JSON line it
    printed or None, its last stderr line)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.stdout.read(), proc.stderr.read()  # (small: one JSON line, a few of logs)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    lines = [ln for ln in (out + "\n" + err).splitlines() if ln.startswith("{")]
    errs = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("{")]
    try:
        got = json.loads(lines[-1]) if code == 0 and lines else None
    except ValueError:
        got = None
    return wall, cpu, got, (errs[-1] if errs else "")[:300]


def ours_once(path: Path, env: dict, tmp: Path) -> tuple[float, float, dict | None, str]:
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=tmp))  # empty: cold
    return _timed([sys.executable, "-c", OUR_WORKER, str(path), "--arch", ARCH, "--emit=ptx", "-q",
                   "--cache-dir", str(cache), "-o", os.devnull], env, cwd=tmp / "snapshot")


def xla_once(path: Path, env: dict, config: Path) -> tuple[float, float, dict | None, str]:
    return _timed([sys.executable, "-c", XLA_WORKER, str(path), str(config)], env)


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def compile_vs_xla_section(ns, corpus: Path | None, runs: int | None = None, only: list[str] | None = None) -> dict:
    runs = runs or getattr(ns, "xla_compile_runs", None) or 3
    notes: list[str] = []
    rows: list[dict] = []
    method = ("median of %d cold runs each, ours and XLA:GPU's interleaved: ours `hlo-compile FILE --arch sm_90 "
              "--emit=ptx` (empty --cache-dir, the package as installed), XLA:GPU jax's CUDA plugin compiling "
              "deviceless for an H100 (no dump, no cache); 'process' = wall clock of the whole process, "
              "'compile' = timed inside it (ours: hlo-compile's main; XLA: parse + StableHLO + compile), "
              "'cpu' = the process's user + system seconds (all its threads: what the machine's load does "
              "not change)" % runs)
    if getattr(ns, "quick", False):
        return {"method": method, "rows": [], "skipped": "--quick"}
    if corpus is None:
        return {"method": method, "rows": [], "skipped": "no corpus (../shared/corpus or $HLO_CORPUS)"}
    jenv, why = jax_env()
    if jenv is None:
        print(f"cpu: compile vs XLA: {why}", flush=True)
        return {"method": method, "rows": [], "skipped": why}
    modules = [(name, corpus / rel) for name, rel in MODULES
               if (corpus / rel).is_file() and (not only or name in only)]
    with tempfile.TemporaryDirectory(prefix="hlo-vs-xla-") as tmp_name:
        tmp = Path(tmp_name)
        env = snapshot(tmp)
        config = tmp / "h100.txtpb"
        config.write_text(H100_TARGET_CONFIG)
        times: dict[str, dict[str, list[float]]] = {n: {"ours_process": [], "ours_compile": [], "xla_process": [],
                                                         "xla_compile": [], "ours_cpu": [], "xla_cpu": []} for n, _ in modules}
        errors: dict[str, str] = {}
        for _ in range(runs):
            for name, path in modules:  # interleaved: each module's pair back to back, every run
                for who, once in (("ours", lambda: ours_once(path, env, tmp)), ("xla", lambda: xla_once(path, jenv, config))):
                    wall, cpu, got, last = once()
                    if got is None:
                        errors[f"{name} {who}"] = last
                        continue
                    times[name][f"{who}_process"].append(wall)
                    times[name][f"{who}_compile"].append(got["compile"])
                    times[name][f"{who}_cpu"].append(cpu)
        for name, path in modules:
            med = {k: _median(v) for k, v in times[name].items()}
            extra = {**med, "runs": len(times[name]["ours_process"]), "file": str(path.relative_to(corpus))}
            for kind in ("process", "compile", "cpu"):
                rows.append({"name": f"{name} ours/XLA ({kind})", "unit": "x",
                             "value": _ratio(med[f"ours_{kind}"], med[f"xla_{kind}"]), "extra": extra})
        notes += [f"{k} failed: {v}" for k, v in errors.items()]
    notes.append("goal: ours/XLA <= 1.0 (issue 29 item 8)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"method": method, "rows": rows, "notes": notes, "errors": [n for n in notes if " failed: " in n],
            "load_average_1min": load, "cpus": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.compile_vs_xla [--runs N] [--corpus DIR] [--module ROW]``: the section alone, as a table."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m bench.compile_vs_xla")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--module", action="append", choices=[n for n, _ in MODULES],
                    help="time only this row's module (repeatable; default: all)")
    ns = ap.parse_args(argv)
    from .cpu_suite import find_corpus
    corpus = ns.corpus or find_corpus()
    out = compile_vs_xla_section(argparse.Namespace(quick=False), corpus, ns.runs, ns.module)
    print(out["method"])
    for r in out["rows"]:
        e = r["extra"]
        print(f"{r['name']:40s} {r['value']!s:>7}  ours {e['ours_process']}/{e['ours_compile']}/{e['ours_cpu']} s, "
              f"XLA {e['xla_process']}/{e['xla_compile']}/{e['xla_cpu']} s (process/compile/cpu)")
    for n in out.get("notes", []) + ([out["skipped"]] if out.get("skipped") else []):
        print("note:", n)
    if ns.json:
        ns.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
