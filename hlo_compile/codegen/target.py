"""The target interface: everything an emitter may ask of the machine it emits for.

Emitters build LLVM IR with llvmlite against this interface only (DESIGN §3); ``targets/``
implements it for NVPTX and for the host (CPU) simulation. Conventions every target keeps:

- Kernel buffer parameters are opaque pointers in the generic address space (``ptr``);
  emitters index them with ``builder.gep(p, [i], source_etype=T)``. On NVPTX LLVM infers
  the global address space for kernel pointer parameters.
- Ids and dims are ``i32``; ``axis`` is 0, 1, 2 for x, y, z.
- ``math`` names are libm's double-precision names without suffix (``exp``, ``log1p``,
  ``tanh``, ``pow``, ``atan2``, ...); the target picks the f32 or f64 variant from the
  argument type (``__nv_expf``/``__nv_exp`` on NVPTX, ``expf``/``exp`` on the host). Only
  ``float`` and ``double`` arguments: emitters widen f16/bf16 first. Operations LLVM lowers
  safely everywhere (sqrt, fabs, floor, ceil, trunc, rint, round, fma, minnum, maxnum,
  minimum, maximum, copysign) are emitted by the emitter as LLVM intrinsics, not through
  ``math``; the LLVM transcendental intrinsics (exp, log, sin, cos, pow, tanh) never are,
  because they abort the process on NVPTX.
- A kernel ends with ``end_kernel``; ``ret`` is an early exit from the current block (the
  builder is left in a fresh unreachable block so emission can go on).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir


@dataclass(frozen=True)
class KernelParam:
    """One buffer argument of a kernel."""

    name: str
    readonly: bool = True  # never written by this kernel: loads may be marked invariant
    align: int = 16        # guaranteed alignment of the buffer's first byte
    # no other parameter of this kernel reaches the buffer; False for the input and output of
    # an in-place kernel whose operand buffer was donated to its output (the same buffer)
    noalias: bool = True


@dataclass(frozen=True)
class LaunchDims:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic shared memory; static arrays are not counted here

    @property
    def num_threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def num_blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


@dataclass
class KernelFunction:
    """What ``begin_kernel`` hands the emitter: the function, a builder positioned in its
    entry block, and one pointer value per ``KernelParam`` (in order)."""

    function: ir.Function
    builder: ir.IRBuilder
    args: list[ir.Value]


class Target(ABC):
    """A code-generation target (NVPTX or host)."""

    name: str          # "nvptx" | "host"
    triple: str
    data_layout: str

    @abstractmethod
    def new_module(self, name: str) -> ir.Module:
        """An empty module with this target's triple and datalayout."""

    @abstractmethod
    def begin_kernel(self, module: ir.Module, name: str, params: Sequence[KernelParam]) -> KernelFunction:
        """Declare the kernel entry ``name`` taking ``params``."""

    @abstractmethod
    def end_kernel(self, builder: ir.IRBuilder) -> None:
        """Terminate the kernel at the builder's position (the normal exit)."""

    @abstractmethod
    def ret(self, builder: ir.IRBuilder) -> None:
        """Early exit of the calling thread."""

    @abstractmethod
    def thread_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value: ...

    @abstractmethod
    def block_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value: ...

    @abstractmethod
    def block_dim(self, builder: ir.IRBuilder, axis: int) -> ir.Value: ...

    @abstractmethod
    def grid_dim(self, builder: ir.IRBuilder, axis: int) -> ir.Value: ...

    @abstractmethod
    def barrier(self, builder: ir.IRBuilder) -> None:
        """``__syncthreads()``: every thread of the block must reach the same barrier."""

    @abstractmethod
    def shfl_down(self, builder: ir.IRBuilder, value: ir.Value, delta: int) -> ir.Value:
        """Full-warp ``shfl.sync.down`` of a 32-bit value (``i32`` or ``float``)."""

    @abstractmethod
    def shfl_xor(self, builder: ir.IRBuilder, value: ir.Value, mask: int) -> ir.Value:
        """Full-warp ``shfl.sync.bfly`` of a 32-bit value (``i32`` or ``float``)."""

    @abstractmethod
    def shared_array(self, builder: ir.IRBuilder, name: str, element_type: ir.Type, count: int) -> ir.Value:
        """A block-shared array of ``count`` elements; returns a pointer to its first element."""

    @abstractmethod
    def math(self, builder: ir.IRBuilder, fn: str, args: Sequence[ir.Value]) -> ir.Value:
        """A libm-style function on ``float``/``double`` values (see the module docstring)."""

    def mark_invariant(self, load: ir.Instruction) -> None:
        """Mark a load from a buffer no thread writes during the kernel (``ld.global.nc``)."""
        module = load.parent.parent.module if hasattr(load.parent, "parent") else None
        if module is not None:
            load.set_metadata("invariant.load", module.add_metadata([]))


def check_math_args(target_name: str, fn: str, arity: int | None, args: Sequence[ir.Value]) -> ir.Type:
    """Validate a ``Target.math`` call before anything reaches LLVM; returns the float type.

    Raises ValueError for an unknown function (``arity`` None), a wrong argument count, or
    arguments that are not all ``float`` or all ``double``.
    """
    if arity is None:
        raise ValueError(f"unknown math function {fn!r} for the {target_name} target")
    if len(args) != arity:
        raise ValueError(f"math function {fn!r} takes {arity} argument(s), got {len(args)}")
    ty = args[0].type
    if str(ty) not in ("float", "double") or any(a.type != ty for a in args):
        raise ValueError(f"math function {fn!r} takes float or double arguments of one type, "
                         f"got {', '.join(str(a.type) for a in args)}")
    return ty
