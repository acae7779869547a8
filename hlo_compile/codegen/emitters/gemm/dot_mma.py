"""The tensor-core path of the dot emitter: warp-level ``mma.sync.aligned.m16n8k16`` (sm_80+).

Chosen when the kernel is emitted (``use_tensor_cores``, ``dot.py``'s ``PATHS``) where
``target.has_tensor_cores()``: off by default (``CompileOptions.dot_tensor_cores``, which the
pipeline/runtime gives the GPU target it creates). Two kernels: with a Triton config tiling
``emit_config_mma_dot_kernel`` (end of this file: the config's launch and staging, a warp
layout per config; also on the host when the options ask for tensor cores, the warp MMA
emulated by ``EmulatedMma``); without one,
the fixed kernel below. The fixed kernel keeps the tiled path's grid, 256-thread
block, 64 × 64 block tile, K steps of 16, operand staging (through the ``FusedEmitter``:
prologues and layouts work as on the tiled path) and epilogue (``FusedEmitter.inject``); only
the shared tiles and the inner product differ:

- Shared tiles in the *input* type (f16 or bf16), both K-contiguous with rows padded to
  ``SMEM_STRIDE`` = 24 elements (48 B: the 8 row addresses of one ``ldmatrix`` phase hit 8
  different 16-byte bank groups): lhs ``[BM][24]`` (row m, column k), rhs ``[BN][24]`` (row n,
  column k, i.e. Bᵀ: the "col" operand of ``mma ... .row.col``). 2 × 64 × 24 × 2 = 6144 B.
- 8 warps as 2 (M) × 4 (N); warp ``w`` owns rows ``32 (w // 4) ..+32`` and columns
  ``16 (w % 4) ..+16`` of the block tile: 2 × 2 mma tiles of 16 × 8, 16 f32 accumulators per
  lane (as the tiled path's 4 × 4).
- Per K step and warp: one ``ldmatrix.x4`` per 16 × 16 lhs tile (2), one ``ldmatrix.x4`` for
  both 16 × 8 rhs tiles, then 4 ``mma`` (``target.warp_mma``: the target's ``WarpMma``).

Layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type" and
"ldmatrix"); ``g = lane // 4`` (groupID), ``t = lane % 4`` (thread in group):

- ``ldmatrix.sync.aligned.m8n8.x4.b16``: lanes 8j..8j+7 give the addresses of rows 0..7 of
  matrix j (8 contiguous b16 each); result register j of lane l holds row ``l // 4``,
  elements ``2 (l % 4)`` (low half) and ``2 (l % 4) + 1`` (high half) of matrix j.
- mma A (16 × 16, row): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
  a3 = A[g+8][2t+8..] (lower k in the low half).
  Our lhs ``ldmatrix`` source for lane l: row ``l % 16``, column ``8 (l // 16)``; so matrix 0
  = rows 0-7/k 0-7, 1 = rows 8-15/k 0-7, 2 = rows 0-7/k 8-15, 3 = rows 8-15/k 8-15, which
  are exactly a0..a3.
- mma B (16 × 8, col): b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]. Our rhs ``ldmatrix``
  source for lane l: row n = ``8 (l // 16) + l % 8`` of the Bᵀ tile, column k =
  ``8 ((l // 8) % 2)``; so registers 0, 1 are b0, b1 of the first 16 × 8 tile (n 0-7) and
  registers 2, 3 those of the second (n 8-15).
- mma C/D (16 × 8, f32): c0 = D[g][2t], c1 = D[g][2t+1], c2 = D[g+8][2t], c3 = D[g+8][2t+1]
  (``acc_position``).

The index maps (``mma_layout.py``) are plain functions of ``lane``/``warp``; the emitter
evaluates them on IR values (``_Ix``) and ``tests/codegen/test_dot_mma.py`` on integers in a numpy
model of ``ldmatrix`` and ``mma``, so the model checks the very arithmetic the kernel runs.
"""
from __future__ import annotations

from llvmlite import ir

from ...elemental.convert import emit_convert
from ...llvm_types import BFLOAT, F16, F32, I16, I32, compute_type
from ...target import Target
from .dot_spec import DotKernelSpec
from .dot_tiled import DotKernelEmission, config_mainloop
from .mma_layout import (MMA_K, MMA_M, MMA_N, SMEM_STRIDE, TILES_M, TILES_N, WARP_SIZE, WarpLayout, a_fragment_offset,
                         a_fragment_owner, b_fragment_offset,
                         a_ldmatrix_source, acc_position, b_fragment_owner, b_ldmatrix_source, smem_offset,
                         warp_origin)
from .tiles import BK, BM, BN


def use_tensor_cores(target: Target, spec: DotKernelSpec) -> bool:
    """Whether ``target`` emits ``spec`` on the tensor-core path: an f16/bf16 dot with f32
    accumulation where the target has warp-level MMA (``has_tensor_cores``); with a config
    tiling, also where the config has a warp layout (``mma_layout.config_warp_layout``) and
    on a target that emulates the warp MMA (``Target.emulates_tensor_cores``: the host when the
    options ask for tensor cores)."""
    if spec.tensor_core_refusal is not None:
        return False
    if spec.tiling is None:
        return target.has_tensor_cores()
    if spec.config_mma_refusal is not None:
        return False
    return target.has_tensor_cores() or target.emulates_tensor_cores()


class _Ix:
    """An index IR value with Python arithmetic (non-negative: ``//`` and ``%`` are unsigned)."""

    def __init__(self, kb, v: ir.Value):
        self.kb, self.v = kb, v

    def _lift(self, o) -> ir.Value:
        return o.v if isinstance(o, _Ix) else self.kb.index(o)

    def _op(self, o, f, reverse=False):
        b = self.kb.b
        x, y = (self._lift(o), self.v) if reverse else (self.v, self._lift(o))
        return _Ix(self.kb, getattr(b, f)(x, y))

    def __add__(self, o):
        return self if isinstance(o, int) and o == 0 else self._op(o, "add")

    def __radd__(self, o):
        return self if o == 0 else self._op(o, "add", True)

    def __mul__(self, o):
        return self._op(o, "mul")

    def __rmul__(self, o):
        return self._op(o, "mul", True)

    def __floordiv__(self, o):
        return self._op(o, "udiv")

    def __mod__(self, o):
        return self._op(o, "urem")


def _value(kb, x) -> ir.Value:
    return x.v if isinstance(x, _Ix) else kb.index(x)


# ---- emission ------------------------------------------------------------------------------------

def emit_mma_dot_kernel(target: Target, spec: DotKernelSpec) -> ir.Module:
    if spec.tiling is not None:
        return emit_config_mma_dot_kernel(target, spec)
    e = DotKernelEmission(target, spec)
    kb, b = e.kb, e.b
    in_et = spec.dot.operands[0].shape.element_type
    it = compute_type(in_et)
    assert it in (F16, BFLOAT) and spec.acc_type == "f32"
    a_tile = target.shared_array(b, "lhs_tile", it, BM * SMEM_STRIDE)
    b_tile = target.shared_array(b, "rhs_tile", it, BN * SMEM_STRIDE)

    tensor_cores = target.warp_mma(b, in_et)

    zero = ir.Constant(F32, 0)
    with b.goto_entry_block():
        slots = [[[b.alloca(F32, name=f"acc{tm}_{tn}_{r}") for r in range(4)] for tn in range(TILES_N)]
                 for tm in range(TILES_M)]
    for s in (s for row in slots for tile in row for s in tile):
        b.store(zero, s)

    tid = _Ix(kb, e.tid)
    lane, warp = tid % WARP_SIZE, tid // WARP_SIZE
    wm0, wn0 = warp_origin(warp)

    def tile_ptr(tile, row, k):
        return b.gep(tile, [_value(kb, smem_offset(row, k))], inbounds=True, source_etype=it)

    a_src = [tile_ptr(a_tile, *a_ldmatrix_source(lane, wm0, tm)) for tm in range(TILES_M)]
    b_src = tile_ptr(b_tile, *b_ldmatrix_source(lane, wn0))

    k_steps = -(-spec.geometry.K // BK)
    with kb.loop(0, k_steps, name="kstep") as step:
        with e.fe.scope():
            # lhs (m, k) at smem_offset(m, k); rhs (k, n) at smem_offset(n, k): Bᵀ, K-contiguous
            e.stage_tiles(step, in_et, a_tile, lambda mm, kk: _value(kb, smem_offset(_Ix(kb, mm), _Ix(kb, kk))),
                          b_tile, lambda kk, nn: _value(kb, smem_offset(_Ix(kb, nn), _Ix(kb, kk))))
            target.barrier(b)
            a_frags = [tensor_cores.load_matrix_x4(b, p) for p in a_src]
            b_regs = tensor_cores.load_matrix_x4(b, b_src)
            b_frags = [b_regs[0:2], b_regs[2:4]]
            for tm in range(TILES_M):
                for tn in range(TILES_N):
                    c = [b.load(s) for s in slots[tm][tn]]
                    d = tensor_cores.mma(b, a_frags[tm], b_frags[tn], c)
                    for r in range(4):
                        b.store(b.extract_value(d, r), slots[tm][tn][r])
            target.barrier(b)

    points = []
    for tm in range(TILES_M):
        for tn in range(TILES_N):
            for r in range(4):
                dm, dn = acc_position(lane, r)
                points.append((_value(kb, wm0 + tm * MMA_M + dm), _value(kb, wn0 + tn * MMA_N + dn),
                               slots[tm][tn][r]))
    return e.epilogue(points)


# ---- the config tiling on tensor cores ------------------------------------------------------------

class NativeMma:
    """The target's warp MMA (``Target.warp_mma``): one ``mma.sync`` per 16 x 8 tile."""

    def __init__(self, target: Target, b: ir.IRBuilder, element_type: str):
        self.mma = target.warp_mma(b, element_type)
        self.fragment_type = getattr(self.mma, "fragment_type", I32 if element_type == "bf16" else ir.VectorType(F16, 2))

    def step(self, b: ir.IRBuilder, a_frags, b_frags, acc) -> None:
        """``acc[tm][tn]`` (4 f32 values each) += A tile ``tm`` x B tile ``tn`` (fragments as
        packed i32 registers, the lower k in the low half)."""
        cast = (lambda v: v) if self.fragment_type == I32 else (lambda v: b.bitcast(v, self.fragment_type))
        a_f = [[cast(v) for v in regs] for regs in a_frags]
        b_f = [[cast(v) for v in regs] for regs in b_frags]
        for tm, regs_a in enumerate(a_f):
            for tn, regs_b in enumerate(b_f):
                d = self.mma.mma(b, regs_a, regs_b, acc[tm][tn])
                acc[tm][tn] = [b.extract_value(d, r) for r in range(4)]


class EmulatedMma:
    """``mma.sync.m16n8k16`` emulated with the target's block primitives (the host): each lane
    publishes its A and B fragment registers in a shared exchange area, ``barrier``, then reads
    the registers of the lanes that hold the rows and columns of its accumulators (the PTX ISA's
    fragment tables, ``mma_layout.a_fragment_owner``/``b_fragment_owner``) and accumulates them
    with f32 ``fma`` in k order. Two exchange areas used in turn: an area is written again only
    after another exchange's barrier (or the K step's closing barrier), so every lane has read it.
    Every thread of the block must take each step (the kernel's K loop is uniform)."""

    def __init__(self, e, element_type: str, layout: WarpLayout):
        self.e, self.et, self.layout = e, element_type, layout
        b, kb = e.b, e.kb
        self.regs = layout.tiles_m * 4 + layout.tiles_n * 2
        self.area = e.threads * self.regs
        self.exchange = e.target.shared_array(b, "mma_exchange", I32, 2 * self.area)
        self.fma = e.module.declare_intrinsic("llvm.fma", [F32], ir.FunctionType(F32, [F32, F32, F32]))
        lane = b.urem(e.tid, kb.index(WARP_SIZE))
        quad = b.urem(lane, kb.index(4))
        t = quad
        # the first thread of this lane's quad (A rows g, g + 8), of the quads of columns 2t, 2t + 1
        self.a_base = b.sub(e.tid, quad)
        self.b_base = b.add(b.sub(e.tid, lane), b.mul(t, kb.index(8)))
        self.parity = 0

    def _half(self, word: ir.Value, half: int) -> ir.Value:
        b = self.e.b
        bits = b.trunc(b.lshr(word, ir.Constant(I32, 16)) if half else word, I16)
        v = b.bitcast(bits, compute_type(self.et))
        return emit_convert(b, v, self.et, "f32")

    def step(self, b: ir.IRBuilder, a_frags, b_frags, acc) -> None:
        kb, lay = self.e.kb, self.layout
        area = self.parity * self.area
        self.parity ^= 1

        def slot(thread: ir.Value, reg: int) -> ir.Value:
            i = b.add(b.mul(thread, kb.index(self.regs)), kb.index(area + reg))
            return b.gep(self.exchange, [i], inbounds=True, source_etype=I32)

        regs = [v for frag in a_frags for v in frag] + [v for frag in b_frags for v in frag]
        for r, v in enumerate(regs):
            b.store(v, slot(self.e.tid, r))
        self.e.target.barrier(b)
        # A[g + 8 rr][k] of each tile tm; B[k][2t + c] of each tile tn
        a_vals = []
        for tm in range(lay.tiles_m):
            rows = [[None] * MMA_K for _ in range(2)]
            for rr in range(2):
                for k in range(MMA_K):
                    lane_j, reg, half = a_fragment_owner(8 * rr, k)   # lane 4 (row % 8) + j: j of the quad
                    word = b.load(slot(b.add(self.a_base, kb.index(lane_j)), 4 * tm + reg), typ=I32)
                    rows[rr][k] = self._half(word, half)
            a_vals.append(rows)
        b_vals = []
        for tn in range(lay.tiles_n):
            cols = [[None] * MMA_K for _ in range(2)]
            for c in range(2):
                for k in range(MMA_K):
                    lane_j, reg, half = b_fragment_owner(k, c)        # lane 4 (2t + c) + j
                    word = b.load(slot(b.add(self.b_base, kb.index(lane_j)), 4 * lay.tiles_m + 2 * tn + reg),
                                  typ=I32)
                    cols[c][k] = self._half(word, half)
            b_vals.append(cols)
        for tm in range(lay.tiles_m):
            for tn in range(lay.tiles_n):
                out = []
                for r in range(4):
                    v = acc[tm][tn][r]
                    for k in range(MMA_K):
                        v = b.call(self.fma, [a_vals[tm][r // 2][k], b_vals[tn][r % 2][k], v])
                    out.append(v)
                acc[tm][tn] = out


def emit_config_mma_dot_kernel(target: Target, spec: DotKernelSpec) -> ir.Module:
    """The config tiling on tensor cores: XLA's launch, grid and operand staging
    (``dot_tiled.config_mainloop``: ``bk x bm``/``bk x bn`` tiles in the operand type, M/N
    contiguous, ``num_stages`` buffers of dynamic shared memory), each warp a grid of 16 x 8
    accumulator tiles (``WarpLayout``); per mma K step the lane's A and B fragment registers are
    read from the staged tiles with 16-bit ``ld.shared`` (``ldmatrix`` wants K-contiguous rows,
    which XLA's shared memory size leaves no room to pad), then one ``mma.sync`` per tile."""
    e = DotKernelEmission(target, spec)
    kb, b, t = e.kb, e.b, spec.tiling
    lay = spec.config_warp_layout
    assert isinstance(lay, WarpLayout)
    et = spec.dot.operands[0].shape.element_type
    engine = NativeMma(target, b, et) if target.has_tensor_cores() else EmulatedMma(e, et, lay)

    zero = ir.Constant(F32, 0)
    with b.goto_entry_block():
        slots = [[[b.alloca(F32, name=f"acc{tm}_{tn}_{r}") for r in range(4)] for tn in range(lay.tiles_n)]
                 for tm in range(lay.tiles_m)]
    for s in (s for row in slots for tile in row for s in tile):
        b.store(zero, s)

    tid = _Ix(kb, e.tid)
    lane, warp = tid % WARP_SIZE, tid // WARP_SIZE
    wm0, wn0 = lay.warp_origin(warp)
    # the lane parts of the fragment elements' offsets (mma_layout.a/b_fragment_offset)
    a_lane = _value(kb, a_fragment_offset(lane, wm0, t.bm, 0, 0, 0, 0)[0])
    b_lane = _value(kb, b_fragment_offset(lane, wn0, t.bn, 0, 0, 0, 0)[0])

    def element(tile, base, offset):
        return b.load(b.gep(tile, [b.add(base, kb.index(offset))], inbounds=True, source_etype=I16), typ=I16)

    def pack(lo, hi):
        return b.or_(b.zext(lo, I32), b.shl(b.zext(hi, I32), ir.Constant(I32, 16)))

    def compute(a_tile, b_tile):
        acc = [[[b.load(s) for s in tile] for tile in row] for row in slots]
        for ks in range(lay.k_steps):
            a_frags, b_frags = [], []
            for tm in range(lay.tiles_m):
                regs = []
                for reg in range(4):
                    halves = [element(a_tile, a_lane, a_fragment_offset(0, 0, t.bm, tm, ks, reg, half)[1])
                              for half in range(2)]
                    regs.append(pack(*halves))
                a_frags.append(regs)
            for tn in range(lay.tiles_n):
                regs = []
                for reg in range(2):
                    halves = [element(b_tile, b_lane, b_fragment_offset(0, 0, t.bn, tn, ks, reg, half)[1])
                              for half in range(2)]
                    regs.append(pack(*halves))
                b_frags.append(regs)
            engine.step(b, a_frags, b_frags, acc)
        for tm in range(lay.tiles_m):
            for tn in range(lay.tiles_n):
                for r in range(4):
                    b.store(acc[tm][tn][r], slots[tm][tn][r])

    config_mainloop(e, compute)
    # replicated warps (more warps than tiles) store nothing
    owner = ([b.icmp_unsigned("<", e.tid, kb.index(lay.warps_m * lay.warps_n * WARP_SIZE))]
             if lay.replicas > 1 else [])
    # accumulators 0, 1 (and 2, 3) of a lane are adjacent columns 2t, 2t + 1 of one row: one
    # 2-vector store where the output's row is contiguous and even (``spec.store_columns``)
    pairs = spec.store_columns % 2 == 0
    points = []
    for tm in range(lay.tiles_m):
        for tn in range(lay.tiles_n):
            for r in range(0, 4, 2) if pairs else range(4):
                dm, dn = acc_position(lane, r)
                acc = slots[tm][tn][r:r + 2] if pairs else slots[tm][tn][r]
                points.append((_value(kb, wm0 + tm * MMA_M + dm), _value(kb, wn0 + tn * MMA_N + dn), acc, owner))
    return e.epilogue(points)
