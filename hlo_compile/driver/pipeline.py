"""The compilation pipeline as data: one driver loop over named stages (DESIGN §2).

The stages are in ``driver/stages.py`` (``hlo`` → ``fusions`` → ``indexing`` → ``llvm`` →
``llvm-opt`` → ``ptx`` → ``cubin``), each a function from the artifacts it names to a new one.
``run_pipeline`` is the only loop that runs them, for ``hlo-compile`` and ``hlo-run`` alike:
it picks the stages the caller needs (the one to print, a platform's own last stages such as
the host JIT or loading PTX on the GPU, or all of them for a dump), runs each once in order,
times it, and alone prints (``artifacts``), dumps (``driver/dump.py``, XLA's names) and caches
(per kernel: a ``KernelStore`` lent to the stages that ask; ``compile_source``, hlo-compile's
entry point, keeps and reads whole results). The cost model runs once per compile
(``PipelineResult.cost``): the fusion report and summary.json read the same estimate, made in
a dump after ptxas has given the kernels' registers. A stage that cannot run here (no ptxas
for ``cubin``) is skipped with the reason, and so is every stage after it that reads its
artifact; asking for it is an error naming the reason. hlo-opt's stage names
(``--stage=llvm-before-optimizations``...) are aliases of ours (``STAGE_ALIASES``).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .dump import (BEFORE_OPTIMIZATIONS, DumpDirectory, DumpWriter, as_dump_directory, safe_file_name,
                   xla_arch_name)
from ..hlo.errors import HloError, HloUnsupportedError
from .kernel_cache import KernelCache, KernelStore
from ..options import CompileOptions
from .stages import (SOURCE, STAGES, LazyText, OptimizedKernels, Stage, StageEnv, StageOutput, StageUnavailable,
                     StreamedText, split_ptx, text_of)

if TYPE_CHECKING:  # pragma: no cover
    from ..codegen.compiler import ModulePlan
    from ..codegen.model.perf_model import ModuleEstimate
    from ..hlo import HloModule

__all__ = ["BEFORE_OPTIMIZATIONS", "CompileOptions", "CompileRecord", "DumpDirectory", "DumpWriter", "PipelineResult",
           "ResultReplayError", "STAGES", "STAGE_ALIASES", "STAGE_NAMES", "Stage", "StageOutput", "StageUnavailable",
           "UNAVAILABLE_STAGES", "compile_source", "dump_source", "result_flags", "run_pipeline", "safe_file_name",
           "split_ptx", "stage", "summary", "xla_arch_name"]

STAGE_NAMES = [s.name for s in STAGES]
# hlo-opt's stage names (``--stage=``) → ours. hlo-opt's bare ``llvm`` is after optimizations;
# ours is the IR as emitted, so an XLA user's ``llvm`` is spelled ``llvm-after-optimizations``.
STAGE_ALIASES: dict[str, str] = {alias: s.name for s in STAGES for alias in s.xla_names}
# hlo-opt stages with no counterpart here, and what to use instead
UNAVAILABLE_STAGES: dict[str, str] = {
    "buffer-assignment": "hlo-run plans buffers at run time; there is no buffer-assignment dump",
    "html": "there is no HTML rendering; use --emit=hlo",
}


def stage(name: str) -> Stage:
    wanted = STAGE_ALIASES.get(name, name)
    for s in STAGES:
        if s.name == wanted:
            return s
    if name in UNAVAILABLE_STAGES:
        raise HloUnsupportedError(f"stage '{name}' is not produced here: {UNAVAILABLE_STAGES[name]}")
    raise HloUnsupportedError(f"unknown stage '{name}' (stages: {', '.join(STAGE_NAMES)}; "
                              f"hlo-opt's names: {', '.join(sorted(STAGE_ALIASES))})")


class Artifacts(dict):
    """stage → printable form; a form made only when read (``stages.LazyText``) is made on
    first access, through any of the dict's ways in."""

    def __getitem__(self, key):
        value = super().__getitem__(key)
        if isinstance(value, LazyText):
            value = value()
            super().__setitem__(key, value)
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def values(self):
        return [self[k] for k in self]

    def items(self):
        return [(k, self[k]) for k in self]


@dataclass
class PipelineResult:
    """Everything one run of the stages produced, and how long each took."""

    source: HloModule
    options: CompileOptions
    values: dict[str, Any] = field(default_factory=dict)            # stage → its artifact
    artifacts: dict[str, str | bytes] = field(default_factory=Artifacts)  # stage → printable form
    skipped: dict[str, str] = field(default_factory=dict)           # stage → why it could not run
    dump_errors: dict[str, str] = field(default_factory=dict)       # dump-only stage → its error
    module_seconds: dict[str, float] = field(default_factory=dict)  # stage (and its parts) → seconds
    kernel_seconds: dict[str, dict[str, float]] = field(default_factory=dict)  # kernel → stage → s
    cache_hits: list[str] = field(default_factory=list)             # stages read from the persistent cache
    writer: DumpWriter | None = None                                # the dump's files, when dumping
    summary: dict | None = None                                     # summary.json, when dumping
    overrides: dict[str, str] = field(default_factory=dict)         # kernel → the override file it came from
    _cost: Any = field(default=None, repr=False)                    # ``cost()``'s estimate, once made

    def cost(self, plan: ModulePlan | None = None) -> ModuleEstimate | None:
        """The cost model's estimate of the planned kernels and library calls (of ``plan``, by
        default the ``fusions`` stage's), made once, on first use, and read by both the fusion
        report and summary.json: with ptxas's registers and static shared memory when the
        ``cubin`` stage has run by then (in a dump the driver asks for it only after our
        stages), else with the model's own figures. None without a plan."""
        if self._cost is None:
            plan = plan if plan is not None else self.values.get("fusions")
            if plan is None:
                return None
            from ..codegen.model.perf_model import cost_device, estimate_module
            cubin = self.values.get("cubin")
            self._cost = estimate_module(plan, cost_device(self.options.device, plan.device),
                                         cubin.kernels if cubin is not None else {}, self.options.dot_tensor_cores)
        return self._cost

    @property
    def module(self) -> HloModule | None:
        """The module after the passes (the ``hlo`` stage)."""
        return self.values.get("hlo")

    @property
    def plan(self) -> ModulePlan | None:
        """The kernels' plan (the ``fusions`` stage)."""
        return self.values.get("fusions")


def _closure(wanted: Sequence[Stage], candidates: Sequence[Stage]) -> list[Stage]:
    """``wanted`` and every stage they read from, transitively, in ``candidates``' order."""
    by_name = {s.name: s for s in candidates}
    needed: set[str] = set()
    todo = [s.name for s in wanted]
    while todo:
        name = todo.pop()
        if name in needed or name not in by_name:
            continue
        needed.add(name)
        todo.extend(by_name[name].needs)
    return [s for s in candidates if s.name in needed]


def run_pipeline(module: HloModule, options: CompileOptions, *, emit: str | None = None,
                 dump_to: Path | DumpDirectory | None = None, module_index: int = 0,
                 then: Sequence[Stage] = (), cache: KernelCache | None = None, jobs: int = 1,
                 progress=None, overrides=None, dump_indexing: str | re.Pattern | None = None) -> PipelineResult:
    """Run the stages in order, each once.

    ``emit``: the stage whose artifact is wanted (an error if it cannot run here). ``then``:
    a platform's stages to run after ours (``Platform.kernel_stage``: JIT or load the
    kernels); their artifacts are the goal, and an error in a stage that only feeds the dump
    does not fail the run: it is kept in ``dump_errors``. With neither, every stage runs.
    With ``dump_to``, every stage runs and each is written as it completes, as module number
    ``module_index`` of the dump; ``summary.json`` once the dumped stages are done. Stages
    that work per kernel (``Stage.uses_env``) keep an entry per kernel in ``cache``, use ``jobs`` processes and
    call ``progress(stage, done, total)`` as kernels are done (and ``progress(stage, 0, 0)``
    as each stage begins). ``overrides`` (``overrides.OverrideSpec``): kernels whose IR or PTX
    comes from files, bound to this module once it is planned. ``dump_indexing``: the stages
    dumped only on request (``Stage.dump_on_request``: the indexing maps) are dumped, for the
    instructions whose name this regex finds ("" or ".*": all); None, the default: they are
    neither run nor written for a dump unless ``emit`` or ``then`` asks for them."""
    result = PipelineResult(module, options)
    env = StageEnv(KernelStore(cache, options) if cache is not None else None, jobs, progress)
    if jobs > 1:
        from .kernel_workers import KernelWorkers
        env.workers = KernelWorkers(jobs, options.arch, options.opt_level)
    wanted = stage(emit) if emit else None
    all_stages = [*STAGES, *then]
    goals = _closure(list(then) or ([wanted] if wanted else STAGES), all_stages)
    dump = as_dump_directory(dump_to)
    order = all_stages if dump is not None else goals
    only = None
    if dump is not None and dump_indexing is None:  # ours, large and slow: only when asked for
        asked = _closure(list(then) or ([wanted] if wanted else []), all_stages)
        order = [s for s in order if not s.dump_on_request or s in asked]
    elif dump is not None and dump_indexing:
        only = re.compile(dump_indexing) if isinstance(dump_indexing, str) else dump_indexing
    required = {s.name for s in (goals if then else order)}
    env.compiles_ir = any(s.name == "llvm-opt" for s in order)
    if dump is not None:
        result.writer = dump.module(module, module_index, options.arch)
    values = result.values
    values[SOURCE] = module
    details: dict[str, str] = {}  # skipped stage → the long form of why

    def cannot_run(s: Stage, why: str, detail: str) -> None:
        if s is wanted or (then and s.name in required):
            raise HloUnsupportedError(f"stage '{s.name}' is not available: {detail}")
        result.skipped[s.name], details[s.name] = why, detail

    # the fusion report reads the cost model's one estimate (``PipelineResult.cost``): in a dump
    # it is made and written with summary.json, once ptxas's registers are known
    report: list[tuple[Stage, StageOutput]] = []
    finished = False
    try:
        for s in order:
            if dump is not None and s.dump_suffix is None and result.summary is None:
                _summarise(dump, result, report, REPORT_STAGE in required)  # before the platform's stages
            missing = next((n for n in s.needs if n not in values), None)
            if missing in result.skipped:  # an earlier stage could not run here: nor can this one
                cannot_run(s, result.skipped[missing], details[missing])
                continue
            if missing is not None:  # an earlier stage failed (dump only)
                result.skipped[s.name] = details[s.name] = f"stage '{missing}' failed"
                continue
            t0 = time.perf_counter()
            if progress is not None:
                progress(s.name, 0, 0)  # a stage begins
            try:
                out = _run_stage(s, options, [values[n] for n in s.needs], result, env,
                                 only if s.dump_on_request and s is not wanted else None)
                deferred = s.name == REPORT_STAGE
                if deferred:
                    out.text = _report_text(result, out.value)
                if overrides is not None and s.name == "fusions":
                    _bind_overrides(overrides, module, module_index, out, result, env)
                deferred = deferred and result.writer is not None  # made with summary.json
                streamed = (isinstance(out.text, StreamedText) and result.writer is not None
                            and s.dump_suffix is not None and s is not wanted)
                if streamed:  # dumped piece by piece, never whole: here, where its failure is this stage's
                    result.writer.write(s.dump_suffix, out.text.chunks())
                elif isinstance(out.text, LazyText) and (result.writer is not None or s is wanted) and not deferred:
                    out.text()  # printed or dumped: made here, where its failure is this stage's
            except StageUnavailable as e:
                cannot_run(s, str(e), e.detail)
                continue
            except HloError as e:
                if s.name in required:
                    raise
                result.dump_errors[s.name] = e.message
                continue
            _record(result, s, out, time.perf_counter() - t0)
            if s.name == "hlo":  # the module lives until the compile ends: no collection rescans it
                env.freeze()
            values[s.name] = out.value
            if deferred:
                report.append((s, out))
            elif result.writer is not None and s.dump_suffix is not None and not streamed:
                _write_stage(result.writer, s, out)
        finished = True
    finally:
        env.close()
        if dump is not None and result.summary is None:  # (after a failure: what there is, never a second error)
            _summarise(dump, result, report, finished and REPORT_STAGE in required)
    return result


REPORT_STAGE = "fusions"  # the stage whose text is the fusion report (with the cost model's estimate)


def run_kernel_stages(plan: ModulePlan, stage_name: str, options: CompileOptions, cache: KernelCache | None = None,
                      jobs: int = 1) -> Any:
    """The text of stage ``stage_name`` made from an already planned ``plan`` (``hlo-compile
    --fusion=NAME``: the module's plan cut down to one kernel): the stages after ``fusions`` it
    needs, in ``STAGES`` order, with a ``KernelStore`` of ``cache`` as ``run_pipeline`` lends it.
    HloUnsupportedError when one of them cannot run here."""
    by_name = {s.name: s for s in STAGES}
    needed: set[str] = set()
    todo = [stage_name]
    while todo:
        n = todo.pop()
        if n in needed or n not in by_name or n in (REPORT_STAGE, "hlo"):
            continue
        needed.add(n)
        todo.extend(by_name[n].needs)
    env = StageEnv(KernelStore(cache, options) if cache is not None else None, jobs)
    values: dict[str, Any] = {REPORT_STAGE: plan}
    text = None
    for s in STAGES:
        if s.name not in needed:
            continue
        inputs = [values[n] for n in s.needs]
        try:
            out = s.run(options, *inputs, env=env) if s.uses_env else s.run(options, *inputs)
        except StageUnavailable as e:
            raise HloUnsupportedError(f"stage '{s.name}' is not available: {e.detail}") from None
        values[s.name] = out.value
        text = out.text
    return text


def _report_text(result: PipelineResult, plan: ModulePlan) -> LazyText:
    """The fusion report of ``plan`` with ``result.cost``'s estimate, made when first read."""
    def make() -> str:
        from ..codegen.report import fusion_report_text
        return fusion_report_text(plan, result.cost(plan))
    return LazyText(make)


def _bind_overrides(spec, module: HloModule, index: int, out: StageOutput, result: PipelineResult,
                   env: StageEnv) -> None:
    """This module's overrides, checked against its kernels (``driver/overrides.py``); the fusions
    text names the kernels they replace."""
    env.overrides = spec.bind(module, index, out.value)
    result.overrides = env.overrides.sources([k.kernel_name for k in out.value.unique_kernels])
    if result.overrides and out.text is not None:
        from .overrides import describe
        report, lines = out.text, describe(result.overrides).replace("; ", "\n")
        out.text = LazyText(lambda: text_of(report) + "\n" + lines + "\n")


def _run_stage(s: Stage, options: CompileOptions, inputs: list, result: PipelineResult,
               env: StageEnv, only: re.Pattern | None = None) -> StageOutput:
    """``s`` on ``inputs`` (a per-kernel stage with ``env``: its cache, workers and progress;
    a stage dumped on request with ``only``: the instructions it reports)."""
    if only is not None:
        return s.run(options, *inputs, only=only)
    if s.uses_env:
        out = s.run(options, *inputs, env=env)
        v = out.value
        if isinstance(v, OptimizedKernels) and v.optimized and v.from_cache == len(v.optimized):
            result.cache_hits.append(s.name)  # every kernel from the cache
        return out
    return s.run(options, *inputs)


def _record(result: PipelineResult, s: Stage, out: StageOutput, seconds: float) -> None:
    result.module_seconds[s.name] = seconds
    result.module_seconds.update(out.seconds)
    for kernel, t in out.kernel_seconds.items():
        result.kernel_seconds.setdefault(kernel, {})[s.name] = t
    if out.text is not None and s.dump_suffix is not None:
        result.artifacts[s.name] = out.text


def _write_stage(writer: DumpWriter, s: Stage, out: StageOutput) -> None:
    if out.text is None:
        return
    writer.write(s.dump_suffix, text_of(out.text))
    for kernel, text in out.per_kernel.items():
        writer.write(s.dump_suffix, text, kernel=kernel)


def _summarise(dump: DumpDirectory, result: PipelineResult, report: list[tuple[Stage, StageOutput]],
               strict: bool) -> None:
    """The fusion report held back until now (``report``: made here, after ptxas, with the
    estimate summary.json reads; its error raised when ``strict``, else kept in
    ``dump_errors``), then summary.json."""
    while report:
        s, out = report.pop()
        try:
            _write_stage(result.writer, s, out)
        except HloError as e:
            if strict:
                raise
            result.dump_errors[s.name] = e.message
    result.summary = summary(result)
    dump.add_summary(result.writer, result.summary)


def dump_source(module: HloModule, dump_to: Path | DumpDirectory, module_index: int = 0,
                arch: str = "sm_80") -> Path:
    """Only the input module, as ``module_NNNN.<name>.before_optimizations.txt`` (runs that
    compile nothing: the interpreter)."""
    writer = as_dump_directory(dump_to).module(module, module_index, arch)
    return next(iter(writer.written.values()))


def summary(result: PipelineResult) -> dict:
    """summary.json (DESIGN §5); its estimates are ``result.cost()``, the fusion report's."""
    from ..codegen.report import FFT_LIBRARY, FFT_REASON, fft_calls
    from ..hlo.calls.library_targets import library_reason
    kernels = []
    cubin = result.values.get("cubin")
    resources = cubin.kernels if cubin is not None else {}
    plan = result.values.get("fusions")
    cost = result.cost()
    # each fusion's own estimate (a reused kernel's figures under the fusion's buffer names)
    own_estimate = {e.fusion: e for e in cost.kernels} if cost is not None else {}
    not_estimated = dict(cost.not_estimated) if cost is not None else {}  # name → why (left out of the total)
    for k in (plan.kernels if plan is not None else []):
        a = k.analysis
        res = resources.get(k.kernel_name)
        est = own_estimate.get(k.fusion.name)
        kernels.append({
            "fusion": k.fusion.name, "kernel": k.kernel_name, "hero": ", ".join(h.name for h in a.heroes),
            "emitter": a.emitter, "variant": a.variant, "reason": a.reason,
            "grid": list(k.launch.grid), "block": list(k.launch.block), **k.spec.summary_fields(),
            "in_place": bool(k.donated), "reuses": k.reuses,
            "shared_bytes": k.launch.shared_bytes,
            "registers": res.registers if res else None,
            "spills": (res.spill_stores_bytes + res.spill_loads_bytes) if res else None,
            "stage_seconds": result.kernel_seconds.get(k.kernel_name, {}),
            **({"override": result.overrides[k.kernel_name]} if k.kernel_name in result.overrides else {}),
            **(est.summary_fields() if est is not None else
               {"estimated_us": None, "not_estimated": not_estimated.get(k.kernel_name)}),
        })
    for call in (plan.library_calls if plan is not None else []):
        target = call.attr("custom_call_target")
        call_est = cost.for_call(call.name) if cost is not None else None
        kernels.append({"fusion": call.name, "kernel": None, "hero": call.name, "emitter": "library",
                        "variant": None, "library": target, "reason": library_reason(target),
                        "grid": None, "block": None, "shared_bytes": 0, "registers": None, "spills": None,
                        "stage_seconds": {},
                        **(call_est.summary_fields() if call_est is not None else
                           {"estimated_us": None, "not_estimated": not_estimated.get(call.name)})})
    for fft in (fft_calls(plan) if plan is not None else []):
        kernels.append({"fusion": fft.name, "kernel": None, "hero": fft.name, "emitter": "library",
                        "variant": None, "library": FFT_LIBRARY, "reason": FFT_REASON,
                        "grid": None, "block": None, "shared_bytes": 0, "registers": None, "spills": None,
                        "stage_seconds": {}, "estimated_us": None, "not_estimated": not_estimated.get(fft.name)})
    return {"module": result.source.name, "arch": result.options.arch, "kernels": kernels,
            "stages": list(result.artifacts), "skipped_stages": result.skipped,
            "stage_seconds": {k: round(v, 6) for k, v in result.module_seconds.items()},
            "cost_model": cost.summary_fields() if cost is not None else None}


# ---- a whole compile, through the result cache --------------------------------------------------

@dataclass
class CompileRecord:
    """What a compile of one input prints and writes, kept whole in the cache for a warm run
    (``compile_source``)."""

    outputs: list = field(default_factory=list)    # the printed stage per module (str, or the cubin's bytes)
    notes: dict = field(default_factory=dict)      # stage → why it was skipped
    files: dict = field(default_factory=dict)      # dump file name → its bytes (as stored; a cold run's are on disk)
    modules: int = 0
    from_cache: bool = False                       # read whole from the cache: nothing parsed or compiled
    dump_files: int = 0                            # the modules' dump files (the directory's summary.json not counted)


class ResultReplayError(Exception):
    """A stored result's dump file could not be written (the message names the file)."""


def result_flags(options: CompileOptions, emit: str | None, short_form: bool, dump: bool,
                 dump_indexing: str | None) -> list[str]:
    """What decides a compile's output besides the input text and the caller's reading of it: the
    stage printed, the form, whether it dumps (not where), the options and the environment the
    tools are found through (PATH: ptxas makes the cubin)."""
    import os
    env = [f"{v}={os.environ.get(v, '')}" for v in ("HLO_COMPILE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH")]
    if dump or emit == "cubin":
        env.append(f"PATH={os.environ.get('PATH', '')}")
    return [f"emit={emit}", f"short={short_form}", f"dump={dump}", f"dump_indexing={dump_indexing}",
            repr(options), *env]


def compile_source(text: str | None, parse: Callable[[], list[HloModule]], options: CompileOptions, *,
                   emit: str | None = None, short_form: bool = False, dump_to: Path | None = None,
                   cache: KernelCache | None = None, key_flags: Sequence[str] = (), jobs: int = 1,
                   progress: Callable[[HloModule], Any] | None = None,
                   after_module: Callable[[HloModule, PipelineResult], None] | None = None,
                   overrides=None, dump_indexing: str | None = None) -> CompileRecord:
    """``hlo-compile``'s whole compile of an input: every module ``parse()`` gives through
    ``run_pipeline`` (printing ``emit``, by default the module after passes, in the short form
    with ``short_form``; dumping into ``dump_to``, which exists), or, with a ``cache``, the
    stored result of the same ``text`` and flags (``result_flags`` and the caller's
    ``key_flags``: what decides how ``parse`` reads ``text``), its dump files written again,
    without parsing or compiling. A cold result is stored whole (``ResultStore``: not one over
    its ``MAX_BYTES``, nor one with ``overrides``, whose files are not in the key).

    ``progress(module)``: the module's progress callback for ``run_pipeline`` (its ``clear()``,
    if it has one, called after); ``after_module(module, result)``: after each module compiled."""
    from .kernel_cache import ResultStore
    from .dump import SUMMARY
    store = ResultStore(cache if text is not None and overrides is None else None)
    key = store.key(text or "", result_flags(options, emit, short_form, dump_to is not None, dump_indexing)
                    + list(key_flags))
    stored = store.load(key)
    if stored is not None and _replay(stored["files"], dump_to):
        return CompileRecord(**stored, from_cache=True, dump_files=max(len(stored["files"]) - 1, 0))
    modules = parse()
    record = CompileRecord(modules=len(modules))
    if overrides is not None:  # a file of no module: refused before anything is compiled
        overrides.check_module_count([m.name for m in modules])
    dump = DumpDirectory(dump_to) if dump_to is not None else None
    written: dict[str, Path] = {}
    for i, module in enumerate(modules):
        live = progress(module) if progress is not None else None
        try:
            result = run_pipeline(module, options, emit=emit or ("hlo" if dump is None else None), dump_to=dump,
                                  module_index=i, cache=cache, jobs=jobs, progress=live, overrides=overrides,
                                  dump_indexing=dump_indexing)
        finally:
            clear = getattr(live, "clear", None)
            if clear is not None:
                clear()
        if after_module is not None:
            after_module(module, result)
        record.notes.update(result.skipped)
        if result.writer is not None:
            written.update(result.writer.written)
        shown = emit or "hlo"
        if shown == "hlo" and short_form:
            record.outputs.append(result.module.to_text("short"))
        elif emit is not None or dump is None:
            record.outputs.append(result.artifacts[shown])
    if overrides is not None:
        overrides.finish()
    if dump_to is not None:
        written.setdefault(SUMMARY, dump_to / SUMMARY)
        written = {name: path for name, path in written.items() if path.is_file()}
    record.dump_files = max(len(written) - 1, 0)
    store.save(key, {f: getattr(record, f) for f in ("outputs", "notes", "files", "modules")}, written)
    return record


def _replay(files: dict[str, str | bytes], dump_to: Path | None) -> bool:
    """A stored result's dump ``files`` written into ``dump_to`` (False, a miss, for a name
    that would leave it)."""
    if dump_to is None:
        return True
    root = dump_to.resolve()
    paths = {name: (dump_to / name).resolve() for name in files}
    if any(path.parent != root for path in paths.values()):  # never outside the dump directory
        return False
    for name, path in paths.items():
        data = files[name]
        try:
            path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)  # the bytes as written
        except OSError as e:
            raise ResultReplayError(f"cannot write {path}: {e.strerror or e}") from None
    return True


def fusions_plan(module: HloModule, options: CompileOptions | None = None) -> ModulePlan:
    """The kernels ``hlo-compile`` makes of ``module`` (its ``fusions`` stage), whose names
    ``--emit=fusions`` prints: what ``hlo.extract.resolve`` looks kernel names up in."""
    return run_pipeline(module, options or CompileOptions(), emit="fusions").plan
