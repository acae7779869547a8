"""The tensor-core path of the dot emitter: warp-level ``mma.sync.aligned.m16n8k16`` (sm_80+).

Chosen when the kernel is emitted (``use_tensor_cores``, ``dot.py``'s ``PATHS``) where
``target.has_tensor_cores()``: off by default (``CompileOptions.dot_tensor_cores``, which the
pipeline/runtime gives the GPU target it creates). It keeps the tiled path's grid, 256-thread
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
evaluates them on IR values (``_Ix``) and ``tests/test_dot_mma.py`` on integers in a numpy
model of ``ldmatrix`` and ``mma``, so the model checks the very arithmetic the kernel runs.
"""
from __future__ import annotations

from llvmlite import ir

from ...llvm_types import BFLOAT, F16, F32, compute_type
from ...target import Target
from .dot_spec import DotKernelSpec
from .dot_tiled import DotKernelEmission
from .mma_layout import (MMA_M, MMA_N, SMEM_STRIDE, TILES_M, TILES_N, WARP_SIZE, a_ldmatrix_source, acc_position,
                         b_ldmatrix_source, smem_offset, warp_origin)
from .tiles import BK, BM, BN


def use_tensor_cores(target: Target, spec: DotKernelSpec) -> bool:
    # the tensor-core path keeps its own fixed tiling and launch: not with a config's (a
    # config-tiled GEMM fusion runs the tiled path with XLA's launch, operand-typed pipelined
    # tiles and wide loads, on every target; mma.sync with the config's warp tiling is not
    # written yet, see dot_staging.py)
    return target.has_tensor_cores() and spec.tensor_core_refusal is None and spec.tiling is None


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
