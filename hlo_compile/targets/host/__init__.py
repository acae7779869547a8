"""The host target: the same emitted kernels JIT-compiled for this CPU (DESIGN §3, notes/nvptx.md §4).

- ``target``: ``HostTarget``, the target interface on the CPU (ids from a context struct,
  barriers and shuffles as coroutine suspends, libm for math); no tensor cores.
- ``context``: the per-thread context struct; ``coro``: a kernel as an LLVM coroutine.
- ``driver``, ``driver_ir``, ``scheduler``: the JIT'd drivers running a grid (serial loops, or
  the round-robin coroutine scheduler).
- ``softfloat``: half/bfloat conversion helpers in IR; ``symbols``: external symbols checked
  before MCJIT links; ``jit``: kernel + driver → machine code.
- ``kernel``: ``compile_host_kernel`` and ``HostKernel``, which launches a grid on numpy buffers.
- ``linked_names``: the libm/libc names kernels link by name, a constant table.

The names below load on first use (PEP 562): planning for the GPU reads ``linked_names``
without loading the JIT, numpy or the drivers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .kernel import HostKernel, HostKernelError, compile_host_kernel, default_workers
    from .target import HostTarget, NeedsSync

_KERNEL = ("HostKernel", "HostKernelError", "compile_host_kernel", "default_workers")
_TARGET = ("HostTarget", "NeedsSync")
__all__ = ["HostKernel", "HostKernelError", "HostTarget", "NeedsSync", "compile_host_kernel", "default_workers"]


def __getattr__(name: str) -> Any:
    if name in _KERNEL:
        from . import kernel as module
    elif name in _TARGET:
        from . import target as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
