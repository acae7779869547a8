"""XLA's tiled-layout arithmetic (XLA docs, ``tiled_layout.md``).

An array element's physical position is found in three steps:

1. Order the dimensions physically, most major first (the reverse of ``minor_to_major``).
2. Apply each tile of the layout in turn. A tile of rank k acts on the k minor-most
   dimensions of the current shape (missing major dimensions count as size 1). A ``*``
   entry (``COMBINE_DIM``) first merges that dimension into the next more minor one
   (bound ``d_i * d_minor``, index ``e_i * d_minor + e_minor``). Every remaining tile entry
   ``t`` splits its dimension ``d`` into an outer dimension ``ceil(d / t)`` and an inner one
   ``t``; the outer dimensions (in order) come first, then the inner ones. The result is the
   shape that the next tile acts on, so repeated tiles tile the inside of earlier tiles.
3. The linear index is the row-major index in the final shape. Positions that no logical
   element maps to are tile padding; the total is also rounded up to a multiple of the
   tail-padding alignment ``L(n)``.

The step functions use only ``//``, ``%``, ``*`` and ``+``, so the same code runs on Python
ints and on numpy arrays (``physical_permutation``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .layout import COMBINE_DIM, Tile

if TYPE_CHECKING:  # annotations only: ``Shape`` delegates its tiling methods to this module
    import numpy as np

    from .shape import Shape


def _physical_order(shape: Shape) -> list[int]:
    """Logical dimension numbers, most major first."""
    if shape.is_tuple or not shape.is_array:
        raise ValueError(f"tiling math needs an array shape, got {shape}")
    return list(reversed(shape.minor_to_major))


def _tiles(shape: Shape) -> tuple[Tile, ...]:
    return shape.layout.tiles if shape.layout is not None else ()


def _apply_tile(dims: list[int], index: list[Any], tile: Tile) -> tuple[list[int], list[Any]]:
    """One tiling step on (bounds, index), both most-major first."""
    k = len(tile.dims)
    if k > len(dims):  # missing major dimensions have bound 1 and index 0
        pad = k - len(dims)
        dims = [1] * pad + dims
        index = [0] * pad + index
    keep_d, keep_i = dims[:len(dims) - k], index[:len(index) - k]
    sub_d, sub_i = dims[len(dims) - k:], index[len(index) - k:]
    # Merge `*` dimensions into their minor neighbour.
    merged: list[tuple[int, Any, int]] = []  # (bound, index, tile size)
    carry_d, carry_i = 1, 0
    for d, e, t in zip(sub_d, sub_i, tile.dims):
        carry_d, carry_i = carry_d * d, carry_i * d + e
        if t == COMBINE_DIM:
            continue
        if t <= 0:
            raise ValueError(f"tile {tile.to_text()} has a non-positive size")
        merged.append((carry_d, carry_i, t))
        carry_d, carry_i = 1, 0
    if tile.dims and tile.dims[-1] == COMBINE_DIM:
        raise ValueError(f"tile {tile.to_text()} ends in '*': there is no minor dimension to combine with")
    outer_d = [-(-d // t) for d, _, t in merged]
    outer_i = [e // t for _, e, t in merged]
    inner_d = [t for _, _, t in merged]
    inner_i = [e % t for _, e, t in merged]
    return keep_d + outer_d + inner_d, keep_i + outer_i + inner_i


def _tiled(shape: Shape, index: Sequence[Any]) -> tuple[list[int], list[Any]]:
    order = _physical_order(shape)
    dims = [shape.dimensions[d] for d in order]
    idx = [index[d] for d in order]
    for tile in _tiles(shape):
        dims, idx = _apply_tile(dims, idx, tile)
    return dims, idx


def _row_major(dims: Sequence[int], index: Sequence[Any]) -> Any:
    linear: Any = 0
    for d, e in zip(dims, index):
        linear = linear * d + e
    return linear


def _alignment(shape: Shape) -> int:
    return max(1, shape.layout.tail_padding_alignment) if shape.layout is not None else 1


def physical_size(shape: Shape) -> int:
    """Number of element slots the layout occupies, tile padding and ``L(n)`` tail included."""
    dims, _ = _tiled(shape, [0] * shape.rank)
    n = 1
    for d in dims:
        n *= d
    align = _alignment(shape)
    return -(-n // align) * align


def linear_index(shape: Shape, index: Sequence[int]) -> int:
    """Physical position of the element at logical ``index``."""
    if len(index) != shape.rank:
        raise ValueError(f"index {tuple(index)} has rank {len(index)}, shape {shape} has rank {shape.rank}")
    for e, d in zip(index, shape.dimensions):
        if not 0 <= e < d:
            raise ValueError(f"index {tuple(index)} is out of bounds for {shape}")
    dims, idx = _tiled(shape, list(index))
    return int(_row_major(dims, idx))


def logical_index(shape: Shape, linear: int) -> tuple[int, ...] | None:
    """The logical index stored at physical position ``linear``; None for a padding slot."""
    if not 0 <= linear < physical_size(shape):
        raise ValueError(f"position {linear} is outside the {physical_size(shape)} slots of {shape}")
    order = _physical_order(shape)
    # Record the bounds before every tiling step, then undo the steps in reverse.
    bounds = [[shape.dimensions[d] for d in order]]
    for tile in _tiles(shape):
        bounds.append(_apply_tile(bounds[-1], [0] * len(bounds[-1]), tile)[0])
    final = bounds[-1]
    total = 1
    for d in final:
        total *= d
    if linear >= total:
        return None  # tail padding
    idx = []
    rest = linear
    for d in reversed(final):
        idx.append(rest % d)
        rest //= d
    idx.reverse()
    for tile, before in zip(reversed(_tiles(shape)), reversed(bounds[:-1])):
        idx = _untile(before, idx, tile)
        if idx is None:
            return None
    logical = [0] * shape.rank
    for pos, d in enumerate(order):
        logical[d] = idx[pos]
    return tuple(int(x) for x in logical)


def _untile(before: list[int], idx: list[int], tile: Tile) -> list[int] | None:
    """Undo one tiling step: ``before`` are the bounds it was applied to."""
    k = len(tile.dims)
    pad = max(0, k - len(before))
    dims = [1] * pad + before
    keep = len(dims) - k
    sub_d = dims[keep:]
    groups: list[list[int]] = [[]]  # dimensions merged into each tiled entry
    for j, t in enumerate(tile.dims):
        groups[-1].append(sub_d[j])
        if t != COMBINE_DIM:
            groups.append([])
    groups.pop()
    sizes = [t for t in tile.dims if t != COMBINE_DIM]
    m = len(sizes)
    outer, inner = idx[keep:keep + m], idx[keep + m:]
    sub_i: list[int] = []
    for group, t, o, i in zip(groups, sizes, outer, inner):
        e = o * t + i
        bound = 1
        for d in group:
            bound *= d
        if e >= bound:
            return None
        parts = []
        for d in reversed(group):
            parts.append(e % d)
            e //= d
        sub_i.extend(reversed(parts))
    full = idx[:keep] + sub_i
    if any(full[:pad]):
        return None
    return full[pad:]


def physical_permutation(shape: Shape) -> np.ndarray:
    """For every logical element in row-major order, its physical linear index (int64)."""
    import numpy as np  # (here: planning never needs numpy, issue 17)
    if shape.rank == 0:
        return np.zeros(1, dtype=np.int64) + linear_index(shape, ())
    grids = np.indices(shape.dimensions, dtype=np.int64).reshape(shape.rank, -1)
    dims, idx = _tiled(shape, list(grids))
    return np.asarray(_row_major(dims, idx), dtype=np.int64).reshape(-1)
