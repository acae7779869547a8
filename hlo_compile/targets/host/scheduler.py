"""The coroutine scheduler: runs the threads of a block as coroutines, round-robin.

One block at a time. Start every thread's coroutine (it runs to its first suspend), then
repeat rounds: drop finished threads, count live threads and those at a barrier. If all live
threads wait at a barrier, check it is one barrier and nobody exited, then resume them all;
otherwise resume the threads parked at shuffles (after checking that every warp's live lanes
wait at the same shuffle the same number of times). A round always resumes somebody or ends
the block, so a divergent kernel ends with an error code, never a hang.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ...codegen.llvm_types import I1, I32, I64, PTR
from .context import CTAID, CTX_TYPE, NCTAID, NTID, TID, Ctx, ctx_field
from .coro import coro_intrinsic
from .driver_ir import Desc, ErrorCode, LaunchFields, Var, c32, c64, for_range, new_driver, store_ids
from .target import WARP_SIZE


@dataclass
class _BlockCount:
    """Per-round counters over the block."""

    live: Var
    at_barrier: Var
    site: Var      # the first barrier site seen (0: none yet)
    thread: Var    # the first thread seen waiting at it


@dataclass
class _WarpCount:
    """Per-warp state of a round: every live lane must match the first one if any shuffles."""

    first: Var        # first live lane (-1: none yet)
    site: Var         # its site
    count: Var        # its shuffle count
    any_shuffle: Var  # some live lane waits at a shuffle
    bad: Var          # first lane that differs from ``first`` (-1: none)


class _CoroScheduler:
    """Builds the coroutine scheduler (see the module docstring)."""

    def __init__(self, module: ir.Module, kernel: ir.Function, num_params: int):
        self.module, self.kernel = module, kernel
        self.fn, self.b = new_driver(module)
        self.L = LaunchFields(self.b, self.fn.args[0], num_params)
        b = self.b
        self.n = b.mul(b.mul(self.L.block[0], self.L.block[1]), self.L.block[2], name="nthreads")
        self.ctxs = self.L.ptr(Desc.CTXS)
        self.handles = self.L.ptr(Desc.HANDLES)
        self.error_bb = self.fn.append_basic_block("error")
        self.err = {k: Var(b, I64, 0, f"err.{k}") for k in ("code", "a", "b", "ta", "tb")}

    def ctx(self, t: ir.Value) -> ir.Value:
        return self.b.gep(self.ctxs, [t], inbounds=True, source_etype=CTX_TYPE)

    def handle_ptr(self, t: ir.Value) -> ir.Value:
        return self.b.gep(self.handles, [t], inbounds=True, source_etype=PTR)

    def call(self, name: str, h: ir.Value) -> ir.Value:
        return self.b.call(coro_intrinsic(self.module, name), [h])

    def fail(self, code: ErrorCode, a: ir.Value, bv: ir.Value, ta: ir.Value, tb: ir.Value) -> None:
        """Record an error and jump to the error block (the builder moves to a dead block)."""
        b = self.b
        self.err["code"].set(c64(int(code)))
        for k, v in (("a", a), ("b", bv), ("ta", ta), ("tb", tb)):
            self.err[k].set(b.sext(v, I64))
        b.branch(self.error_bb)
        b.position_at_end(self.fn.append_basic_block("dead"))

    def build(self) -> ir.Function:
        b, L = self.b, self.L
        self.init_contexts()
        blk_var = Var(b, I64, 0, "blk.cur")
        with for_range(b, L.begin, L.end, "blk") as blk:
            blk_var.set(blk)
            coords = L.block_coords(blk)
            with for_range(b, c32(0), self.n, "t") as t:
                c = self.ctx(t)
                store_ids(b, c, CTAID, coords)
                b.store(c32(0), ctx_field(b, c, Ctx.SITE))
                b.store(c32(0), ctx_field(b, c, Ctx.SHUFFLES))
            with for_range(b, c32(0), self.n, "start") as t:
                b.store(b.call(self.kernel, L.args + [self.ctx(t)]), self.handle_ptr(t))
            self.rounds()
        b.ret(c32(0))
        self.build_error(blk_var)
        return self.fn

    def init_contexts(self) -> None:
        b, L = self.b, self.L
        xchg = L.ptr(Desc.XCHG)
        frames = L.ptr(Desc.FRAMES)
        slot = L.i64(Desc.FRAME_SLOT)
        nxy = b.mul(L.block[0], L.block[1])
        with for_range(b, c32(0), self.n, "init") as t:
            c = self.ctx(t)
            store_ids(b, c, TID, [b.urem(t, L.block[0]), b.urem(b.udiv(t, L.block[0]), L.block[1]), b.udiv(t, nxy)])
            store_ids(b, c, NTID, L.block)
            store_ids(b, c, NCTAID, L.grid)
            b.store(L.smem, ctx_field(b, c, Ctx.SMEM))
            b.store(L.dyn_smem, ctx_field(b, c, Ctx.DYN_SMEM))
            b.store(xchg, ctx_field(b, c, Ctx.XCHG))
            frame = b.gep(frames, [b.mul(b.zext(t, I64), slot)], source_etype=ir.IntType(8))
            b.store(frame, ctx_field(b, c, Ctx.FRAME))
            b.store(b.trunc(slot, I32), ctx_field(b, c, Ctx.FRAME_CAP))
            b.store(c32(0), ctx_field(b, c, Ctx.FRAME_NEED))
            b.store(t, ctx_field(b, c, Ctx.LTID))
            b.store(self.n, ctx_field(b, c, Ctx.NTHREADS))

    def rounds(self) -> None:
        """Schedule one block until every thread has finished (or an error)."""
        b = self.b
        head = self.fn.append_basic_block("round")
        done = self.fn.append_basic_block("block.done")
        b.branch(head)
        b.position_at_end(head)
        live, nbar, site0, t0 = self.census()
        live_bb = self.fn.append_basic_block("round.live")
        b.cbranch(b.icmp_unsigned("==", live, c32(0)), done, live_bb)
        b.position_at_end(live_bb)
        with b.if_else(b.icmp_unsigned("==", nbar, live)) as (all_at_barrier, some_at_shuffle):
            with all_at_barrier:
                with b.if_then(b.icmp_unsigned("<", live, self.n), likely=False):
                    self.fail(ErrorCode.BARRIER_AFTER_EXIT, site0, b.sub(self.n, live), t0, t0)
                self.resume_where(lambda site: ir.Constant(I1, 1))
            with some_at_shuffle:
                self.resume_where(lambda site: b.icmp_signed("<", site, c32(0)))
        b.branch(head)
        b.position_at_end(done)

    def census(self) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """Reap finished threads; count live ones and those at a barrier; check warps.

        Returns (live, at_barrier, first barrier site, first thread at it).
        """
        b = self.b
        blk = _BlockCount(*(Var(b, I32, 0, n) for n in ("live", "nbar", "site0", "t0")))
        nwarps = b.udiv(b.add(self.n, c32(WARP_SIZE - 1)), c32(WARP_SIZE))
        with for_range(b, c32(0), nwarps, "warp") as w:
            first = b.mul(w, c32(WARP_SIZE))
            last = b.add(first, c32(WARP_SIZE))
            last = b.select(b.icmp_unsigned("<", last, self.n), last, self.n)
            warp = _WarpCount(Var(b, I32, -1, "wt"), Var(b, I32, 0, "wsite"), Var(b, I32, 0, "wcount"),
                              Var(b, I1, 0, "wshfl"), Var(b, I32, -1, "wbad"))
            with for_range(b, first, last, "lane") as t:
                h = b.load(self.handle_ptr(t), typ=PTR)
                with b.if_then(b.icmp_unsigned("!=", h, ir.Constant(PTR, None))):
                    with b.if_else(self.call("llvm.coro.done", h)) as (finished, running):
                        with finished:
                            self.call("llvm.coro.destroy", h)
                            b.store(ir.Constant(PTR, None), self.handle_ptr(t))
                        with running:
                            self.count_lane(t, blk, warp)
            bad = warp.bad.get()
            with b.if_then(b.and_(warp.any_shuffle.get(), b.icmp_signed(">=", bad, c32(0))), likely=False):
                bad_site = b.load(ctx_field(b, self.ctx(bad), Ctx.SITE), typ=I32)
                self.fail(ErrorCode.WARP_DIVERGENCE, warp.site.get(), bad_site, warp.first.get(), bad)
        return blk.live.get(), blk.at_barrier.get(), blk.site.get(), blk.thread.get()

    def count_lane(self, t: ir.Value, blk: _BlockCount, warp: _WarpCount) -> None:
        """Account for live thread ``t``: barrier bookkeeping, then its warp's consistency."""
        b = self.b
        c = self.ctx(t)
        blk.live.set(b.add(blk.live.get(), c32(1)))
        site = b.load(ctx_field(b, c, Ctx.SITE), typ=I32)
        count = b.load(ctx_field(b, c, Ctx.SHUFFLES), typ=I32)
        with b.if_then(b.icmp_signed(">", site, c32(0))):
            blk.at_barrier.set(b.add(blk.at_barrier.get(), c32(1)))
            with b.if_else(b.icmp_unsigned("==", blk.site.get(), c32(0))) as (first, other):
                with first:
                    blk.site.set(site)
                    blk.thread.set(t)
                with other:
                    with b.if_then(b.icmp_unsigned("!=", site, blk.site.get()), likely=False):
                        self.fail(ErrorCode.BARRIER_MISMATCH, blk.site.get(), site, blk.thread.get(), t)
        warp.any_shuffle.set(b.or_(warp.any_shuffle.get(), b.icmp_signed("<", site, c32(0))))
        with b.if_else(b.icmp_signed("<", warp.first.get(), c32(0))) as (first_lane, other_lane):
            with first_lane:
                warp.first.set(t)
                warp.site.set(site)
                warp.count.set(count)
            with other_lane:
                differs = b.or_(b.icmp_unsigned("!=", site, warp.site.get()),
                                b.icmp_unsigned("!=", count, warp.count.get()))
                with b.if_then(b.and_(differs, b.icmp_signed("<", warp.bad.get(), c32(0)))):
                    warp.bad.set(t)

    def resume_where(self, pick: Callable[[ir.Value], ir.Value]) -> None:
        """Resume every live thread whose site satisfies ``pick(site)`` (after clearing it)."""
        b = self.b
        with for_range(b, c32(0), self.n, "resume") as t:
            h = b.load(self.handle_ptr(t), typ=PTR)
            with b.if_then(b.icmp_unsigned("!=", h, ir.Constant(PTR, None))):
                site_ptr = ctx_field(b, self.ctx(t), Ctx.SITE)
                with b.if_then(pick(b.load(site_ptr, typ=I32))):
                    b.store(c32(0), site_ptr)
                    self.call("llvm.coro.resume", h)

    def build_error(self, blk_var: Var) -> None:
        """Destroy the block's live coroutines, write the details into ``desc``, return the code."""
        b = self.b
        b.position_at_end(self.error_bb)
        with for_range(b, c32(0), self.n, "reap") as t:
            h = b.load(self.handle_ptr(t), typ=PTR)
            with b.if_then(b.icmp_unsigned("!=", h, ir.Constant(PTR, None))):
                self.call("llvm.coro.destroy", h)
                b.store(ir.Constant(PTR, None), self.handle_ptr(t))
        b.store(blk_var.get(), self.L.slot(Desc.ERR_BLOCK))
        for k, slot in (("a", Desc.ERR_A), ("b", Desc.ERR_B), ("ta", Desc.ERR_TA), ("tb", Desc.ERR_TB)):
            b.store(self.err[k].get(), self.L.slot(slot))
        b.ret(b.trunc(self.err["code"].get(), I32))


def build_coro_driver(module: ir.Module, kernel: ir.Function, num_params: int) -> ir.Function:
    """The round-robin coroutine scheduler around a kernel emitted in ``"coro"`` mode."""
    return _CoroScheduler(module, kernel, num_params).build()
