"""The CPU suite: what needs no GPU.

- parse: MB/s of ``hlo_compile.parse_module`` on a large module built from the corpus
  (``bench/parse.py``'s ``build_large_module``), beside XLA's C++ parser when jax is importable;
- pass scaling: the passes' seconds at 1×, 2×, 4×, 8× a generated chain (``bench/scaling.py``),
  the ratio 8×/1× (≤ 10: linear);
- compile: seconds per pipeline stage (``run_pipeline``, all stages, ``CompileOptions(arch=
  "sm_90")``) for ``examples/*.hlo`` and a generated module of 1,000 fusions;
- interpreter: the interpreter on each JAX corpus case (``bench/interpreter.py``), beside XLA:CPU
  on the same module and inputs when jax is importable;
- model scale: ``hlo-compile --emit=ptx`` cold and warm, with peak RSS, on Llama 3.1 8B,
  ResNet-50 and gelu (``bench/model_scale.py``; gelu only with ``--quick``);
- compile vs XLA: our cold compile to PTX against XLA:GPU's (deviceless, jax's CUDA plugin from
  ``$HLO_JAXENV``) of the same unfused module, interleaved, on ResNet-50 and four corpus
  modules: the ratios ours/XLA (``bench/compile_vs_xla.py``; skipped with a note without jax,
  and with ``--quick``);
- host: the host target on the GPU suite's modules scaled down (``catalog.scaled_text``), checked
  against the interpreter first, timed with all kernels bound once (``bench/emitters.py``'s
  ``bind``), beside a host memcpy of the same bytes.

``--quick`` keeps it to seconds: a small parse module, 20 generated fusions, 3 corpus cases,
modules scaled by 1/64, one timed iteration, no XLA.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from hlo_compile import parse_module
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable

from . import catalog
from . import interpreter as interp_bench
from . import parse as parse_bench
from .compile_vs_xla import compile_vs_xla_section
from .cost_model import cost_section
from .emitters import bind
from .model_scale import model_scale_section
from .scaling import scaling_section

REPO = Path(__file__).resolve().parents[1]
_OPS = ["exponential", "tanh", "negate", "sqrt"]


def _median(xs) -> float:
    return float(statistics.median(xs))


def _row(name: str, value: float | None, unit: str, **extra) -> dict:
    return {"name": name, "value": value, "unit": unit, "extra": extra}


def _timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


# ---- parse ------------------------------------------------------------------------------------
def parse_section(ns, corpus: Path | None) -> dict:
    if corpus is None:
        return {"skipped": "no corpus (../shared/corpus or $HLO_CORPUS)", "rows": []}
    text = parse_bench.build_large_module(corpus, int((0.3 if ns.quick else 5.0) * 1e6), small=ns.quick)
    mb = len(text.encode()) / 1e6
    repeat = 1 if ns.quick else 3
    rows = []
    plain = parse_bench.time_ours(text, repeat, verify=False)
    verified = parse_bench.time_ours(text, repeat, verify=True)
    xla = None
    if ns.xla and not ns.quick:
        with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as f:
            f.write(text)
        xla = parse_bench.time_xla(Path(f.name), repeat)
        Path(f.name).unlink()
    best = mb / min(plain)
    rows.append(_row("parse", best, "MB/s", module_mb=mb, xla_mb_s=xla,
                     ours_over_xla=(best / xla) if xla else None))
    rows.append(_row("parse + verify", mb / min(verified), "MB/s", module_mb=mb))
    how = f"best of {repeat}; XLA: " + ("xla_ref.py parse-time in a subprocess" if xla else
                                        "not measured" + (" (--quick)" if ns.quick else ""))
    return {"method": how, "rows": rows}


# ---- compile ----------------------------------------------------------------------------------
def many_fusions_text(n: int, size: int = 256) -> str:
    """A chain of ``n`` loop fusions over f32[size], each calling a computation of its own."""
    shape = f"f32[{size}]"
    out = [f"HloModule fusions_{n}", ""]
    for i in range(n):
        out += [f"%fused_{i} (p: {shape}, q: {shape}) -> {shape} {{",
                f"  %p = {shape} parameter(0)", f"  %q = {shape} parameter(1)",
                f"  %u = {shape} {_OPS[i % len(_OPS)]}(%p)",
                f"  %m = {shape} multiply(%u, %q)",
                f"  ROOT %r = {shape} add(%m, %p)", "}", ""]
    out += [f"ENTRY %main (x: {shape}, y: {shape}) -> {shape} {{",
            f"  %v0 = {shape} parameter(0)", f"  %y = {shape} parameter(1)"]
    for i in range(n):
        root = "ROOT " if i == n - 1 else ""
        out.append(f"  {root}%v{i + 1} = {shape} fusion(%v{i}, %y), kind=kLoop, calls=%fused_{i}")
    out.append("}")
    return "\n".join(out) + "\n"


def compile_section(ns) -> dict:
    options = CompileOptions(arch="sm_90")
    n = 20 if ns.quick else 1000
    sources = [(p.name, p.read_text()) for p in sorted((REPO / "examples").glob("*.hlo"))]
    sources.append((f"generated: {n} fusions", many_fusions_text(n)))
    rows = []
    for name, text in sources:
        t0 = time.perf_counter()
        module = parse_module(text, name)
        parse_s = time.perf_counter() - t0
        result = run_pipeline(module, options)
        total = time.perf_counter() - t0
        stages = {"parse": parse_s, **result.module_seconds}
        rows.append(_row(name, total, "s", kernels=len(result.plan.kernels),
                         stage_seconds=stages, skipped=sorted(result.skipped)))
    return {"method": "parse_module + run_pipeline(all stages, arch sm_90), one run, in this process",
            "rows": rows}


# ---- interpreter ------------------------------------------------------------------------------
def interpreter_section(ns, corpus: Path | None) -> dict:
    root = interp_bench._corpus(str(corpus) if corpus else None)
    if root is None:
        return {"skipped": "no JAX corpus (../shared/corpus or $HLO_CORPUS)", "rows": []}
    import json
    cases = sorted(d for d in root.iterdir() if (d / "case.json").is_file())
    cases = cases[:3] if ns.quick else cases
    repeat = 1 if ns.quick else 3
    xr = interp_bench._xla_ref(root) if ns.xla and not ns.quick else None
    rows, errors = [], []
    for case in cases:
        info = json.loads((case / "case.json").read_text())
        f = case / info["primary_hlo"]
        try:
            t_int = interp_bench.time_interpreter(f, case / "inputs.npz", repeat)
        except Exception as e:
            errors.append(f"{case.name}: interpreter failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        t_xla = None
        if xr is not None:
            try:
                t_xla = interp_bench.time_xla(xr, f, case / "inputs.npz", repeat)
            except (Exception, SystemExit) as e:
                errors.append(f"{case.name}: XLA:CPU failed: {type(e).__name__}: {str(e)[:200]}")
        rows.append(_row(case.name, t_int * 1e3, "ms", xla_cpu_ms=t_xla * 1e3 if t_xla else None,
                         ratio=(t_int / t_xla) if t_xla else None))
    ratios = [r["extra"]["ratio"] for r in rows if r["extra"]["ratio"]]
    out = {"method": f"best of {repeat} after a warm-up; XLA:CPU via xla_ref.py "
                     + ("in this process" if xr is not None else "not measured" + (" (--quick)" if ns.quick else "")),
           "rows": rows, "errors": errors}
    if ratios:
        out["median_ratio_interpreter_over_xla_cpu"] = _median(ratios)
    return out


# ---- host target ------------------------------------------------------------------------------
def host_section(ns) -> dict:
    scale = 64 if ns.quick else 8
    n = 1 if ns.quick else 10
    rows, errors = [], []
    modules = catalog.MODULES
    if ns.only:
        modules = [m for m in modules if any(s in m.name for s in ns.only)]
    for bm in modules:
        try:
            text, module = catalog.load(bm, scale)
            t0 = time.perf_counter()
            exe = compile_executable(module, "host")
            compile_s = time.perf_counter() - t0
            args, expected = catalog.reference(module)
            why = catalog.check_results(expected, literals.flatten(exe.run(args)))
            if why:
                errors.append(f"{bm.name}: {why}")
                continue
            run, launches = bind(exe, args)
            run()
            ms = _median(_timed(run, n)) * 1e3
            nbytes = catalog.kernel_bytes(exe.plan)
            src, dst = np.ones(nbytes // 2, np.uint8), np.empty(nbytes // 2, np.uint8)
            copy_ms = _median(_timed(lambda: np.copyto(dst, src), max(n, 3))) * 1e3
            shape = str(module.entry.parameters[0].shape)
            rows.append(_row(bm.name, ms, "ms", first_parameter=shape, kernels=launches,
                             emitters=[k.analysis.emitter for k in exe.plan.kernels], bytes=nbytes,
                             time_over_copy=ms / copy_ms if copy_ms else None, compile_s=compile_s))
        except Exception as e:  # a benchmark: say why and go on
            errors.append(f"{bm.name}: {type(e).__name__}: {str(e)[:300]}")
    return {"method": f"host target, modules scaled by 1/{scale}, results checked against the interpreter, "
                      f"kernels bound once, wall clock, median of {n}; time/copy over np.copyto of half the bytes",
            "rows": rows, "errors": errors}


def find_corpus() -> Path | None:
    import os
    for c in (os.environ.get("HLO_CORPUS"), str(REPO.parent / "shared" / "corpus")):
        if c and Path(c).is_dir():
            return Path(c)
    return None


def run_cpu_suite(ns) -> dict:
    corpus = find_corpus()
    sections = {}
    for name, fn in (("parse", lambda: parse_section(ns, corpus)), ("compile", lambda: compile_section(ns)),
                     ("pass scaling", lambda: scaling_section(ns)),
                     ("interpreter", lambda: interpreter_section(ns, corpus)), ("host", lambda: host_section(ns)),
                     ("cost model", lambda: cost_section(ns)),
                     ("model scale", lambda: model_scale_section(ns, corpus)),
                     ("compile vs XLA", lambda: compile_vs_xla_section(ns, corpus))):
        t0 = time.perf_counter()
        try:
            sections[name] = fn()
        except Exception as e:  # one section failing does not lose the others
            sections[name] = {"error": f"{type(e).__name__}: {str(e)[:600]}", "rows": []}
        sections[name]["seconds"] = time.perf_counter() - t0
        print(f"cpu: {name} done in {sections[name]['seconds']:.1f} s", flush=True)
    return {"ran": True, "corpus": str(corpus) if corpus else None, "method": __doc__.strip(),
            "sections": sections}
