"""Shared pieces of the JIT'd host drivers: the launch descriptor, error codes, IR helpers.

Both drivers are ``i32 hlo_host_run(ptr desc)``: ``desc`` is an ``i64`` launch descriptor
(``Desc``) the runner fills, one per worker thread, covering blocks ``[begin, end)`` in
linear order (x fastest). The result is 0, or an ``ErrorCode`` with details in ``desc``.
"""
from __future__ import annotations

from enum import IntEnum

from llvmlite import ir

from ...codegen.kernel_builder import counted_loop

from ...codegen.llvm_types import I32, I64, PTR
from .context import Ctx, ctx_field

DRIVER_NAME = "hlo_host_run"


class Desc(IntEnum):
    """Slots of the ``i64`` launch descriptor."""

    ARGS = 0          # ptr to one pointer per kernel parameter
    GRID = 1          # 1, 2, 3: grid x, y, z
    BLOCK = 4         # 4, 5, 6: block x, y, z
    SMEM = 7          # this worker's shared memory
    CTXS = 8          # coro: nthreads context structs
    HANDLES = 9       # coro: nthreads coroutine handles
    XCHG = 10         # coro: i32[nthreads][2] shuffle exchange
    FRAMES = 11       # coro: nthreads frame slots of FRAME_SLOT bytes
    FRAME_SLOT = 12
    BLOCK_BEGIN = 13
    BLOCK_END = 14
    ERR_BLOCK = 15    # outputs on error: linear block id, two sites, two threads
    ERR_A = 16
    ERR_B = 17
    ERR_TA = 18
    ERR_TB = 19
    DYN_SMEM = 20     # where the dynamic shared memory starts (SMEM + static bytes)


DESC_LEN = 21


class ErrorCode(IntEnum):
    OK = 0
    BARRIER_MISMATCH = 1   # live threads wait at different barriers
    BARRIER_AFTER_EXIT = 2  # all live threads at a barrier, but some threads have exited
    WARP_DIVERGENCE = 3    # lanes of a warp parked at different shuffles (or barrier vs shuffle)


def c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def for_range(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, name: str):
    """``for i in range(start, stop)`` (unsigned compare; the body may branch but must rejoin)."""
    return counted_loop(b, start, stop, name, signed=False)


class Var:
    """A mutable scalar (an alloca that SROA turns back into SSA values)."""

    def __init__(self, b: ir.IRBuilder, ty: ir.Type, init: int, name: str):
        with b.goto_entry_block():
            self.ptr = b.alloca(ty, name=name)
        self.b, self.ty = b, ty
        self.set(ir.Constant(ty, init))

    def get(self) -> ir.Value:
        return self.b.load(self.ptr, typ=self.ty)

    def set(self, v: ir.Value) -> None:
        self.b.store(v, self.ptr)


class LaunchFields:
    """The descriptor's fields, loaded in the driver's entry block."""

    def __init__(self, b: ir.IRBuilder, desc: ir.Value, num_params: int):
        self.b, self.desc = b, desc
        argv = self.ptr(Desc.ARGS)
        self.args = [b.load(b.gep(argv, [c64(i)], source_etype=PTR), typ=PTR, name=f"arg{i}")
                     for i in range(num_params)]
        self.grid = [b.trunc(self.i64(Desc.GRID + a), I32, name=f"grid{a}") for a in range(3)]
        self.block = [b.trunc(self.i64(Desc.BLOCK + a), I32, name=f"block{a}") for a in range(3)]
        self.smem = self.ptr(Desc.SMEM)
        self.dyn_smem = self.ptr(Desc.DYN_SMEM)
        self.begin = self.i64(Desc.BLOCK_BEGIN)
        self.end = self.i64(Desc.BLOCK_END)

    def slot(self, i: int) -> ir.Value:
        return self.b.gep(self.desc, [c64(i)], source_etype=I64)

    def i64(self, i: int) -> ir.Value:
        return self.b.load(self.slot(i), typ=I64)

    def ptr(self, i: int) -> ir.Value:
        return self.b.inttoptr(self.i64(i), PTR)

    def block_coords(self, blk: ir.Value) -> list[ir.Value]:
        b = self.b
        gx, gy = (b.zext(g, I64) for g in self.grid[:2])
        rest = b.udiv(blk, gx)
        return [b.trunc(b.urem(blk, gx), I32), b.trunc(b.urem(rest, gy), I32), b.trunc(b.udiv(rest, gy), I32)]


def store_ids(b: ir.IRBuilder, ctx: ir.Value, base: int, values: list[ir.Value]) -> None:
    for axis, v in enumerate(values):
        b.store(v, ctx_field(b, ctx, Ctx.IDS, base + axis))


def new_driver(module: ir.Module) -> tuple[ir.Function, ir.IRBuilder]:
    fn = ir.Function(module, ir.FunctionType(I32, [PTR]), DRIVER_NAME)
    fn.args[0].name = "desc"
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))
