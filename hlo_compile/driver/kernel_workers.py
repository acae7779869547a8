"""One compile's per-kernel work in forked worker processes (issue 29 item 8: compile time).

Emitting a kernel (Python building its llvmlite module, ``KernelPlan.emit``) and compiling
it (LLVM's O3 and NVPTX code generation, ``compile_to_ptx``) depend on no other kernel. With
``-j N`` (N > 1), enough kernels and free cores, on Linux in a process that has no other
thread (``can_fork``), the ``llvm`` stage forks one pool of workers once the module is
planned. Each worker inherits the plan, so only kernel indices go out and texts come back;
it emits kernels by index and makes their canonical IR (``kernel_names``). Where the compile
goes on to ``llvm-opt`` the parent hands each emitted kernel's canonical IR straight back to
the pool (``prefetch``), so LLVM works on the first kernels while later ones are still being
emitted; among the kernels waiting, the largest goes first, so no long kernel is left for
the end. ``llvm-opt`` then takes those results (``compile``) instead of compiling again.

The output is the bytes of ``-j 1``: a worker runs the same code on the same plan, results
are put back in the kernels' order, and a kernel whose emission fails in a worker is emitted
again in this process, in the kernels' order, so that its error is raised as ``-j 1`` raises
it. A spawned worker would have to import the compiler and could not see the plan, so where
forking is not safe the work stays in this process (emission) or goes to
``targets/nvptx/kernels.compile_kernels``'s spawned workers (LLVM).
"""
from __future__ import annotations

import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Callable, Sequence

# (target, kernel plans, canonical names wanted): set in the parent while it forks the
# workers, which read it; never pickled
_WORK: tuple[Any, Sequence[Any], bool] | None = None


def can_fork() -> bool:
    """Whether workers may be forked from this process: on Linux, with one thread in it (a
    fork copies the locks other threads hold, held for ever in the child; CUDA's, the
    pool's own and Python's threads all count, as /proc sees them)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1]) == 1
    except (OSError, ValueError):
        pass
    return False


def _emit_one(i: int) -> tuple[int, str | None, Any, float]:
    """Worker: kernel ``i`` emitted → (i, IR text or None where it failed, its canonical IR
    or None, seconds)."""
    assert _WORK is not None
    target, kernels, canonical = _WORK
    t0 = time.perf_counter()
    try:
        text = str(kernels[i].emit(target))
    except Exception:  # noqa: BLE001 - emitted again in the parent, which raises it in order
        return i, None, None, 0.0
    seconds = time.perf_counter() - t0
    c = None
    if canonical:
        from .kernel_names import canonical_ir
        c = canonical_ir(text, kernels[i].kernel_name)
    return i, text, c, seconds


def _compile_to_ptx(*args, **kwargs):
    """``stages.compile_to_ptx``, looked up in the worker when it runs (a module-level name the
    pool can send; the stage's seam, which tests replace, is read where the work is done)."""
    from . import stages
    return stages.compile_to_ptx(*args, **kwargs)


class KernelWorkers:
    """The forked pool of one compile (``StageEnv.workers``), started by the ``llvm`` stage
    and closed by the driver when the compile ends."""

    def __init__(self, jobs: int, arch: str, opt_level: int) -> None:
        self.jobs = jobs
        self.arch, self.opt_level = arch, opt_level   # what every kernel is compiled for
        self._pool: Any = None
        self._workers = 0
        self._compiles: dict[tuple[str, str], Future] = {}   # (kernel name, IR) → LLVM's result
        self._waiting: list[tuple[str, str]] = []             # prefetched, not yet handed out
        self.canonical: dict[str, tuple[str, Any]] = {}       # kernel → (its IR, its CanonicalKernel)

    @property
    def started(self) -> bool:
        return self._pool is not None

    def workers_for(self, kernels: int) -> int:
        """How many workers ``kernels`` kernels get here: 0 (this process does the work) below
        ``PARALLEL_MIN_KERNELS``, with one free core or where forking is not safe."""
        from ..targets.nvptx.kernels import PARALLEL_MIN_KERNELS, free_cpus
        if self.jobs <= 1 or kernels < PARALLEL_MIN_KERNELS or not can_fork():
            return 0
        n = min(self.jobs, kernels, free_cpus())
        return n if n > 1 else 0

    def emit(self, target: Any, kernels: Sequence[Any], workers: int, canonical: bool,
             progress: Callable[[int, int], None] | None = None,
             prefetch: Callable[[str, str, Any], None] | None = None) -> list[tuple[str | None, float]]:
        """Each of ``kernels`` (``KernelPlan``s) emitted in ``workers`` workers (``workers_for``'s
        answer, asked once by the caller: the free cores may change between two asks): (IR text
        or None where its emission failed, seconds), in their order. ``canonical``: the workers also make
        each one's canonical IR (kept in ``self.canonical``); ``prefetch(name, text,
        canonical)`` is called as each arrives (in the order they finish)."""
        global _WORK
        from ..targets.nvptx.kernels import ProcessPoolExecutor
        import multiprocessing
        n = workers
        assert n > 1 and self._pool is None
        _WORK = (target, kernels, canonical)
        try:
            self._pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("fork"))
            self._workers = n
            # a fork-context pool forks every worker at the first submit, before its own threads
            futures = [self._pool.submit(_emit_one, i) for i in range(len(kernels))]
        finally:
            _WORK = None
        out: list[tuple[str | None, float]] = [(None, 0.0)] * len(kernels)
        pending = set(futures)
        done = 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                i, text, c, seconds = self._result(f)
                out[i] = (text, seconds)
                done += 1
                if progress is not None:
                    progress(done, len(kernels))
                if text is None:
                    continue
                name = kernels[i].kernel_name
                if canonical:
                    self.canonical[name] = (text, c)
                if prefetch is not None:
                    prefetch(name, text, c)
            self._dispatch()
        return out

    def prefetch(self, name: str, text: str) -> None:
        """Compile kernel ``name``'s ``text`` ahead of ``llvm-opt`` (at most once per text)."""
        self._queue(name, text)

    def _queue(self, name: str, text: str) -> None:
        if (name, text) not in self._compiles and (name, text) not in self._waiting:
            self._waiting.append((name, text))

    def _dispatch(self, all_of_them: bool = False) -> None:
        """Hand waiting compiles to the pool, the largest first, keeping the pool's queue short
        (so a larger kernel that arrives later still goes before smaller ones)."""
        if not self._waiting:
            return
        queued = sum(1 for f in self._compiles.values() if not f.running() and not f.done())
        room = len(self._waiting) if all_of_them else max(0, 2 * self._workers - queued)
        if room <= 0:
            return
        from ..targets.nvptx.kernels import compile_job
        self._waiting.sort(key=lambda item: len(item[1]))
        for _ in range(min(room, len(self._waiting))):
            name, text = self._waiting.pop()
            self._compiles[(name, text)] = self._pool.submit(
                compile_job, (name, text, self.arch, self.opt_level, _compile_to_ptx))

    def compile(self, kernels: Sequence[tuple[str, str]], progress: Callable[[int, int], None] | None = None) -> list:
        """``(kernel name, IR)`` → its ``PtxResult``, in order: prefetched results where there
        are, the others compiled in the pool now. A ``CodegenError`` is raised for the first
        failing kernel in order."""
        from ..targets.nvptx.ptx import PtxResult
        for name, text in kernels:
            self._queue(name, text)
        self._dispatch(all_of_them=True)
        futures = [self._compiles[(name, text)] for name, text in kernels]
        out = []
        for f in futures:
            llvm_opt, ptx, seconds = self._result(f)
            out.append(PtxResult(llvm_opt, ptx, seconds))
            if progress is not None:
                progress(len(out), len(futures))
        return out

    def _result(self, f: Future) -> Any:
        """``f``'s result; ``WorkerError`` where its worker died (no traceback of the pool's)."""
        from concurrent.futures.process import BrokenProcessPool
        from ..codegen.errors import WorkerError
        try:
            return f.result()
        except BrokenProcessPool:
            raise WorkerError.lost(self._workers) from None

    def close(self) -> None:
        """Stop the workers (prefetched compiles nobody took are cancelled)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._compiles.clear()
        self._waiting.clear()
