"""Run kernels written against the target interface on the CPU (DESIGN §3).

``compile_host_kernel(emit, name)`` emits the kernel in serial mode, re-emits it as a
coroutine if it needs barriers or shuffles, JIT-compiles it with its driver, and returns a
``HostKernel`` whose ``launch`` runs a grid over numpy buffers. Blocks are split across a few
OS threads (ctypes releases the GIL); the threads of one block always run on one OS thread.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from llvmlite import ir

from ...codegen.target import LaunchDims, Target
from .context import CTX_TYPE, Ctx, struct_layout
from .driver_ir import DESC_LEN, Desc, ErrorCode
from .jit import JitCode, jit_compile
from .target import WARP_SIZE, HostKernelInfo, HostTarget, NeedsSync, host_target_data

__all__ = ["HostKernel", "HostKernelError", "HostTarget", "NeedsSync", "compile_host_kernel"]

MAX_THREADS_PER_BLOCK = 1024
FIRST_FRAME_SLOT = 512      # initial per-thread coroutine frame slot; grows when too small
SMEM_ALIGN = 64
# Blocks per worker below which a launch stays on the calling thread.
MIN_BLOCKS_PER_WORKER = 4


class HostKernelError(RuntimeError):
    """A kernel misbehaved at run time on the host (divergent barrier or shuffle).

    ``code`` is a ``driver_ir.ErrorCode``; barriers and shuffles are numbered in the order
    the emitter created them (``barrier #1`` is the first ``target.barrier`` call).
    """

    def __init__(self, message: str, kernel: str, block: tuple[int, int, int], code: int):
        super().__init__(message)
        self.kernel, self.block, self.code = kernel, block, code


def default_workers() -> int:
    """OS threads a launch may use: ``$HLO_HOST_THREADS``, else the CPUs this process may use."""
    env = os.environ.get("HLO_HOST_THREADS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(2, default_workers()), thread_name_prefix="hlo-host")
        return _pool


def _aligned_zeros(nbytes: int, align: int = SMEM_ALIGN) -> np.ndarray:
    """A zeroed byte buffer whose first byte is ``align``-aligned (kept alive by the caller)."""
    raw = np.zeros(max(nbytes, 1) + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + max(nbytes, 1)]


def _site(s: int) -> str:
    return f"barrier #{s}" if s > 0 else f"shuffle #{-s}" if s < 0 else "no sync point"


@dataclass
class _Worker:
    """The descriptor and scratch memory of one OS thread's share of a launch."""

    desc: np.ndarray
    smem: np.ndarray
    ctxs: np.ndarray | None = None
    scratch: list[np.ndarray] = field(default_factory=list)  # handles, exchange, frame slots


class HostKernel:
    """A JIT-compiled host kernel; ``launch`` runs it over a grid."""

    def __init__(self, info: HostKernelInfo, llvm_ir: str, code: JitCode):
        self.name = info.name
        self.uses_sync = info.mode == "coro"
        self.llvm_ir = llvm_ir                  # as emitted, before optimisation
        self.optimized_ir = code.optimized_ir   # kernel + driver after O3
        self.static_shared_bytes = info.static_shared_bytes
        self._info = info
        self._code = code  # holds the engine: the machine code lives as long as this kernel
        self._frame_slot = FIRST_FRAME_SLOT
        offsets, self._ctx_bytes = struct_layout(CTX_TYPE, host_target_data()[1])
        self._frame_need_offset = offsets[Ctx.FRAME_NEED]
        self.max_workers = default_workers()

    def __repr__(self) -> str:
        return f"HostKernel({self.name!r}, uses_sync={self.uses_sync})"

    # ---- launch -----------------------------------------------------------------------------
    def launch(self, dims: LaunchDims, buffers: Sequence[np.ndarray]) -> None:
        """Run the kernel over ``dims`` with ``buffers`` (C-contiguous, in parameter order)."""
        self._check_dims(dims)
        argv = self._arg_pointers(buffers)
        nblocks = dims.num_blocks
        workers = max(1, min(self.max_workers, nblocks // MIN_BLOCKS_PER_WORKER))
        bounds = [nblocks * w // workers for w in range(workers + 1)]
        jobs = [self._prepare(dims, argv, bounds[w], bounds[w + 1]) for w in range(workers)]
        if workers == 1:
            codes = [self._code.run(jobs[0].desc.ctypes.data)]
        else:
            futures = [_executor().submit(self._code.run, job.desc.ctypes.data) for job in jobs]
            codes = [f.result() for f in futures]
        if self.uses_sync:
            self._grow_frame_slot(jobs[0])
        failed = [(int(job.desc[Desc.ERR_BLOCK]), code, job.desc) for job, code in zip(jobs, codes) if code]
        if failed:
            raise self._error(dims, *min(failed, key=lambda f: f[0]))

    def _check_dims(self, dims: LaunchDims) -> None:
        for what, v in (("grid", dims.grid), ("block", dims.block)):
            if len(v) != 3 or any(int(x) < 1 for x in v):
                raise ValueError(f"launch {what} must be three positive integers, got {v}")
        if dims.num_threads > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"{dims.num_threads} threads per block; GPUs allow at most {MAX_THREADS_PER_BLOCK}")
        if dims.shared_bytes < 0:
            raise ValueError(f"dynamic shared memory must be >= 0 bytes, got {dims.shared_bytes}")

    def _arg_pointers(self, buffers: Sequence[np.ndarray]) -> np.ndarray:
        info = self._info
        if len(buffers) != info.num_params:
            raise ValueError(f"kernel {self.name!r} takes {info.num_params} buffers, got {len(buffers)}")
        argv = np.empty(max(1, len(buffers)), dtype=np.uint64)
        for i, (buf, align) in enumerate(zip(buffers, info.param_aligns)):
            if not isinstance(buf, np.ndarray) or not buf.flags.c_contiguous:
                raise ValueError(f"buffer {i} of {self.name!r} must be a C-contiguous numpy array")
            addr = buf.ctypes.data
            if buf.size and align > 1 and addr % align:
                raise ValueError(f"buffer {i} of {self.name!r} is at {addr:#x}, not {align}-byte aligned "
                                 "as the kernel assumes")
            argv[i] = addr
        return argv

    def _prepare(self, dims: LaunchDims, argv: np.ndarray, begin: int, end: int) -> _Worker:
        """One worker's descriptor and the scratch buffers it points into."""
        n = dims.num_threads
        w = _Worker(desc=np.zeros(DESC_LEN, dtype=np.int64),
                    smem=_aligned_zeros(self.static_shared_bytes + dims.shared_bytes))
        desc = w.desc
        desc[Desc.ARGS] = argv.ctypes.data
        desc[Desc.GRID:Desc.GRID + 3] = dims.grid
        desc[Desc.BLOCK:Desc.BLOCK + 3] = dims.block
        desc[Desc.SMEM] = w.smem.ctypes.data
        desc[Desc.DYN_SMEM] = w.smem.ctypes.data + self.static_shared_bytes
        desc[Desc.BLOCK_BEGIN], desc[Desc.BLOCK_END] = begin, end
        if self.uses_sync:
            w.ctxs = _aligned_zeros(n * self._ctx_bytes)
            w.scratch = [_aligned_zeros(n * 8), _aligned_zeros(n * 8), _aligned_zeros(n * self._frame_slot)]
            desc[Desc.CTXS] = w.ctxs.ctypes.data
            desc[Desc.HANDLES], desc[Desc.XCHG], desc[Desc.FRAMES] = (a.ctypes.data for a in w.scratch)
            desc[Desc.FRAME_SLOT] = self._frame_slot
        return w

    def _grow_frame_slot(self, worker: _Worker) -> None:
        """If the coroutine frame outgrew its slot (so it was malloc'ed), use bigger slots next time."""
        off = self._frame_need_offset
        need = int(worker.ctxs[off:off + 4].view(np.int32)[0])
        if need > self._frame_slot:
            self._frame_slot = (need + SMEM_ALIGN - 1) // SMEM_ALIGN * SMEM_ALIGN

    def _error(self, dims: LaunchDims, block: int, code: int, desc: np.ndarray) -> HostKernelError:
        gx, gy, _ = dims.grid
        coords = (block % gx, block // gx % gy, block // (gx * gy))
        a, b, ta, tb = (int(desc[s]) for s in (Desc.ERR_A, Desc.ERR_B, Desc.ERR_TA, Desc.ERR_TB))

        def thread(t: int) -> str:
            bx, by, _ = dims.block
            return f"thread {t} {(t % bx, t // bx % by, t // (bx * by))}"

        where = f"kernel {self.name!r}, block {coords}"
        if code == ErrorCode.BARRIER_MISMATCH:
            msg = f"{where}: threads wait at different barriers ({thread(ta)} at {_site(a)}, {thread(tb)} at {_site(b)})"
        elif code == ErrorCode.BARRIER_AFTER_EXIT:
            msg = (f"{where}: {_site(a)} reached (first by {thread(ta)}) while {b} thread(s) of the block "
                   "had already exited; every thread must reach each barrier")
        elif code == ErrorCode.WARP_DIVERGENCE:
            again = ", having done a different number of shuffles" if a == b else ""
            msg = (f"{where}: lanes of warp {ta // WARP_SIZE} diverge at a shuffle ({thread(ta)} at {_site(a)}, "
                   f"{thread(tb)} at {_site(b)}{again})")
        else:
            msg = f"{where}: host driver error code {code}"
        return HostKernelError(msg, self.name, coords, int(code))


# ---- compilation ---------------------------------------------------------------------------
_cache: OrderedDict[tuple[str, str, str | None], tuple[HostKernelInfo, JitCode]] = OrderedDict()
_cache_lock = threading.Lock()
CACHE_SIZE = 64


def compile_host_kernel(emit: Callable[[Target], ir.Module], kernel_name: str, *,
                        cpu: str | None = None, tensor_cores: bool = False) -> HostKernel:
    """Emit ``kernel_name`` with ``emit`` (serial, else coroutine mode) and JIT-compile it.

    ``cpu`` picks the target CPU (default: this host with its features; ``"x86-64"`` runs
    without F16C/AVX, exercising the soft-float helpers). ``tensor_cores``: the compile asked
    for tensor cores (``CompileOptions.dot_tensor_cores``), which the host emulates. Compiled
    code is cached by IR text.
    """
    target = HostTarget("serial", tensor_cores=tensor_cores)
    try:
        module = emit(target)
    except NeedsSync:
        target = HostTarget("coro", tensor_cores=tensor_cores)
        module = emit(target)
    info = target.kernels.get(kernel_name)
    if info is None:
        raise ValueError(f"emit did not define kernel {kernel_name!r} (defined: {sorted(target.kernels)})")
    llvm_ir = str(module)
    key = (llvm_ir, kernel_name, cpu)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is None:
        info = dataclasses.replace(info, ctx=None, coroutine=None)  # drop references into the ir module
        hit = (info, jit_compile(llvm_ir, info, cpu))
        with _cache_lock:
            _cache[key] = hit
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    info, code = hit
    return HostKernel(info, llvm_ir, code)
