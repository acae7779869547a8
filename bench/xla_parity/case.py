"""One case folder compared kernel by kernel: XLA's kernels (``xla_dump.py``) against ours.

``compare_case`` compiles the case's ``optimized_gpu.hlo`` with our pipeline (``run_pipeline``
up to the ``ptx`` stage, as ``hlo-compile --emit=ptx``), matches our kernels to XLA's launches
by fusion name (XLA's thunk metadata names each thunk's fusion; our kernels keep the fusion's
name), and returns plain JSON: one row per kernel, matched or not. Rows:

- ``matched``: our kernel and XLA's launch of the same fusion;
- ``ours-only``: a kernel of ours XLA has no launch for; ``from_xla`` names the XLA fusion its
  instructions came from where one can be found (a fusion we split into several kernels);
- ``xla-only``: an XLA launch we have no kernel for (``split_into``: our kernels made of its
  instructions; ``ours_library``: we keep it as a library call);
- ``xla-not-kernel``: a kernel of ours whose fusion XLA runs as another thunk (a ``kCopy``,
  a ``kDynamicSliceFusion``...);
- ``library``: a library call of ours (no kernel), with XLA's thunk kind where it has one.

Each matched row also has ``model``: the cost model's time (``perf_model.estimate_launch``) of
XLA's kernel and of ours, the same fusion (bytes, flops, access pattern from our plan) under
each side's launch, shared memory, registers and global loads, and ``ratio`` ours/XLA; an
ours-only row has our time. The case's ``model`` sums the matched pairs (the module's ratio).

Registers and spills come from ``ptxas -v`` on both PTX texts for the same arch (XLA's PTX
``.target``, e.g. sm_90a); where ptxas is absent or fails they are None and the case says why.
A module we refuse (or fail on) is a case with ``status`` "refused" (or "failed") and the
message, never a traceback.
"""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

from .xla_dump import AccessWidths, XlaKernels, access_widths, ptx_entries, ptx_target, read_xla_dump

GEMM_BACKENDS = ("__triton_gemm", "__triton_nested_gemm_fusion", "__cublas$gemm", "__cublas$lt$matmul")
_CLONE_SUFFIX = re.compile(r"^(.*\.\d+)\.\d+$")  # "exp.1.3" -> "exp.1": a clone of exp.1


def case_arch(case: Path) -> str | None:
    """The arch the case was made for (``case.json``'s ``arch_requested``)."""
    try:
        data = json.loads((case / "case.json").read_text())
    except (OSError, ValueError):
        return None
    return data.get("arch_requested") or data.get("arch")


def _arch_number(arch: str) -> int:
    m = re.match(r"sm_(\d+)", arch or "")
    return int(m.group(1)) if m else 0


def family_of(emitter, variant, xla_backend: str | None = None) -> str:
    """Our emitter family: ``reduction/row``, ``loop``, ``transpose/packed``...; with the tag of
    XLA's custom fusion kind where the kernel is (or comes from) one: ``loop [gemm]`` (a GEMM
    fusion on our loop emitter), ``reduction/row [triton]`` (a piece of a block-level Triton
    fusion we split), so that the plain families hold only plain fusions."""
    e = getattr(emitter, "value", emitter)
    v = getattr(variant, "value", variant)
    base = f"{e}/{v}" if v else str(e)
    tag = backend_tag(xla_backend)
    return f"{base} [{tag}]" if tag else base


def backend_tag(backend: str | None) -> str | None:
    """A short name of XLA's custom fusion kind: gemm, triton, custom..."""
    if not backend:
        return None
    if backend in GEMM_BACKENDS or "gemm" in backend:
        return "gemm"
    return backend.strip("_").replace("$", "-")


# ---- XLA's fusions, from the optimized module ---------------------------------------------------

def xla_fusions(module) -> tuple[dict[str, dict], dict[str, str]]:
    """(fusion name -> {kind, backend, gemm}, instruction name -> the fusion holding it) of the
    module as XLA optimized it (before our passes)."""
    from hlo_compile.hlo.backend_config import fusion_backend_config
    from hlo_compile.hlo.ir import called_closure
    fusions: dict[str, dict] = {}
    member: dict[str, str] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "custom-call":
                fusions.setdefault(inst.name, {"kind": "custom-call", "backend": inst.attr("custom_call_target", None),
                                               "gemm": inst.attr("custom_call_target", "") in GEMM_BACKENDS})
            if inst.opcode != "fusion":
                continue
            backend = fusion_backend_config(inst).get("kind")
            called = called_closure(inst)
            has_dot = any(i.opcode in ("dot", "scaled-dot") for c in called for i in c.instructions)
            fusions[inst.name] = {"kind": inst.attr("kind", None), "backend": backend,
                                  "gemm": backend in GEMM_BACKENDS or (backend or "").startswith("__triton_gemm")
                                  or (has_dot and backend is not None and "triton" in backend and backend != "__triton")}
            for c in called:
                for i in c.instructions:
                    member.setdefault(i.name, inst.name)
    return fusions, member


def origin_of(kernel_fusion, member: dict[str, str]) -> str | None:
    """The XLA fusion most of our kernel's instructions come from (by name; a clone suffix
    ``.N`` dropped where the exact name is unknown), or None."""
    from hlo_compile.hlo.ir import called_closure
    names = [kernel_fusion.name] + [i.name for c in called_closure(kernel_fusion) for i in c.instructions
                                    if i.opcode != "parameter"]
    votes: Counter = Counter()
    for n in names:
        hit = member.get(n)
        if hit is None:
            m = _CLONE_SUFFIX.match(n)
            hit = member.get(m.group(1)) if m else None
        if hit is not None:
            votes[hit] += 1
    return votes.most_common(1)[0][0] if votes else None


# ---- ptxas --------------------------------------------------------------------------------------

def ptxas_resources(ptx: str, arch: str) -> tuple[dict[str, dict], str | None]:
    """(entry -> {registers, spills (bytes stored + loaded), static_shared}, error or None)."""
    from hlo_compile.hlo.errors import HloError
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        return {}, "ptxas not found"
    try:
        result = run_ptxas(ptx, arch)
    except HloError as e:
        return {}, e.message.splitlines()[0]
    return ({name: {"registers": r.registers, "spills": r.spill_stores_bytes + r.spill_loads_bytes,
                    "static_shared": r.shared_bytes} for name, r in result.kernels.items()}, None)


def _side(kernel: str | None, grid, block, shared, widths: AccessWidths | None, res: dict | None) -> dict:
    return {"kernel": kernel, "grid": list(grid) if grid is not None else None,
            "block": list(block) if block is not None else None, "shared": shared,
            **(widths.to_json() if widths is not None else
               {"load_bits": None, "store_bits": None, "load_op": None, "store_op": None, "bulk_copies": 0,
                "load_bytes": None}),
            "registers": res.get("registers") if res else None, "spills": res.get("spills") if res else None,
            "static_shared": res.get("static_shared") if res else None}


def launch_figures(side: dict, static_shared: int | None = None):
    """The cost model's ``LaunchFigures`` of one side of a row (its launch, shared memory
    dynamic + static, ptxas's registers, the widths and bytes of its global loads and stores);
    ``static_shared``: the figure to take where ptxas gave none."""
    from hlo_compile.codegen.model.perf_model import LaunchFigures
    static = side["static_shared"] if side["static_shared"] is not None else (static_shared or 0)
    return LaunchFigures(tuple(side["grid"]), tuple(side["block"]), (side["shared"] or 0) + static,
                         side["registers"], side["load_bits"], side["store_bits"], side.get("load_bytes"))


def model_times(kernel, device, xla: dict | None, ours: dict | None) -> dict:
    """``{"xla_us", "ours_us", "ratio"}`` (ours/XLA): the modelled time of each side's kernel of
    ``kernel``'s fusion; ``error`` where the model cannot take the fusion."""
    from hlo_compile.codegen.model.perf_model import estimate_launch
    out: dict = {"xla_us": None, "ours_us": None, "ratio": None}
    try:
        static = int(kernel.spec.summary_fields().get("static_shared_bytes", 0) or 0)
        for key, side in (("xla_us", xla), ("ours_us", ours)):
            if side is not None and side["grid"] is not None and side["block"] is not None:
                est = estimate_launch(kernel, device, launch_figures(side, static if key == "ours_us" else 0))
                out[key] = round(est.estimated_us, 4)
    except (ArithmeticError, ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    if out["xla_us"] and out["ours_us"] is not None:
        out["ratio"] = round(out["ours_us"] / out["xla_us"], 4)
    return out


def module_model(rows: list[dict]) -> dict:
    """The module's modelled times: the matched pairs summed (``ratio`` ours/XLA over the kernels
    both have), our kernels XLA has no launch for, and how many rows the model could not take."""
    pairs = [r["model"] for r in rows if r["status"] == "matched" and r.get("model", {}).get("ratio") is not None]
    xla_us = sum(m["xla_us"] for m in pairs)
    ours_us = sum(m["ours_us"] for m in pairs)
    return {"pairs": len(pairs), "xla_us": round(xla_us, 4), "ours_us": round(ours_us, 4),
            "ratio": round(ours_us / xla_us, 4) if xla_us else None,
            "ours_only_us": round(sum(r["model"]["ours_us"] or 0 for r in rows
                                      if r["status"] == "ours-only" and r.get("model")), 4),
            "unmodelled": sum(1 for r in rows if r["status"] == "matched" and r.get("model", {}).get("ratio") is None)}


def compare_rows(row: dict) -> dict:
    """The equalities of a matched row."""
    x, o = row["xla"], row["ours"]
    out = {"grid_equal": x["grid"] == o["grid"], "block_equal": x["block"] == o["block"],
           "shared_equal": x["shared"] == o["shared"]}
    out["launch_equal"] = out["grid_equal"] and out["block_equal"]
    out["load_ge"] = x["load_bits"] is None or (o["load_bits"] or 0) >= x["load_bits"]
    out["store_ge"] = x["store_bits"] is None or (o["store_bits"] or 0) >= x["store_bits"]
    if x["static_shared"] is not None and o["static_shared"] is not None:
        out["total_shared_equal"] = x["shared"] + x["static_shared"] == o["shared"] + o["static_shared"]
    else:
        out["total_shared_equal"] = None
    return out


# ---- one case -----------------------------------------------------------------------------------

def compare_case(case: str, arch: str | None = None, *, cache_dir: str | None = None, use_cache: bool = True,
                 gemm: str = "library", tensor_cores: bool = False, ptxas: bool = True) -> dict:
    """The comparison of one case folder, as JSON (see the module's doc)."""
    path = Path(case)
    out: dict = {"case": str(path), "name": path.name, "arch": None, "status": "ok", "message": None,
                 "rows": [], "xla_other_thunks": {}, "ptxas_arch": None, "ptxas_error": None}
    try:
        xla = read_xla_dump(path / "xla_dump")
        source_text = (path / "optimized_gpu.hlo").read_text()
    except (OSError, ValueError) as e:
        out.update(status="bad-case", message=str(e))
        return out
    out["arch"] = arch = arch or case_arch(path) or "sm_90"
    t0 = time.perf_counter()
    try:
        plan, ptx, fusions, member = _compile(source_text, str(path / "optimized_gpu.hlo"), arch, cache_dir,
                                              use_cache, gemm, tensor_cores)
    except Exception as e:  # noqa: BLE001 - a refusal (HloError) or a failure: recorded, never raised
        from hlo_compile.hlo.errors import HloError
        if isinstance(e, HloError):
            out.update(status="refused", message=e.message.splitlines()[0] if e.message else type(e).__name__)
        else:
            out.update(status="failed", message=f"{type(e).__name__}: {e}")
        out["xla_kernels"] = sum(1 for t in xla.thunks if t.is_launch)
        out["rows"] = _xla_rows_only(xla)
        return out
    out["compile_seconds"] = round(time.perf_counter() - t0, 3)
    out["rows"] = _rows(xla, plan, ptx, fusions, member, arch, out, ptxas)
    out["model"] = module_model(out["rows"])
    out["xla_kernels"] = sum(1 for t in xla.thunks if t.is_launch)
    out["our_kernels"] = len(plan.kernels)
    return out


def _compile(text: str, name: str, arch: str, cache_dir, use_cache: bool, gemm: str, tensor_cores: bool):
    from hlo_compile.hlo import parse_module
    from hlo_compile.driver.kernel_cache import KernelCache, default_cache_dir
    from hlo_compile.options import CompileOptions
    from hlo_compile.driver.pipeline import run_pipeline
    fusions, member = xla_fusions(parse_module(text, name))
    cache = KernelCache(Path(cache_dir) if cache_dir else default_cache_dir()) if use_cache else None
    options = CompileOptions(arch=arch, gemm=gemm, dot_tensor_cores=tensor_cores)
    result = run_pipeline(parse_module(text, name), options, emit="ptx", cache=cache, jobs=1)
    return result.plan, result.artifacts["ptx"], fusions, member


def _xla_rows_only(xla: XlaKernels) -> list[dict]:
    rows = []
    for t in xla.thunks:
        if t.is_launch:
            widths = access_widths(xla.entries[t.kernel]) if t.kernel in xla.entries else None
            rows.append({"status": "xla-only", "fusion": xla.annotation(t) or t.kernel, "family": None,
                         "xla": _side(t.kernel, t.grid, t.block, t.shared_bytes, widths, None), "ours": None})
    return rows


def _rows(xla: XlaKernels, plan, ptx: str, fusions: dict, member: dict, arch: str, out: dict,
          run_ptx: bool) -> list[dict]:
    ours_entries = ptx_entries(ptx)
    # ptxas on both for one arch: XLA's PTX target (sm_90a), unless ours is for a newer one
    ptxas_arch = xla.target or arch
    ours_ptxas_arch = ptxas_arch if _arch_number(arch) <= _arch_number(ptxas_arch) else arch
    out["ptxas_arch"] = ptxas_arch if ours_ptxas_arch == ptxas_arch else f"{ptxas_arch} (XLA), {ours_ptxas_arch} (ours)"
    xla_res: dict[str, dict] = {}
    ours_res: dict[str, dict] = {}
    errors = []
    if run_ptx:
        for file_path, text in xla.ptx_files.items():
            if ".entry" not in text:
                continue
            res, err = ptxas_resources(text, ptx_target(text) or ptxas_arch)
            xla_res.update(res)
            if err:
                errors.append(f"XLA {file_path.name}: {err}")
        res, err = ptxas_resources(ptx, ours_ptxas_arch)
        ours_res.update(res)
        if err:
            errors.append(f"ours: {err}")
    else:
        errors.append("ptxas not run (--no-ptxas)")
    out["ptxas_error"] = "; ".join(dict.fromkeys(errors)) or None

    launches: dict[str, list] = {}
    for t in xla.thunks:
        if t.is_launch:
            launches.setdefault(xla.annotation(t) or t.kernel, []).append(t)
    other = {xla.annotation(t): t.kind for t in xla.thunks if not t.is_launch and xla.annotation(t)}
    out["xla_other_thunks"] = dict(Counter(t.kind for t in xla.thunks if not t.is_launch))
    by_sanitized = {t.kernel: name for name, ts in launches.items() for t in ts}
    used: set[int] = set()
    rows: list[dict] = []
    width_cache: dict[str, AccessWidths] = {}

    def widths_of(entries: dict[str, str], kernel: str | None, side: str) -> AccessWidths | None:
        key = f"{side}:{kernel}"
        if key not in width_cache and kernel in entries:
            width_cache[key] = access_widths(entries[kernel])
        return width_cache.get(key)

    def xla_side(t) -> dict:
        return _side(t.kernel, t.grid, t.block, t.shared_bytes, widths_of(xla.entries, t.kernel, "x"),
                     xla_res.get(t.kernel))

    def info(name: str | None) -> dict:
        f = fusions.get(name or "", {})
        return {"xla_kind": f.get("kind"), "xla_backend": f.get("backend"), "gemm": bool(f.get("gemm"))}

    for k in plan.kernels:
        a = k.analysis
        name = k.fusion.name
        ours = _side(k.kernel_name, k.launch.grid, k.launch.block, k.launch.shared_bytes,
                     widths_of(ours_entries, k.kernel_name, "o"), ours_res.get(k.kernel_name))
        ours["emitter"] = str(getattr(a.emitter, "value", a.emitter))
        ours["variant"] = getattr(a.variant, "value", a.variant)
        ours["xla_emitter"] = str(getattr(a.xla_emitter, "value", a.xla_emitter))
        ours["reuses"] = k.reuses
        row = {"fusion": name, "family": family_of(a.emitter, a.variant, fusions.get(name, {}).get("backend")),
               **info(name)}
        candidates = launches.get(name) or launches.get(by_sanitized.get(k.kernel_name, ""), [])
        t = next((t for t in candidates if t.id not in used), None)
        if t is not None:
            used.add(t.id)
            row.update(status="matched", xla=xla_side(t), ours=ours)
            row.update(compare_rows(row))
            row["model"] = model_times(k, plan.device, row["xla"], ours)
        elif name in other:
            row.update(status="xla-not-kernel", xla_thunk=other[name], xla=None, ours=ours)
        else:
            origin = origin_of(k.fusion, member)
            row.update(status="ours-only", from_xla=origin, xla=None, ours=ours, **info(origin))
            row["model"] = model_times(k, plan.device, None, ours)
            row["family"] = family_of(a.emitter, a.variant, row["xla_backend"])
        row["gemm"] = row["gemm"] or ours["emitter"] == "dot"
        rows.append(row)
    library = {c.name for c in plan.library_calls}
    split: dict[str, list[str]] = {}
    for r in rows:
        if r["status"] == "ours-only" and r.get("from_xla"):
            split.setdefault(r["from_xla"], []).append(r["fusion"])
    for name, ts in launches.items():
        for t in ts:
            if t.id in used:
                continue
            row = {"status": "xla-only", "fusion": name, "family": None, **info(name), "xla": xla_side(t),
                   "ours": None}
            if name in split:
                row["split_into"] = split[name]
            if name in library:
                row["ours_library"] = True
            rows.append(row)
    for c in plan.library_calls:
        rows.append({"status": "library", "fusion": c.name, "family": "library", **info(c.name),
                     "library": c.attr("custom_call_target", None), "xla_thunk": other.get(c.name),
                     "xla": None, "ours": None})
    return rows
