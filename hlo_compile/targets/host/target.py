"""The host (CPU) implementation of the target interface (DESIGN §3, notes/nvptx.md §4).

The same emitted kernel runs on the CPU: it gets one extra trailing argument, a pointer to a
context struct (``context``) holding its ids, dims and shared-memory base. Two modes:

- ``"serial"``: a plain function the serial driver calls once per (block, thread). Barriers
  and shuffles cannot work that way, so they raise ``NeedsSync`` and the caller re-emits the
  kernel in coroutine mode.
- ``"coro"``: every thread is an LLVM coroutine (``coro``); a barrier is a suspend
  point, a shuffle a store into a per-warp exchange, a suspend, then a load from the source
  lane. Lanes are consecutive linear thread ids of the block (x fastest), 32 per warp.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from ...codegen.llvm_types import F32, I32, I64, PTR, VOID
from ...codegen.target import KernelFunction, KernelParam, Target, check_math_args
from .context import CTAID, NCTAID, NTID, TID, Ctx, ctx_field, load_id
from .coro import CoroutineKernel
from .linked_names import BINARY_MATH, LINKED_SYMBOLS, UNARY_MATH

WARP_SIZE = 32
SHARED_ALIGN = 16


class NeedsSync(Exception):
    """The kernel uses a barrier or a shuffle: emit it again with ``HostTarget("coro")``."""


@dataclass
class HostKernelInfo:
    """What the runner must know about one emitted kernel beyond its IR."""

    name: str
    mode: str
    num_params: int
    param_aligns: tuple[int, ...] = ()  # KernelParam.align: the runner checks buffers against it
    # KernelParam.noalias. Host kernels carry no aliasing attributes (in coroutine mode the
    # threads of a block interleave their accesses, which LLVM's noalias does not allow), so
    # a donated in-place buffer given twice needs nothing more; recorded for the runner.
    param_noalias: tuple[bool, ...] = ()
    static_shared_bytes: int = 0
    barrier_sites: int = 0
    shuffle_sites: int = 0
    shared_arrays: list[tuple[str, int, int]] = field(default_factory=list)  # (name, offset, bytes)
    coroutine: CoroutineKernel | None = None
    ctx: ir.Value | None = None


_native_ready = False


def init_native() -> None:
    """Initialise LLVM's native target once (``llvm.initialize()`` raises in llvmlite 0.50)."""
    global _native_ready
    if not _native_ready:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _native_ready = True


@lru_cache(maxsize=None)
def host_target_data() -> tuple[str, str]:
    """The process triple and the host target machine's datalayout."""
    init_native()
    tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine()
    return llvm.get_process_triple(), str(tm.target_data)


class HostTarget(Target):
    """Emit kernels for the CPU simulation; ``mode`` is ``"serial"`` or ``"coro"``."""

    name = "host"
    linked_symbols = LINKED_SYMBOLS  # libm and libc, linked by name (linked_names.py)

    def __init__(self, mode: str = "serial", *, tensor_cores: bool = False):
        if mode not in ("serial", "coro"):
            raise ValueError(f"host target mode must be 'serial' or 'coro', not {mode!r}")
        self.mode = mode
        self.tensor_cores = tensor_cores  # CompileOptions.dot_tensor_cores: emulate the warp MMA
        self.triple, self.data_layout = host_target_data()
        self._td = llvm.create_target_data(self.data_layout)
        self.kernels: dict[str, HostKernelInfo] = {}

    def emulates_tensor_cores(self) -> bool:
        return self.tensor_cores

    # ---- module and kernel ----------------------------------------------------------------
    def new_module(self, name: str) -> ir.Module:
        m = ir.Module(name=name)
        m.triple = self.triple
        m.data_layout = self.data_layout
        return m

    def begin_kernel(self, module: ir.Module, name: str, params: Sequence[KernelParam],
                     block: tuple[int, int, int] | None = None) -> KernelFunction:
        ret = PTR if self.mode == "coro" else VOID
        fnty = ir.FunctionType(ret, [PTR] * (len(params) + 1))
        fn = ir.Function(module, fnty, name)
        fn.attributes.add("nounwind")
        for arg, p in zip(fn.args, params):
            arg.name = p.name
        ctx = fn.args[-1]
        ctx.name = "ctx"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        info = HostKernelInfo(name=name, mode=self.mode, num_params=len(params), ctx=ctx,
                              param_aligns=tuple(p.align for p in params),
                              param_noalias=tuple(p.noalias for p in params))
        if self.mode == "coro":
            info.coroutine = CoroutineKernel(fn, b, ctx)
        self.kernels[name] = info
        return KernelFunction(function=fn, builder=b, args=list(fn.args[:-1]))

    def _info(self, b: ir.IRBuilder) -> HostKernelInfo:
        try:
            return self.kernels[b.function.name]
        except KeyError:
            raise ValueError(f"{b.function.name!r} was not begun with this target's begin_kernel") from None

    def end_kernel(self, builder: ir.IRBuilder) -> None:
        info = self._info(builder)
        if info.coroutine is not None:
            info.coroutine.finish(builder)
        else:
            builder.ret_void()

    def ret(self, builder: ir.IRBuilder) -> None:
        info = self._info(builder)
        if info.coroutine is not None:
            info.coroutine.exit(builder)
        else:
            builder.ret_void()
            builder.position_at_end(builder.function.append_basic_block("after.ret"))

    # ---- ids --------------------------------------------------------------------------------
    def thread_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return load_id(builder, self._info(builder).ctx, TID, axis)

    def block_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return load_id(builder, self._info(builder).ctx, CTAID, axis)

    def block_dim(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return load_id(builder, self._info(builder).ctx, NTID, axis)

    def grid_dim(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return load_id(builder, self._info(builder).ctx, NCTAID, axis)

    # ---- synchronisation --------------------------------------------------------------------
    def _coroutine(self, builder: ir.IRBuilder, what: str) -> tuple[HostKernelInfo, CoroutineKernel]:
        info = self._info(builder)
        if info.coroutine is None:
            raise NeedsSync(f"kernel {info.name!r} uses {what}")
        return info, info.coroutine

    def barrier(self, builder: ir.IRBuilder) -> None:
        info, coro = self._coroutine(builder, "a barrier")
        info.barrier_sites += 1
        coro.suspend(builder, info.barrier_sites)

    def shfl_down(self, builder: ir.IRBuilder, value: ir.Value, delta: int) -> ir.Value:
        return self._shuffle(builder, value, "down", delta)

    def shfl_xor(self, builder: ir.IRBuilder, value: ir.Value, mask: int) -> ir.Value:
        return self._shuffle(builder, value, "xor", mask)

    def _shuffle(self, b: ir.IRBuilder, value: ir.Value, kind: str, k: int) -> ir.Value:
        if value.type not in (I32, F32):
            raise ValueError(f"warp shuffles move 32-bit values (i32 or float), not {value.type}")
        if not 0 <= int(k) < WARP_SIZE:
            raise ValueError(f"shuffle {kind} operand must be in [0, 32), not {k}")
        info, coro = self._coroutine(b, "a warp shuffle")
        ctx = info.ctx
        bits = b.bitcast(value, I32) if value.type == F32 else value
        ltid = b.load(ctx_field(b, ctx, Ctx.LTID), typ=I32, name="ltid")
        count = b.load(ctx_field(b, ctx, Ctx.SHUFFLES), typ=I32)
        parity = b.and_(count, ir.Constant(I32, 1), name="parity")
        xchg = b.load(ctx_field(b, ctx, Ctx.XCHG), typ=PTR, name="xchg")
        mine = b.gep(xchg, [b.add(b.shl(ltid, ir.Constant(I32, 1)), parity)], inbounds=True, source_etype=I32)
        b.store(bits, mine)
        info.shuffle_sites += 1
        coro.suspend(b, -info.shuffle_sites)
        # after every lane of the warp has stored: read the source lane's slot
        lane = b.and_(ltid, ir.Constant(I32, WARP_SIZE - 1))
        kc = ir.Constant(I32, int(k))
        src_lane = b.add(lane, kc) if kind == "down" else b.xor(lane, kc)
        src = b.add(b.sub(ltid, lane), src_lane)
        nthreads = b.load(ctx_field(b, ctx, Ctx.NTHREADS), typ=I32)
        ok = b.and_(b.icmp_unsigned("<", src_lane, ir.Constant(I32, WARP_SIZE)),
                    b.icmp_unsigned("<", src, nthreads))
        src = b.select(ok, src, ltid)  # out of the warp: the lane keeps its own value
        theirs = b.load(b.gep(xchg, [b.add(b.shl(src, ir.Constant(I32, 1)), parity)], inbounds=True,
                              source_etype=I32), typ=I32)
        b.store(b.add(count, ir.Constant(I32, 1)), ctx_field(b, ctx, Ctx.SHUFFLES))
        return b.bitcast(theirs, F32) if value.type == F32 else theirs

    # ---- memory -----------------------------------------------------------------------------
    def shared_array(self, builder: ir.IRBuilder, name: str, element_type: ir.Type, count: int) -> ir.Value:
        """Every call is a new array (as on NVPTX), 16-byte aligned after the previous ones;
        ``count == 0`` is the dynamic shared memory (``LaunchDims.shared_bytes``), which the
        runner places after all static arrays."""
        if count < 0:
            raise ValueError(f"shared array {name!r} has negative size {count}")
        info = self._info(builder)
        if count == 0:
            return builder.load(ctx_field(builder, info.ctx, Ctx.DYN_SMEM), typ=PTR, name=name)
        size = element_type.get_abi_size(self._td) * int(count)
        offset = info.static_shared_bytes
        info.shared_arrays.append((name, offset, size))
        info.static_shared_bytes = offset + (size + SHARED_ALIGN - 1) // SHARED_ALIGN * SHARED_ALIGN
        base = builder.load(ctx_field(builder, info.ctx, Ctx.SMEM), typ=PTR, name="smem")
        return builder.gep(base, [ir.Constant(I64, offset)], inbounds=True, source_etype=ir.IntType(8),
                           name=name)

    # ---- math -------------------------------------------------------------------------------
    def math(self, builder: ir.IRBuilder, fn: str, args: Sequence[ir.Value]) -> ir.Value:
        arity = 1 if fn in UNARY_MATH or fn == "rsqrt" else 2 if fn in BINARY_MATH else None
        ty = check_math_args("host", fn, arity, args)
        m = builder.module
        if fn == "rsqrt":
            sqrt = m.declare_intrinsic("llvm.sqrt", [ty])
            return builder.fdiv(ir.Constant(ty, 1.0), builder.call(sqrt, [args[0]]), name="rsqrt")
        cname = fn + "f" if ty == F32 else fn
        callee = m.globals.get(cname)
        if callee is None:
            callee = ir.Function(m, ir.FunctionType(ty, [ty] * arity), cname)
            callee.attributes.add("nounwind")
        return builder.call(callee, list(args), name=fn)
