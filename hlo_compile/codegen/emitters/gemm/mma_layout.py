"""The layouts of the tensor-core path (``mma.sync.aligned.m16n8k16``, ``ldmatrix.x4``): its
constants and the index maps between lanes and fragment elements.

The maps are plain functions of ``lane``/``warp``: the emitter (``dot_mma.py``) evaluates them
on IR values, the dot spec's thread -> output map on affine expressions and
``tests/codegen/test_dot_mma.py`` on integers in a numpy model of ``ldmatrix`` and ``mma``, so the
model checks the very arithmetic the kernel runs. ``dot_mma.py`` spells out the PTX ISA's
fragment layouts they follow.
"""
from __future__ import annotations

from dataclasses import dataclass

from .tiles import BK, BM, BN, NUM_THREADS

MMA_M, MMA_N, MMA_K = 16, 8, 16
WARP_SIZE = 32
NUM_WARPS = NUM_THREADS // WARP_SIZE          # 8
WARPS_M, WARPS_N = 2, 4
WM, WN = BM // WARPS_M, BN // WARPS_N         # 32 x 16 outputs per warp
TILES_M, TILES_N = WM // MMA_M, WN // MMA_N   # 2 x 2 mma tiles per warp
SMEM_STRIDE = BK + 8                          # padded K-contiguous rows (elements)
MMA_TYPES = ("f16", "bf16")
MMA_SHARED_BYTES = (BM + BN) * SMEM_STRIDE * 2

assert NUM_WARPS == WARPS_M * WARPS_N and BK == MMA_K and WM % MMA_M == 0 and WN == 2 * MMA_N


def warp_origin(warp):
    """Block-tile (row, column) of warp ``warp``'s WM x WN output tile."""
    return (warp // WARPS_N) * WM, (warp % WARPS_N) * WN


def smem_offset(row, k):
    """Element offset of (row, k) in a K-contiguous padded shared tile."""
    return row * SMEM_STRIDE + k


def a_ldmatrix_source(lane, warp_m0, tm):
    """(m, k) in the lhs tile of the 8-element row ``lane`` addresses for the ``ldmatrix.x4``
    of the warp's mma row tile ``tm``."""
    return warp_m0 + tm * MMA_M + lane % 16, (lane // 16) * 8


def b_ldmatrix_source(lane, warp_n0):
    """(n, k) in the rhs (Bᵀ) tile of the row ``lane`` addresses for the warp's one
    ``ldmatrix.x4`` (both 16 x 8 tiles)."""
    return warp_n0 + (lane // 16) * 8 + lane % 8, ((lane // 8) % 2) * 8


def acc_position(lane, r):
    """(row, column) in the 16 x 8 mma tile of accumulator ``r`` (0..3) of ``lane``."""
    return lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2


# ---- the config tiling's warp layout (dot_mma.emit_config_mma_dot_kernel) -------------------------

@dataclass(frozen=True)
class WarpLayout:
    """The ``num_warps`` warps of a config tile ``bm x bn``: ``warps_m x warps_n`` warps (warp
    ``w`` at ``(w % warps_m, w // warps_m)``: over M, then N), each owning a ``tiles_m x
    tiles_n`` grid of 16 x 8 mma tiles (rows ``wm0 + 16 tm``, columns ``wn0 + 8 tn``), K steps
    of ``bk`` in ``k_steps`` mma steps of 16."""

    warps_m: int
    warps_n: int
    tiles_m: int
    tiles_n: int
    k_steps: int
    replicas: int = 1      # warps per warp tile: more warps than 16 x 8 tiles, as Triton replicates

    @property
    def wm(self) -> int:
        return self.tiles_m * MMA_M

    @property
    def wn(self) -> int:
        return self.tiles_n * MMA_N

    def warp_origin(self, warp):
        """Block-tile (row, column) of warp ``warp``'s ``wm x wn`` output tile (warps past
        ``warps_m x warps_n`` repeat the first ones' tiles; only the first store them)."""
        w = warp % (self.warps_m * self.warps_n) if self.replicas > 1 else warp
        return (w % self.warps_m) * self.wm, (w // self.warps_m) * self.wn

    def text(self) -> str:
        rep = f", each tile on {self.replicas} warps (the first stores it)" if self.replicas > 1 else ""
        return (f"{self.warps_m}x{self.warps_n} warps of {self.wm}x{self.wn} ({self.tiles_m}x{self.tiles_n} "
                f"mma tiles of {MMA_M}x{MMA_N}, {self.k_steps} mma K step(s) of {MMA_K} per block_k{rep})")


def config_warp_layout(bm: int, bn: int, bk: int, num_warps: int) -> WarpLayout | str:
    """The warp layout of a config tile, or why it has none (then the FMA path): as Triton's
    mma layout, a warp doubles along M while it has more 16-row tiles than 8-column ones, else
    along N, the tiles dividing the block; warps beyond the tiles repeat them (Triton replicates
    a layout over more warps than the tile has room for)."""
    if bm < MMA_M or bm % MMA_M:
        return f"block_m {bm} is not a multiple of {MMA_M} (mma tile rows)"
    if bn < MMA_N or bn % MMA_N:
        return f"block_n {bn} is not a multiple of {MMA_N} (mma tile columns)"
    if bk < MMA_K or bk % MMA_K:
        return f"block_k {bk} is not a multiple of {MMA_K} (mma K)"
    if num_warps & (num_warps - 1):
        return f"num_warps {num_warps} is not a power of two"
    rows, cols = bm // MMA_M, bn // MMA_N
    wm = wn = 1
    while wm * wn < num_warps:
        if rows % (2 * wm) == 0 and (rows // wm >= cols // wn or cols % (2 * wn)):
            wm *= 2
        elif cols % (2 * wn) == 0:
            wn *= 2
        else:
            # fewer 16 x 8 tiles than warps: the other warps repeat the first ones' tiles
            break
    return WarpLayout(wm, wn, rows // wm, cols // wn, bk // MMA_K, num_warps // (wm * wn))


def a_fragment_element(lane, reg: int, half: int):
    """(row, k) in the 16 x 16 A tile of half ``half`` of register ``reg`` (0..3) of ``lane``
    (mma.m16n8k16 .f16/.bf16 A, row: a0 = A[g][2t..], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
    a3 = A[g+8][2t+8..])."""
    return lane // 4 + 8 * (reg % 2), 2 * (lane % 4) + half + 8 * (reg // 2)


def b_fragment_element(lane, reg: int, half: int):
    """(k, n) in the 16 x 8 B tile of half ``half`` of register ``reg`` (0..1) of ``lane``
    (B, col: b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g])."""
    return 2 * (lane % 4) + half + 8 * reg, lane // 4


def a_fragment_owner(row: int, k: int) -> tuple[int, int, int]:
    """(lane, register, half) holding A[row][k]: the inverse of ``a_fragment_element``."""
    return 4 * (row % 8) + (k % 8) // 2, row // 8 + 2 * (k // 8), k % 2


def b_fragment_owner(k: int, n: int) -> tuple[int, int, int]:
    """(lane, register, half) holding B[k][n]: the inverse of ``b_fragment_element``."""
    return 4 * n + (k % 8) // 2, k // 8, k % 2


def a_fragment_offset(lane, warp_m0, bm: int, tm: int, ks: int, reg: int, half: int):
    """(lane part, constant part) of the element offset in the ``bk x bm`` lhs tile (element
    (m, k) at ``k * bm + m``) of half ``half`` of A register ``reg`` of the warp's mma row tile
    ``tm`` in mma K step ``ks``: ``a_fragment_element`` split so that the lane part is computed
    once and the rest is an immediate offset."""
    return (2 * (lane % 4)) * bm + warp_m0 + lane // 4, (ks * MMA_K + half + 8 * (reg // 2)) * bm + tm * MMA_M + 8 * (reg % 2)


def b_fragment_offset(lane, warp_n0, bn: int, tn: int, ks: int, reg: int, half: int):
    """As ``a_fragment_offset`` for B register ``reg`` of column tile ``tn`` in the ``bk x bn``
    rhs tile (element (k, n) at ``k * bn + n``)."""
    return (2 * (lane % 4)) * bn + warp_n0 + lane // 4, (ks * MMA_K + half + 8 * reg) * bn + tn * MMA_N
