"""The compilation pipeline as data: an ordered list of named stages (DESIGN §2).

``hlo`` (parsed + passes) → ``fusions`` (hero, emitter, launch per fusion) → ``indexing``
(thread→data maps) → ``llvm`` (as emitted) → ``llvm-opt`` (after O3) → ``ptx`` → ``cubin``
(where ptxas is found). Each stage reads the ``Compilation`` state and returns one printable
artifact (module level) plus, optionally, one per kernel. The driver loop (``run_pipeline``)
alone decides what is printed, dumped or skipped; stages never do I/O. A stage that cannot
run here (no ptxas for ``cubin``) says why, and asking for it names the reason.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .hlo import HloModule
from .hlo.errors import HloUnsupportedError
from .options import CompileOptions


class StageUnavailable(Exception):
    """Raised by a stage that cannot run in this environment (the message says why)."""


@dataclass
class StageOutput:
    text: str | bytes
    per_kernel: dict[str, str | bytes] = field(default_factory=dict)  # kernel name → artifact


@dataclass
class Compilation:
    """What the stages share: the source module and everything derived from it so far."""

    source: HloModule
    options: CompileOptions
    module: HloModule | None = None          # after the passes
    plan: Any = None                         # codegen.compiler.ModulePlan
    kernel_ir: dict[str, str] = field(default_factory=dict)
    linked_ir: str | None = None
    ptx_result: Any = None                   # targets.nvptx.PtxResult
    ptxas_result: Any = None                 # targets.ptxas.PtxasResult
    kernel_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    module_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    name: str
    extension: str
    run: Callable[[Compilation], StageOutput]
    binary: bool = False


def _hlo(c: Compilation) -> StageOutput:
    from .codegen.compiler import prepare_module
    c.module = prepare_module(c.source, c.options)
    return StageOutput(c.module.to_text("long"))


def _ensure_plan(c: Compilation):
    if c.plan is None:
        from .codegen.compiler import plan_module
        c.plan = plan_module(c.source, c.options)
    return c.plan


def _fusions(c: Compilation) -> StageOutput:
    from .codegen.report import fusion_report_text
    plan = _ensure_plan(c)
    return StageOutput(fusion_report_text(plan))


def _indexing(c: Compilation) -> StageOutput:
    from .indexing.report import indexing_report_text
    return StageOutput(indexing_report_text(c.source))


def _indexing_json(c: Compilation) -> StageOutput:
    from .indexing.report import indexing_report_json
    return StageOutput(json.dumps(indexing_report_json(c.source), indent=1) + "\n")


def _llvm(c: Compilation) -> StageOutput:
    from .targets.linking import link_kernel_modules
    from .targets.nvptx import NvptxTarget
    plan = _ensure_plan(c)
    target = NvptxTarget(c.options.arch)
    target.dot_tensor_cores = c.options.dot_tensor_cores
    modules = []
    for k in plan.kernels:
        t0 = time.perf_counter()
        m = k.emit(target)
        c.kernel_ir[k.kernel_name] = str(m)
        c.kernel_seconds.setdefault(k.kernel_name, {})["llvm"] = time.perf_counter() - t0
        modules.append(m)
    c.linked_ir = link_kernel_modules(target, c.source.name, modules)
    return StageOutput(c.linked_ir, dict(c.kernel_ir))


def _compile_ptx(c: Compilation):
    if c.ptx_result is None:
        from .targets.nvptx import compile_to_ptx
        if c.linked_ir is None:
            _llvm(c)
        names = [k.kernel_name for k in c.plan.kernels]
        c.ptx_result = compile_to_ptx(c.linked_ir, c.options.arch, names, opt_level=c.options.opt_level)
        c.module_seconds.update(c.ptx_result.seconds)
    return c.ptx_result


def _llvm_opt(c: Compilation) -> StageOutput:
    return StageOutput(_compile_ptx(c).llvm_opt)


def _ptx(c: Compilation) -> StageOutput:
    return StageOutput(_compile_ptx(c).ptx)


def _cubin(c: Compilation) -> StageOutput:
    from .targets.ptxas import run_ptxas
    from .targets.toolkit import find_ptxas
    ptx = _compile_ptx(c).ptx
    if find_ptxas() is None:
        raise StageUnavailable("ptxas not found (pip install nvidia-cuda-nvcc, or set CUDA_HOME)")
    t0 = time.perf_counter()
    c.ptxas_result = run_ptxas(ptx, c.options.arch)
    c.module_seconds["ptxas"] = time.perf_counter() - t0
    return StageOutput(c.ptxas_result.cubin)


STAGES: list[Stage] = [
    Stage("hlo", "txt", _hlo),
    Stage("fusions", "txt", _fusions),
    Stage("indexing", "txt", _indexing),
    Stage("indexing-json", "json", _indexing_json),
    Stage("llvm", "ll", _llvm),
    Stage("llvm-opt", "ll", _llvm_opt),
    Stage("ptx", "ptx", _ptx),
    Stage("cubin", "cubin", _cubin, binary=True),
]
STAGE_NAMES = [s.name for s in STAGES]


def stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise HloUnsupportedError(f"unknown stage '{name}' (stages: {', '.join(STAGE_NAMES)})")


def safe_file_name(name: str) -> str:
    """A name from HLO text made safe as a file name inside the dump directory."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return cleaned or "_"


@dataclass
class PipelineResult:
    artifacts: dict[str, str | bytes] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # stage → why
    compilation: Compilation | None = None


def run_pipeline(module: HloModule, options: CompileOptions, *, emit: str | None = None,
                 dump_to: Path | None = None) -> PipelineResult:
    """Run the stages in order. With ``emit``, stop after that stage (an error if it cannot
    run here); with ``dump_to``, run them all and write each as it completes."""
    c = Compilation(module, options)
    result = PipelineResult(compilation=c)
    wanted = stage(emit) if emit else None
    if dump_to is not None:
        dump_to.mkdir(parents=True, exist_ok=True)
    stages = [wanted] if wanted is not None and dump_to is None else STAGES
    try:
        for s in stages:
            t0 = time.perf_counter()
            try:
                out = s.run(c)
            except StageUnavailable as why:
                result.skipped[s.name] = str(why)
                if wanted is s:
                    raise HloUnsupportedError(f"stage '{s.name}' is not available: {why}") from None
                continue
            c.module_seconds[s.name] = time.perf_counter() - t0
            result.artifacts[s.name] = out.text
            if dump_to is not None:
                _write_stage(dump_to, s, out)
    finally:
        if dump_to is not None:
            (dump_to / "summary.json").write_text(json.dumps(summary(c, result), indent=1) + "\n")
    return result


def _write_stage(root: Path, s: Stage, out: StageOutput) -> None:
    _write(root, f"module.{s.name}.{s.extension}", out.text)
    for kernel, text in out.per_kernel.items():
        _write(root, f"{safe_file_name(kernel)}.{s.name}.{s.extension}", text)


def _write(root: Path, name: str, data: str | bytes) -> None:
    path = (root / safe_file_name(name)).resolve()
    if path.parent != root.resolve():  # never outside the dump directory
        raise HloUnsupportedError(f"refusing to write {name!r} outside {root}")
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


def summary(c: Compilation, result: PipelineResult) -> dict:
    """summary.json (DESIGN §5)."""
    kernels = []
    resources = c.ptxas_result.kernels if c.ptxas_result is not None else {}
    for k in (c.plan.kernels if c.plan is not None else []):
        a = k.analysis
        res = resources.get(k.kernel_name)
        kernels.append({
            "fusion": k.fusion.name, "kernel": k.kernel_name, "hero": ", ".join(h.name for h in a.heroes),
            "emitter": a.emitter, "variant": a.variant, "reason": a.reason,
            "grid": list(k.launch.grid), "block": list(k.launch.block), **k.spec.summary_fields(),
            "in_place": bool(k.donated),
            "shared_bytes": k.launch.shared_bytes,
            "registers": res.registers if res else None,
            "spills": (res.spill_stores_bytes + res.spill_loads_bytes) if res else None,
            "stage_seconds": c.kernel_seconds.get(k.kernel_name, {}),
        })
    return {"module": c.source.name, "arch": c.options.arch, "kernels": kernels,
            "stages": list(result.artifacts), "skipped_stages": result.skipped,
            "stage_seconds": {k: round(v, 6) for k, v in c.module_seconds.items()}}
