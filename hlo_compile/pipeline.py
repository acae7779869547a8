"""The compilation pipeline as data: an ordered list of named stages (DESIGN §2).

``hlo`` (parsed + passes) → ``fusions`` (hero, emitter, launch per fusion) → ``indexing``
(thread→data maps) → ``llvm`` (as emitted) → ``llvm-opt`` (after O3) → ``ptx`` → ``cubin``
(where ptxas is found). Each stage reads the ``Compilation`` state and returns one printable
artifact (module level) plus, optionally, one per kernel. The driver loop (``run_pipeline``)
alone decides what is printed, dumped or skipped; stages never do I/O. A stage that cannot
run here (no ptxas for ``cubin``) says why, and asking for it names the reason.

Dumps follow XLA's names (``--xla_dump_to``): every file of module number N is
``module_NNNN.<module>.<suffix>``, e.g. ``module_0000.gelu.before_optimizations.txt`` (the input),
``module_0000.gelu.sm_8.0_gpu_after_optimizations.txt`` (after our passes),
``module_0000.gelu.ir-no-opt.ll``, ``module_0000.gelu.ir-with-opt.ll``, ``module_0000.gelu.ptx``,
plus ours (``fusions.txt``, ``indexing.txt``, ``indexing.json``, ``cubin``, ``summary.json``);
per kernel ``module_0000.gelu.<kernel>.ir-no-opt.ll`` and ``module_0000.gelu.<kernel>.ptx``.
Names are sanitised to ``[A-Za-z0-9._-]``, never leave the directory and never collide
(``DumpWriter``). hlo-opt's stage names (``--stage=llvm-before-optimizations``...) are
aliases of ours (``STAGE_ALIASES``).
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
    """Raised by a stage that cannot run in this environment (the message says why, in one
    line; ``detail`` is the long form for when the stage was asked for)."""

    def __init__(self, why: str, detail: str | None = None):
        super().__init__(why)
        self.detail = detail or why


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
    dump_suffix: str = ""                # XLA's file suffix; "{arch}" becomes e.g. "sm_8.0"
    xla_names: tuple[str, ...] = ()      # hlo-opt's --stage spellings of this stage
    description: str = ""


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
        from .targets.toolkit import LIBDEVICE_MISSING, ToolkitNotFound
        if c.linked_ir is None:
            _llvm(c)
        names = [k.kernel_name for k in c.plan.kernels]
        try:
            c.ptx_result = compile_to_ptx(c.linked_ir, c.options.arch, names, opt_level=c.options.opt_level)
        except ToolkitNotFound as e:  # libdevice missing: these stages cannot run here
            raise StageUnavailable(LIBDEVICE_MISSING, e.message) from None
        c.module_seconds.update(c.ptx_result.seconds)
    return c.ptx_result


def _llvm_opt(c: Compilation) -> StageOutput:
    return StageOutput(_compile_ptx(c).llvm_opt)


def _ptx(c: Compilation) -> StageOutput:
    ptx = _compile_ptx(c).ptx
    return StageOutput(ptx, split_ptx(ptx, [k.kernel_name for k in c.plan.kernels]))


_PTX_HEADER = re.compile(r"\s*\.(version|target|address_size)\b")
_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)")


def split_ptx(ptx: str, kernels: list[str]) -> dict[str, str]:
    """One self-contained PTX text per kernel: the module's header, its declarations and
    helper functions (libdevice's, shared arrays), and that kernel's ``.entry`` alone."""
    header: list[str] = []
    items: list[tuple[str | None, str]] = []  # (entry name or None, text)
    current: list[str] = []
    depth = 0
    for line in ptx.splitlines(keepends=True):
        code = line.split("//", 1)[0]
        if depth == 0 and not current and _PTX_HEADER.match(code):
            header.append(line)
            continue
        current.append(line)
        depth += code.count("{") - code.count("}")
        tail = code.rstrip()
        if depth == 0 and (tail.endswith("}") or tail.endswith(";")):
            text = "".join(current)
            m = _PTX_ENTRY.search(text)
            items.append((m.group(1) if m else None, text))
            current = []
    trailer = "".join(current)
    shared = [text for name, text in items if name is None]
    entries = {name: text for name, text in items if name is not None}
    out = {}
    for k in kernels:
        if k in entries:
            out[k] = "".join(header) + "".join(shared) + entries[k] + trailer
    return out


def _cubin(c: Compilation) -> StageOutput:
    from .targets.ptxas import run_ptxas
    from .targets.toolkit import find_ptxas, ptxas_missing_reason
    if find_ptxas() is None:
        raise StageUnavailable(ptxas_missing_reason())
    ptx = _compile_ptx(c).ptx
    t0 = time.perf_counter()
    c.ptxas_result = run_ptxas(ptx, c.options.arch)
    c.module_seconds["ptxas"] = time.perf_counter() - t0
    return StageOutput(c.ptxas_result.cubin)


STAGES: list[Stage] = [
    Stage("hlo", "txt", _hlo, dump_suffix="{arch}_gpu_after_optimizations.txt", xla_names=("hlo-backend",),
          description="the module after our passes (fusion), XLA's long form"),
    Stage("fusions", "txt", _fusions, dump_suffix="fusions.txt",
          description="per fusion: hero, emitter and why, launch dimensions"),
    Stage("indexing", "txt", _indexing, dump_suffix="indexing.txt",
          description="indexing maps of ENTRY's root and fusions"),
    Stage("indexing-json", "json", _indexing_json, dump_suffix="indexing.json",
          description="the same maps as JSON"),
    Stage("llvm", "ll", _llvm, dump_suffix="ir-no-opt.ll", xla_names=("llvm-before-optimizations",),
          description="LLVM IR as emitted (per kernel too)"),
    Stage("llvm-opt", "ll", _llvm_opt, dump_suffix="ir-with-opt.ll", xla_names=("llvm-after-optimizations",),
          description="LLVM IR after O3, libdevice linked"),
    Stage("ptx", "ptx", _ptx, dump_suffix="ptx", description="PTX from LLVM's NVPTX back end (per kernel too)"),
    Stage("cubin", "cubin", _cubin, binary=True, dump_suffix="cubin",
          description="the cubin from ptxas (needs ptxas; binary: -o FILE)"),
]
STAGE_NAMES = [s.name for s in STAGES]
# hlo-opt's stage names (``--stage=``) → ours. hlo-opt's bare ``llvm`` is after optimizations;
# ours is the IR as emitted, so an XLA user's ``llvm`` is spelled ``llvm-after-optimizations``.
STAGE_ALIASES: dict[str, str] = {alias: s.name for s in STAGES for alias in s.xla_names}
# hlo-opt stages with no counterpart here, and what to use instead
UNAVAILABLE_STAGES: dict[str, str] = {
    "buffer-assignment": "hlo-run plans buffers at run time; there is no buffer-assignment dump",
    "html": "there is no HTML rendering; use --emit=hlo",
}
BEFORE_OPTIMIZATIONS = "before_optimizations.txt"


def stage(name: str) -> Stage:
    wanted = STAGE_ALIASES.get(name, name)
    for s in STAGES:
        if s.name == wanted:
            return s
    if name in UNAVAILABLE_STAGES:
        raise HloUnsupportedError(f"stage '{name}' is not produced here: {UNAVAILABLE_STAGES[name]}")
    raise HloUnsupportedError(f"unknown stage '{name}' (stages: {', '.join(STAGE_NAMES)}; "
                              f"hlo-opt's names: {', '.join(sorted(STAGE_ALIASES))})")


def safe_file_name(name: str) -> str:
    """A name from HLO text made safe as a file name inside the dump directory."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return cleaned or "_"


def xla_arch_name(arch: str) -> str:
    """``sm_90`` → ``sm_9.0``, ``sm_90a`` → ``sm_9.0a``: the compute capability as XLA writes it
    in ``..._gpu_after_optimizations.txt``."""
    m = re.fullmatch(r"sm_(\d+)(\d)([a-z]?)", arch)
    return f"sm_{m.group(1)}.{m.group(2)}{m.group(3)}" if m else safe_file_name(arch)


class DumpWriter:
    """Writes one module's files into a dump directory under XLA's names.

    ``module_NNNN.<module>.`` prefixes every file (the module name is dropped, as XLA does,
    when a name would pass 255 characters); per-kernel files add ``<kernel>.``. Every name is
    sanitised, stays inside the directory, and a name already written by this writer gets a
    ``-2``, ``-3``... before its suffix instead of overwriting the first file."""

    MAX_NAME = 255

    def __init__(self, root: Path, module_name: str, index: int = 0, arch: str = "sm_80"):
        self.root = root
        self.index = index
        self.arch = arch
        self.module = safe_file_name(module_name) if module_name else ""
        self.written: dict[str, Path] = {}

    def file_name(self, suffix: str, kernel: str | None = None) -> str:
        suffix = suffix.replace("{arch}", xla_arch_name(self.arch))
        parts = [f"module_{self.index:04d}"]
        if self.module:
            parts.append(self.module)
        if kernel is not None:
            parts.append(safe_file_name(kernel))
        name = ".".join(parts + [suffix])
        if len(name) > self.MAX_NAME and self.module:
            name = ".".join([parts[0]] + parts[2:] + [suffix])
        if len(name) > self.MAX_NAME:  # a kernel name of hundreds of characters: keep it unique
            import hashlib
            digest = hashlib.sha1(name.encode()).hexdigest()[:12]
            name = name[:self.MAX_NAME - len(suffix) - 14] + "." + digest + "." + suffix
        return safe_file_name(name)

    def write(self, suffix: str, data: str | bytes, kernel: str | None = None) -> Path:
        name = self.file_name(suffix, kernel)
        suffix = suffix.replace("{arch}", xla_arch_name(self.arch))
        if name in self.written:
            stem, n = name[:len(name) - len(suffix) - 1], 2
            while f"{stem}-{n}.{suffix}" in self.written:
                n += 1
            name = f"{stem}-{n}.{suffix}"
        path = (self.root / name).resolve()
        if path.parent != self.root.resolve():  # never outside the dump directory
            raise HloUnsupportedError(f"refusing to write {name!r} outside {self.root}")
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
        self.written[name] = path
        return path


@dataclass
class PipelineResult:
    artifacts: dict[str, str | bytes] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # stage → why
    compilation: Compilation | None = None
    writer: "DumpWriter | None" = None                     # the dump's files, when dumping


def run_pipeline(module: HloModule, options: CompileOptions, *, emit: str | None = None,
                 dump_to: Path | None = None, module_index: int = 0) -> PipelineResult:
    """Run the stages in order. With ``emit``, stop after that stage (an error if it cannot
    run here); with ``dump_to``, run them all and write each as it completes, as module
    number ``module_index`` of the dump (``DumpWriter``)."""
    c = Compilation(module, options)
    result = PipelineResult(compilation=c)
    wanted = stage(emit) if emit else None
    writer = None
    if dump_to is not None:
        dump_to.mkdir(parents=True, exist_ok=True)
        writer = DumpWriter(dump_to, module.name, module_index, options.arch)
        writer.write(BEFORE_OPTIMIZATIONS, module.to_text("long"))
    result.writer = writer
    stages = [wanted] if wanted is not None and dump_to is None else STAGES
    try:
        for s in stages:
            t0 = time.perf_counter()
            try:
                out = s.run(c)
            except StageUnavailable as why:
                result.skipped[s.name] = str(why)
                if wanted is s:
                    raise HloUnsupportedError(f"stage '{s.name}' is not available: {why.detail}") from None
                continue
            c.module_seconds[s.name] = time.perf_counter() - t0
            result.artifacts[s.name] = out.text
            if writer is not None:
                _write_stage(writer, s, out)
    finally:
        if writer is not None:
            text = json.dumps(summary(c, result), indent=1) + "\n"
            writer.write("summary.json", text)
            (dump_to / "summary.json").write_text(text)
    return result


def dump_source(module: HloModule, dump_to: Path, module_index: int = 0, arch: str = "sm_80") -> Path:
    """Only the input module, as ``module_NNNN.<name>.before_optimizations.txt`` (runs that
    compile nothing: the interpreter)."""
    dump_to.mkdir(parents=True, exist_ok=True)
    return DumpWriter(dump_to, module.name, module_index, arch).write(BEFORE_OPTIMIZATIONS, module.to_text("long"))


def _write_stage(writer: DumpWriter, s: Stage, out: StageOutput) -> None:
    writer.write(s.dump_suffix or f"{s.name}.{s.extension}", out.text)
    for kernel, text in out.per_kernel.items():
        writer.write(s.dump_suffix or f"{s.name}.{s.extension}", text, kernel=kernel)


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
