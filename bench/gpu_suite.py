"""The GPU suite: every module of ``bench/catalog.py`` at full size on the GPU.

For each module: compile with ``compile_executable(module, "cuda")`` (PTX for the GPU there),
check that every kernel got its intended emitter, run it once on random inputs and compare
with the interpreter (no timing on a mismatch or on an all-zero result). Then:

- our kernels: bind every launch of ENTRY to buffers, in several copies whose total exceeds a
  few times the L2 so that inputs do not sit in L2 between launches, and time all launches of
  one copy between two CUDA events, queued behind a spinning kernel (``bench/gelu.py``'s
  ``DeviceTimer``, so the events time the GPU, not the host), median of many after warm-up;
- bytes moved (``catalog.kernel_bytes``: each launch's operands and outputs) and GB/s, over
  the bandwidth of a 256 MiB ``cuMemcpyDtoD`` timed the same way in the same run (% of the copy
  roofline); TFLOP/s for dots and convolutions;
- the whole module: all launches (and the copies that start in-place kernels) from Python,
  then a synchronize, wall clock, median: launch overhead included; and the same work as one
  CUDA graph (``runtime/graph.py``: one ``cuGraphLaunch`` and a synchronize), with the gain;
- XLA on the same module through jax (``../shared/tools/xla_ref.py``, ``$HLO_XLA_REF``) on the
  ``cuda`` backend, after our device is closed: for a module of one parameter and a ROOT fusion
  of the same shape, ``bench/gelu.py``'s chain recipe (the module as fused, backend only, a
  chain of K kernels: (wall(K) - wall(1)) / (K - 1)); otherwise XLA's full pipeline on the
  module with its fusions inlined, N runs queued back to back on rotated input copies,
  (wall(N) - wall(1)) / (N - 1), median: a figure that includes XLA's dispatch where the GPU is
  faster than the host (an upper bound then). XLA's result is checked against the interpreter
  too. Each row's ``xla_how`` says which.
"""
from __future__ import annotations

import itertools
import math
import os
import statistics
import time

import numpy as np

from hlo_compile.runtime import cuda as rt
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable
from hlo_compile.runtime.physical import buffer_bytes

from . import catalog
from .emitters import bind
from .gelu import DeviceTimer, _wall_ms, chain_text, find_xla_ref
from .gelu import time_xla as xla_chain_time

COPY_BYTES = 256 << 20
DEFAULT_L2 = 50 << 20


def _median(xs) -> float:
    return float(statistics.median(xs))


def measure_copy(dev, timer: DeviceTimer, iterations: int) -> dict:
    src, dst = dev.alloc(COPY_BYTES), dev.alloc(COPY_BYTES)
    dev.memset(src, 1)
    ms = _median(timer.time(lambda: dev.copy_device_to_device(dst, src), iterations))
    src.free()
    dst.free()
    return {"bytes": 2 * COPY_BYTES, "ms": ms, "gbs": 2 * COPY_BYTES / (ms * 1e-3) / 1e9,
            "how": f"cuMemcpyDtoD of {COPY_BYTES >> 20} MiB (read + write counted), events, median of {iterations}"}


def _copies(dev, module_bytes: int) -> int:
    try:
        l2 = dev.attribute("L2_CACHE_SIZE") or DEFAULT_L2
    except Exception:
        l2 = DEFAULT_L2
    want = math.ceil(4 * l2 / max(module_bytes, 1))
    fit = int(0.4 * dev.total_memory // max(module_bytes, 1))
    return max(1, min(8, max(2, want), fit))


def bench_ours(bm: catalog.BenchModule, iterations: int, copy_gbs: float) -> tuple[dict, tuple | None]:
    """Our figures for one module, and (text, module, args, expected) for XLA when it ran."""
    text, module = catalog.load(bm)
    row: dict = {"name": bm.name, "value": None, "unit": "us", "extra": {}}
    ex = row["extra"]
    t0 = time.perf_counter()
    exe = compile_executable(module, "cuda")
    ex["compile_s"] = time.perf_counter() - t0
    dev = exe.platform.device
    try:
        ex["emitters"] = [k.analysis.emitter for k in exe.plan.kernels]
        why = catalog.check_emitters(bm, exe.plan)
        if why:
            row["error"] = "not the intended emitters: " + why
            return row, None
        args, expected = catalog.reference(module)
        why = catalog.check_results(expected, literals.flatten(exe.run(args)))
        if why:
            row["error"] = why
            return row, None
        module_bytes = sum(buffer_bytes(p.shape) for p in exe.module.entry.parameters) + \
            buffer_bytes(exe.module.entry.root.shape)
        n_copies = _copies(dev, module_bytes)
        runs = []
        for _ in range(n_copies):
            run, launches = bind(exe, args)
            runs.append(run)
        cycle = itertools.cycle(runs)
        timer = DeviceTimer(dev)
        ms = _median(timer.time(lambda: next(cycle)(), iterations))

        def whole():
            next(cycle)(True)
            dev.synchronize()
        module_ms = _median(_wall_ms(whole, max(3, iterations // 4)))
        graph_ms = module_graph_ms(exe, args, expected, max(3, iterations // 4))
        nbytes = catalog.kernel_bytes(exe.plan)
        gbs = nbytes / (ms * 1e-3) / 1e9
        fl = catalog.flops(module)
        row["value"] = ms * 1e3
        ex.update(kernels=launches, input_copies=n_copies, bytes=nbytes, gbs=gbs,
                  pct_copy_roofline=100 * gbs / copy_gbs, module_us=module_ms * 1e3,
                  module_graph_us=graph_ms * 1e3 if graph_ms else None,
                  graph_gain=(module_ms / graph_ms) if graph_ms else None,
                  tflops=(fl / (ms * 1e-3) / 1e12) if fl else None,
                  registers=[getattr(exe.kernels[k.fusion.name], "registers", None) for k in exe.plan.kernels])
        return row, (text, module, args, expected)
    finally:
        dev.close()  # before jax takes the GPU


def module_graph_ms(exe, args, expected, n: int) -> float | None:
    """The whole module as one CUDA graph (``runtime/graph.py``): wall clock of one
    ``cuGraphLaunch`` and a synchronize, median of ``n``; its result checked first. None for a
    module with host control flow."""
    from hlo_compile.runtime.graph import ModuleGraph, unsupported_reason
    if unsupported_reason(exe) is not None:
        return None
    with ModuleGraph(exe) as graph:
        why = catalog.check_results(expected, literals.flatten(graph.run(args)))
        if why:
            raise RuntimeError("CUDA graph: " + why)

        def replay():
            exe.platform.launch_graph(graph.graph)
            exe.platform.synchronize()
        return _median(_wall_ms(replay, n))


def xla_queue_time(xr, text: str, args, expected, iterations: int, copies: int = 4) -> dict:
    import jax
    from jax._src import xla_bridge
    xc = xr._xc()
    backend = xla_bridge.get_backend("cuda")
    dev = backend.local_devices()[0]
    t0 = time.perf_counter()
    comp, mlir = xr.hlo_text_to_mlir(xr.inline_fusions(text))
    exe = backend.compile_and_load(mlir, xc.DeviceList((dev,)), xr.compile_options(False))
    compile_s = time.perf_counter() - t0
    specs = xr.parameter_specs(comp)
    host = [xr.coerce_input(np.asarray(a), dt, dims, f"arg{i}") for i, (a, (dt, dims)) in enumerate(zip(args, specs))]
    sets = [[jax.device_put(a, dev) for a in host] for _ in range(copies)]

    def run(bufs):
        return exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
    got = [np.asarray(o[0]) for o in run(sets[0])]
    why = catalog.check_results(expected, got)
    if why:
        raise RuntimeError("XLA: " + why)

    def queue(n: int) -> float:
        t = time.perf_counter()
        last = None
        for i in range(n):
            last = run(sets[i % copies])
        for o in last:
            o[0].block_until_ready()
        return time.perf_counter() - t
    n = max(4, min(50, iterations))
    queue(3)
    one = _median([queue(1) for _ in range(5)])
    many = _median([queue(n) for _ in range(5)])
    return {"ms": max(many - one, 0.0) / (n - 1) * 1e3, "compile_s": compile_s, "device": str(dev),
            "how": f"XLA full pipeline (fusions inlined), {n} runs queued on {copies} input copies: "
                   f"(wall({n}) - wall(1)) / {n - 1}, median of 5; XLA's dispatch included where it "
                   "exceeds the GPU time (an upper bound)"}


def bench_xla(xr, data: tuple, iterations: int) -> dict:
    text, module, args, expected = data
    full = catalog.full_precision(text)
    if full != text:   # FP32 as ours, not TF32 (see catalog.full_precision)
        from hlo_compile import parse_module
        res = bench_xla(xr, (full, parse_module(full), args, expected), iterations)
        if res.get("how"):
            res["how"] = "f32 dots/convolutions at operand_precision=highest (FP32, no TF32); " + res["how"]
        return res
    try:
        chain_text(module, text, 2)
        chainable = len(args) == 1 and len(expected) == 1
    except Exception:
        chainable = False
    errors = []
    if chainable:
        try:
            res = xla_chain_time(xr, module, text, np.asarray(args[0]), expected[0], "cuda", iterations, 20)
            return {"ms": res["ms"], "how": res["how"], "compile_s": res.get("compile_s")}
        except Exception as e:
            errors.append(f"chain recipe: {type(e).__name__}: {str(e)[:300]}")
    try:
        res = xla_queue_time(xr, text, args, expected, iterations)
        if errors:
            res["how"] += "; " + "; ".join(errors)
        return res
    except Exception as e:
        errors.append(f"queue recipe: {type(e).__name__}: {str(e)[:300]}")
    return {"ms": None, "why": "; ".join(errors)}


def run_gpu_suite(ns) -> dict:
    ok, why = rt.available()
    if not ok:
        return {"ran": False, "skipped": f"gpu suite skipped: no GPU ({why})"}
    iterations = 10 if ns.quick else 200
    modules = catalog.MODULES[:4] if ns.quick else catalog.MODULES
    if ns.only:
        modules = [m for m in modules if any(s in m.name for s in ns.only)]
    with rt.CudaDevice() as dev:
        info = {"device": dev.name, "arch": dev.arch, "sm_count": dev.sm_count,
                "total_memory": dev.total_memory}
        copy = measure_copy(dev, DeviceTimer(dev), iterations)
    print(f"gpu: {info['device']} ({info['arch']}, {info['sm_count']} SMs); copy roofline "
          f"{copy['gbs']:.0f} GB/s ({copy['how']})", flush=True)
    rows, kept = [], []
    for bm in modules:
        try:
            row, data = bench_ours(bm, iterations, copy["gbs"])
        except Exception as e:  # a benchmark: say why and go on
            row, data = {"name": bm.name, "value": None, "unit": "us", "extra": {},
                         "error": f"{type(e).__name__}: {str(e)[:600]}"}, None
        rows.append(row)
        kept.append(data)
        print(f"  {bm.name}: " + (f"{row['value']:.1f} us" if row["value"] is not None else row["error"]),
              flush=True)
    xla_method = "not measured"
    if ns.xla:
        os.environ.setdefault("JAX_PLATFORMS", "cuda,cpu")
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        xr, where = find_xla_ref(ns.xla_ref)
        xla_method = f"jax + {where}" if xr is not None else f"not measured: {where}"
        for row, data in zip(rows, kept):
            if xr is None or data is None:
                continue
            x = bench_xla(xr, data, iterations)
            ex = row["extra"]
            ex["xla_us"] = x["ms"] * 1e3 if x.get("ms") else None
            ex["ours_over_xla"] = (row["value"] / ex["xla_us"]) if ex["xla_us"] else None
            ex["xla_how"] = x.get("how") or f"not measured: {x.get('why')}"
    else:
        xla_method = "not measured (--no-xla)"
    return {"ran": True, "device": info, "copy_roofline": copy, "iterations": iterations,
            "xla": xla_method, "method": __doc__.strip(),
            "sections": {"gpu kernels": {"rows": rows}}}
