"""The tile of the transpose emitter and the index arithmetic between normalised and real shapes.

``TransposeTiling`` is XLA's tiling of the normalised transpose (notes/xla.md §b.4): 32 on
the two swapped dims, 128 threads (32 × 4 rows), the shared tile padded by one element on
the operand-minor tiled dim. The helpers (de)linearise indices in the kernel's index type.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir

from ..kernel_builder import KernelBuilder

TILE = 32
NUM_ROWS = 4
NUM_THREADS = TILE * NUM_ROWS  # 128
MAX_BLOCKS = 2**31 - 1


@dataclass(frozen=True)
class TransposeTiling:
    """Tile of the normalised operand ``dims``; output dim i is operand dim ``perm[i]``."""

    dims: tuple[int, ...]       # normalised operand dims
    perm: tuple[int, ...]
    tile: tuple[int, ...]       # tile extent per operand dim
    pad_dim: int                # operand dim padded by one element in shared memory

    @staticmethod
    def for_transpose(dims: Sequence[int], perm: Sequence[int]) -> "TransposeTiling":
        n = len(dims)
        tile = [1] * n
        if perm[-1] != n - 1:                      # minor dim moves: 021, 210, ...
            swapped = (n - 1, perm[-1])
        else:                                       # minor dim kept: 102; whole minor dim in the tile
            swapped = (n - 2, perm[-2])
            tile[n - 1] = dims[n - 1]
        for d in swapped:
            tile[d] = min(TILE, dims[d])
        return TransposeTiling(tuple(dims), tuple(perm), tuple(tile), swapped[0])

    @property
    def out_dims(self) -> tuple[int, ...]:
        return tuple(self.dims[p] for p in self.perm)

    @property
    def out_tile(self) -> tuple[int, ...]:
        return tuple(self.tile[p] for p in self.perm)

    @property
    def block_counts(self) -> tuple[int, ...]:
        return tuple(-(-d // t) for d, t in zip(self.dims, self.tile))

    @property
    def num_blocks(self) -> int:
        return math.prod(self.block_counts)

    @property
    def tile_elements(self) -> int:
        return math.prod(self.tile)

    @property
    def iterations(self) -> int:
        """Loop turns of each thread per phase (8 for a full 32 × 32 tile)."""
        return -(-self.tile_elements // NUM_THREADS)

    @property
    def shmem_shape(self) -> tuple[int, ...]:
        return tuple(t + (1 if d == self.pad_dim else 0) for d, t in enumerate(self.tile))

    @property
    def shmem_elements(self) -> int:
        return math.prod(self.shmem_shape)

    @property
    def shmem_strides(self) -> tuple[int, ...]:
        out, s = [], 1
        for n in reversed(self.shmem_shape):
            out.append(s)
            s *= n
        return tuple(reversed(out))


# ---- index arithmetic ------------------------------------------------------------------------

def delinearize(kb: KernelBuilder, linear: ir.Value, dims: Sequence[int]) -> list[ir.Value]:
    """Row-major coordinates of ``linear`` in ``dims`` (size-1 dims are constant 0)."""
    return delinearize_order(kb, linear, dims, range(len(dims) - 1, -1, -1))


def delinearize_order(kb: KernelBuilder, linear: ir.Value, dims: Sequence[int],
                      minor_to_major: Sequence[int]) -> list[ir.Value]:
    b = kb.b
    out: list[ir.Value] = [kb.index(0)] * len(dims)
    order = [d for d in minor_to_major if dims[d] != 1]
    for k, d in enumerate(order):
        out[d] = linear if k == len(order) - 1 else b.urem(linear, kb.index(dims[d]))
        if k < len(order) - 1:
            linear = b.udiv(linear, kb.index(dims[d]))
    return out


def linearize(kb: KernelBuilder, index: Sequence[ir.Value], dims: Sequence[int]) -> ir.Value:
    b = kb.b
    out, stride = None, 1
    for v, n in reversed(list(zip(index, dims))):
        if n != 1:
            term = v if stride == 1 else b.mul(v, kb.index(stride))
            out = term if out is None else b.add(out, term)
        stride *= n
    return out if out is not None else kb.index(0)


def reshape_index(kb: KernelBuilder, index: Sequence[ir.Value], src: Sequence[int],
                  dst: Sequence[int]) -> list[ir.Value]:
    """The row-major index in ``dst`` of the element at ``index`` in ``src`` (same count)."""
    if tuple(src) == tuple(dst):
        return list(index)
    if [n for n in src if n != 1] == [n for n in dst if n != 1]:   # only unit dims differ
        it = iter(v for v, n in zip(index, src) if n != 1)
        return [kb.index(0) if n == 1 else next(it) for n in dst]
    return delinearize(kb, linearize(kb, index, src), dst)


class Guarded:
    """``kb.if_(all of conds)``, or nothing when there is no condition."""

    def __init__(self, kb: KernelBuilder, conds: list[ir.Value]):
        self.kb, self.conds, self.ctx = kb, conds, None

    def __enter__(self):
        if self.conds:
            self.ctx = self.kb.if_(self.kb.all_of(self.conds))
            self.ctx.__enter__()

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc) if self.ctx is not None else False




# ---- the same arithmetic as affine expressions (thread -> data indexing maps) ----------------

def expr_delinearize(linear, dims: Sequence[int], minor_to_major: Sequence[int] | None = None) -> list:
    """``delinearize_order`` as affine expressions (row-major when ``minor_to_major`` is None)."""
    from ...indexing import affine as A
    order = list(minor_to_major) if minor_to_major is not None else list(range(len(dims) - 1, -1, -1))
    out: list = [A.const(0)] * len(dims)
    stride, total = 1, math.prod(dims)
    for d in order:
        n = dims[d]
        if n != 1:
            q = A.floordiv(linear, stride) if stride != 1 else A.as_expr(linear)
            out[d] = q if stride * n == total else A.mod(q, n)
        stride *= n
    return out


def expr_linearize(index: Sequence, dims: Sequence[int], minor_to_major: Sequence[int] | None = None):
    from ...indexing import affine as A
    order = list(minor_to_major) if minor_to_major is not None else list(range(len(dims) - 1, -1, -1))
    out, stride = A.const(0), 1
    for d in order:
        if dims[d] != 1:
            out = A.add(out, A.mul(index[d], stride))
        stride *= dims[d]
    return out


def thread_map(exprs: Sequence, launch, ranges: Sequence[tuple[int, int]], constraints: Sequence[tuple]):
    """An IndexingMap over ``(th_x, th_y, th_z, bl_x, bl_y, bl_z)`` of ``launch``, simplified;
    constraints are ``(expr, lo, hi)``."""
    from dataclasses import replace
    from ...indexing.indexing_map import IndexingMap
    from ...indexing.simplifier import simplify
    from ..launch import WORK_ITEM_DIM_NAMES
    dims = [(0, n - 1) for n in launch.block] + [(0, n - 1) for n in launch.grid]
    m = IndexingMap.make(exprs, dims, ranges, (), [(e, (lo, hi)) for e, lo, hi in constraints])
    return replace(simplify(replace(m, dim_names=WORK_ITEM_DIM_NAMES)), dim_names=WORK_ITEM_DIM_NAMES)
