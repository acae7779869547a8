"""The tiled GEMM every generated matrix product shares (the dot and the convolution emitters).

Block tile BM × BN = 64 × 64, K steps of BK = 16, 256 threads (16 × 16) per block, each
thread accumulating a 4 × 4 register tile (rows ``ty + 16 i``, columns ``tx + 16 j``) from
operand tiles staged in shared memory; the accumulator is then injected as the hero's value
and the fusion's root computed and stored (``store_epilogue``). What is refused everywhere
(``gemm_refusal``): complex and pred element types, fusions with more than one output.
"""
from __future__ import annotations

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
    """Each (conds, index_fn, slot) of ``points``: where all ``conds`` hold, the accumulator in
    ``slot`` (converted to the hero's type) is injected as ``hero``'s value at ``index_fn()``
    (the hero's output index, built inside the guarded block) and the fusion's ``root`` is
    computed there and stored at its physical offset in ``out_ptr``."""
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
            v = emit_convert(b, b.load(slot), acc_et, hero.shape.element_type)
            current["point"] = (index, v)
            fe.store(root.shape, out_ptr, index, fe.root_value(root, index))


def emit_tiled_mainloop(target: Target, kb: KernelBuilder, module: ir.Module, fe: FusedEmitter, acc_et: str,
                        k_steps: int, tx: ir.Value, ty: ir.Value, stage) -> list[list[ir.Value]]:
    """The tiled GEMM main loop: ``k_steps`` steps, each ``stage(step, a_tile, a_offset,
    b_tile, b_offset)`` filling the shared BM x BK lhs and BK x BN rhs tiles (in ``acc_et``;
    element (mm, kk) at ``a_offset(mm, kk)``, (kk, nn) at ``b_offset(kk, nn)``), a barrier,
    each thread's RM x RN register tile (rows ty + TY i, columns tx + TX j) accumulated, a
    barrier. Returns the accumulator slots [i][j]."""
    b = kb.b
    at = compute_type(acc_et)
    is_float = acc_et.startswith(("f", "bf"))
    zero = ir.Constant(at, 0)
    a_tile = target.shared_array(b, "lhs_tile", at, BK * BM)
    b_tile = target.shared_array(b, "rhs_tile", at, BK * BN)

    with b.goto_entry_block():
        slots = [[b.alloca(at, name=f"acc{i}_{j}") for j in range(RN)] for i in range(RM)]
    for row in slots:
        for s in row:
            b.store(zero, s)

    fma = module.declare_intrinsic("llvm.fma", [at], ir.FunctionType(at, [at, at, at])) if is_float else None

    with kb.loop(0, k_steps, name="kstep") as step:
        with fe.scope():
            # lhs stored k-major [BK][BM], rhs [BK][BN]
            stage(step, a_tile, lambda mm, kk: b.add(b.mul(kk, kb.index(BM)), mm),
                  b_tile, lambda kk, nn: b.add(b.mul(kk, kb.index(BN)), nn))
            target.barrier(b)
            acc = [[b.load(s) for s in row] for row in slots]
            for kk in range(BK):
                a_vals = [b.load(b.gep(a_tile, [b.add(ty, kb.index(kk * BM + TY * i))], inbounds=True,
                                       source_etype=at), typ=at) for i in range(RM)]
                b_vals = [b.load(b.gep(b_tile, [b.add(tx, kb.index(kk * BN + TX * j))], inbounds=True,
                                       source_etype=at), typ=at) for j in range(RN)]
                for i in range(RM):
                    for j in range(RN):
                        if is_float:
                            acc[i][j] = b.call(fma, [a_vals[i], b_vals[j], acc[i][j]])
                        else:
                            acc[i][j] = b.add(acc[i][j], b.mul(a_vals[i], b_vals[j]))
            for i in range(RM):
                for j in range(RN):
                    b.store(acc[i][j], slots[i][j])
            target.barrier(b)
    return slots
