"""Kernels written once against the target interface, for the host-target tests.

Each ``*_kernel`` function returns an ``emit(target) -> ir.Module`` closure, the shape
``compile_host_kernel`` (and, for NVPTX, the PTX compiler) takes.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from hlo_compile.codegen.llvm_types import F32, I32, I64
from hlo_compile.codegen.target import KernelParam, Target

Emit = Callable[[Target], ir.Module]


def _i32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def _global_index(t: Target, b: ir.IRBuilder) -> ir.Value:
    """blockIdx.x * blockDim.x + threadIdx.x"""
    return b.add(b.mul(t.block_id(b, 0), t.block_dim(b, 0)), t.thread_id(b, 0))


def _load(b: ir.IRBuilder, ptr: ir.Value, idx: ir.Value, ty: ir.Type) -> ir.Value:
    return b.load(b.gep(ptr, [idx], inbounds=True, source_etype=ty), typ=ty)


def _store(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, idx: ir.Value) -> None:
    b.store(v, b.gep(ptr, [idx], inbounds=True, source_etype=v.type))


def elementwise_kernel(n: int) -> Emit:
    """out[i] = tanh(a[i]) + b[i] * exp(-a[i]) for i < n (f32)."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("elementwise")
        k = t.begin_kernel(m, "elementwise", [KernelParam("a"), KernelParam("b"), KernelParam("out", readonly=False)])
        b = k.builder
        a_p, b_p, o_p = k.args
        i = _global_index(t, b)
        with b.if_then(b.icmp_signed("<", i, _i32(n))):
            a = _load(b, a_p, i, F32)
            bv = _load(b, b_p, i, F32)
            r = b.fadd(t.math(b, "tanh", [a]), b.fmul(bv, t.math(b, "exp", [b.fneg(a)])))
            _store(b, r, o_p, i)
        t.end_kernel(b)
        return m
    return emit


def transpose_kernel(rows: int, cols: int) -> Emit:
    """out[cols, rows] = in[rows, cols].T through a 32x33 shared tile; block (32, 8), grid
    (ceil(cols/32), ceil(rows/32)); one barrier."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("transpose")
        k = t.begin_kernel(m, "transpose", [KernelParam("in"), KernelParam("out", readonly=False)])
        b = k.builder
        src, dst = k.args
        tile = t.shared_array(b, "tile", F32, 32 * 33)
        tx, ty = t.thread_id(b, 0), t.thread_id(b, 1)
        bx, by = t.block_id(b, 0), t.block_id(b, 1)
        for j in range(0, 32, 8):
            r = b.add(b.mul(by, _i32(32)), b.add(ty, _i32(j)))
            c = b.add(b.mul(bx, _i32(32)), tx)
            with b.if_then(b.and_(b.icmp_signed("<", r, _i32(rows)), b.icmp_signed("<", c, _i32(cols)))):
                v = _load(b, src, b.add(b.mul(r, _i32(cols)), c), F32)
                _store(b, v, tile, b.add(b.mul(b.add(ty, _i32(j)), _i32(33)), tx))
        t.barrier(b)
        for j in range(0, 32, 8):
            r = b.add(b.mul(bx, _i32(32)), b.add(ty, _i32(j)))   # output row = input column
            c = b.add(b.mul(by, _i32(32)), tx)
            with b.if_then(b.and_(b.icmp_signed("<", r, _i32(cols)), b.icmp_signed("<", c, _i32(rows)))):
                v = _load(b, tile, b.add(b.mul(tx, _i32(33)), b.add(ty, _i32(j))), F32)
                _store(b, v, dst, b.add(b.mul(r, _i32(rows)), c))
        t.end_kernel(b)
        return m
    return emit


def row_sum_kernel(cols: int, block: int = 256) -> Emit:
    """out[row] = sum(in[row, :]); one block of ``block`` threads per row: strided partial
    sums, a shuffle-down tree per warp, warp totals through shared memory, one barrier, and
    a final shuffle tree in warp 0."""
    nwarps = block // 32

    def emit(t: Target) -> ir.Module:
        m = t.new_module("row_sum")
        k = t.begin_kernel(m, "row_sum", [KernelParam("in"), KernelParam("out", readonly=False)])
        b = k.builder
        src, dst = k.args
        partial = t.shared_array(b, "partial", F32, nwarps)
        tid = t.thread_id(b, 0)
        row = t.block_id(b, 0)
        acc_p = b.alloca(F32)
        b.store(ir.Constant(F32, 0.0), acc_p)
        base = b.mul(row, _i32(cols))
        # for (c = tid; c < cols; c += block) acc += in[row, c]
        pre = b.block
        head = b.append_basic_block("loop")
        body = b.append_basic_block("body")
        done = b.append_basic_block("done")
        b.branch(head)
        b.position_at_end(head)
        c = b.phi(I32)
        c.add_incoming(tid, pre)
        b.cbranch(b.icmp_signed("<", c, _i32(cols)), body, done)
        b.position_at_end(body)
        b.store(b.fadd(b.load(acc_p, typ=F32), _load(b, src, b.add(base, c), F32)), acc_p)
        c.add_incoming(b.add(c, _i32(block)), body)
        b.branch(head)
        b.position_at_end(done)
        acc = b.load(acc_p, typ=F32)
        for d in (16, 8, 4, 2, 1):
            acc = b.fadd(acc, t.shfl_down(b, acc, d))
        lane = b.and_(tid, _i32(31))
        warp = b.lshr(tid, _i32(5))
        with b.if_then(b.icmp_signed("==", lane, _i32(0))):
            _store(b, acc, partial, warp)
        t.barrier(b)
        with b.if_then(b.icmp_signed("<", tid, _i32(32))):
            v_p = b.alloca(F32)
            b.store(ir.Constant(F32, 0.0), v_p)
            with b.if_then(b.icmp_signed("<", lane, _i32(nwarps))):
                b.store(_load(b, partial, lane, F32), v_p)
            v = b.load(v_p, typ=F32)
            for d in (16, 8, 4, 2, 1):
                v = b.fadd(v, t.shfl_xor(b, v, d))
            with b.if_then(b.icmp_signed("==", lane, _i32(0))):
                _store(b, v, dst, row)
        t.end_kernel(b)
        return m
    return emit


def bounded_scale_kernel(n: int) -> Emit:
    """out[i] = 2 * a[i], with an early ``ret`` for i >= n (serial path)."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("bounded_scale")
        k = t.begin_kernel(m, "bounded_scale", [KernelParam("a"), KernelParam("out", readonly=False)])
        b = k.builder
        a_p, o_p = k.args
        i = _global_index(t, b)
        with b.if_then(b.icmp_signed(">=", i, _i32(n))):
            t.ret(b)
        _store(b, b.fmul(_load(b, a_p, i, F32), ir.Constant(F32, 2.0)), o_p, i)
        t.end_kernel(b)
        return m
    return emit


def block_scan_kernel(n: int, block: int) -> Emit:
    """Inclusive prefix sum of i32 per block (Hillis-Steele): a runtime loop over strides with
    two barriers inside; threads with i >= n leave with ``ret`` after the loop."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("block_scan")
        k = t.begin_kernel(m, "block_scan", [KernelParam("in"), KernelParam("out", readonly=False)])
        b = k.builder
        src, dst = k.args
        s = t.shared_array(b, "scan", I32, block)
        tid = t.thread_id(b, 0)
        i = _global_index(t, b)
        in_range = b.icmp_signed("<", i, _i32(n))
        v0_p = b.alloca(I32)
        b.store(_i32(0), v0_p)
        with b.if_then(in_range):
            b.store(_load(b, src, i, I32), v0_p)
        _store(b, b.load(v0_p, typ=I32), s, tid)
        pre = b.block
        head, body, done = (b.append_basic_block(x) for x in ("stride", "stride.body", "stride.done"))
        b.branch(head)
        b.position_at_end(head)
        stride = b.phi(I32)
        stride.add_incoming(_i32(1), pre)
        b.cbranch(b.icmp_signed("<", stride, t.block_dim(b, 0)), body, done)
        b.position_at_end(body)
        t.barrier(b)
        add_p = b.alloca(I32)
        b.store(_i32(0), add_p)
        with b.if_then(b.icmp_signed(">=", tid, stride)):
            b.store(_load(b, s, b.sub(tid, stride), I32), add_p)
        add = b.load(add_p, typ=I32)
        t.barrier(b)
        _store(b, b.add(_load(b, s, tid, I32), add), s, tid)
        stride.add_incoming(b.shl(stride, _i32(1)), b.block)
        b.branch(head)
        b.position_at_end(done)
        with b.if_then(b.not_(in_range)):
            t.ret(b)
        _store(b, _load(b, s, tid, I32), dst, i)
        t.end_kernel(b)
        return m
    return emit


def ids_kernel(sync: bool) -> Emit:
    """Every thread of a 3-D grid of 3-D blocks writes its global linear index (computed from
    ids and dims) at that index. With ``sync``, values go through shared memory: each thread
    stores its own, a barrier, then it writes the value of the thread mirrored in the block."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("ids")
        k = t.begin_kernel(m, "ids", [KernelParam("out", readonly=False)])
        b = k.builder
        (out,) = k.args
        g = []
        for axis in range(3):
            g.append(b.add(b.mul(t.block_id(b, axis), t.block_dim(b, axis)), t.thread_id(b, axis)))
        width = b.mul(t.block_dim(b, 0), t.grid_dim(b, 0))
        height = b.mul(t.block_dim(b, 1), t.grid_dim(b, 1))
        lin = b.add(b.mul(b.add(b.mul(g[2], height), g[1]), width), g[0])
        if not sync:
            _store(b, lin, out, lin)
        else:
            nx, ny, nz = (t.block_dim(b, a) for a in range(3))
            tx, ty, tz = (t.thread_id(b, a) for a in range(3))
            ltid = b.add(b.mul(b.add(b.mul(tz, ny), ty), nx), tx)
            nthreads = b.mul(b.mul(nx, ny), nz)
            s = t.shared_array(b, "vals", I32, 1024)
            _store(b, lin, s, ltid)
            t.barrier(b)
            mirror = b.sub(b.sub(nthreads, _i32(1)), ltid)
            v = _load(b, s, mirror, I32)  # the mirrored thread's global index, written there
            _store(b, v, out, v)
        t.end_kernel(b)
        return m
    return emit


def lane_shuffle_kernel(mask: int, down: int) -> Emit:
    """out[ltid, 0] = shfl_xor(ltid, mask), out[ltid, 1] = shfl_down(ltid, down) (i32) for a
    block of any shape; ltid is the linear thread id (x fastest)."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("lanes")
        k = t.begin_kernel(m, "lanes", [KernelParam("out", readonly=False)])
        b = k.builder
        (out,) = k.args
        nx, ny = t.block_dim(b, 0), t.block_dim(b, 1)
        tx, ty, tz = (t.thread_id(b, a) for a in range(3))
        ltid = b.add(b.mul(b.add(b.mul(tz, ny), ty), nx), tx)
        x = t.shfl_xor(b, ltid, mask)
        d = t.shfl_down(b, b.sitofp(ltid, F32), down)
        _store(b, x, out, b.mul(ltid, _i32(2)))
        _store(b, b.fptosi(d, I32), out, b.add(b.mul(ltid, _i32(2)), _i32(1)))
        t.end_kernel(b)
        return m
    return emit


def divergent_kernel(case: str) -> Emit:
    """Deliberately wrong kernels: ``barrier_in_if`` (barrier under tid < 16), ``ret_before_barrier``
    (threads tid >= 16 return first), ``two_barriers`` (a different barrier in each arm),
    ``shuffle_vs_barrier`` (lanes < 16 shuffle while the others wait at a barrier)."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module(case)
        k = t.begin_kernel(m, case, [KernelParam("out", readonly=False)])
        b = k.builder
        (out,) = k.args
        tid = t.thread_id(b, 0)
        low = b.icmp_signed("<", tid, _i32(16))
        if case == "barrier_in_if":
            with b.if_then(low):
                t.barrier(b)
        elif case == "ret_before_barrier":
            with b.if_then(b.not_(low)):
                t.ret(b)
            t.barrier(b)
        elif case == "two_barriers":
            with b.if_else(low) as (then, otherwise):
                with then:
                    t.barrier(b)
                with otherwise:
                    t.barrier(b)
        elif case == "shuffle_vs_barrier":
            with b.if_else(low) as (then, otherwise):
                with then:
                    _store(b, t.shfl_xor(b, tid, 1), out, tid)
                with otherwise:
                    t.barrier(b)
        else:
            raise ValueError(case)
        _store(b, tid, out, tid)
        t.end_kernel(b)
        return m
    return emit


def conversion_kernel(src: ir.Type, dst: ir.Type, helper: str | None = None) -> Emit:
    """out[i] = convert(in[i]) for i < n (n = grid x * block x): ``fptrunc``/``fpext``, or a
    direct call of the soft-float ``helper`` (which every host module defines)."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("convert")
        k = t.begin_kernel(m, "convert", [KernelParam("in", align=1), KernelParam("out", readonly=False, align=1)])
        b = k.builder
        src_p, dst_p = k.args
        i = b.zext(_global_index(t, b), I64)
        x = b.load(b.gep(src_p, [i], source_etype=src), typ=src)
        if helper is not None:
            fn = ir.Function(m, ir.FunctionType(dst, [src]), helper)
            y = b.call(fn, [x])
        elif _width(dst) < _width(src):
            y = b.fptrunc(x, dst)
        else:
            y = b.fpext(x, dst)
        b.store(y, b.gep(dst_p, [i], source_etype=dst))
        t.end_kernel(b)
        return m
    return emit


def _width(ty: ir.Type) -> int:
    return {"half": 16, "bfloat": 16, "float": 32, "double": 64}[str(ty)]


def frame_heavy_kernel(values: int) -> Emit:
    """out[tid, j] = in[tid, j] + 1 for j < values, loaded before a barrier and stored after it,
    so all ``values`` floats live in the coroutine frame."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("frame_heavy")
        k = t.begin_kernel(m, "frame_heavy", [KernelParam("in"), KernelParam("out", readonly=False)])
        b = k.builder
        src, dst = k.args
        base = b.mul(t.thread_id(b, 0), _i32(values))
        vals = [_load(b, src, b.add(base, _i32(j)), F32) for j in range(values)]
        t.barrier(b)
        for j, v in enumerate(vals):
            _store(b, b.fadd(v, ir.Constant(F32, 1.0)), dst, b.add(base, _i32(j)))
        t.end_kernel(b)
        return m
    return emit


def dynamic_shared_kernel() -> Emit:
    """Two static arrays both named ``s`` (distinct, as on NVPTX) and the dynamic shared
    memory (``count == 0``): thread t stores t, 2t and 3t in them; after a barrier it writes
    the sum of the mirrored thread's three values to out[t]."""
    def emit(t: Target) -> ir.Module:
        m = t.new_module("dyn_smem")
        k = t.begin_kernel(m, "dyn_smem", [KernelParam("out", readonly=False)])
        b = k.builder
        (out,) = k.args
        s1 = t.shared_array(b, "s", I32, 5)  # an odd size: the next array starts 16-aligned
        s2 = t.shared_array(b, "s", I32, 256)
        dyn = t.shared_array(b, "dyn", I32, 0)
        tid = t.thread_id(b, 0)
        n = t.block_dim(b, 0)
        _store(b, tid, dyn, tid)
        _store(b, b.mul(tid, _i32(2)), s2, tid)
        with b.if_then(b.icmp_signed("<", tid, _i32(5))):
            _store(b, b.mul(tid, _i32(3)), s1, tid)
        t.barrier(b)
        mirror = b.sub(b.sub(n, _i32(1)), tid)
        v = b.add(_load(b, dyn, mirror, I32), _load(b, s2, mirror, I32))
        with b.if_then(b.icmp_signed("<", mirror, _i32(5))):
            _store(b, b.add(v, _load(b, s1, mirror, I32)), out, tid)
        with b.if_then(b.icmp_signed(">=", mirror, _i32(5))):
            _store(b, v, out, tid)
        t.end_kernel(b)
        return m
    return emit
