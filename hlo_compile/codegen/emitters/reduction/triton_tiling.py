"""The launch of the kernels XLA generates with Triton for reduction fusions.

XLA hands some reduction fusions without a normalization diamond to its block-level Triton
emitter (``kind=kCustom``, backend config ``__triton`` with ``block_level_fusion_config``:
``output_tiles`` and ``num_warps``). Ours runs them with the row and column reduction
kernels; these helpers give those kernels the Triton kernel's launch and vector width so
that both read memory alike:

- one block of ``32·num_warps`` threads per output tile, each block reducing its tile's
  outputs over the whole reduced extent (the grid is the number of tiles);
- Triton's coalescing (its ``Coalesce`` pass) gives each thread ``perThread`` adjacent
  elements of the minor dimension: ``min(128 bits / element bits, max(tile elements /
  threads, 1))``, the tile's reduced extent padded to a power of two; the vector must divide
  the minor extent (Triton's divisibility of the row starts).
"""
from __future__ import annotations

from dataclasses import dataclass

from ....hlo.backend_config import fusion_backend_config
from ....passes.custom_fusions import block_level_config
from ...analysis.fusion_analysis import FusionAnalysis
from ...analysis.hero_shapes import bits_of

TRITON_VECTOR_BITS = 128   # Triton's widest vector access (its coalescing pass' maxVecBits)


@dataclass(frozen=True)
class TritonTiling:
    """The ``__triton`` config of a reduction fusion: output tile ``tile`` over the hero's
    output dims, ``threads`` per block; ``bits`` the widest element type reduced."""

    tile: tuple[int, ...]
    threads: int
    out_dims: tuple[int, ...]
    out_minor_to_major: tuple[int, ...]
    bits: int

    def contiguous(self, count: int) -> tuple[int, int] | None:
        """``(kept, padded)`` for the ``count`` minor-most kept outputs (physical order): how many
        of them one tile covers as one run of consecutive positions (the minor-most dims whole,
        then part of one dim, then 1s), and the tile's padded element count over them; None when
        the tile is not such a run (over those dims, or not 1 on the dims above them)."""
        run, padded, partial, seen = 1, 1, False, 1
        for d in self.out_minor_to_major:
            n, t = self.out_dims[d], self.tile[d]
            if seen >= count:          # a dim above the run: the tile is 1 there
                if t != 1 and n != 1:
                    return None
                continue
            seen *= n
            if (partial and t != 1) or (t < n and n % t):
                return None
            run *= min(n, t)
            padded *= t
            partial = partial or t < n
        return (run, padded) if seen == count else None

    def per_thread(self, tile_elements: int, minor: int) -> int:
        """Triton's perThread for a tile of ``tile_elements`` (padded) over a minor extent
        ``minor``: 128 bits, at most the tile's elements per thread, dividing ``minor``."""
        v = max(1, min(TRITON_VECTOR_BITS // self.bits, max(tile_elements // self.threads, 1)))
        while minor % v:
            v //= 2
        return v


def triton_tiling(analysis: FusionAnalysis | None) -> TritonTiling | None:
    """The fusion's ``__triton`` tiling, or None (no such config, or one tile per output
    that differs)."""
    if analysis is None or analysis.hero_reduce is None:
        return None
    fusion = analysis.fusion
    config = block_level_config(fusion)
    if fusion_backend_config(fusion).get("kind") != "__triton" or config is None:
        return None
    tiles, warps = config
    hero = analysis.hero_reduce
    out = hero.shape.tuple_shapes[0] if hero.shape.is_tuple else hero.shape
    if any(t != tiles[0] for t in tiles) or len(tiles[0]) != out.rank or warps < 1 or any(t < 1 for t in tiles[0]):
        return None
    m2m = tuple(out.minor_to_major) if out.minor_to_major else tuple(range(out.rank - 1, -1, -1))
    bits = max(bits_of(o.shape.element_type) for o in hero.operands[:len(hero.operands) // 2])
    return TritonTiling(tuple(tiles[0]), 32 * warps, tuple(out.dimensions), m2m, bits)


def next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def is_power_of_two(n: int) -> bool:
    return n > 0 and not n & (n - 1)


__all__ = ["TritonTiling", "is_power_of_two", "next_power_of_two", "triton_tiling"]
