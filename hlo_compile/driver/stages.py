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

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ..options import CompileOptions

if TYPE_CHECKING:  # pragma: no cover
    from ..codegen.compiler import ModulePlan
    from ..hlo import HloModule

# The stages import the code generator, LLVM and the runtime checks when they run, not when
# this table is imported: listing or naming stages (and a warm ``hlo-compile``) stays cheap.
# The three steps below are module attributes (tests count and break them here).

def plan_prepared_module(*args, **kwargs):
    from ..codegen.compiler import plan_prepared_module as plan
    return plan(*args, **kwargs)


def compile_to_ptx(*args, **kwargs):
    from ..targets.nvptx.ptx import compile_to_ptx as compile_
    return compile_(*args, **kwargs)


def run_ptxas(*args, **kwargs):
    from ..targets.nvptx.ptxas import run_ptxas as run
    return run(*args, **kwargs)


SOURCE = "source"  # the name under which stages read the input module


class StageUnavailable(Exception):
    """Raised by a stage that cannot run in this environment (the message says why, in one
    line; ``detail`` is the long form for when the stage was asked for)."""

    def __init__(self, why: str, detail: str | None = None):
        super().__init__(why)
        self.detail = detail or why


class LazyText:
    """A stage's printable form made only if it is printed or dumped (the linked modules of
    hundreds of kernels cost seconds that ``--emit=ptx`` does not need)."""

    def __init__(self, make: Callable[[], str]):
        self._make: Callable[[], str] | None = make
        self._text: str | None = None

    def __call__(self) -> str:
        if self._make is not None:
            self._text, self._make = self._make(), None
        return self._text


class StreamedText(LazyText):
    """A printable form made in pieces: ``--dump-to`` writes the pieces as they are made and
    drops them (``chunks``), so a large module's indexing maps (Llama 8B's: 177 MB of JSON,
    several times that as objects) are never held whole; printed, it is made whole."""

    def __init__(self, pieces: Callable[[], Iterable[str]]):
        super().__init__(lambda: "".join(pieces()))
        self._pieces = pieces

    def chunks(self) -> Iterator[str]:
        """The text in pieces, each made when asked for (the whole text if already made)."""
        if self._text is not None:
            return iter((self._text,))
        return iter(self._pieces())


def text_of(text: str | bytes | LazyText | None) -> str | bytes | None:
    return text() if isinstance(text, LazyText) else text


@dataclass
class StageEnv:
    """What the driver lends a stage that asks for it (``Stage.uses_env``): none of it
    changes the stage's output. ``store``: the persistent cache's per-kernel entries
    (``kernel_cache.KernelStore``; None: nothing kept); ``jobs``: processes for per-kernel
    work; ``progress(stage, done, total)``."""

    store: Any = None
    jobs: int = 1
    progress: Callable[[str, int, int], None] | None = None
    # this module's ``overrides.ModuleOverrides``: kernels whose IR or PTX comes from a file
    # (they change the output, and never go through ``store``)
    overrides: Any = None
    # ``kernel_workers.KernelWorkers``: the forked workers of this compile (None: -j 1), and
    # whether ``llvm-opt`` runs after ``llvm`` (the workers then compile kernels as they are emitted)
    workers: Any = None
    compiles_ir: bool = False

    frozen: bool = False

    def freeze(self) -> None:
        """Every object alive now out of the collector's reach until ``close`` (``gc.freeze``):
        the module and its plan live until the compile ends, and a full collection would
        rescan them each time (and, in forked workers, touch their pages)."""
        import gc
        if not self.frozen and gc.get_freeze_count() > 0:
            return  # someone else's freeze: theirs to undo
        gc.freeze()
        self.frozen = True

    def close(self) -> None:
        """Stop the workers, if any were started, and give the frozen objects back."""
        if self.workers is not None:
            self.workers.close()
        if self.frozen:
            import gc
            gc.unfreeze()
            self.frozen = False

    def report(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)


@dataclass
class StageOutput:
    value: Any                                # the artifact later stages read
    text: str | bytes | LazyText | None = None  # what --emit prints and --dump-to writes
    per_kernel: dict[str, str | bytes] = field(default_factory=dict)  # kernel name → its part
    seconds: dict[str, float] = field(default_factory=dict)         # parts of the stage
    kernel_seconds: dict[str, float] = field(default_factory=dict)  # kernel name → its time


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
    uses_env: bool = False                    # ``run`` takes ``env=StageEnv`` (cache, jobs, progress)
    # Dumped only when asked for (``run_pipeline(dump_indexing=REGEX)``, ``--dump-indexing``), and
    # then ``run`` takes ``only=`` (a compiled regex over the instructions it reports). A file of
    # ours, not one of XLA's, and the largest and slowest of a dump: a MobileNetV2 training step's
    # maps were 118 MB and most of its 126 s (ENTRY's root, a tuple of N, has 2*N*N records); an
    # XLA user looks for the module after optimizations, the LLVM IR and the PTX. Printed
    # (``--emit``), the stage runs as any other.
    dump_on_request: bool = False


@dataclass(frozen=True)
class LinkedKernels:
    """The ``llvm`` stage's artifact: each kernel's module as emitted and, for a kernel found
    in the persistent cache, its optimised IR and PTX."""

    kernel_ir: dict[str, str]
    cached: dict[str, Any] = field(default_factory=dict)  # kernel → PtxResult
    overridden: dict[str, str] = field(default_factory=dict)  # kernel → its IR override's path
    module_ir: str | None = None  # the whole module's IR from --xla_gpu_llvm_ir_file


@dataclass(frozen=True)
class OptimizedKernels:
    """The ``llvm-opt`` stage's artifact: the module's PTX (one header, each kernel's
    ``.entry``), each kernel's optimised IR, and how many came from the cache."""

    ptx: str
    optimized: dict[str, str]
    text: LazyText
    from_cache: int = 0
    renamed: int = 0  # of those, found under their canonical IR (``kernel_names``), not their names

    @property
    def llvm_opt(self) -> str:
        """The optimised kernel modules linked into one."""
        return self.text()


def _hlo(options: CompileOptions, source: HloModule) -> StageOutput:
    from ..codegen.compiler import prepare_module
    module = prepare_module(source, options)
    return StageOutput(module, LazyText(lambda: module.to_text("long")))


def _fusions(options: CompileOptions, module: HloModule) -> StageOutput:
    from ..codegen.launch_limits import check_plan as check_launch_limits
    from .runnable import check_runnable
    from ..targets import reserved_kernel_symbols
    # kernels keep their names on every target: none may take a symbol some target links
    plan = plan_prepared_module(module, options, reserved_kernel_symbols())
    check_runnable(plan.computations or [plan.module.entry], options.generated_call_families())
    check_launch_limits(plan)  # block, grid, static shared memory: before any code is made
    # the text, the fusion report, is made by the driver from the compile's one cost estimate
    # (pipeline._report_text, PipelineResult.cost)
    return StageOutput(plan, None)


def _indexing(options: CompileOptions, source: HloModule, *, only=None) -> StageOutput:
    from ..indexing.report import indexing_report_text_pieces
    text = StreamedText(lambda: indexing_report_text_pieces(source, only))
    return StageOutput(text, text)


def _indexing_json(options: CompileOptions, source: HloModule, *, only=None) -> StageOutput:
    from ..indexing.report import indexing_report_json_pieces
    text = StreamedText(lambda: itertools.chain(indexing_report_json_pieces(source, only), ("\n",)))
    return StageOutput(text, text)


def _llvm(options: CompileOptions, plan: ModulePlan, *, env: StageEnv | None = None) -> StageOutput:
    from ..targets.nvptx import NvptxTarget
    env = env or StageEnv()
    target = NvptxTarget(options.arch, dot_tensor_cores=options.dot_tensor_cores)
    kernel_ir, seconds, cached = {}, {}, {}
    unique = plan.unique_kernels
    ov = env.overrides
    overridden = {k.kernel_name for k in unique if ov and (ov.kernels.get(k.kernel_name) or ov.module_ir)}
    hits = env.store.find_named(unique, skip=overridden) if env.store is not None else {}  # overrides: never kept
    for k in unique:
        hit = hits.get(k.kernel_name)
        if hit is not None:
            kernel_ir[k.kernel_name], cached[k.kernel_name] = hit
    todo = [k for k in unique if k.kernel_name not in hits]
    workers = env.workers.workers_for(len(todo)) if env.workers is not None and not env.workers.started else 0
    if workers:
        _emit_in_workers(env, target, todo, workers, overridden, kernel_ir, seconds, len(unique) - len(todo))
    for k in todo:  # a kernel several fusions launch is emitted once
        if k.kernel_name not in kernel_ir:  # (not by workers; one that failed there raises its error here)
            t0 = time.perf_counter()
            kernel_ir[k.kernel_name] = str(k.emit(target))
            seconds[k.kernel_name] = time.perf_counter() - t0
            env.report("llvm", len(kernel_ir), len(unique))
    module_ir, overridden = _apply_overrides(ov, kernel_ir) if overridden else (None, {})

    def linked() -> str:
        if module_ir is not None:  # XLA's --xla_gpu_llvm_ir_file: the file is the module
            return module_ir
        from ..targets.linking import link_kernel_modules
        return link_kernel_modules(target, plan.module.name, [kernel_ir[k.kernel_name] for k in unique])
    return StageOutput(LinkedKernels(kernel_ir, cached, overridden, module_ir), LazyText(linked),
                       dict(kernel_ir), kernel_seconds=seconds)


def _emit_in_workers(env: StageEnv, target, todo: list, n: int, overridden: set[str], kernel_ir: dict,
                     seconds: dict, cached: int) -> None:
    """``todo``'s kernels emitted by ``n`` of ``env.workers`` into ``kernel_ir`` (in the kernels' order;
    a kernel that failed there is left out) and, where ``llvm-opt`` follows, each one the cache
    does not hold compiled there as soon as it is emitted, under its canonical names as
    ``_compile_fresh`` compiles it."""
    workers = env.workers

    def prefetch(name: str, text: str, c) -> None:
        if c is None or name in overridden:  # compiled under its own names, or replaced by a file
            return
        if env.store is not None and env.store.find_canonical({name: c}):
            return
        workers.prefetch(c.kernel, c.text)

    env.freeze()  # the plan out of the workers' collections too: its pages stay shared with this process
    got = workers.emit(target, todo, n, canonical=env.compiles_ir,
                       progress=lambda done, total: env.report("llvm", cached + done, cached + total),
                       prefetch=prefetch if env.compiles_ir else None)
    for k, (text, t) in zip(todo, got):
        if text is None:
            break  # emitted again in order by the caller, which raises its error
        kernel_ir[k.kernel_name], seconds[k.kernel_name] = text, t


def _signature(kernel_ir: str, name: str) -> list[str]:
    """The parameter types of kernel ``name`` as we emitted it."""
    import llvmlite.binding as llvm
    return [str(a.type) for a in llvm.parse_assembly(kernel_ir).get_function(name).arguments]


def _apply_overrides(ov, kernel_ir: dict[str, str]) -> tuple[str | None, dict[str, str]]:
    """Put the overrides' IR (``driver/overrides.py``) in place of the emitted IR in ``kernel_ir``,
    each checked to define the kernel with its signature: (the whole module's IR or None,
    kernel → override path)."""
    from .overrides import check_ir
    if ov.module_ir is not None:
        check_ir(ov.module_ir, {n: _signature(text, n) for n, text in kernel_ir.items()})
        for n in kernel_ir:
            kernel_ir[n] = ov.module_ir.text
        return ov.module_ir.text, {n: str(ov.module_ir.path) for n in kernel_ir}
    out = {}
    for n in kernel_ir:
        f = ov.kernels.get(n)
        if f is None or f.kind != "ll":
            continue
        check_ir(f, {n: _signature(kernel_ir[n], n)})
        kernel_ir[n], out[n] = f.text, str(f.path)
    return None, out


def _llvm_opt(options: CompileOptions, plan: ModulePlan, llvm: LinkedKernels, *,
              env: StageEnv | None = None) -> StageOutput:
    """Each kernel optimised and turned into PTX on its own (``targets/nvptx/kernels.py``:
    in ``env.jobs`` processes when there are many), the kernels the cache holds skipped;
    the stage's value is the module's PTX (one header, every kernel's ``.entry``) and, when
    printed, the optimised modules linked into one. A kernel goes through LLVM under its
    canonical names (``kernel_names``), which key its entry, so a fusion renamed between
    two compiles finds the other's; it is compiled under its own names only where the
    renaming could not be exact."""
    from ..targets.nvptx import toolkit
    from ..targets.nvptx.kernels import link_optimized, merge_ptx
    env = env or StageEnv()
    names = [k.kernel_name for k in plan.unique_kernels]
    if llvm.module_ir is not None or (env.overrides and env.overrides.module_ptx is not None):
        return _whole_module_override(options, plan, llvm, env.overrides)
    todo = [n for n in names if n not in llvm.cached]
    t0 = time.perf_counter()
    canonical = _canonical_kernels(llvm, todo, env)
    canonical.update({n: None for n in llvm.overridden})  # compiled under its own names, never cached
    found = env.store.find_canonical(canonical) if env.store is not None else {}
    results, fresh = dict(llvm.cached), []
    for n in todo:
        got = found.get(n)
        restored = None if got is None else _restored(canonical[n], *got)
        if restored is not None:
            results[n] = restored
        else:
            fresh.append(n)
    try:
        first, direct = _compile_fresh(options, env, llvm, canonical, fresh)
        again = dict(zip(direct, _compile(options, env, [(n, llvm.kernel_ir[n]) for n in direct])))
    except toolkit.ToolkitNotFound as e:  # libdevice missing: this stage and those after it cannot run here
        raise StageUnavailable(toolkit.LIBDEVICE_MISSING, e.message) from None
    for n, r in zip(fresh, first):
        results[n] = again.get(n, r)
    compiled = [r for r in first if r is not None] + list(again.values())
    kept = [n for n in todo if env.store is not None and env.store.kept_by_name(n)]
    for n in kept:
        env.store.put_named(n, llvm.kernel_ir[n], results[n])
    if kept:
        env.store.flush()
    seconds = {part: sum(r.seconds.get(part, 0.0) for r in compiled) for part in ("parse", "link", "opt", "emit")}
    seconds["compile"] = time.perf_counter() - t0
    _ptx_overrides(env.overrides, results, names)
    if names:
        ptx = merge_ptx([results[n].ptx for n in names], names)
        text = LazyText(lambda: link_optimized([results[n].llvm_opt for n in names], plan.module.name))
    else:  # no kernel (only library calls, fft, tuples...): LLVM's PTX of an empty module, which ptxas takes
        from llvmlite import ir
        empty = compile_to_ptx(ir.Module(name=plan.module.name), options.arch, [], options.opt_level)
        ptx, text = empty.ptx, LazyText(lambda: empty.llvm_opt)
    value = OptimizedKernels(ptx, {n: results[n].llvm_opt for n in names}, text, len(names) - len(fresh),
                             renamed=len(todo) - len(fresh))
    return StageOutput(value, text, seconds=seconds)


def _ptx_overrides(ov, results: dict, names: list[str]) -> None:
    """Each kernel's PTX override (``driver/overrides.py``) in place of its compiled PTX, checked to
    have the kernel's ``.entry`` with as many parameters."""
    if not ov:
        return
    from .overrides import check_ptx, ptx_params
    from ..targets.nvptx.ptx import PtxResult
    for n in names:
        f = ov.ptx(n)
        if f is not None:
            check_ptx(f, {n: ptx_params(results[n].ptx, n)})
            results[n] = PtxResult(llvm_opt=results[n].llvm_opt, ptx=f.text)


def _whole_module_override(options: CompileOptions, plan: ModulePlan, llvm: LinkedKernels, ov) -> StageOutput:
    """XLA's --xla_gpu_llvm_ir_file (the file's module optimised and compiled as one) or
    --xla_gpu_ptx_file (the file is the module's PTX; the optimised IR is ours): no cache."""
    from ..codegen.errors import CodegenError
    from .overrides import OverrideError, check_ptx, ptx_params
    from ..targets.nvptx import toolkit
    names = [k.kernel_name for k in plan.unique_kernels]
    t0 = time.perf_counter()
    source = llvm.module_ir
    if source is None:  # a PTX file: our IR compiled for the optimised form and the signatures
        from ..targets.linking import link_kernel_modules
        from ..targets.nvptx import NvptxTarget
        source = link_kernel_modules(NvptxTarget(options.arch, dot_tensor_cores=options.dot_tensor_cores),
                                     plan.module.name, [llvm.kernel_ir[n] for n in names])
    try:
        r = compile_to_ptx(source, options.arch, names, options.opt_level)
    except toolkit.ToolkitNotFound as e:
        raise StageUnavailable(toolkit.LIBDEVICE_MISSING, e.message) from None
    except CodegenError as e:
        if llvm.module_ir is None:
            raise
        raise OverrideError(f"--xla_gpu_llvm_ir_file {ov.module_ir.path}: {e.message}") from None
    ptx = r.ptx
    if ov is not None and ov.module_ptx is not None:
        check_ptx(ov.module_ptx, {n: ptx_params(r.ptx, n) for n in names})
        ptx = ov.module_ptx.text
    text = LazyText(lambda: r.llvm_opt)
    value = OptimizedKernels(ptx, {n: r.llvm_opt for n in names}, text, 0)
    return StageOutput(value, text, seconds={**r.seconds, "compile": time.perf_counter() - t0})


def _compile_fresh(options: CompileOptions, env: StageEnv, llvm: LinkedKernels, canonical: dict,
                   fresh: list[str]) -> tuple[list, list[str]]:
    """The ``PtxResult`` of each kernel of ``fresh`` under its names, compiled under canonical
    names where it has them (their entries written; kernels of the same canonical IR, e.g. 74
    distinct of ResNet-50's 81, go through LLVM once), and the kernels whose result could not
    be named back (to compile under their names)."""
    from ..codegen.errors import CodegenError
    unique: dict[str, int] = {}  # canonical IR → its place in ``jobs``
    jobs, slot = [], []
    for n in fresh:
        c = canonical[n]
        key = c.text if c is not None else "\0" + n
        if key not in unique:
            unique[key] = len(jobs)
            jobs.append((c.kernel, c.text) if c is not None else (n, llvm.kernel_ir[n]))
        slot.append(unique[key])
    try:
        done = _compile(options, env, jobs)
    except CodegenError:  # LLVM's message would name placeholders: again under the kernels' names, to raise it
        return _compile(options, env, [(n, llvm.kernel_ir[n]) for n in fresh]), []
    out, direct, timed = [], [], set()
    for n, i in zip(fresh, slot):
        r, c = done[i], canonical[n]
        if c is not None and env.store is not None:
            env.store.put_canonical(n, r)
        seconds = r.seconds if i not in timed else {}  # a shared compile's time counted once
        timed.add(i)
        named = r if c is None else _restored(c, r.llvm_opt, r.ptx, seconds)
        if named is None:  # LLVM's output under canonical names cannot be named back exactly
            direct.append(n)
        out.append(named)
    return out, direct


def _canonical_kernels(llvm: LinkedKernels, todo: list[str], env: StageEnv) -> dict:
    """Each kernel of ``todo``: its IR under canonical names (``kernel_names.CanonicalKernel``),
    or None where it is compiled under its own (made by the workers that emitted it, if any)."""
    from .kernel_names import canonical_ir
    made = env.workers.canonical if env.workers is not None else {}
    out = {}
    for n in todo:
        text, c = made.get(n, (None, None))
        out[n] = c if text is not None and text is llvm.kernel_ir[n] else canonical_ir(llvm.kernel_ir[n], n)
    return out


def _restored(c, llvm_opt: str, ptx: str, seconds: dict | None = None):
    """A ``PtxResult`` of LLVM's output for canonical kernel ``c`` under the kernel's names, or
    None where they cannot be put back exactly."""
    from .kernel_names import restore_ir, restore_ptx
    from ..targets.nvptx.ptx import PtxResult
    named_ir = restore_ir(llvm_opt, c)
    named_ptx = None if named_ir is None else restore_ptx(ptx, c)
    return None if named_ptx is None else PtxResult(llvm_opt=named_ir, ptx=named_ptx, seconds=seconds or {})


def _compile(options: CompileOptions, env: StageEnv, kernels: list[tuple[str, str]]) -> list:
    """``compile_kernels`` on ``(kernel name, IR)`` pairs, reporting progress."""
    from ..targets.nvptx.kernels import compile_kernels
    if not kernels:
        return []
    if env.workers is not None and env.workers.started:  # the workers that emitted them
        return env.workers.compile(kernels, progress=lambda done, total: env.report("llvm-opt", done, total))
    return compile_kernels(kernels, options.arch, options.opt_level, jobs=env.jobs,
                           progress=lambda done, total: env.report("llvm-opt", done, total), compile_one=compile_to_ptx)


def _ptx(options: CompileOptions, plan: ModulePlan, optimized: OptimizedKernels) -> StageOutput:
    ptx = optimized.ptx
    return StageOutput(ptx, ptx, split_ptx(ptx, [k.kernel_name for k in plan.unique_kernels]))


def _cubin(options: CompileOptions, plan: ModulePlan, ptx: str) -> StageOutput:
    from ..codegen.launch_limits import check_plan as check_launch_limits
    from ..targets.nvptx import toolkit
    if toolkit.find_ptxas() is None:  # looked up at each call: tests stand in for it
        raise StageUnavailable(toolkit.ptxas_missing_reason())
    t0 = time.perf_counter()
    result = run_ptxas(ptx, options.arch)
    check_launch_limits(plan, result.kernels)  # ptxas's registers and static shared memory
    return StageOutput(result, result.cubin, seconds={"ptxas": time.perf_counter() - t0})


def split_ptx(ptx: str, kernels: list[str]) -> dict[str, str]:
    """One self-contained PTX text per kernel: the module's header, its declarations and
    helper functions (libdevice's, shared arrays), and that kernel's ``.entry`` alone."""
    from ..targets.nvptx.ptx_text import ptx_items
    header, items, trailer = ptx_items(ptx)
    shared = [text for name, text in items if name is None]
    entries = {name: text for name, text in items if name is not None}
    return {k: "".join(header) + "".join(shared) + entries[k] + trailer for k in kernels if k in entries}


STAGES: list[Stage] = [
    Stage("hlo", (SOURCE,), _hlo, dump_suffix="{arch}_gpu_after_optimizations.txt", xla_names=("hlo-backend",),
          description="the module after our passes (fusion), XLA's long form"),
    Stage("fusions", ("hlo",), _fusions, dump_suffix="fusions.txt",
          description="per fusion: hero, emitter and why, launch dimensions"),
    Stage("indexing", (SOURCE,), _indexing, dump_suffix="indexing.txt",
          description="indexing maps of ENTRY's root and fusions", dump_on_request=True),
    Stage("indexing-json", (SOURCE,), _indexing_json, "json", dump_suffix="indexing.json",
          description="the same maps as JSON", dump_on_request=True),
    Stage("llvm", ("fusions",), _llvm, "ll", dump_suffix="ir-no-opt.ll", xla_names=("llvm-before-optimizations",),
          description="LLVM IR as emitted (per kernel too)", uses_env=True),
    Stage("llvm-opt", ("fusions", "llvm"), _llvm_opt, "ll", dump_suffix="ir-with-opt.ll",
          xla_names=("llvm-after-optimizations",), description="LLVM IR after O3, libdevice linked",
          uses_env=True),
    Stage("ptx", ("fusions", "llvm-opt"), _ptx, "ptx", dump_suffix="ptx",
          description="PTX from LLVM's NVPTX back end (per kernel too)"),
    Stage("cubin", ("fusions", "ptx"), _cubin, "cubin", binary=True, dump_suffix="cubin",
          description="the cubin from ptxas (needs ptxas; binary: -o FILE)"),
]
