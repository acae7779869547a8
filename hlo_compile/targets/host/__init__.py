"""The host target: the same emitted kernels JIT-compiled for this CPU (DESIGN §3, notes/nvptx.md §4).

- ``target``: ``HostTarget``, the target interface on the CPU (ids from a context struct,
  barriers and shuffles as coroutine suspends, libm for math); no tensor cores.
- ``context``: the per-thread context struct; ``coro``: a kernel as an LLVM coroutine.
- ``driver``, ``driver_ir``, ``scheduler``: the JIT'd drivers running a grid (serial loops, or
  the round-robin coroutine scheduler).
- ``softfloat``: half/bfloat conversion helpers in IR; ``symbols``: external symbols checked
  before MCJIT links; ``jit``: kernel + driver → machine code.
- ``kernel``: ``compile_host_kernel`` and ``HostKernel``, which launches a grid on numpy buffers.
"""
from .kernel import HostKernel, HostKernelError, compile_host_kernel, default_workers
from .target import HostTarget, NeedsSync

__all__ = ["HostKernel", "HostKernelError", "HostTarget", "NeedsSync", "compile_host_kernel", "default_workers"]
