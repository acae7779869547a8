"""A host kernel as an LLVM switched-resume coroutine (notes/nvptx.md §4, "coro").

Each GPU thread is one coroutine: ``barrier`` and shuffles are suspend points and LLVM's
CoroSplit does the work of cutting the kernel at them and spilling live values into the
coroutine frame. The shape every kernel gets:

    entry:    id = coro.id; size = coro.size; mem = frame slot (or aligned_alloc if too
              small); hdl = coro.begin(id, mem); ...body...
    suspend:  ctx.site = site; s = coro.suspend(none, false); switch s: 0 -> continue,
              1 -> cleanup, default -> ret_hdl
    final:    (``ret`` and ``end_kernel`` branch here; LLVM allows one final suspend)
              s = coro.suspend(none, true); switch s: 1 -> cleanup, default -> ret_hdl
    cleanup:  mem = coro.free(id, hdl); free it unless it is the preallocated slot
    ret_hdl:  coro.end(hdl, false, none) (void in LLVM 22); ret hdl

The frame normally lives in a per-thread slot the scheduler preallocates (``ctx.frame``,
``ctx.frame_cap`` bytes) so a launch does no malloc per thread; ``ctx.frame_need`` records
the size asked for so the runner can grow the slots for the next launch.
"""
from __future__ import annotations

from llvmlite import ir

from ...codegen.llvm_types import I1, I8, I32, I64, PTR, TOKEN, VOID
from .context import Ctx, ctx_field

FRAME_ALIGN = 64  # enough for any vector the CPU backend may spill into the frame


def _declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def coro_intrinsic(module: ir.Module, name: str) -> ir.Function:
    """Declare one ``llvm.coro.*`` intrinsic with its LLVM 22 signature."""
    sigs: dict[str, tuple[ir.Type, list[ir.Type]]] = {
        "llvm.coro.id": (TOKEN, [I32, PTR, PTR, PTR]),
        "llvm.coro.size.i64": (I64, []),
        "llvm.coro.begin": (PTR, [TOKEN, PTR]),
        "llvm.coro.suspend": (I8, [TOKEN, I1]),
        "llvm.coro.free": (PTR, [TOKEN, PTR]),
        "llvm.coro.end": (VOID, [PTR, I1, TOKEN]),
        "llvm.coro.done": (I1, [PTR]),
        "llvm.coro.resume": (VOID, [PTR]),
        "llvm.coro.destroy": (VOID, [PTR]),
    }
    ret, args = sigs[name]
    return _declare(module, name, ret, args)


class CoroutineKernel:
    """The coroutine scaffolding of one kernel; the target calls ``suspend``/``exit``/``finish``."""

    def __init__(self, fn: ir.Function, builder: ir.IRBuilder, ctx: ir.Value):
        set.add(fn.attributes, "presplitcoroutine")  # not in llvmlite's attribute whitelist
        self.fn = fn
        self.ctx = ctx
        m = fn.module
        b = builder
        null = ir.Constant(PTR, None)
        self.id = b.call(coro_intrinsic(m, "llvm.coro.id"), [ir.Constant(I32, 0), null, null, null], name="coro.id")
        size = b.call(coro_intrinsic(m, "llvm.coro.size.i64"), [], name="coro.size")
        b.store(b.trunc(size, I32), ctx_field(b, ctx, Ctx.FRAME_NEED))
        slot = b.load(ctx_field(b, ctx, Ctx.FRAME), typ=PTR, name="frame.slot")
        cap = b.zext(b.load(ctx_field(b, ctx, Ctx.FRAME_CAP), typ=I32), I64)
        fits = b.icmp_unsigned("<=", size, cap)
        entry_bb = b.block
        heap_bb = fn.append_basic_block("coro.heap")
        body_bb = fn.append_basic_block("coro.body")
        b.cbranch(fits, body_bb, heap_bb)
        b.position_at_end(heap_bb)
        rounded = b.and_(b.add(size, ir.Constant(I64, FRAME_ALIGN - 1)), ir.Constant(I64, -FRAME_ALIGN))
        aligned_alloc = _declare(m, "aligned_alloc", PTR, [I64, I64])
        heap = b.call(aligned_alloc, [ir.Constant(I64, FRAME_ALIGN), rounded], name="frame.heap")
        b.branch(body_bb)
        b.position_at_end(body_bb)
        mem = b.phi(PTR, name="frame")
        mem.add_incoming(slot, entry_bb)
        mem.add_incoming(heap, heap_bb)
        self.handle = b.call(coro_intrinsic(m, "llvm.coro.begin"), [self.id, mem], name="coro.hdl")
        self.final_bb = fn.append_basic_block("coro.final")
        self.cleanup_bb = fn.append_basic_block("coro.cleanup")
        self.ret_bb = fn.append_basic_block("coro.ret")

    def suspend(self, b: ir.IRBuilder, site: int) -> None:
        """Park the thread at ``site`` (> 0 barrier, < 0 shuffle) until the scheduler resumes it."""
        b.store(ir.Constant(I32, site), ctx_field(b, self.ctx, Ctx.SITE))
        s = b.call(coro_intrinsic(self.fn.module, "llvm.coro.suspend"),
                   [ir.Constant(TOKEN, None), ir.Constant(I1, 0)], name="susp")
        cont = self.fn.append_basic_block(f"resume.{abs(site)}" if site > 0 else f"shfl.{-site}")
        sw = b.switch(s, self.ret_bb)
        sw.add_case(ir.Constant(I8, 0), cont)
        sw.add_case(ir.Constant(I8, 1), self.cleanup_bb)
        b.position_at_end(cont)

    def exit(self, b: ir.IRBuilder) -> None:
        """Early exit: go to the final suspend; the builder moves to a fresh unreachable block."""
        b.branch(self.final_bb)
        b.position_at_end(self.fn.append_basic_block("after.ret"))

    def finish(self, b: ir.IRBuilder) -> None:
        """The normal end of the kernel, then the final/cleanup/return blocks."""
        b.branch(self.final_bb)
        m = self.fn.module
        b.position_at_end(self.final_bb)
        s = b.call(coro_intrinsic(m, "llvm.coro.suspend"), [ir.Constant(TOKEN, None), ir.Constant(I1, 1)],
                   name="final")
        trap = self.fn.append_basic_block("coro.resumed_after_final")
        sw = b.switch(s, self.ret_bb)
        sw.add_case(ir.Constant(I8, 0), trap)
        sw.add_case(ir.Constant(I8, 1), self.cleanup_bb)
        b.position_at_end(trap)
        b.unreachable()

        b.position_at_end(self.cleanup_bb)
        mem = b.call(coro_intrinsic(m, "llvm.coro.free"), [self.id, self.handle], name="frame.mem")
        slot = b.load(ctx_field(b, self.ctx, Ctx.FRAME), typ=PTR)
        free_bb = self.fn.append_basic_block("coro.free_heap")
        with_slot = b.icmp_unsigned("==", mem, slot)
        b.cbranch(b.or_(with_slot, b.icmp_unsigned("==", mem, ir.Constant(PTR, None))), self.ret_bb, free_bb)
        b.position_at_end(free_bb)
        b.call(_declare(m, "free", VOID, [PTR]), [mem])
        b.branch(self.ret_bb)

        b.position_at_end(self.ret_bb)
        b.call(coro_intrinsic(m, "llvm.coro.end"), [self.handle, ir.Constant(I1, 0), ir.Constant(TOKEN, None)])
        b.ret(self.handle)
