"""Each kernel to optimised IR and PTX on its own, in parallel across processes, and the
module's PTX put together from theirs (issue 17: parallel codegen, a cache entry per kernel).

A kernel's module (as emitted, its helpers prefixed with its name) goes through
``compile_to_ptx`` alone: libdevice linked, everything but the kernel internal, O3, PTX. With
``jobs`` > 1 and at least ``PARALLEL_MIN_KERNELS`` kernels, worker processes do it (a worker
costs an interpreter and LLVM's start-up, more than a small module's O3 on two cores); the
results are taken in the kernels' order, so the output is the same bytes whatever ``jobs``.

``merge_ptx`` makes one PTX module of the kernels' PTX: one header, every ``.entry`` in order,
and each module-scope declaration once (the same text from two kernels: a libdevice function
both call); a name two kernels declare differently is renamed in the later kernel's text.
``link_optimized`` links the optimised modules into one (the ``llvm-opt`` stage's text).
"""
from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Sequence

from .ptx import PtxResult, compile_to_ptx

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


# ---- one PTX module from the kernels' ------------------------------------------------------------

_HEADER = re.compile(r"\s*\.(version|target|address_size)\b")
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)")
# the name a module-scope item declares: a function's (before its parameter list) or a variable's
_DECLARED = re.compile(r"\.func\s+(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)|"
                       r"\.(?:global|shared|const|local)\s+(?:\.\w+\s+(?:\d+\s+)?)*([A-Za-z_$%][\w$]*)\s*(?:\[|;|=)")


def ptx_items(ptx: str) -> tuple[list[str], list[tuple[str | None, str]], str]:
    """(header lines, module-scope items as (entry name or None, text), the text after the last)."""
    header: list[str] = []
    items: list[tuple[str | None, str]] = []
    current: list[str] = []
    depth = 0
    in_header = True  # the comments and directives before the first declaration
    for line in ptx.splitlines(keepends=True):
        code = line.split("//", 1)[0]
        if depth == 0 and not current and in_header:
            if _HEADER.match(code) or (not code.strip() and ".address_size" not in "".join(header)):
                header.append(line)
                continue
            in_header = False
        current.append(line)
        depth += code.count("{") - code.count("}")
        tail = code.rstrip()
        if depth == 0 and (tail.endswith("}") or tail.endswith(";")):
            text = "".join(current)
            m = _ENTRY.search(text)
            items.append((m.group(1) if m else None, text))
            current = []
    return header, items, "".join(current)


def _declared(text: str) -> str | None:
    code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    m = _DECLARED.search(code)
    return (m.group(1) or m.group(2)) if m else None


def _rename(text: str, old: str, new: str) -> str:
    return re.sub(rf"(?<![\w$%]){re.escape(old)}(?![\w$%])", new, text)


def merge_ptx(ptxs: Sequence[str], names: Sequence[str]) -> str:
    """One PTX module holding the ``.entry`` of each kernel (``names``, parallel to ``ptxs``)."""
    if not ptxs:
        return ""
    header = ptx_items(ptxs[0])[0]
    seen: dict[str, str] = {}  # declared name → its text
    body: list[str] = []
    for ptx, kernel in zip(ptxs, names):
        h, items, _ = ptx_items(ptx)
        if h != header:
            raise ValueError(f"kernel {kernel}: PTX header differs from the first kernel's")
        renames: dict[str, str] = {}
        for _, text in items:
            name = _declared(text) if not _ENTRY.search(text) else None
            if name is not None and name in seen and seen[name] != text:
                renames[name] = f"{name}_{kernel}"
        for old, new in renames.items():
            items = [(entry, _rename(text, old, new)) for entry, text in items]
        for entry, text in items:
            name = None if entry is not None else _declared(text)
            if name is not None:
                if seen.get(name) == text:
                    continue  # declared the same way by an earlier kernel
                seen[name] = text
            body.append(text)
    return "".join(header) + "".join(body)


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
