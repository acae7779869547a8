"""Each kernel to optimised IR and PTX on its own, in parallel across processes, and the
module's PTX put together from theirs (issue 17: parallel codegen, a cache entry per kernel).

A kernel's module (as emitted, its helpers prefixed with its name) goes through
``compile_to_ptx`` alone: libdevice linked, everything but the kernel internal, O3, PTX. With
``jobs`` > 1 and at least ``PARALLEL_MIN_KERNELS`` kernels, worker processes do it (a worker
costs an interpreter and LLVM's start-up, more than a small module's O3 on two cores); the
results are taken in the kernels' order, so the output is the same bytes whatever ``jobs``.

``ptx_text.merge_ptx`` makes one PTX module of the kernels' PTX; ``link_optimized`` links the
optimised modules into one (the ``llvm-opt`` stage's text).
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Sequence

from .ptx import PtxResult, compile_to_ptx
from .ptx_text import merge_ptx, ptx_items  # noqa: F401  (re-exported)

PARALLEL_MIN_KERNELS = 128  # below, one process: ResNet-50 (81 kernels) took 8.8 s with 2 workers, 6.9 s without
Progress = Callable[[int, int], None]  # (kernels done, total)


def default_jobs() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _compile_one(args: tuple) -> tuple[str, str, dict]:
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
    if jobs <= 1 or total < PARALLEL_MIN_KERNELS:
        for item in work:
            llvm_opt, ptx, seconds = _compile_one(item)
            out.append(PtxResult(llvm_opt, ptx, seconds))
            if progress is not None:
                progress(len(out), total)
        return out
    import multiprocessing
    context = multiprocessing.get_context("spawn")  # LLVM is not fork-safe once initialised
    with ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=context) as pool:
        for llvm_opt, ptx, seconds in pool.map(_compile_one, work, chunksize=max(1, total // (jobs * 8))):
            out.append(PtxResult(llvm_opt, ptx, seconds))
            if progress is not None:
                progress(len(out), total)
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
