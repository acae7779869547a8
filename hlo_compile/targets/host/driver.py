"""JIT'd drivers that run a host kernel over a grid (notes/nvptx.md §4), built in LLVM IR.

- serial: loops over blocks x threads calling the kernel; the context struct is a stack slot,
  so once the kernel is inlined its fields become registers.
- coro: the round-robin coroutine scheduler of ``scheduler``.

The launch descriptor both read is described in ``driver_ir``.
"""
from __future__ import annotations

from llvmlite import ir

from ...codegen.llvm_types import PTR
from .context import CTAID, CTX_TYPE, NCTAID, NTID, TID, Ctx, ctx_field
from .driver_ir import LaunchFields, c32, for_range, new_driver, store_ids
from .scheduler import build_coro_driver


def build_serial_driver(module: ir.Module, kernel: ir.Function, num_params: int) -> ir.Function:
    """The plain (block, thread) loop nest around a kernel that has no barrier or shuffle."""
    fn, b = new_driver(module)
    L = LaunchFields(b, fn.args[0], num_params)
    ctx = b.alloca(CTX_TYPE, name="ctx")
    ctx.type = PTR  # llvmlite types allocas as typed pointers; index it as an opaque one
    store_ids(b, ctx, NTID, L.block)
    store_ids(b, ctx, NCTAID, L.grid)
    b.store(L.smem, ctx_field(b, ctx, Ctx.SMEM))
    b.store(L.dyn_smem, ctx_field(b, ctx, Ctx.DYN_SMEM))
    nthreads = b.mul(b.mul(L.block[0], L.block[1]), L.block[2])
    b.store(nthreads, ctx_field(b, ctx, Ctx.NTHREADS))
    with for_range(b, L.begin, L.end, "blk") as blk:
        store_ids(b, ctx, CTAID, L.block_coords(blk))
        with for_range(b, c32(0), L.block[2], "tz") as tz:
            b.store(tz, ctx_field(b, ctx, Ctx.IDS, TID + 2))
            with for_range(b, c32(0), L.block[1], "ty") as ty:
                b.store(ty, ctx_field(b, ctx, Ctx.IDS, TID + 1))
                with for_range(b, c32(0), L.block[0], "tx") as tx:
                    b.store(tx, ctx_field(b, ctx, Ctx.IDS, TID))
                    b.call(kernel, L.args + [ctx])
    b.ret(c32(0))
    return fn


def build_driver_module(triple: str, data_layout: str, kernel_name: str, num_params: int,
                        mode: str) -> ir.Module:
    """A module holding the driver and a declaration of the kernel (linked in afterwards)."""
    m = ir.Module(name=f"{kernel_name}.driver")
    m.triple, m.data_layout = triple, data_layout
    ret = PTR if mode == "coro" else ir.VoidType()
    kernel = ir.Function(m, ir.FunctionType(ret, [PTR] * (num_params + 1)), kernel_name)
    if mode == "coro":
        build_coro_driver(m, kernel, num_params)
    else:
        build_serial_driver(m, kernel, num_params)
    return m
