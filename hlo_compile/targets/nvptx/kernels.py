"""Each kernel to optimised IR and PTX on its own, in parallel across processes, and the
module's PTX put together from theirs (issue 17: parallel codegen, a cache entry per kernel).

A kernel's module (as emitted, its helpers prefixed with its name) goes through
``compile_to_ptx`` alone: libdevice linked, everything but the kernel internal, O3, PTX. With
``jobs`` > 1, at least ``PARALLEL_MIN_KERNELS`` kernels and cores free (``free_cpus``),
worker processes do it: forked ones that also emit the kernels (``driver/kernel_workers.py``)
where forking is safe, else the spawned ones of ``compile_kernels`` (a spawned worker costs an
interpreter and LLVM's start-up); the results are taken in the kernels' order, so the output
is the same bytes whatever ``jobs``.

``ptx_text.merge_ptx`` makes one PTX module of the kernels' PTX; ``link_optimized`` links the
optimised modules into one (the ``llvm-opt`` stage's text).
"""
from __future__ import annotations

import os
from typing import Callable, Sequence

from .ptx import PtxResult, compile_to_ptx
from .ptx_text import merge_ptx, ptx_items  # noqa: F401  (re-exported)

PARALLEL_MIN_KERNELS = 32  # below, one process: a worker's start-up outweighs a few kernels' O3
Progress = Callable[[int, int], None]  # (kernels done, total)


def default_jobs() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def free_cpus() -> int:
    """The CPUs not busy with other work: those this process may use less the threads other
    processes are running now (``runnable_elsewhere``). Measured on a 2-core machine: ResNet-50's
    81 kernels took 1.6 s in two spawned workers and 2.3 s in one process when it was idle, but
    5.4 s and 3.5 s when other jobs kept both cores busy: workers help only where cores are free."""
    cpus = default_jobs()
    return max(1, min(cpus, cpus - runnable_elsewhere()))


def runnable_elsewhere() -> int:
    """Threads of other processes running or waiting for a CPU at this moment (Linux's
    /proc/loadavg, whose count includes this process), else the 1-minute load average less
    this process. The moment's count, not the average: a compile that follows another job
    (a benchmark's previous run) is not held to one core by a load that has already gone."""
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        return max(0, running - 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return max(0, int(os.getloadavg()[0] - 1 + 0.5))
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return 0


def ProcessPoolExecutor(*args, **kwargs):  # noqa: N802 - stands for the class (a seam for tests)
    """``concurrent.futures.ProcessPoolExecutor``, imported on first use: it loads
    multiprocessing (~8 ms of start-up), which a compile of a few kernels never needs."""
    from concurrent.futures import ProcessPoolExecutor as pool
    return pool(*args, **kwargs)


def compile_job(args: tuple) -> tuple[str, str, dict]:
    """A worker's job: ``(kernel name, IR, arch, opt level, compile_one)`` → ``compile_one``'s
    optimised IR, PTX and seconds (plain values: they go back through a pipe)."""
    name, ir_text, arch, opt_level, compile_one = args
    r = compile_one(ir_text, arch, [name], opt_level=opt_level)
    return r.llvm_opt, r.ptx, r.seconds


def compile_kernels(kernels: Sequence[tuple[str, str]], arch: str, opt_level: int = 3, jobs: int = 1,
                    progress: Progress | None = None,
                    compile_one: Callable[..., PtxResult] = compile_to_ptx) -> list[PtxResult]:
    """``(name, IR text)`` of each kernel → its ``PtxResult``, in the same order. A
    ``CodegenError`` in any kernel is raised (the first in the kernels' order).
    ``compile_one`` (``compile_to_ptx``'s signature; a module-level function, so workers can
    import it) compiles one."""
    work = [(name, text, arch, opt_level, compile_one) for name, text in kernels]
    total = len(work)
    out: list[PtxResult] = []
    jobs = min(jobs, total, free_cpus())
    if jobs <= 1 or total < PARALLEL_MIN_KERNELS:
        for item in work:
            llvm_opt, ptx, seconds = compile_job(item)
            out.append(PtxResult(llvm_opt, ptx, seconds))
            if progress is not None:
                progress(len(out), total)
        return out
    import multiprocessing
    # spawned: this is the path where forking was not safe (another thread in the process:
    # driver/kernel_workers.can_fork), so each worker starts afresh
    context = multiprocessing.get_context("spawn")
    from concurrent.futures.process import BrokenProcessPool
    from ...codegen.errors import WorkerError
    with ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=context) as pool:
        try:
            for llvm_opt, ptx, seconds in pool.map(compile_job, work, chunksize=max(1, total // (jobs * 8))):
                out.append(PtxResult(llvm_opt, ptx, seconds))
                if progress is not None:
                    progress(len(out), total)
        except BrokenProcessPool:
            raise WorkerError.lost(min(jobs, total)) from None
    return out


def link_optimized(modules: Sequence[str], name: str) -> str:
    """The optimised kernel modules linked into one (their internal symbols renamed apart by
    LLVM where two share a name)."""
    import llvmlite.binding as llvm
    if not modules:
        return ""
    main = llvm.parse_assembly(modules[0])
    main.name = name
    for text in modules[1:]:
        main.link_in(llvm.parse_assembly(text))
    return str(main)
