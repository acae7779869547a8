"""A shape's layout as an indexing map: logical index → physical (tiled) index.

Dimensions are first put in physical order (most major first). Each tile then acts on the
minor-most dims of the current index space: ``*`` entries merge a dim into its minor
neighbour, every other entry ``t`` splits its dim ``e`` into ``e floordiv t`` (outer, bound
``ceil(n / t)``) and ``e mod t`` (inner, bound ``t``), outer parts first. The linear offset is
the row-major offset in the final space (tile padding included).
"""
from __future__ import annotations

from hlo_compile.hlo.shape import COMBINE_DIM

from . import affine as A
from .affine import Expr
from .indexing_map import IndexingMap, dims_of
from .reshape_maps import linearize
from .simplifier import simplify
from .memo import BoundedMemo


def tiled_space(shape) -> tuple[list[int], list[Expr]]:
    """Bounds and expressions (in the logical dims) of the final tiled index space."""
    if not shape.is_array:
        raise ValueError(f"layout maps need an array shape, got {shape}")
    order = list(reversed(shape.layout.minor_to_major)) if shape.layout else list(range(shape.rank))
    bounds = [shape.dimensions[d] for d in order]
    exprs: list[Expr] = [A.dim(d) for d in order]
    for tile in (shape.layout.tiles if shape.layout else ()):
        k = len(tile.dims)
        if k > len(bounds):
            bounds = [1] * (k - len(bounds)) + bounds
            exprs = [A.Const(0)] * (k - len(exprs)) + exprs
        head_b, head_e = bounds[:-k] if k else bounds, exprs[:-k] if k else exprs
        tail_b, tail_e = bounds[len(bounds) - k:], exprs[len(exprs) - k:]
        parts: list[tuple[int, Expr, int]] = []
        acc_b, acc_e = 1, A.Const(0)
        for b, e, t in zip(tail_b, tail_e, tile.dims):
            acc_b, acc_e = acc_b * b, A.add(A.mul(acc_e, b), e)
            if t == COMBINE_DIM:
                continue
            parts.append((acc_b, acc_e, t))
            acc_b, acc_e = 1, A.Const(0)
        bounds = head_b + [-(-b // t) for b, _, t in parts] + [t for _, _, t in parts]
        exprs = head_e + [A.floordiv(e, t) for _, e, t in parts] + [A.mod(e, t) for _, e, t in parts]
    return bounds, exprs


def _layout_key(shape) -> tuple:
    """Everything of ``shape`` that ``tiled_space`` reads (dims, physical order, tiles)."""
    layout = shape.layout
    if layout is None:
        return (tuple(shape.dimensions), None, ())
    return (tuple(shape.dimensions), tuple(layout.minor_to_major), tuple(tuple(t.dims) for t in layout.tiles))


def physical_index_map(shape) -> IndexingMap:
    """``(logical dims) -> (tiled physical index)``, simplified."""
    _, exprs = tiled_space(shape)
    return simplify(IndexingMap.make(exprs, dims_of(shape.dimensions)), fold_point_dims=False)


# kept per layout key (``_layout_key``: all that the map depends on); the map is frozen, so
# every caller can share it
_LINEAR: BoundedMemo[IndexingMap] = BoundedMemo(2048)


def linear_index_map(shape) -> IndexingMap:
    """``(logical dims) -> (physical linear offset)``, simplified."""
    if not shape.is_array:
        raise ValueError(f"layout maps need an array shape, got {shape}")

    def make() -> IndexingMap:
        bounds, exprs = tiled_space(shape)
        return simplify(IndexingMap.make([linearize(exprs, bounds)], dims_of(shape.dimensions)),
                        fold_point_dims=False)
    return _LINEAR.get(_layout_key(shape), make)
