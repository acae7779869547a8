"""The tiled path of the dot emitter, and what it shares with the tensor-core path
(``DotKernelEmission``: the kernel, the block's output origin, operand staging, epilogue)."""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ...kernel import open_kernel
from ...llvm_types import I8, compute_type, from_storage, storage_bytes, storage_type, to_storage
from ...target import Target
from .dot_spec import DotKernelSpec
from ...elemental.convert import emit_convert
from .dot_config import epilogue_index
from .dot_staging import OperandStaging, TileReuse, slots_per_thread
from .tiles import (BK, BM, BN, NUM_THREADS, RM, RN, TX, TY, bounds, emit_tiled_mainloop, load_or_zero,
                    staged_slots, store_epilogue)


def _operand_index(rank: int, batch_dims, contract_dims, free_dims, bidx, kidx, fidx) -> list:
    index: list = [None] * rank
    for d, v in zip(batch_dims, bidx):
        index[d] = v
    for d, v in zip(contract_dims, kidx):
        index[d] = v
    for d, v in zip(free_dims, fidx):
        index[d] = v
    return index


class DotKernelEmission:
    """What both dot paths share: the kernel, the fused emitter, the block's output origin
    (``m0``, ``n0``, batch index), staging operand tiles into shared memory and the epilogue."""

    def __init__(self, target: Target, spec: DotKernelSpec):
        self.target, self.spec = target, spec
        self.kernel = open_kernel(target, spec, inline=True)
        self.module = self.kernel.module
        self.kb = kb = self.kernel.kb
        self.b = b = kb.b
        g = spec.geometry
        self.fe = self.kernel.fe
        self.out_ptr = self.kernel.outputs[0]
        t = spec.tiling
        if t is None:
            self.bm, self.bn, self.bk, self.threads = BM, BN, BK, NUM_THREADS
            tx, ty = kb.thread_id(0), kb.thread_id(1)
            self.tid = b.add(tx, b.mul(ty, kb.index(TX)))
            self.m0 = b.mul(kb.block_id(1), kb.index(BM))
            self.n0 = b.mul(kb.block_id(0), kb.index(BN))
            batch = kb.block_id(2)
        else:
            # 1-D block and XLA's grid: block -> (batch, M tile, N tile), N tile fastest
            self.bm, self.bn, self.bk, self.threads = t.bm, t.bn, t.bk, t.threads
            self.tid = kb.thread_id(0)
            if t.m_fastest:
                tx, ty = b.udiv(self.tid, kb.index(t.ty)), b.urem(self.tid, kb.index(t.ty))
            else:
                tx, ty = b.urem(self.tid, kb.index(t.tx)), b.udiv(self.tid, kb.index(t.tx))
            tm, tn = t.tiles(g.M, g.N)
            launch = spec.launch
            if launch.grid[1] == 1 and launch.grid[2] == 1:
                pid, batch = kb.block_id(0), None
            else:
                pid = kb.block_id(0)
                batch = kb.block_id(2) if launch.grid[1] == 1 else b.add(
                    b.mul(kb.block_id(2), kb.index(launch.grid[1])), kb.block_id(1))
            self.n0 = b.mul(b.urem(pid, kb.index(tn)), kb.index(t.bn))
            rest = b.udiv(pid, kb.index(tn))
            self.m0 = b.mul(b.urem(rest, kb.index(tm)) if batch is None else rest, kb.index(t.bm))
            if batch is None:
                batch = b.udiv(rest, kb.index(tm))
        self.tx, self.ty = tx, ty
        self.bidx = kb.delinearize(batch, g.batch) if g.batch else []

    def _load(self, operand: HloInstruction, index: list, conds: list, tile_et: str, zero: ir.Value) -> ir.Value:
        return load_or_zero(self.kb, self.fe, operand, index, conds, tile_et, zero)

    def stage_tiles(self, step: ir.Value, tile_et: str, a_tile: ir.Value, a_offset, b_tile: ir.Value,
                    b_offset) -> None:
        """This K step's operand tiles into shared memory, converted to ``tile_et`` (zero
        outside the bounds): lhs element (mm, kk) of the BM x BK tile at ``a_offset(mm, kk)``,
        rhs element (kk, nn) of the BK x BN tile at ``b_offset(kk, nn)`` (element offsets)."""
        kb, b, g, tid = self.kb, self.b, self.spec.geometry, self.tid
        lhs, rhs = self.spec.dot.operands
        tt = compute_type(tile_et)
        zero = ir.Constant(tt, 0)
        bidx, m0, n0 = self.bidx, self.m0, self.n0

        def store(tile, offset, v, guard):
            # guard: whether the slot lies inside the tile (when the block has more threads than
            # the tile elements); outside it nothing is stored, not even the address computed
            with b.if_then(guard[0]) if guard else contextlib.nullcontext():
                b.store(v, b.gep(tile, [offset()], inbounds=True, source_etype=tt))

        k0 = b.mul(step, kb.index(self.bk))
        slots = staged_slots if self.spec.tiling is None else self._staged_slots
        for mm, kk, m, k, conds, *guard in slots(kb, tid, True, m0, k0, g.M, g.K):
            index = _operand_index(lhs.shape.rank, g.lhs_batch, g.lhs_contract, g.lhs_free, bidx,
                                   kb.delinearize(k, g.k_dims), kb.delinearize(m, g.m_dims))
            store(a_tile, lambda mm=mm, kk=kk: a_offset(mm, kk), self._load(lhs, index, conds, tile_et, zero), guard)
        for nn, kk, n, k, conds, *guard in slots(kb, tid, False, n0, k0, g.N, g.K):
            index = _operand_index(rhs.shape.rank, g.rhs_batch, g.rhs_contract, g.rhs_free, bidx,
                                   kb.delinearize(k, g.k_dims), kb.delinearize(n, g.n_dims))
            store(b_tile, lambda nn=nn, kk=kk: b_offset(kk, nn), self._load(rhs, index, conds, tile_et, zero), guard)

    def epilogue(self, points: Sequence[tuple], along_m: bool = False) -> ir.Module:
        """Each (m, n, slot[, extra store conditions]) of this thread: the accumulator in ``slot`` (at row ``m0 + m``,
        column ``n0 + n`` of the canonical output) injected as the dot's value and the root
        stored; then the kernel ends. ``slot`` a list of ``v`` slots: columns ``n .. n + v -
        1`` (rows ``m .. m + v - 1`` where ``along_m``), the root computed element by element
        and stored as one vector (see ``_store_vectors``)."""
        kb, b, spec, g = self.kb, self.b, self.spec, self.spec.geometry

        def point(mm, nn, slot, extra=()):
            m, n = b.add(self.m0, mm), b.add(self.n0, nn)
            return ([*extra, *bounds(kb, (m, g.M, self.bm), (n, g.N, self.bn))],
                    lambda: [*self.bidx, *kb.delinearize(m, g.m_dims), *kb.delinearize(n, g.n_dims)], slot)
        if any(isinstance(p[2], list) for p in points):
            _store_vectors(self, [(b.add(self.m0, p[0]), b.add(self.n0, p[1]), *p[2:]) for p in points], along_m)
            return self.kernel.finish()
        pts = [point(*p) for p in points]
        if spec.epilogue_moves:
            _store_moved_epilogue(kb, self.fe, spec, self.out_ptr, pts)
        else:
            store_epilogue(kb, self.fe, spec.dot, spec.root, spec.acc_type, self.out_ptr, pts)
        return self.kernel.finish()

    def _staged_slots(self, kb, tid, lhs: bool, origin, k0, size: int, k_size: int):
        """``staged_slots`` of the config tiling: element ``tid + threads s`` of the lhs bm x
        bk tile (k fastest) or the rhs bk x bn tile (n fastest); a sixth item, the condition
        that the slot lies inside the tile, where a tile has fewer elements than the block has
        threads (those slots load nothing and store nothing)."""
        b, bk = kb.b, self.bk
        tile = self.bm if lhs else self.bn
        total = tile * bk
        for s in range(-(-total // self.threads)):
            lin = b.add(tid, kb.index(s * self.threads))
            inside = [b.icmp_unsigned("<", lin, kb.index(total))] if (s + 1) * self.threads > total else []
            if lhs:
                kk, ff = b.urem(lin, kb.index(bk)), b.udiv(lin, kb.index(bk))
            else:
                ff, kk = b.urem(lin, kb.index(tile)), b.udiv(lin, kb.index(tile))
            free, k = b.add(origin, ff), b.add(k0, kk)
            yield (ff, kk, free, k, [*inside, *bounds(kb, (free, size, tile), (k, k_size, bk))], *inside)


def _store_moved_epilogue(kb, fe, spec: DotKernelSpec, out_ptr, points) -> None:
    """``store_epilogue`` for a dot whose value reaches the root through element moves
    (transpose, bitcast, reshape): the root is computed at the moved index, where it reads the
    dot at this very point (the chain is one path of bijections, ``dot_epilogue_chain``)."""
    b, dot, root = kb.b, spec.dot, spec.root
    current: dict = {}
    fe.inject(dot, lambda index: current["value"])
    for conds, index_fn, slot in points:
        with kb.if_all(conds), fe.scope():
            index = epilogue_index(kb, list(spec.epilogue_chain), dot, index_fn())
            current["value"] = emit_convert(b, b.load(slot), spec.acc_type, dot.shape.element_type)
            fe.store(root.shape, out_ptr, index, fe.root_value(root, index))


def _store_vectors(e: DotKernelEmission, groups: Sequence[tuple], along_m: bool = False) -> None:
    """The epilogue as vector stores: each (m, n, slots[, extra conditions]) (GEMM row ``m``,
    columns ``n .. n + v - 1`` of the canonical output, or rows ``m .. m + v - 1`` of column
    ``n`` where ``along_m``, ``slots`` their accumulators; a single slot: a scalar store). Where
    the bounds hold (those of ``(m, n)`` hold for the group: the contiguous dim and the block
    tile are multiples of ``v``), each lane's accumulator is injected as the
    dot's value at its own index and the root computed there (the epilogue's ops per element,
    through the epilogue's element moves where it has them), then the lanes are stored as one
    vector at the first lane's offset: adjacent elements (``contiguous_output``), aligned to
    the vector's size (the offset a multiple of ``v``, kernel buffers 16-byte aligned)."""
    kb, b, fe, spec, g = e.kb, e.b, e.fe, e.spec, e.spec.geometry
    dot, root = spec.dot, spec.root
    chain = list(spec.epilogue_chain or ())
    et = root.shape.element_type
    st = storage_type(et)
    current: dict = {}
    fe.inject(dot, lambda index: current["value"])
    for m, n, slots, *rest in groups:
        lanes = slots if isinstance(slots, list) else [slots]
        conds = [*(rest[0] if rest else ()), *bounds(kb, (m, g.M, e.bm), (n, g.N, e.bn))]
        with kb.if_all(conds), fe.scope():
            fixed = kb.delinearize(n if along_m else m, g.n_dims if along_m else g.m_dims)
            stored, offset = [], None
            for lane, slot in enumerate(lanes):
                first = m if along_m else n
                moving = kb.delinearize(first if lane == 0 else b.add(first, kb.index(lane)),
                                        g.m_dims if along_m else g.n_dims)
                index = [*e.bidx, *moving, *fixed] if along_m else [*e.bidx, *fixed, *moving]
                with fe.scope():
                    if chain and spec.epilogue_moves:
                        index = epilogue_index(kb, chain, dot, index)
                    current["value"] = emit_convert(b, b.load(slot), spec.acc_type, dot.shape.element_type)
                    stored.append(to_storage(b, fe.root_value(root, index), et))
                    if lane == 0:
                        offset = fe.offset(root.shape, index)
            ptr = b.gep(e.out_ptr, [offset], inbounds=True, source_etype=st)
            if len(stored) == 1:
                b.store(stored[0], ptr)
                continue
            vec: ir.Value = ir.Constant(ir.VectorType(st, len(stored)), None)
            for lane, v in enumerate(stored):
                vec = b.insert_element(vec, v, ir.Constant(ir.IntType(32), lane))
            b.store(vec, ptr, align=len(stored) * storage_bytes(et))


def emit_tiled_dot_kernel(target: Target, spec: DotKernelSpec) -> ir.Module:
    if spec.tiling is not None:
        return _emit_configured_dot_kernel(target, spec)
    e = DotKernelEmission(target, spec)
    kb, b = e.kb, e.b
    tx, ty = e.tx, e.ty

    def stage(step, a_tile, a_offset, b_tile, b_offset):
        e.stage_tiles(step, spec.acc_type, a_tile, a_offset, b_tile, b_offset)
    slots = emit_tiled_mainloop(target, kb, e.module, e.fe, spec.acc_type, -(-spec.geometry.K // BK), tx, ty, stage)

    # epilogue: the accumulator is the dot's value at this thread's outputs
    return e.epilogue([(b.add(ty, kb.index(TY * i)), b.add(tx, kb.index(TX * j)), slots[i][j])
                       for i in range(RM) for j in range(RN)])


def _emit_configured_dot_kernel(target: Target, spec: DotKernelSpec) -> ir.Module:
    """The tiled path with the config's tiling (``DotTiling``): operand-typed ``bk x bm`` and
    ``bk x bn`` shared tiles, ``num_stages`` of them, staged with wide loads
    (``dot_staging.py``), each thread's ``rm x rn`` register tile (columns in groups of ``vn``
    adjacent ones, stored as one vector each), outputs outside the block tile skipped. With
    ``spec.tile_reuse`` one tile's bytes hold both operands (``reused_tile_mainloop``)."""
    e = DotKernelEmission(target, spec)
    kb, b, t = e.kb, e.b, spec.tiling
    sa, sb = spec.staging
    at = compute_type(spec.acc_type)
    is_float = spec.acc_type.startswith(("f", "bf"))
    zero = ir.Constant(at, 0)
    with b.goto_entry_block():
        slots = [[b.alloca(at, name=f"acc{i}_{j}") for j in range(t.rn)] for i in range(t.rm)]
    for row in slots:
        for sl in row:
            b.store(zero, sl)
    fma = e.module.declare_intrinsic("llvm.fma", [at], ir.FunctionType(at, [at, at, at])) if is_float else None
    # rows/columns of a thread's register tile beyond the block tile: clamped reads, no store
    first_row = b.mul(e.ty, kb.index(t.vm)) if t.vm > 1 else e.ty
    first_col = b.mul(e.tx, kb.index(t.vn)) if t.vn > 1 else e.tx
    rows = [b.add(first_row, kb.index(t.row(0, i))) if t.row(0, i) else first_row for i in range(t.rm)]
    cols = [b.add(first_col, kb.index(t.column(0, j))) if t.column(0, j) else first_col for j in range(t.rn)]
    rows_c = [r if not t.row_guarded(i) else b.select(b.icmp_unsigned("<", r, kb.index(t.bm)), r, kb.index(0))
              for i, r in enumerate(rows)]
    cols_c = [c if not t.column_guarded(j) else b.select(b.icmp_unsigned("<", c, kb.index(t.bn)), c, kb.index(0))
              for j, c in enumerate(cols)]

    def read(tile, s, offset):
        st = storage_type(s.element_type)
        v = b.load(b.gep(tile, [offset], inbounds=True, source_etype=st), typ=st)
        return emit_convert(b, from_storage(b, v, s.element_type), s.element_type, spec.acc_type)

    def a_values(a_tile, kk: int) -> list:
        return [read(a_tile, sa, b.add(r, kb.index(kk * t.bm))) for r in rows_c]

    def b_values(b_tile, kk: int) -> list:
        return [read(b_tile, sb, b.add(c, kb.index(kk * t.bn))) for c in cols_c]

    def accumulate(a_of: Callable[[int], list], b_of: Callable[[int], list], order: Sequence[int] = ()) -> None:
        acc = [[b.load(sl) for sl in row] for row in slots]
        for kk in order or range(t.bk):
            a_vals, b_vals = a_of(kk), b_of(kk)
            for i in range(t.rm):
                for j in range(t.rn):
                    acc[i][j] = (b.call(fma, [a_vals[i], b_vals[j], acc[i][j]]) if is_float
                                 else b.add(acc[i][j], b.mul(a_vals[i], b_vals[j])))
        pinned = pin_values(e, [v for row in acc for v in row]) if pin_each_step else [v for row in acc for v in row]
        for i in range(t.rm):
            for j in range(t.rn):
                b.store(pinned[i * t.rn + j], slots[i][j])

    r = spec.tile_reuse
    # each K step's accumulators pinned (``pin_values``), with reused tiles only where a
    # prologue stages through branches; else the final ones only (measured on the corpus)
    pin_each_step = r is None or any(_branchy_prologue(o) for o in spec.dot.operands)
    if r is not None:
        first_values = a_values if r.first_lhs else b_values

        def compute(regs: list, first_tile, second_tile) -> None:
            def first_of(kk: int) -> list:
                return regs[kk - r.from_k] if kk >= r.from_k else first_values(first_tile, kk)
            # the values in registers first: their registers are free for the rest
            order = [*range(r.from_k, t.bk), *range(r.from_k)]
            if r.first_lhs:
                accumulate(first_of, lambda kk: b_values(second_tile, kk), order)
            else:
                accumulate(lambda kk: a_values(second_tile, kk), first_of, order)
        reused_tile_mainloop(e, r, lambda tile: [first_values(tile, kk) for kk in range(r.from_k, t.bk)], compute)
        if not pin_each_step:
            final = [sl for row in slots for sl in row]
            for sl, v in zip(final, pin_values(e, [b.load(sl) for sl in final])):
                b.store(v, sl)
    else:
        config_mainloop(e, lambda a_tile, b_tile: accumulate(lambda kk: a_values(a_tile, kk),
                                                             lambda kk: b_values(b_tile, kk)))

    def extra(i, j):
        out = []
        if t.row_guarded(i):
            out.append(b.icmp_unsigned("<", rows[i], kb.index(t.bm)))
        if t.column_guarded(j):
            out.append(b.icmp_unsigned("<", cols[j], kb.index(t.bn)))
        return out
    # one point per group of vn adjacent columns or vm adjacent rows (a vector store)
    if t.vm > 1:
        return e.epilogue([(rows[i], cols[j], [slots[i + lane][j] for lane in range(t.vm)], extra(i, j))
                           for i in range(0, t.rm, t.vm) for j in range(t.rn)], along_m=True)
    return e.epilogue([(rows[i], cols[j], slots[i][j:j + t.vn] if t.vn > 1 else slots[i][j], extra(i, j))
                       for i in range(t.rm) for j in range(0, t.rn, t.vn)])


def _branchy_prologue(operand: HloInstruction) -> bool:
    """Whether the dot operand's fused prologue has a ``concatenate`` (staged through branches)."""
    todo, seen = [operand], set()
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if cur.opcode == "concatenate":
            return True
        if cur.opcode != "parameter":
            todo.extend(cur.operands)
    return False


def pin_values(e: DotKernelEmission, values: Sequence[ir.Value]) -> list[ir.Value]:
    """``values`` (a K step's accumulators) each through ``Target.pin`` (on the GPU an opaque
    identity: no instruction, but it stays where it is), so the multiply-adds
    computing them stay in their K step. Without it LLVM moves them (pure arithmetic) past the
    next K steps' barriers and, where the K loop is unrolled fully, into the epilogue's guarded
    stores (their only use), and every operand value they read from shared memory stays live
    until then: in the corpus up to 106 registers where XLA's kernel (whose ``mma`` does not
    move) has 32. The host target returns the values themselves."""
    return [e.target.pin(e.b, v) for v in values]


def reused_tile_mainloop(e: DotKernelEmission, reuse: TileReuse, read_first: Callable[[ir.Value], list],
                         compute: Callable[[list, ir.Value, ir.Value], None]) -> None:
    """The K loop of a one-stage config tiling whose operand tiles share one buffer of dynamic
    shared memory (``dot_staging.TileReuse``): per K step the first operand is staged at byte
    0, ``read_first(tile)`` reads this thread's values of its rows ``k >= from_k`` into
    registers, then the other operand is staged at ``second_offset`` (over those rows) and
    ``compute(values, first_tile, second_tile)`` runs; a barrier after each of the four (the
    last one also ends the step: the next step's first tile overwrites the second)."""
    kb, b, spec, target = e.kb, e.b, e.spec, e.target
    sa, sb = spec.staging
    first, second = (sa, sb) if reuse.first_lhs else (sb, sa)
    tile = target.shared_array(b, "dot_tiles", I8, 0)   # dynamic: LaunchDims.shared_bytes
    second_tile = b.gep(tile, [kb.index(reuse.second_offset)], inbounds=True, source_etype=I8)
    with kb.loop(0, -(-spec.geometry.K // spec.tiling.bk), name="kstep") as step:
        with e.fe.scope():
            _stage_operand(e, first, step, tile)
        target.barrier(b)
        values = read_first(tile)
        target.barrier(b)
        with e.fe.scope():
            _stage_operand(e, second, step, second_tile)
        target.barrier(b)
        compute(values, tile, second_tile)
        target.barrier(b)


def config_mainloop(e: DotKernelEmission, compute: Callable[[ir.Value, ir.Value], None]) -> None:
    """The K loop of a config-tiled kernel (both paths): the operand tiles staged into
    ``num_stages`` buffers of dynamic shared memory (``dot_staging.py``), ``compute(a_tile,
    b_tile)`` on each K step's buffer (its first bytes), one barrier per step (two with one
    stage). Every K step ends with a barrier after ``compute``."""
    kb, b, t, spec, target = e.kb, e.b, e.spec.tiling, e.spec, e.target
    sa, sb = spec.staging
    smem = target.shared_array(b, "dot_tiles", I8, 0)   # dynamic: LaunchDims.shared_bytes
    stages = max(1, t.num_stages)
    stage_bytes = sa.tile_bytes + sb.tile_bytes

    def tiles(buf: ir.Value | int) -> tuple[ir.Value, ir.Value]:
        base = kb.index(buf * stage_bytes) if isinstance(buf, int) else b.mul(buf, kb.index(stage_bytes))
        a_tile = b.gep(smem, [base], inbounds=True, source_etype=I8)
        b_tile = b.gep(smem, [b.add(base, kb.index(sa.tile_bytes))], inbounds=True, source_etype=I8)
        return a_tile, b_tile

    def stage(step: ir.Value, buf) -> None:
        a_tile, b_tile = tiles(buf)
        with e.fe.scope():
            _stage_operand(e, sa, step, a_tile)
            _stage_operand(e, sb, step, b_tile)

    k_steps = -(-spec.geometry.K // t.bk)
    if stages == 1:
        with kb.loop(0, k_steps, name="kstep") as step:
            stage(step, 0)
            target.barrier(b)
            compute(*tiles(0))
            target.barrier(b)
    else:
        # software pipeline: steps 0..S-2 staged ahead, then step s + S - 1 while s is computed
        for p in range(min(stages - 1, k_steps)):
            stage(kb.index(p), p)
        target.barrier(b)
        with kb.loop(0, k_steps, name="kstep") as step:
            ahead = b.add(step, kb.index(stages - 1))
            if k_steps > stages - 1:
                with b.if_then(b.icmp_unsigned("<", ahead, kb.index(k_steps))):
                    stage(ahead, b.urem(ahead, kb.index(stages)))
            compute(*tiles(b.urem(step, kb.index(stages))))
            target.barrier(b)


def _stage_operand(e: DotKernelEmission, s: OperandStaging, step: ir.Value, tile: ir.Value) -> None:
    """This K step's tile of one operand into shared memory (``tile``: its stage's first byte),
    as ``s`` says: each thread's chunks ``tid + threads c`` of ``vec`` elements along the
    fastest dim, one global load each (a vector where ``vec`` > 1), zero outside the bounds;
    slots past the tile (more threads than chunks) store nothing."""
    kb, b, g, spec = e.kb, e.b, e.spec.geometry, e.spec
    dot = spec.dot
    operand = dot.operands[0 if s.lhs else 1]
    et = s.element_type
    st, ct = storage_type(et), compute_type(et)
    zero = ir.Constant(ct, 0)
    fast, _ = s.chunks
    size = g.M if s.lhs else g.N
    origin = e.m0 if s.lhs else e.n0
    k0 = b.mul(step, kb.index(s.bk))
    rank = operand.shape.rank
    batch_dims = g.lhs_batch if s.lhs else g.rhs_batch
    contract_dims = g.lhs_contract if s.lhs else g.rhs_contract
    free_dims = g.lhs_free if s.lhs else g.rhs_free
    free_sizes = g.m_dims if s.lhs else g.n_dims
    threads = e.threads
    for c in range(slots_per_thread(s, threads)):
        lin = b.add(e.tid, kb.index(c * threads))
        inside = [b.icmp_unsigned("<", lin, kb.index(s.count))] if (c + 1) * threads > s.count else []
        fc, sc = b.urem(lin, kb.index(fast)), b.udiv(lin, kb.index(fast))
        f0 = b.mul(fc, kb.index(s.vec)) if s.vec > 1 else fc
        ff, kk = (sc, f0) if s.along_k else (f0, sc)
        free, k = b.add(origin, ff), b.add(k0, kk)
        conds = [*inside, *bounds(kb, (free, size, s.tile), (k, g.K, s.bk))]
        with b.if_then(inside[0]) if inside else contextlib.nullcontext(), e.fe.scope():
            def index_of(lane: int, free: ir.Value = free, k: ir.Value = k) -> list:
                fl = free if s.along_k or lane == 0 else b.add(free, kb.index(lane))
                kl = k if not s.along_k or lane == 0 else b.add(k, kb.index(lane))
                return _operand_index(rank, batch_dims, contract_dims, free_dims, e.bidx,
                                      kb.delinearize(kl, g.k_dims), kb.delinearize(fl, free_sizes))
            if s.vec == 1:
                values = [e._load(operand, index_of(0), conds, et, zero)]
            else:
                values = _vector_load(e, s, operand, index_of, conds, zero)
            for lane, v in enumerate(values):
                fl = ff if s.along_k or lane == 0 else b.add(ff, kb.index(lane))
                kl = kk if not s.along_k or lane == 0 else b.add(kk, kb.index(lane))
                offset = b.add(b.mul(kl, kb.index(s.tile)), fl)
                b.store(to_storage(b, v, et), b.gep(tile, [offset], inbounds=True, source_etype=st))


def _vector_load(e: DotKernelEmission, s: OperandStaging, operand: HloInstruction, index_of, conds: list,
                 zero: ir.Value) -> list[ir.Value]:
    """``s.vec`` consecutive elements of ``operand`` (lane ``l`` at ``index_of(l)``): one
    vector load of each of its leaf parameters, whose lanes are seeded into the fused emitter,
    then each lane through the operand's prologue; zeros where ``conds`` fail (then nothing is
    read)."""
    kb, b, fe = e.kb, e.b, e.fe
    vt = ir.VectorType(compute_type(s.element_type), s.vec)

    def read() -> ir.Value:
        indices = [index_of(lane) for lane in range(s.vec)]
        for leaf in s.leaves:
            let = leaf.shape.element_type
            lst = storage_type(let)
            ptr = b.gep(fe.parameter_pointer(leaf), [fe.offset(leaf.shape, indices[0])], inbounds=True,
                        source_etype=lst)
            load = b.load(ptr, typ=ir.VectorType(lst, s.vec))
            load.align = s.vec * storage_bytes(let)
            e.target.mark_invariant(load)
            for lane, index in enumerate(indices):
                fe.seed(leaf, index, from_storage(b, b.extract_element(load, kb.index(lane)), let))
        out: ir.Value = ir.Constant(vt, None)
        for lane, index in enumerate(indices):
            out = b.insert_element(out, fe.value(operand, index), kb.index(lane))
        return out

    if conds:
        vec = fe.branch(kb.all_of(conds), read, lambda: ir.Constant(vt, [zero] * s.vec))
    else:
        with fe.scope():
            vec = read()
    return [b.extract_element(vec, kb.index(lane)) for lane in range(s.vec)]
