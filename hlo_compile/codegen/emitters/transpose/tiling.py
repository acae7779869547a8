"""The tile of the tiled transpose emitter (XLA's ``TransposeFusion``, notes/xla.md §b.4).

``TransposeTiling`` tiles the normalised transpose: 32·v on the two swapped dims (v: the
vector size, > 1 only for narrow types whose minor dim moves), 128 threads (32 × 4 rows), the
shared tile padded by one element on the operand-minor tiled dim. Each thread handles v
consecutive elements of the tile's minor dim per loop turn.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

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
    vector: int = 1             # consecutive elements per thread and loop turn (minor dim moves)

    @staticmethod
    def for_transpose(dims: Sequence[int], perm: Sequence[int], vector: int = 1) -> "TransposeTiling":
        n = len(dims)
        tile = [1] * n
        if perm[-1] != n - 1:                      # minor dim moves: 021, 210, ...
            swapped = (n - 1, perm[-1])
        else:                                       # minor dim kept: 102; whole minor dim in the tile
            swapped = (n - 2, perm[-2])
            tile[n - 1] = dims[n - 1]
        if perm[-1] == n - 1:
            vector = 1                              # XLA: vector size = the kept minor dim
        for d in swapped:
            tile[d] = min(TILE * vector, dims[d])
        return TransposeTiling(tuple(dims), tuple(perm), tuple(tile), swapped[0], vector)

    @property
    def per_turn(self) -> int:
        """Tile elements the block covers per loop turn (128·v)."""
        return NUM_THREADS * self.vector

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
        """Loop turns of each thread per phase (8·v for a full 32v × 32v tile)."""
        return -(-self.tile_elements // self.per_turn)

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
