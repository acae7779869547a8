#!/usr/bin/env python3
"""Benchmark examples/gelu.hlo (1024×1024 f32 tanh-GELU, one loop fusion): our kernel against
the copy roofline and XLA, and the time our compiler takes.

    python bench/gelu.py [--iterations N] [--json OUT] [--chain K] [--flush-l2] [--xla-ref PATH]

On a GPU (``hlo_compile.runtime.cuda.available()``):
- our kernel, compiled for the device's arch: the median of N launches, each timed by CUDA
  events around it, and K launches back to back between two events (per launch);
- the copy roofline: ``cuMemcpyDtoD`` of half the bytes the kernel reads and writes (a copy
  reads and writes each byte, so both move the same bytes);
- XLA:GPU on the same module through jax (the recipe of ../shared/tools/xla_ref.py, on the
  ``cuda`` backend): the module as fused (backend only) in a chain of K gelus, wall(K) - wall(1)
  over K - 1, so that the dispatch from Python cancels out. If XLA refuses that, its full
  pipeline on the module, one run's wall time: an upper bound. "not measured" (with the reason)
  when jax or xla_ref.py is missing (``--xla-ref``, ``$HLO_XLA_REF``).
- GB/s counts bytes read + written; "time/copy" is the row's time over the copy's (1.0 = roofline).
A launch from Python can take longer than this kernel runs, so every timed batch is queued behind
a one-thread kernel that spins on the GPU for a while (nvbench's "blocking kernel"): the events
then time the GPU, not the host. The 8 MiB moved fit in an H100's 50 MB L2, so the figures are
L2-warm unless ``--flush-l2`` (a 256 MiB memset before each timed launch; not for the chains).

Without a GPU it says why, times the host platform instead (our host kernel against numpy's
float32 formula of ``jax.nn.gelu(approximate=True)``, a host memcpy as the copy, and XLA:CPU by
the chain recipe when jax is importable) and exits 0. Either way it times the compiler:
``hlo-compile examples/gelu.hlo --dump-to DIR`` (as ``python -m hlo_compile.cli.compile``) in a
fresh process twice, cold then warm, and ``run_pipeline`` twice in this process. ``--json``
writes every figure.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform as py_platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
GELU_PATH = REPO / "examples" / "gelu.hlo"
sys.path.insert(0, str(REPO))

from hlo_compile import parse_module  # noqa: E402
from hlo_compile.interpreter import evaluate_module  # noqa: E402
from hlo_compile.options import CompileOptions  # noqa: E402
from hlo_compile.driver.pipeline import run_pipeline  # noqa: E402
from hlo_compile.runtime import compare, literals  # noqa: E402
from hlo_compile.runtime import cuda as rt  # noqa: E402
from hlo_compile.runtime.executable import compile_executable  # noqa: E402
from hlo_compile.runtime.physical import buffer_bytes, to_physical  # noqa: E402

# A one-thread kernel that spins for `cycles` SM clocks: launches queued behind it run back to back.
SPIN_PTX = r"""
.version 8.0
.target sm_80
.address_size 64

.visible .entry spin(.param .u64 cycles)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [cycles];
    mov.u64 %rd2, %clock64;
LOOP:
    mov.u64 %rd3, %clock64;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p1, %rd4, %rd1;
    @%p1 bra LOOP;
    ret;
}
"""
HOST_US_PER_ENQUEUE = 40.0  # a generous bound on one cuLaunchKernel/cuEventRecord from Python
MAX_QUEUED = 300            # enqueued operations per batch, well under the driver's queue depth
FLUSH_BYTES = 256 << 20
HOST_XLA_CHAIN = 10         # XLA:CPU: a run costs ~1 ms besides its kernel; the chain cancels it


def _median_ms(times: list[float]) -> float:
    return float(statistics.median(times))


def _wall_ms(fn, iterations: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _row(name: str, ms: float | None, nbytes: int, copy_ms: float | None, how: str) -> dict:
    if ms is None:
        return {"name": name, "us": None, "gbs": None, "time_over_copy": None, "how": how}
    return {"name": name, "us": ms * 1e3, "gbs": nbytes / (ms * 1e-3) / 1e9,
            "time_over_copy": (ms / copy_ms) if copy_ms else None, "how": how}


# ---- the compiler -----------------------------------------------------------------------------
def time_compile(arch: str | None) -> dict:
    """hlo-compile --dump-to in a fresh process (cold, then warm), run_pipeline twice here."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out: dict = {"command": f"{Path(sys.executable).name} -m hlo_compile.cli.compile examples/gelu.hlo --dump-to DIR"
                            + (f" --arch {arch}" if arch else "")}
    with tempfile.TemporaryDirectory(prefix="gelu_bench_") as tmp:
        for label in ("fresh_process_cold", "fresh_process_warm"):
            dump = Path(tmp) / label
            cmd = [sys.executable, "-m", "hlo_compile.cli.compile", str(GELU_PATH), "--dump-to", str(dump)]
            cmd += ["--arch", arch] if arch else []
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
            seconds = time.perf_counter() - t0
            if proc.returncode != 0:
                out[label] = {"error": proc.stderr.strip()[-2000:]}
                continue
            summary = json.loads((dump / "summary.json").read_text())
            out[label] = {"seconds": seconds, "stage_seconds": summary.get("stage_seconds", {}),
                          "skipped_stages": summary.get("skipped_stages", {}), "arch": summary.get("arch")}
        options = CompileOptions(arch=arch) if arch else CompileOptions()
        text = GELU_PATH.read_text()
        for label in ("in_process_first", "in_process_second"):
            dump = Path(tmp) / label
            t0 = time.perf_counter()
            result = run_pipeline(parse_module(text, str(GELU_PATH)), options, dump_to=dump)
            seconds = time.perf_counter() - t0
            stage_seconds = {k: round(v, 6) for k, v in result.module_seconds.items()}
            out[label] = {"seconds": seconds, "stage_seconds": stage_seconds,
                          "skipped_stages": result.skipped, "arch": options.arch}
    return out


# ---- XLA through jax --------------------------------------------------------------------------
def find_xla_ref(explicit: str | None) -> tuple[object | None, str]:
    """(xla_ref module, where) or (None, why not)."""
    if importlib.util.find_spec("jax") is None:
        return None, "jax is not importable"
    candidates = [Path(p) for p in (explicit, os.environ.get("HLO_XLA_REF")) if p]
    candidates += [REPO.parent / "shared" / "tools" / "xla_ref.py", REPO / "shared" / "tools" / "xla_ref.py"]
    for path in candidates:
        if path.is_file():
            spec = importlib.util.spec_from_file_location("xla_ref", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod, str(path)
    return None, "xla_ref.py not found (give --xla-ref or set HLO_XLA_REF; looked in " + \
        ", ".join(str(p) for p in candidates) + ")"


def chain_text(module, text: str, k: int) -> str:
    """The ENTRY fusion applied k times in a row, each fusion with its own clone of the fused
    computation. Compiled backend-only, XLA emits each as given: k kernels."""
    entry = module.entry
    (param,) = entry.parameters
    root = entry.root
    if root.opcode != "fusion" or list(root.operands) != [param] or str(root.shape) != str(param.shape):
        raise ValueError("chaining needs an ENTRY of one parameter and a ROOT fusion of the same shape")
    fused = root.fused_computation.name
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"%?{re.escape(fused)}[\s(]", line))
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "}")
    shape = str(param.shape)
    out = [f"HloModule {module.name}_x{k}", ""]
    for j in range(k):
        out.append(f"%{fused}.c{j} {{")
        out += [re.sub(r"%([A-Za-z_][\w.\-]*)", rf"%\1.c{j}", line) for line in lines[start + 1:end]]
        out += ["}", ""]
    out.append(f"ENTRY %main.x{k} (p: {shape}) -> {shape} {{")
    out.append(f"  %v0 = {shape} parameter(0)")
    for j in range(k):
        prefix = "ROOT " if j == k - 1 else ""
        out.append(f"  {prefix}%v{j + 1} = {shape} fusion({shape} %v{j}), kind=kLoop, calls=%{fused}.c{j}")
    out.append("}")
    return "\n".join(out) + "\n"


def _count_fusions(exe) -> int | None:
    try:
        return sum(len(re.findall(r"\sfusion\(", m.to_string())) for m in exe.hlo_modules())
    except Exception:  # not every jaxlib gives the compiled modules back
        return None


def time_xla(xr, module, text: str, x: np.ndarray, expected: np.ndarray, backend_name: str,
             iterations: int, chain: int) -> dict:
    """XLA on ``backend_name`` ('cuda' or 'cpu'). With chain > 1, first the module as fused
    (backend only) in a chain of ``chain`` gelus: (wall(chain) - wall(1)) / (chain - 1), medians,
    so the dispatch from Python cancels out. If that recipe fails, XLA's full pipeline on the
    module, one run's wall time: an upper bound (dispatch included; XLA would merge a chain of
    gelus into one kernel, and it drops opt-barriers before fusion)."""
    import jax
    from jax._src import xla_bridge
    xc = xr._xc()
    backend = xla_bridge.get_backend(backend_name)
    dev = backend.local_devices()[0]
    recipes = ([("backend-only", chain)] if chain > 1 else []) + [("full", 1)]
    errors = {}
    for mode, k_max in recipes:
        try:
            runs = {}
            for k in sorted({1, k_max}):
                source = chain_text(module, text, k) if mode == "backend-only" else text
                t0 = time.perf_counter()
                comp, mlir = xr.hlo_text_to_mlir(source)
                exe = backend.compile_and_load(mlir, xc.DeviceList((dev,)), xr.compile_options(mode == "backend-only"))
                compile_s = time.perf_counter() - t0
                kernels = _count_fusions(exe)
                if mode == "backend-only" and kernels is not None and kernels < k:
                    raise RuntimeError(f"XLA compiled {kernels} fusion(s) for a chain of {k}")
                (spec,) = xr.parameter_specs(comp)
                buf = jax.device_put(xr.coerce_input(x, spec[0], spec[1], "arg0"), dev)

                def run(exe=exe, buf=buf):
                    outs = exe.execute_sharded([buf]).disassemble_into_single_device_arrays()
                    for o in outs:
                        o[0].block_until_ready()
                    return outs
                if k == 1:
                    got = np.asarray(run()[0][0])
                    cmp = compare.compare_results([expected], [got])
                    if not cmp.ok:
                        raise RuntimeError(f"XLA's result differs from the interpreter's: {cmp.report()}")
                runs[k] = {"median_ms": _median_ms(_wall_ms(run, iterations, warmup=3)),
                           "compile_s": compile_s, "fusions": kernels}
            one = runs[1]["median_ms"]
            if k_max > 1:
                per = (runs[k_max]["median_ms"] - one) / (k_max - 1)
                how = f"wall(chain of {k_max}) - wall(1), / {k_max - 1}; the module as fused (backend only)"
            else:
                per = one
                how = f"one run, wall clock, median of {iterations}" + \
                    ("; XLA's full pipeline: dispatch included, an upper bound" if chain > 1 else "")
            return {"ms": per, "one_run_ms": one, "chain": k_max, "mode": mode, "how": how, "runs": runs,
                    "compile_s": runs[1]["compile_s"], "device": str(dev), "jax": jax.__version__,
                    "errors_before": errors}
        except Exception as e:  # a benchmark: report why and try the next recipe
            errors[mode] = f"{type(e).__name__}: {str(e)[:500]}"
    raise RuntimeError("; ".join(f"{m}: {e}" for m, e in errors.items()))


def xla_figures(ns, module, text, x, expected, backend_name: str, iterations: int, chain: int) -> dict:
    os.environ.setdefault("JAX_PLATFORMS", "cuda,cpu" if backend_name == "cuda" else "cpu")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    xr, where = find_xla_ref(ns.xla_ref)
    if xr is None:
        return {"ms": None, "why": where}
    try:
        out = time_xla(xr, module, text, x, expected, backend_name, iterations, chain)
    except Exception as e:
        return {"ms": None, "why": f"{type(e).__name__}: {e}", "xla_ref": where}
    out["xla_ref"] = where
    return out


# ---- the GPU ----------------------------------------------------------------------------------
class DeviceTimer:
    """CUDA-event timings of work queued behind a spinning kernel (see the module docstring)."""

    def __init__(self, dev: rt.CudaDevice):
        self.dev = dev
        self.spin_fn = dev.load_module(SPIN_PTX).function("spin")
        try:
            self.clock_khz = dev.attribute("CLOCK_RATE") or 2_000_000
        except Exception:  # deprecated in recent drivers: assume 2 GHz (too long a spin is harmless)
            self.clock_khz = 2_000_000
        self.spun_ms = 0.0
        self.host_us_per_launch = 0.0  # the slowest enqueue seen, from Python

    def spin(self, us: float) -> None:
        self.spun_ms += us / 1e3
        self.dev.launch(self.spin_fn, 1, 1, [np.uint64(int(us * self.clock_khz / 1e3))])

    def time(self, fn, iterations: int, per_call: int = 1, flush: rt.DeviceBuffer | None = None) -> list[float]:
        """Milliseconds per launch: ``fn`` enqueues ``per_call`` launches."""
        fn()
        self.dev.synchronize()  # warm-up: first-launch costs stay out of the figures
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        host_us = (time.perf_counter() - t0) / (3 * per_call) * 1e6
        self.dev.synchronize()
        self.host_us_per_launch = max(self.host_us_per_launch, host_us)
        us_per_op = max(HOST_US_PER_ENQUEUE, 2 * host_us)  # an event record costs about a launch
        batch = 1 if flush is not None else max(1, MAX_QUEUED // (per_call + 2))
        times: list[float] = []
        while len(times) < iterations:
            n = min(batch, iterations - len(times))
            if flush is not None:
                self.dev.memset(flush, len(times) & 0xFF)
            self.spin(300 + us_per_op * n * (per_call + 2))
            times += self.dev.time_kernel(fn, iterations=n, warmup=0)
        return [t / per_call for t in times]


def bench_gpu(ns, module, text: str, x: np.ndarray, expected: np.ndarray, report: dict) -> list[dict]:
    t0 = time.perf_counter()
    exe = compile_executable(module, "cuda")
    report["compile_executable_s"] = time.perf_counter() - t0
    dev = exe.platform.device
    try:
        cmp = compare.compare_results([expected], literals.flatten(exe.run([x])))
        report["results_match_interpreter"] = cmp.ok
        if not cmp.ok:
            report["mismatch"] = cmp.report()
        (plan,) = exe.plan.kernels
        kernel = exe.kernels[plan.fusion.name]
        param, root = module.entry.parameters[0], module.entry.root
        din = exe.platform.upload(to_physical(x, param.shape))
        dout = exe.platform.allocate(root.shape)
        nbytes = buffer_bytes(param.shape) + buffer_bytes(root.shape)
        report.update(device=dev.name, arch=dev.arch, sm_count=dev.sm_count, bytes_moved=nbytes,
                      kernel={"name": plan.kernel_name, "grid": list(plan.launch.grid),
                              "block": list(plan.launch.block), "shared_bytes": plan.launch.shared_bytes,
                              "registers": kernel.registers, "local_bytes": kernel.local_bytes})
        timer = DeviceTimer(dev)
        flush = dev.alloc(FLUSH_BYTES) if ns.flush_l2 else None
        src, dst = dev.alloc(nbytes // 2), dev.alloc(nbytes // 2)
        dev.memset(src, 1)

        def ours():
            exe.platform.launch(kernel, plan, [din, dout])

        def ours_chain():
            for _ in range(ns.chain):
                ours()
        ours_ms = _median_ms(timer.time(ours, ns.iterations, flush=flush))
        chain_ms = _median_ms(timer.time(ours_chain, max(5, ns.iterations // 10), per_call=ns.chain))
        copy_ms = _median_ms(timer.time(lambda: dev.copy_device_to_device(dst, src), ns.iterations, flush=flush))
        report["spin_ms_total"] = timer.spun_ms
        report["host_us_per_launch"] = timer.host_us_per_launch
        l2 = "L2 flushed" if flush is not None else "L2 warm"
    finally:
        dev.close()  # before jax takes the GPU
    xla = xla_figures(ns, module, text, x, expected, "cuda", ns.iterations, ns.chain)
    report["xla"] = xla
    rows = [_row("ours: kernel", ours_ms, nbytes, copy_ms, f"events, median of {ns.iterations}, {l2}"),
            _row(f"ours: kernel x{ns.chain} back to back", chain_ms, nbytes, copy_ms,
                 f"events around {ns.chain} launches / {ns.chain}, L2 warm"),
            _row("copy roofline (cuMemcpyDtoD)", copy_ms, nbytes, copy_ms,
                 f"{nbytes // 2} bytes, events, median of {ns.iterations}, {l2}"),
            _row("XLA:GPU (jax)", xla.get("ms"), nbytes, copy_ms, xla.get("how") or f"not measured: {xla['why']}")]
    report["ratios"] = {"ours_over_copy": ours_ms / copy_ms,
                        "ours_over_xla": (ours_ms / xla["ms"]) if xla.get("ms") else None,
                        "ours_back_to_back_over_xla": (chain_ms / xla["ms"]) if xla.get("ms") else None}
    return rows


# ---- the host ---------------------------------------------------------------------------------
def numpy_gelu(x: np.ndarray) -> np.ndarray:
    """jax.nn.gelu(x, approximate=True) in float32 numpy."""
    c, k = np.float32(np.sqrt(2 / np.pi)), np.float32(0.044715)
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(c * (x + k * (x * x * x))))


def bench_host(ns, module, text: str, x: np.ndarray, expected: np.ndarray, report: dict) -> list[dict]:
    from hlo_compile.targets.host import default_workers
    t0 = time.perf_counter()
    exe = compile_executable(module, "host")
    report["compile_executable_s"] = time.perf_counter() - t0
    cmp = compare.compare_results([expected], literals.flatten(exe.run([x])))
    report["results_match_interpreter"] = cmp.ok
    report["numpy_matches_interpreter"] = compare.compare_results([expected], [numpy_gelu(x)]).ok
    (plan,) = exe.plan.kernels
    kernel, p = exe.kernels[plan.fusion.name], exe.platform
    param, root = module.entry.parameters[0], module.entry.root
    din, dout = p.upload(to_physical(x, param.shape)), p.allocate(root.shape)
    nbytes = buffer_bytes(param.shape) + buffer_bytes(root.shape)
    report.update(device=f"host: {py_platform.processor() or py_platform.machine()}, {default_workers()} worker thread(s)",
                  bytes_moved=nbytes, kernel={"name": plan.kernel_name, "grid": list(plan.launch.grid),
                                              "block": list(plan.launch.block)})
    n = ns.iterations
    ours_ms = _median_ms(_wall_ms(lambda: p.launch(kernel, plan, [din, dout]), n))
    run_ms = _median_ms(_wall_ms(lambda: exe.run([x]), n))
    np_ms = _median_ms(_wall_ms(lambda: numpy_gelu(x), n))
    src, dst = np.ones(nbytes // 2, np.uint8), np.empty(nbytes // 2, np.uint8)
    copy_ms = _median_ms(_wall_ms(lambda: np.copyto(dst, src), n))
    xla = xla_figures(ns, module, text, x, expected, "cpu", n, HOST_XLA_CHAIN)
    report["xla"] = xla
    rows = [_row("ours: host kernel", ours_ms, nbytes, copy_ms, f"wall, median of {n}"),
            _row("ours: Executable.run", run_ms, nbytes, copy_ms, "wall, layout conversions included"),
            _row("numpy formula (float32)", np_ms, nbytes, copy_ms, "jax.nn.gelu(approximate=True)'s formula"),
            _row("copy roofline (np.copyto)", copy_ms, nbytes, copy_ms, f"{nbytes // 2} bytes"),
            _row("XLA:CPU (jax)", xla.get("ms"), nbytes, copy_ms, xla.get("how") or f"not measured: {xla['why']}")]
    report["ratios"] = {"ours_over_numpy": ours_ms / np_ms, "ours_over_copy": ours_ms / copy_ms,
                        "ours_over_xla_cpu": (ours_ms / xla["ms"]) if xla.get("ms") else None}
    return rows


# ---- report -----------------------------------------------------------------------------------
def _versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for name in ("numpy", "llvmlite", "lark", "cuda-bindings", "cuda-python", "jax", "jaxlib"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _fmt(v: float | None, spec: str) -> str:
    width = int(spec.split(".")[0] or 0)
    return "-".rjust(width) if v is None else format(v, spec)


def _stage_text(e: dict) -> str:
    """Pipeline stages in order, their sub-steps in brackets, and what is left of the total
    (process start and imports, for a fresh process)."""
    from hlo_compile.driver.pipeline import STAGE_NAMES
    st = e["stage_seconds"]
    stages = [f"{k} {st[k] * 1e3:.0f}" for k in STAGE_NAMES if k in st]
    steps = [f"{k} {v * 1e3:.0f}" for k, v in st.items() if k not in STAGE_NAMES]
    rest = e["seconds"] - sum(st[k] for k in STAGE_NAMES if k in st)
    text = ", ".join(stages) + (f" [{', '.join(steps)}]" if steps else "") + f"; other {rest * 1e3:.0f}"
    if e.get("skipped_stages"):
        text += f"; skipped: {', '.join(e['skipped_stages'])}"
    return text


def print_report(report: dict, rows: list[dict]) -> None:
    k = report["kernel"]
    print(f"\n{report['module']} on {report['device']}" + (f" ({report['arch']})" if report.get("arch") else ""))
    print(f"bytes read + written: {report['bytes_moved']} ({report['bytes_moved'] / 2**20:.0f} MiB); kernel "
          f"{k['name']}: grid {k['grid']} block {k['block']}"
          + (f", {k['registers']} registers, {k['local_bytes']} bytes local" if "registers" in k else "")
          + f"; results match the interpreter: {report['results_match_interpreter']}")
    width = max(len(r["name"]) for r in rows)
    print(f"\n{'':<{width}}  {'µs':>10}  {'GB/s':>8}  {'time/copy':>9}  how")
    for r in rows:
        print(f"{r['name']:<{width}}  {_fmt(r['us'], '10.2f')}  {_fmt(r['gbs'], '8.1f')}  "
              f"{_fmt(r['time_over_copy'], '9.2f')}  {r['how']}")
    print("\nratios: " + ", ".join(f"{name} {_fmt(v, '.2f')}" for name, v in report["ratios"].items()))
    c = report["compile"]
    print(f"\ncompile, ms ({c['command']}):")
    for label in ("fresh_process_cold", "fresh_process_warm", "in_process_first", "in_process_second"):
        e = c.get(label, {})
        if "error" in e:
            print(f"  {label:<19} failed: {e['error']}")
        else:
            print(f"  {label:<19} {e['seconds'] * 1e3:6.0f}  ({_stage_text(e)})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=100, help="timed runs; medians are reported")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--chain", type=int, default=100, help="GPU: launches per back-to-back / XLA chain timing")
    ap.add_argument("--flush-l2", action="store_true", help="GPU: flush L2 before each timed launch")
    ap.add_argument("--xla-ref", default=None, help="path of xla_ref.py (default: $HLO_XLA_REF, ../shared/tools)")
    ns = ap.parse_args(argv)
    if ns.iterations < 1 or ns.chain < 2:
        ap.error("--iterations must be >= 1 and --chain >= 2")

    text = GELU_PATH.read_text()
    module = parse_module(text, str(GELU_PATH))
    x = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    expected = literals.flatten(evaluate_module(module, [x]))[0]
    ok, why = rt.available()
    report: dict = {"module": module.name, "gpu": ok, "gpu_reason": why, "iterations": ns.iterations,
                    "inputs": "standard normal float32, seed 0", "versions": _versions()}
    arch = None
    if ok:
        with rt.CudaDevice() as dev:
            arch = dev.arch
    else:
        print(f"no GPU ({why}): timing the host platform instead", flush=True)
    report["compile"] = time_compile(arch)  # first, while nothing of codegen is loaded here
    if ok:
        rows = bench_gpu(ns, module, text, x, expected, report)
    else:
        rows = bench_host(ns, module, text, x, expected, report)
    report["rows"] = rows
    print_report(report, rows)
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(f"\nwrote {ns.json}")
    return 0 if report["results_match_interpreter"] else 1


if __name__ == "__main__":
    sys.exit(main())
