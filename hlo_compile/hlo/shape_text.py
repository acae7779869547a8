"""Shape text (``f32[2,<=3]{1,0:T(2,2)S(1)}``, tuples, ``b(...)``) to ``Shape``.

Array shapes are decoded once per distinct text and memoized: a module repeats the same
few shape strings thousands of times.
"""
from __future__ import annotations

import functools
import re

from .element_types import ELEMENT_TYPES, TYPE_ALIASES, is_array_type
from .shape import COMBINE_DIM, UNBOUNDED_DIM, Layout, Shape, Tile, default_layout
from .sizes import dims_error


class ShapeError(ValueError):
    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


_ARRAY = re.compile(r"([a-z][a-z0-9_]*)\[([^\]]*)\](?:\{([^{}]*)\})?")
_SUFFIX = re.compile(r"(D|T|L|#|\*|E|S|SC|P|M)\(")
_ORDER = ["D", "T", "L", "#", "*", "E", "S", "SC", "P", "M"]


def _paren_groups(text: str, pos: int) -> tuple[list[str], int]:
    """Consecutive ``(...)`` groups starting at ``pos``: their contents and the end offset."""
    groups = []
    while pos < len(text) and text[pos] == "(":
        depth, i = 0, pos
        while i < len(text):
            if text[i] == "(":
                depth += 1
            elif text[i] == ")":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        if depth:
            raise ShapeError("unbalanced parentheses in layout", pos)
        groups.append(text[pos + 1:i])
        pos = i + 1
    return groups, pos


def _int(text: str, what: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"-?\d+", text):
        raise ShapeError(f"expects an integer in {what}, got '{text}'")
    return int(text)


def parse_layout(text: str, rank: int) -> Layout:
    """The inside of a layout's braces, e.g. ``1,0:T(8,128)(2,1)S(1)``."""
    m2m_text, _, suffixes = text.partition(":")
    m2m = tuple(_int(x, "layout") for x in m2m_text.split(",")) if m2m_text.strip() else ()
    if len(m2m) != rank:
        raise ShapeError(f"layout {{{text}}} has {len(m2m)} minor_to_major entries for a rank-{rank} shape")
    if sorted(m2m) != list(range(rank)):
        raise ShapeError(f"layout {{{text}}} is not a permutation of the dimensions 0..{rank - 1}")
    fields: dict = {}
    pos, last = 0, -1
    suffixes = suffixes.strip()
    while pos < len(suffixes):
        m = _SUFFIX.match(suffixes, pos)
        if not m:
            raise ShapeError(f"unexpected '{suffixes[pos:pos + 10]}' in layout; expects one of D( T( L( #( *( E( S( SC( P( M(")
        key = m.group(1)
        order = _ORDER.index(key)
        if order <= last:
            raise ShapeError(f"layout suffix {key}(...) is out of order or repeated")
        last = order
        groups, end = _paren_groups(suffixes, m.end() - 1)
        if key in ("T", "SC"):
            if key == "T":
                tiles = []
                for g in groups:
                    dims = tuple(COMBINE_DIM if d.strip() == "*" else _int(d, "tile") for d in g.split(","))
                    if any(d <= 0 and d != COMBINE_DIM for d in dims):
                        raise ShapeError(f"tile dimensions must be positive, got T({g})")
                    tiles.append(Tile(dims))
                fields["tiles"] = tuple(tiles)
            else:
                fields["split_configs"] = suffixes[pos:end]
        else:
            if len(groups) != 1:
                raise ShapeError(f"layout suffix {key} takes one (...) group")
            g = groups[0]
            if key == "D":
                for t in g.split(","):
                    if not re.fullmatch(r"\s*[DCSH]\+?~?\s*", t):
                        raise ShapeError(f"expected a DimLevelType abbreviation (D, C, S or H), got '{t.strip()}'")
                fields["dim_level_types"] = g
            elif key == "L":
                fields["tail_padding_alignment"] = _int(g, "L(...)")
            elif key == "#":
                fields["index_primitive_type"] = g.strip()
            elif key == "*":
                fields["pointer_primitive_type"] = g.strip()
            elif key == "E":
                fields["element_size_in_bits"] = _int(g, "E(...)")
            elif key == "S":
                fields["memory_space"] = _int(g, "S(...)")
            elif key == "P":
                raise ShapeError("Layout has physical shape, but is not for a sparse array")
            elif key == "M":
                fields["dynamic_shape_metadata_prefix_bytes"] = _int(g, "M(...)")
        pos = end
    return Layout(m2m, **fields)


@functools.lru_cache(maxsize=65536)
def parse_array_shape(text: str) -> Shape:
    """One array shape with optional layout, e.g. ``f32[2,3]{0,1}``."""
    m = _ARRAY.fullmatch(text.strip())
    if not m:
        raise ShapeError(f"expects an array shape like f32[2,3], got '{text}'")
    etype = TYPE_ALIASES.get(m.group(1), m.group(1))
    if etype not in ELEMENT_TYPES:
        raise ShapeError(f"unknown element type '{m.group(1)}'")
    dims: list[int] = []
    dyn: list[bool] = []
    body = m.group(2).strip()
    if body:
        for d in body.split(","):
            d = d.strip()
            if d == "?":
                dims.append(UNBOUNDED_DIM)
                dyn.append(True)
            elif d.startswith("<="):
                dims.append(_int(d[2:], "a bounded dimension"))
                dyn.append(True)
            else:
                v = _int(d, "dimensions")
                if v < 0:
                    raise ShapeError(f"dimension sizes must be non-negative, got {v}")
                dims.append(v)
                dyn.append(False)
    too_big = dims_error(tuple(dims), etype)
    if too_big is not None:  # XLA's limits (ShapeUtil::ValidateShape): int64 sizes and byte counts
        raise ShapeError(too_big)
    if m.group(3) is not None:
        layout = parse_layout(m.group(3), len(dims))
    elif is_array_type(etype):
        layout = default_layout(len(dims))
    else:
        layout = None
    return Shape(etype, tuple(dims), tuple(dyn), layout)


def parse_shape_text(text: str) -> Shape:
    """Any shape: array, tuple ``(a, (b, c))``, or buffer ``b(a)``."""
    shape, pos = _parse_at(text, _skip(text, 0))
    pos = _skip(text, pos)
    if pos != len(text):
        raise ShapeError(f"unexpected '{text[pos:pos + 10]}' after the shape", pos)
    return shape


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


_ARRAY_AT = re.compile(r"[a-z][a-z0-9_]*\[[^\]]*\](?:\{(?=\s*[0-9:])[^{}]*\})?")


def _parse_at(text: str, pos: int) -> tuple[Shape, int]:
    if text.startswith("b(", pos):
        inner, pos = _parse_at(text, _skip(text, pos + 2))
        pos = _skip(text, pos)
        if not text.startswith(")", pos):
            raise ShapeError("expects ')' to close the buffer shape", pos)
        return Shape("buffer", tuple_shapes=(inner,)), pos + 1
    if text.startswith("(", pos):
        pos = _skip(text, pos + 1)
        elems = []
        while not text.startswith(")", pos):
            if elems:
                if not text.startswith(",", pos):
                    raise ShapeError("expects ',' or ')' in the tuple shape", pos)
                pos = _skip(text, pos + 1)
            s, pos = _parse_at(text, pos)
            elems.append(s)
            pos = _skip(text, pos)
            if pos >= len(text):
                raise ShapeError("expects ')' to close the tuple shape", pos)
        return Shape.tuple_of(elems), pos + 1
    m = _ARRAY_AT.match(text, pos)
    if not m:
        raise ShapeError(f"expects a shape at '{text[pos:pos + 20]}'", pos)
    try:
        return parse_array_shape(m.group()), m.end()
    except ShapeError as e:
        raise ShapeError(str(e), pos) from None
