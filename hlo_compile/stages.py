"""The compilation stages (DESIGN §2): each a function from the artifacts it names to one new one.

``source`` (the parsed module) → ``hlo`` (after the passes: an ``HloModule``) → ``fusions``
(hero, emitter and launch per fusion: a ``ModulePlan``) → ``llvm`` (the kernels' LLVM IR as
emitted: ``LinkedKernels``) → ``llvm-opt`` (libdevice linked and O3, then PTX emitted by the
same LLVM pass: a ``PtxResult``) → ``ptx`` (its text) → ``cubin`` (ptxas's ``PtxasResult``);
``indexing`` and ``indexing-json`` read the source. A stage is called as
``stage.run(options, *artifacts named in stage.needs)`` and returns a ``StageOutput``: the
artifact, its printable form and, optionally, one per kernel and finer timings. Stages do no
I/O and never look at each other's state: the driver loop (``pipeline.run_pipeline``) runs
each once, times it, prints, dumps and (later) caches. A stage that cannot run here (no
ptxas for ``cubin``) raises ``StageUnavailable`` saying why.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .options import CompileOptions

if TYPE_CHECKING:  # pragma: no cover
    from .codegen.compiler import ModulePlan
    from .hlo import HloModule
    from .targets.nvptx import PtxResult

# The stages import the code generator, LLVM and the runtime checks when they run, not when
# this table is imported: listing or naming stages (and a warm ``hlo-compile``) stays cheap.
# The three steps below are module attributes (tests count and break them here).

def plan_prepared_module(*args, **kwargs):
    from .codegen.compiler import plan_prepared_module as plan
    return plan(*args, **kwargs)


def compile_to_ptx(*args, **kwargs):
    from .targets.nvptx.ptx import compile_to_ptx as compile_
    return compile_(*args, **kwargs)


def run_ptxas(*args, **kwargs):
    from .targets.nvptx.ptxas import run_ptxas as run
    return run(*args, **kwargs)

SOURCE = "source"  # the name under which stages read the input module


class StageUnavailable(Exception):
    """Raised by a stage that cannot run in this environment (the message says why, in one
    line; ``detail`` is the long form for when the stage was asked for)."""

    def __init__(self, why: str, detail: str | None = None):
        super().__init__(why)
        self.detail = detail or why


@dataclass
class StageOutput:
    value: Any                                # the artifact later stages read
    text: str | bytes | None = None           # what --emit prints and --dump-to writes
    per_kernel: dict[str, str | bytes] = field(default_factory=dict)  # kernel name → its part
    seconds: dict[str, float] = field(default_factory=dict)         # parts of the stage
    kernel_seconds: dict[str, float] = field(default_factory=dict)  # kernel name → its time


@dataclass(frozen=True)
class StageCache:
    """How the driver keeps a stage's output in the persistent cache (``kernel_cache.py``):
    ``key_text(options, *inputs)`` is the text of what the output depends on besides the
    options and tool versions; ``dump(output)`` its bytes; ``load(bytes)`` the output again."""

    key_text: Callable[..., str]
    dump: Callable[[StageOutput], bytes]
    load: Callable[[bytes], StageOutput]


@dataclass(frozen=True)
class Stage:
    name: str
    needs: tuple[str, ...]                    # the artifacts ``run`` takes after the options
    run: Callable[..., StageOutput]
    extension: str = "txt"
    binary: bool = False
    dump_suffix: str | None = None            # XLA's file suffix ("{arch}": e.g. "sm_8.0"); None:
    #                                           a stage of the runtime, never printed or dumped
    xla_names: tuple[str, ...] = ()           # hlo-opt's --stage spellings of this stage
    description: str = ""
    cache: StageCache | None = None           # kept in the persistent cache by the driver


@dataclass(frozen=True)
class LinkedKernels:
    """The ``llvm`` stage's artifact: each kernel's module as emitted, and all of them linked."""

    kernel_ir: dict[str, str]
    linked: str


def _hlo(options: CompileOptions, source: HloModule) -> StageOutput:
    from .codegen.compiler import prepare_module
    module = prepare_module(source, options)
    return StageOutput(module, module.to_text("long"))


def _fusions(options: CompileOptions, module: HloModule) -> StageOutput:
    from .codegen.launch_limits import check_plan as check_launch_limits
    from .codegen.perf_model import cost_device, estimate_module
    from .codegen.report import fusion_report_text
    from .runtime.runnable import check_runnable
    from .targets import reserved_kernel_symbols
    # kernels keep their names on every target: none may take a symbol some target links
    plan = plan_prepared_module(module, options, reserved_kernel_symbols())
    check_runnable(plan.computations or [plan.module.entry], options.generated_call_families())
    check_launch_limits(plan)  # block, grid, static shared memory: before any code is made
    cost = estimate_module(plan, cost_device(options.device, plan.device), tensor_cores=options.dot_tensor_cores)
    return StageOutput(plan, fusion_report_text(plan, cost))


def _indexing(options: CompileOptions, source: HloModule) -> StageOutput:
    from .indexing.report import indexing_report_text
    text = indexing_report_text(source)
    return StageOutput(text, text)


def _indexing_json(options: CompileOptions, source: HloModule) -> StageOutput:
    from .indexing.report import indexing_report_json
    report = indexing_report_json(source)
    return StageOutput(report, json.dumps(report, indent=1) + "\n")


def _llvm(options: CompileOptions, plan: ModulePlan) -> StageOutput:
    from .targets.linking import link_kernel_modules
    from .targets.nvptx import NvptxTarget
    target = NvptxTarget(options.arch, dot_tensor_cores=options.dot_tensor_cores)
    kernel_ir, seconds, modules = {}, {}, []
    for k in plan.unique_kernels:  # a kernel several fusions launch is emitted once
        t0 = time.perf_counter()
        m = k.emit(target)
        kernel_ir[k.kernel_name] = str(m)
        seconds[k.kernel_name] = time.perf_counter() - t0
        modules.append(m)
    linked = link_kernel_modules(target, plan.module.name, modules)
    return StageOutput(LinkedKernels(kernel_ir, linked), linked, dict(kernel_ir), kernel_seconds=seconds)


def _llvm_opt(options: CompileOptions, plan: ModulePlan, llvm: LinkedKernels) -> StageOutput:
    from .targets.nvptx import toolkit
    names = [k.kernel_name for k in plan.unique_kernels]
    try:
        result = compile_to_ptx(llvm.linked, options.arch, names, opt_level=options.opt_level)
    except toolkit.ToolkitNotFound as e:  # libdevice missing: this stage and those after it cannot run here
        raise StageUnavailable(toolkit.LIBDEVICE_MISSING, e.message) from None
    return StageOutput(result, result.llvm_opt, seconds=result.seconds)


def _llvm_opt_key(options: CompileOptions, plan: ModulePlan, llvm: LinkedKernels) -> str:
    return "\n".join(k.kernel_name for k in plan.unique_kernels) + "\n" + llvm.linked


def _llvm_opt_dump(out: StageOutput) -> bytes:
    r: PtxResult = out.value
    return json.dumps({"llvm_opt": r.llvm_opt, "ptx": r.ptx}).encode()


def _llvm_opt_load(data: bytes) -> StageOutput:
    from .targets.nvptx import PtxResult
    d = json.loads(data)
    if not isinstance(d.get("llvm_opt"), str) or not isinstance(d.get("ptx"), str):
        raise ValueError("not an llvm-opt entry")
    result = PtxResult(llvm_opt=d["llvm_opt"], ptx=d["ptx"])
    return StageOutput(result, result.llvm_opt)


def _ptx(options: CompileOptions, plan: ModulePlan, optimized: PtxResult) -> StageOutput:
    ptx = optimized.ptx
    return StageOutput(ptx, ptx, split_ptx(ptx, [k.kernel_name for k in plan.unique_kernels]))


def _cubin(options: CompileOptions, plan: ModulePlan, ptx: str) -> StageOutput:
    from .codegen.launch_limits import check_plan as check_launch_limits
    from .targets.nvptx import toolkit
    if toolkit.find_ptxas() is None:  # looked up at each call: tests stand in for it
        raise StageUnavailable(toolkit.ptxas_missing_reason())
    t0 = time.perf_counter()
    result = run_ptxas(ptx, options.arch)
    check_launch_limits(plan, result.kernels)  # ptxas's registers and static shared memory
    return StageOutput(result, result.cubin, seconds={"ptxas": time.perf_counter() - t0})


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


STAGES: list[Stage] = [
    Stage("hlo", (SOURCE,), _hlo, dump_suffix="{arch}_gpu_after_optimizations.txt", xla_names=("hlo-backend",),
          description="the module after our passes (fusion), XLA's long form"),
    Stage("fusions", ("hlo",), _fusions, dump_suffix="fusions.txt",
          description="per fusion: hero, emitter and why, launch dimensions"),
    Stage("indexing", (SOURCE,), _indexing, dump_suffix="indexing.txt",
          description="indexing maps of ENTRY's root and fusions"),
    Stage("indexing-json", (SOURCE,), _indexing_json, "json", dump_suffix="indexing.json",
          description="the same maps as JSON"),
    Stage("llvm", ("fusions",), _llvm, "ll", dump_suffix="ir-no-opt.ll", xla_names=("llvm-before-optimizations",),
          description="LLVM IR as emitted (per kernel too)"),
    Stage("llvm-opt", ("fusions", "llvm"), _llvm_opt, "ll", dump_suffix="ir-with-opt.ll",
          xla_names=("llvm-after-optimizations",), description="LLVM IR after O3, libdevice linked",
          cache=StageCache(_llvm_opt_key, _llvm_opt_dump, _llvm_opt_load)),
    Stage("ptx", ("fusions", "llvm-opt"), _ptx, "ptx", dump_suffix="ptx",
          description="PTX from LLVM's NVPTX back end (per kernel too)"),
    Stage("cubin", ("fusions", "ptx"), _cubin, "cubin", binary=True, dump_suffix="cubin",
          description="the cubin from ptxas (needs ptxas; binary: -o FILE)"),
]
