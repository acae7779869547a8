"""The tiled GEMM every generated matrix product shares (the dot and the convolution emitters).

Block tile BM × BN = 64 × 64, K steps of BK = 16, 256 threads (16 × 16) per block, each
thread accumulating a 4 × 4 register tile (rows ``ty + 16 i``, columns ``tx + 16 j``) from
operand tiles staged in shared memory; the accumulator is then injected as the hero's value
and the fusion's root computed and stored (``store_epilogue``). What is refused everywhere
(``gemm_refusal``): complex and pred element types, fusions with more than one output.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ....indexing import affine as A
from ...elemental.contraction import accumulation_type
from ...elemental.convert import emit_convert
from ...elemental.fused_emitter import FusedEmitter
from ...analysis.fusion_analysis import bits_of
from ...kernel import Declined, kernel_index_type, output_leaves
from ...kernel_builder import KernelBuilder
from ...llvm_types import compute_type
from ...elemental.partitioner import partition
from ...target import LaunchDims, Target

BM, BN, BK = 64, 64, 16
TX, TY = 16, 16
NUM_THREADS = TX * TY
RM, RN = BM // TY, BN // TX        # register tile per thread (4 x 4)
MIN_WORK = 4096                    # B*M*N*K below this: loop emitter
MIN_MN = 8                         # M or N below this (matrix-vector): loop emitter
MAX_GRID_YZ = 65535


# ---- the GEMM coordinates a thread handles, as affine expressions (thread -> data maps) -----------

def output_element() -> tuple[A.Expr, A.Expr, list[tuple[int, int]]]:
    """``(m, n, symbol ranges)``: the GEMM output element of register ``(s0, s1)`` of thread
    ``(th_x, th_y)`` in block ``(bl_x, bl_y)``: ``(m0 + ty + 16 s0, n0 + tx + 16 s1)``."""
    m = A.add(A.mul(A.dim(4), BM), A.add(A.dim(1), A.mul(A.sym(0), TY)))
    n = A.add(A.mul(A.dim(3), BN), A.add(A.dim(0), A.mul(A.sym(1), TX)))
    return m, n, [(0, RM - 1), (0, RN - 1)]


def staged_element(lhs: bool, k_size: int) -> tuple[A.Expr, A.Expr, list[tuple[int, int]]]:
    """``(m or n, k, symbol ranges)``: the GEMM operand element a thread stages into shared
    memory at K step ``s0``, slot ``s1``: element ``tid + 256 s1`` of the block's BM x BK lhs
    tile (k fastest) or BK x BN rhs tile (n fastest)."""
    tid = A.add(A.dim(0), A.mul(A.dim(1), TX))
    lin = A.add(tid, A.mul(A.sym(1), NUM_THREADS))
    if lhs:
        free, kk = A.add(A.mul(A.dim(4), BM), A.floordiv(lin, BK)), A.mod(lin, BK)
    else:
        free, kk = A.add(A.mul(A.dim(3), BN), A.mod(lin, BN)), A.floordiv(lin, BN)
    tile = BM if lhs else BN
    return free, A.add(A.mul(A.sym(0), BK), kk), [(0, -(-k_size // BK) - 1), (0, tile * BK // NUM_THREADS - 1)]


# ---- launch and refusals ---------------------------------------------------------------------------

def gemm_hero(fusion: HloInstruction, roots: Sequence[HloInstruction],
              find: Callable[[Sequence[HloInstruction]], HloInstruction | None],
              refusal: Callable[[HloInstruction, HloInstruction | None], str | None]) -> HloInstruction:
    """The GEMM hero ``find`` sees among ``roots``; ``Declined`` with ``refusal``'s reason."""
    hero = find(roots)
    why = refusal(fusion, hero)
    if why is not None:
        raise Declined(why)
    return hero


def gemm_plan(fusion: HloInstruction, kernel_name: str, hero: HloInstruction, root: HloInstruction, m: int, n: int,
              z: int) -> dict:
    """The ``KernelSpec`` fields every tiled GEMM plan shares, for ``z`` independent M x N
    products around ``hero`` (the accumulation type follows the elemental emitter's)."""
    acc = accumulation_type(hero.shape.element_type)
    launch, shared = tiled_gemm_launch(m, n, z, acc)
    return dict(name=kernel_name, fusion=fusion, partitioned=partition(fusion.fused_computation), root=root,
                acc_type=acc, launch=launch, index_type=kernel_index_type(fusion, launch), static_shared_bytes=shared)


def tiled_gemm_launch(m: int, n: int, z: int, acc: str) -> tuple[LaunchDims, int]:
    """Launch dims of the tiled GEMM over an M×N output (z independent problems) and its
    static shared bytes (one BM×BK and one BK×BN tile in the accumulation type)."""
    launch = LaunchDims((-(-n // BN), -(-m // BM), z), (TX, TY, 1), 0)
    elt = _bytes(acc)
    return launch, (-(-BK * BM * elt // 16) + -(-BK * BN * elt // 16)) * 16


def _bytes(et: str) -> int:
    return max(1, bits_of(et) // 8)


def gemm_refusal(fusion: HloInstruction, hero: HloInstruction | None, what: str,
                 operands_may_be_pred: bool = False) -> str | None:
    """Why the tiled GEMM cannot take ``fusion`` around ``hero`` (a dot or convolution) on
    element types and outputs alone, or None."""
    if hero is None:
        return f"no single {what} hero reachable through elementwise ops"
    types = [hero.shape.element_type] + [o.shape.element_type for o in hero.operands
                                         if not (operands_may_be_pred and o.shape.element_type == "pred")]
    for t in types:
        if t.startswith("c") or t == "pred" or not t.startswith(("s", "u", "f", "bf")):
            return f"{t} elements"
    leaves = output_leaves(fusion)
    if len(leaves) != 1 or leaves[0][0].shape.is_tuple:
        return "more than one output"
    return None


# ---- staging operand tiles -------------------------------------------------------------------------

def bounds(kb: KernelBuilder, *checks: tuple[ir.Value, int, int]) -> list[ir.Value]:
    """``value < size`` for each ``(value, size, tile)`` whose size the tile does not divide
    (where it does, every tile lies inside)."""
    b = kb.b
    return [b.icmp_unsigned("<", v, kb.index(size)) for v, size, tile in checks if size % tile]


def staged_slots(kb: KernelBuilder, tid: ir.Value, lhs: bool, origin: ir.Value, k0: ir.Value, size: int,
                 k_size: int) -> Iterator[tuple[ir.Value, ir.Value, ir.Value, ir.Value, list[ir.Value]]]:
    """The elements thread ``tid`` stages of this K step's lhs tile (BM x BK, k fastest among
    consecutive threads) or rhs tile (BK x BN, n fastest): per slot ``(row or column in the
    tile, k in the tile, GEMM m or n, GEMM k, bounds conditions)``; ``origin`` is the block's
    first m (lhs) or n (rhs), ``k0`` the step's first k, ``size`` M or N."""
    b = kb.b
    tile = BM if lhs else BN
    for s in range(tile * BK // NUM_THREADS):
        lin = b.add(tid, kb.index(s * NUM_THREADS))
        if lhs:
            kk, ff = b.urem(lin, kb.index(BK)), b.udiv(lin, kb.index(BK))
        else:
            ff, kk = b.urem(lin, kb.index(BN)), b.udiv(lin, kb.index(BN))
        free, k = b.add(origin, ff), b.add(k0, kk)
        yield ff, kk, free, k, bounds(kb, (free, size, tile), (k, k_size, BK))


@dataclass(frozen=True)
class StagingSlot:
    """One element a thread stages per K step, what does not change from step to step: its
    row (lhs) or column (rhs) in the tile ``ff`` and GEMM m or n ``free``, its k in the tile
    ``kk``, the bounds conditions of ``free``, and where it goes in shared memory ``ptr``."""
    ff: ir.Value
    kk: ir.Value
    free: ir.Value
    free_conds: list[ir.Value]
    ptr: ir.Value


def staging_slots(kb: KernelBuilder, tid: ir.Value, lhs: bool, origin: ir.Value, size: int, tile: ir.Value,
                  tile_type: ir.Type) -> list[StagingSlot]:
    """The elements thread ``tid`` stages of each K step's lhs tile (BM x BK, k fastest among
    consecutive threads) or rhs tile (BK x BN, n fastest), as ``staged_slots`` (element ``tid
    + 256 s``), computed once before the K loop: the slots share their k (lhs) or column
    (rhs), and lie at constant distances in ``tile`` (``lhs_tile_offset``,
    ``rhs_tile_offset``) from the first one, one pointer plus a constant each. ``origin`` is
    the block's first m (lhs) or n (rhs), ``size`` M or N."""
    b = kb.b
    I = kb.index
    n = BM if lhs else BN
    # consecutive slots: NUM_THREADS // BK more tile rows (lhs), NUM_THREADS // BN more k (rhs)
    if lhs:
        kk, ff0 = b.urem(tid, I(BK)), b.udiv(tid, I(BK))
        step = NUM_THREADS // BK
        assert step % TY == 0, "lhs slots must keep their place among a thread's register rows"
        delta = step // TY            # lhs_tile_offset: the mm // TY term
        first = lhs_tile_offset(kb, ff0, kk)
    else:
        ff0, kk0 = b.urem(tid, I(BN)), b.udiv(tid, I(BN))
        step = NUM_THREADS // BN
        delta = step * BN             # rhs_tile_offset: the kk term
        first = rhs_tile_offset(kb, kk0, ff0)
    base = b.gep(tile, [first], inbounds=True, source_etype=tile_type)
    out = []
    for s in range(n * BK // NUM_THREADS):
        if lhs:
            ff, k_in = (ff0 if s == 0 else b.add(ff0, I(s * step))), kk
        else:
            ff, k_in = ff0, (kk0 if s == 0 else b.add(kk0, I(s * step)))
        free = b.add(origin, ff)
        ptr = base if s == 0 else b.gep(base, [I(s * delta)], inbounds=True, source_etype=tile_type)
        out.append(StagingSlot(ff, k_in, free, bounds(kb, (free, size, n)), ptr))
    return out


def load_or_zero(kb: KernelBuilder, fe: FusedEmitter, operand: HloInstruction, index: list, conds: list,
                 tile_et: str, zero: ir.Value) -> ir.Value:
    """``operand`` at ``index`` converted to ``tile_et`` where every condition holds, else
    ``zero`` (a real branch: the read may be out of bounds otherwise)."""
    b = kb.b
    et = operand.shape.element_type

    def read():
        return emit_convert(b, fe.value(operand, index), et, tile_et)
    if not conds:
        with fe.scope():
            return read()
    return fe.branch(kb.all_of(conds), read, lambda: zero)


def store_epilogue(kb: KernelBuilder, fe: FusedEmitter, hero: HloInstruction, root: HloInstruction, acc_et: str,
                   out_ptr: ir.Value, points) -> None:
    """Each (conds, index_fn, slot) of ``points``: where all ``conds`` hold, the accumulator
    ``slot`` (its value, or a pointer to it), converted to the hero's type, is injected as
    ``hero``'s value at ``index_fn()`` (the hero's output index, built inside the guarded
    block) and the fusion's ``root`` is computed there and stored at its physical offset in
    ``out_ptr``."""
    b = kb.b
    current: dict = {}

    def hero_value(index: Sequence[ir.Value]) -> ir.Value:
        idx, v = current["point"]
        if len(idx) != len(index) or any(x is not y for x, y in zip(idx, index)):
            raise AssertionError(f"tiled GEMM epilogue: %{hero.name} read at an index other than its output's")
        return v

    fe.inject(hero, hero_value)
    for conds, index_fn, slot in points:
        with kb.if_all(conds), fe.scope():
            index = index_fn()
            acc = b.load(slot) if isinstance(slot.type, ir.PointerType) else slot
            v = emit_convert(b, acc, acc_et, hero.shape.element_type)
            current["point"] = (index, v)
            fe.store(root.shape, out_ptr, index, fe.root_value(root, index))


def lhs_tile_offset(kb: KernelBuilder, mm: ir.Value, kk: ir.Value) -> ir.Value:
    """The element offset of lhs tile element (mm, kk) in shared memory: k-major, and in a k
    row the RM rows ``ty + TY i`` of thread ``ty`` side by side (at ``RM ty + i``), so that a
    thread reads its RM values of a k row as one vector."""
    b, I = kb.b, kb.index
    return b.add(b.add(b.mul(kk, I(BM)), b.mul(b.urem(mm, I(TY)), I(RM))), b.udiv(mm, I(TY)))


def rhs_tile_offset(kb: KernelBuilder, kk: ir.Value, nn: ir.Value) -> ir.Value:
    """The element offset of rhs tile element (kk, nn) in shared memory: row-major [BK][BN]
    (a thread's RN columns ``tx + TX j`` apart, read one by one: side by side they would
    cost registers, see ``tiled_mainloop``)."""
    b, I = kb.b, kb.index
    return b.add(b.mul(kk, I(BN)), nn)


def emit_tiled_mainloop(target: Target, kb: KernelBuilder, module: ir.Module, fe: FusedEmitter, acc_et: str,
                        k_steps: int, tx: ir.Value, ty: ir.Value, stage) -> list[list[ir.Value]]:
    """``tiled_mainloop`` with each K step's tiles staged by ``stage(step, a_tile, a_offset,
    b_tile, b_offset)`` (lhs element (mm, kk) at element offset ``a_offset(mm, kk)``, rhs
    element (kk, nn) at ``b_offset(kk, nn)``), and each accumulator's final value stored in a
    slot of its own (an ``alloca``): returns the slots [i][j]."""
    b = kb.b

    def prepare(a_tile: ir.Value, b_tile: ir.Value) -> Callable[[ir.Value], None]:
        def stage_step(step: ir.Value) -> None:
            stage(step, a_tile, lambda mm, kk: lhs_tile_offset(kb, mm, kk),
                  b_tile, lambda kk, nn: rhs_tile_offset(kb, kk, nn))
        return stage_step
    values = tiled_mainloop(target, kb, module, fe, acc_et, k_steps, tx, ty, prepare)
    with b.goto_entry_block():
        slots = [[b.alloca(v.type, name=f"acc{i}_{j}") for j, v in enumerate(row)] for i, row in enumerate(values)]
    for row, slot_row in zip(values, slots):
        for v, s in zip(row, slot_row):
            b.store(v, s)
    return slots


def _vector_intrinsic(module: ir.Module, name: str, vt: ir.VectorType, args: list[ir.Type]) -> ir.Function:
    """The intrinsic ``name`` returning vectors ``vt`` of ``args`` (declared by hand: llvmlite
    mangles scalar types only); a vector of pointers among ``args`` is mangled too."""
    suffix = f".v{vt.count}{vt.element.intrinsic_name}"
    for a in args:
        if isinstance(a, ir.VectorType) and isinstance(a.element, ir.PointerType):
            suffix += f".v{a.count}p{a.element.addrspace}"
    existing = module.globals.get(name + suffix)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(module, ir.FunctionType(vt, args), name=name + suffix)


def tiled_mainloop(target: Target, kb: KernelBuilder, module: ir.Module, fe: FusedEmitter, acc_et: str,
                   k_steps: int, tx: ir.Value, ty: ir.Value,
                   prepare: Callable[[ir.Value, ir.Value], Callable[[ir.Value], None]]) -> list[list[ir.Value]]:
    """The tiled GEMM main loop: ``k_steps`` (>= 1) steps, each filling the shared BM x BK lhs
    and BK x BN rhs tiles (in ``acc_et``, laid out as ``lhs_tile_offset`` and
    ``rhs_tile_offset`` say), a barrier, each thread's RM x RN register tile (rows ty + TY i,
    columns tx + TX j) accumulated, a barrier. ``prepare(a_tile, b_tile)``, called before the
    loop (where what does not change from step to step is computed), returns the staging of
    one step, ``stage(step)``. Returns the accumulators' values after the loop, [i][j].

    Emitted so that O3 has little to do (its alias queries grow with the square of the loop's
    memory accesses of loop-invariant address: LICM's promotion candidates, GVN's memory
    dependences): a bottom-tested loop (one iteration at least); the register tile's rows
    RN-wide vectors, phi nodes of the loop (no memory slots for SROA and LICM to promote),
    each k row's products one vector ``llvm.fma`` (or mul and add) per register row with the
    lhs value splat (the backend splits them into RM x RN scalar ones); per k row one vector
    load of the thread's RM lhs values (side by side: PTX ``ld.shared.v4 [base+offset]``)
    and one ``llvm.masked.gather`` of its RN rhs values (TX apart: RN scalar loads in PTX;
    read as one vector they cost registers), both off one base pointer per operand."""
    b = kb.b
    at = compute_type(acc_et)
    is_float = acc_et.startswith(("f", "bf"))
    zero = ir.Constant(at, 0)
    a_tile = target.shared_array(b, "lhs_tile", at, BK * BM)
    b_tile = target.shared_array(b, "rhs_tile", at, BK * BN)
    a_base = b.gep(a_tile, [b.mul(ty, kb.index(RM))], inbounds=True, source_etype=at)
    b_base = b.gep(b_tile, [tx], inbounds=True, source_etype=at)
    vt = ir.VectorType(at, RN)
    fma = _vector_intrinsic(module, "llvm.fma", vt, [vt, vt, vt]) if is_float else None
    pvt = ir.VectorType(b_base.type, RN)
    i1v = ir.VectorType(ir.IntType(1), RN)
    gather = _vector_intrinsic(module, "llvm.masked.gather", vt, [pvt, ir.IntType(32), i1v, vt])
    stage = prepare(a_tile, b_tile)

    pre = b.block
    body = b.append_basic_block("kstep.body")
    done = b.append_basic_block("kstep.done")
    b.branch(body)
    b.position_at_end(body)
    step = b.phi(kb.index_type, name="kstep")
    step.add_incoming(kb.index(0), pre)
    # row i of the register tile, a vector of its RN columns
    phis = [b.phi(vt, name=f"acc{i}") for i in range(RM)]
    for p in phis:
        p.add_incoming(ir.Constant(vt, [zero] * RN), pre)
    acc: list[ir.Value] = list(phis)
    with fe.scope():
        stage(step)
        target.barrier(b)

        def read_rows(kk: int) -> ir.Value:
            # this thread's RM values of lhs tile row kk, side by side: one vector load
            ptr = a_base if kk == 0 else b.gep(a_base, [kb.index(kk * BM)], inbounds=True, source_etype=at)
            return b.load(ptr, typ=ir.VectorType(at, RM), align=min(16, RM * _bytes(acc_et)))

        def read_columns(kk: int) -> ir.Value:
            # its RN values of rhs tile row kk, TX apart: a gather (the backend makes it RN
            # scalar loads), one memory access for the middle end instead of RN
            ptrs = b.gep(b_base, [ir.Constant(ir.VectorType(kb.index_type, RN), [kk * BN + TX * j for j in range(RN)])],
                         inbounds=True, source_etype=at)
            ptrs.type = pvt          # llvmlite types a GEP on vector indices as a scalar pointer
            align = ir.Constant(ir.IntType(32), _bytes(acc_et))
            return b.call(gather, [ptrs, align, ir.Constant(i1v, [1] * RN), ir.Constant(vt, None)])
        for kk in range(BK):
            a_vec, b_vec = read_rows(kk), read_columns(kk)
            for i in range(RM):
                # a_i * (b_0 .. b_RN-1) + acc_i: the backend splits it into RN scalar fmas
                a_i = b.shuffle_vector(a_vec, a_vec, ir.Constant(ir.VectorType(ir.IntType(32), RN), [i] * RN))
                acc[i] = b.call(fma, [a_i, b_vec, acc[i]]) if is_float else b.add(acc[i], b.mul(a_i, b_vec))
        target.barrier(b)
    latch = b.block
    nxt = b.add(step, kb.index(1), name="kstep.next", flags=("nsw", "nuw"))
    step.add_incoming(nxt, latch)
    for i in range(RM):
        phis[i].add_incoming(acc[i], latch)
    b.cbranch(b.icmp_unsigned("<", nxt, kb.index(k_steps)), body, done)
    b.position_at_end(done)
    # the values after the loop: the last step's (the loop's exit block has one predecessor)
    return [[b.extract_element(acc[i], ir.Constant(ir.IntType(32), j)) for j in range(RN)] for i in range(RM)]
