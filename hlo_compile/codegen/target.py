"""The target interface: everything an emitter may ask of the machine it emits for.

Emitters build LLVM IR with llvmlite against this interface only (DESIGN §3): they never
name a target, its intrinsics or its address spaces. ``targets/`` implements it, once for
NVIDIA GPUs and once for the host (CPU) simulation, each in a subpackage of its own.
Conventions every target keeps:

- Kernel buffer parameters are opaque pointers in the generic address space (``ptr``);
  emitters index them with ``builder.gep(p, [i], source_etype=T)``. On the GPU LLVM infers
  the global address space for kernel pointer parameters.
- Ids and dims are ``i32``; ``axis`` is 0, 1, 2 for x, y, z.
- ``math`` names are libm's double-precision names without suffix (``exp``, ``log1p``,
  ``tanh``, ``pow``, ``atan2``, ...); the target picks the f32 or f64 variant from the
  argument type (libdevice's ``__nv_expf``/``__nv_exp`` on the GPU, ``expf``/``exp`` on the
  host). Only ``float`` and ``double`` arguments: emitters widen f16/bf16 first. Operations
  LLVM lowers safely everywhere (sqrt, fabs, floor, ceil, trunc, rint, round, fma, minnum,
  maxnum, minimum, maximum, copysign) are emitted by the emitter as LLVM intrinsics, not
  through ``math``; the LLVM transcendental intrinsics (exp, log, sin, cos, pow, tanh) never
  are, because they abort the process on the GPU target.
- A kernel ends with ``end_kernel``; ``ret`` is an early exit from the current block (the
  builder is left in a fresh unreachable block so emission can go on).
- Optional features are asked for before use: ``has_tensor_cores`` before ``warp_mma``. A
  target without one refuses it with ``TargetFeatureError``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir

from .errors import CodegenError


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


class TargetFeatureError(CodegenError):
    """An emitter asked a target for something it does not have (tensor cores on the host)."""


class WarpMma(ABC):
    """Warp-level matrix multiply-accumulate of one 16 x 8 x 16 tile, ``D = A B + C``, with
    f16 or bf16 ``A`` (16 x 16, row-major) and ``B`` (16 x 8, column-major) and f32 ``C``/``D``,
    as ``Target.warp_mma`` gives it. Every lane of the warp calls each method together. The
    fragment layouts are the PTX ISA's for ``mma.m16n8k16`` and ``ldmatrix``
    (``codegen/emitters/dot_mma.py`` spells them out)."""

    element_type: str  # "f16" | "bf16": the type of A and B

    @abstractmethod
    def load_matrix_x4(self, builder: ir.IRBuilder, address: ir.Value) -> list[ir.Value]:
        """Four 8 x 8 matrices of 16-bit elements from a ``shared_array`` (``ldmatrix.x4``):
        lanes 8j..8j+7 give in ``address`` rows 0..7 of matrix j (8 contiguous elements,
        16-byte aligned). Returns the lane's 4 fragment registers: register j holds row
        lane // 4, elements 2 (lane % 4) (low half) and 2 (lane % 4) + 1 of matrix j."""

    @abstractmethod
    def mma(self, builder: ir.IRBuilder, a: Sequence[ir.Value], b: Sequence[ir.Value],
            c: Sequence[ir.Value]) -> ir.Value:
        """``D = A B + C`` on this lane's fragments: 4 registers of ``A`` and 2 of ``B`` (as
        ``load_matrix_x4`` returns them) and 4 f32 accumulators of ``C``. Returns a
        ``{float, float, float, float}`` value: ``extract_value(d, r)`` is accumulator r."""


class Target(ABC):
    """A code-generation target (a GPU or the host)."""

    name: str          # short name, as in dumps and messages ("host", ...)
    triple: str
    data_layout: str
    # Functions this target's kernels are linked against by name (the host's libm and libc,
    # float and double names): a kernel taking one of these names would shadow the function
    # it calls. A plan is emitted for every target under one kernel name, so the planner
    # avoids the union over all targets (``plan_module``'s ``reserved_symbols``).
    linked_symbols: frozenset[str] = frozenset()

    @abstractmethod
    def new_module(self, name: str) -> ir.Module:
        """An empty module with this target's triple and datalayout."""

    @abstractmethod
    def begin_kernel(self, module: ir.Module, name: str, params: Sequence[KernelParam],
                     block: tuple[int, int, int] | None = None) -> KernelFunction:
        """Declare the kernel entry ``name`` taking ``params``; ``block``: the threads per block
        it is launched with (a GPU target bounds the kernel's registers by it)."""

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

    def has_tensor_cores(self) -> bool:
        """Whether dot emitters may use ``warp_mma``: the machine has warp-level MMA and the
        compile options asked for it (``CompileOptions.dot_tensor_cores``, given to the target
        when it was made). No by default."""
        return False

    def emulates_tensor_cores(self) -> bool:
        """Whether dot emitters run the tensor-core kernel here with the warp MMA built from
        shared memory and barriers (the host, when the compile options asked for tensor cores:
        it then runs the very kernel the GPU runs). No by default."""
        return False

    def warp_mma(self, builder: ir.IRBuilder, element_type: str) -> WarpMma:
        """Warp-level MMA on ``element_type`` (``"f16"`` or ``"bf16"``) inputs for the kernel
        being built at ``builder``; only where ``has_tensor_cores()``, else
        ``TargetFeatureError``."""
        raise TargetFeatureError(f"the {self.name} target has no tensor cores (warp-level MMA); "
                                 "ask has_tensor_cores() first")

    def pin(self, builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
        """``value`` itself, computed where it is: code motion may not sink its computation past
        this point (a target whose back end would otherwise stretch live ranges across barriers
        returns an opaque identity; the default is the value, unchanged)."""
        return value

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
