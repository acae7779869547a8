"""Reshape and bitcast maps: linearise one index, delinearise into the other, simplify.

The map from an index of shape ``src`` to the index of shape ``dst`` holding the same element
in row-major (or, for bitcasts, physical) order. Simplification keeps dims of size one as
variables, as XLA does for these ops.
"""
from __future__ import annotations

from typing import Sequence

from hlo_compile.hlo.element_types import ELEMENT_TYPES

from . import affine as A
from .affine import Expr
from .indexing_map import IndexingMap, dims_of
from .simplifier import simplify
from .memo import BoundedMemo


def linearize(exprs: Sequence[Expr], sizes: Sequence[int]) -> Expr:
    out: Expr = A.Const(0)
    for e, n in zip(exprs, sizes):
        out = A.add(A.mul(out, n), e)
    return out


def delinearize(linear: Expr, sizes: Sequence[int]) -> list[Expr]:
    """Row-major digits of ``linear``: the first has no ``mod``, the last no ``floordiv``."""
    out: list[Expr] = []
    stride = 1
    strides = []
    for n in reversed(sizes):
        strides.append(stride)
        stride *= n
    strides.reverse()
    for i, (n, st) in enumerate(zip(sizes, strides)):
        e = A.floordiv(linear, st)
        if i > 0:
            e = A.mod(e, n)
        out.append(e)
    return out


def _empty(src: Sequence[int], dst_rank: int) -> IndexingMap:
    """The map of a reshape or bitcast without elements (a zero-size dim: strides of 0)."""
    return simplify(IndexingMap.make([A.Const(0)] * dst_rank, dims_of(src)), fold_point_dims=False)


# kept per (src, dst) dims, all that the map depends on; the map is frozen, so every caller
# can share it
_RESHAPE: BoundedMemo[IndexingMap] = BoundedMemo(2048)


def reshape_map(src: Sequence[int], dst: Sequence[int]) -> IndexingMap:
    """Map from an index of ``src`` to the ``dst`` index of the same row-major element."""
    key = (tuple(int(n) for n in src), tuple(int(n) for n in dst))
    return _RESHAPE.get(key, lambda: _reshape_map(*key))


def _reshape_map(src: tuple[int, ...], dst: tuple[int, ...]) -> IndexingMap:
    if 0 in src or 0 in dst:
        return _empty(src, len(dst))
    lin = linearize([A.dim(i) for i in range(len(src))], src)
    m = IndexingMap.make(delinearize(lin, dst), dims_of(src))
    return simplify(m, fold_point_dims=False)


def _major_to_minor(shape) -> list[int]:
    return list(reversed(shape.layout.minor_to_major)) if shape.layout else list(range(shape.rank))


def _bits(element_type: str) -> int | None:
    info = ELEMENT_TYPES.get(element_type)
    return getattr(info, "bits", None) if info is not None else None


# kept per (src, dst) shapes (frozen, compared by every field); the map is frozen, so every
# caller can share it
_BITCAST: BoundedMemo[IndexingMap | None] = BoundedMemo(2048)


def bitcast_map(src, dst) -> IndexingMap | None:
    """Map from an index of ``src`` to the ``dst`` index of the same physical element, or None
    when the bitcast is not a pure relabelling (tiles, different element widths)."""
    return _BITCAST.get((src, dst), lambda: _bitcast_map(src, dst))  # (unhashable shapes: not kept)


def _bitcast_map(src, dst) -> IndexingMap | None:
    for s in (src, dst):
        if not s.is_array or (s.layout is not None and s.layout.tiles):
            return None
    if src.element_type != dst.element_type:
        bs, bd = _bits(src.element_type), _bits(dst.element_type)
        if bs is None or bs != bd:
            return None
    if src.element_count() != dst.element_count():
        return None
    if src.element_count() == 0:
        return _empty(src.dimensions, dst.rank)
    s_order, d_order = _major_to_minor(src), _major_to_minor(dst)
    s_phys = [A.dim(i) for i in s_order]
    lin = linearize(s_phys, [src.dimensions[i] for i in s_order])
    d_phys = delinearize(lin, [dst.dimensions[i] for i in d_order])
    exprs: list[Expr] = [A.Const(0)] * dst.rank
    for pos, logical in enumerate(d_order):
        exprs[logical] = d_phys[pos]
    m = IndexingMap.make(exprs, dims_of(src.dimensions))
    return simplify(m, fold_point_dims=False)
