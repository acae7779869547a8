"""The layouts of the tensor-core path (``mma.sync.aligned.m16n8k16``, ``ldmatrix.x4``): its
constants and the index maps between lanes and fragment elements.

The maps are plain functions of ``lane``/``warp``: the emitter (``dot_mma.py``) evaluates them
on IR values, the dot spec's thread -> output map on affine expressions and
``tests/test_dot_mma.py`` on integers in a numpy model of ``ldmatrix`` and ``mma``, so the
model checks the very arithmetic the kernel runs. ``dot_mma.py`` spells out the PTX ISA's
fragment layouts they follow.
"""
from __future__ import annotations

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
