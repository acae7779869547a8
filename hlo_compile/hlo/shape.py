"""Shapes and layouts, as XLA defines them.

``Shape`` is an array shape (element type, dimensions, dynamic flags, layout) or a tuple
of shapes. ``Layout`` holds minor_to_major and every layout suffix XLA's text format knows
(tiles, tail padding ``L``, index/pointer types ``#``/``*``, element size ``E``, memory
space ``S``, split configs ``SC``, physical shape ``P``, dynamic-metadata prefix ``M``,
dim-level types ``D``; defined in ``layout.py``). Printing gives XLA's canonical text. Tiling
math lives in ``tiling.py``; ``Shape`` only delegates to it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import reduce
from typing import Iterator, Sequence

from . import tiling
from .element_types import ELEMENT_TYPES, TYPE_ALIASES, is_array_type
from .layout import COMBINE_DIM, Layout, Tile, default_layout

__all__ = ["COMBINE_DIM", "UNBOUNDED_DIM", "Layout", "Shape", "Tile", "default_layout", "is_type_name"]

UNBOUNDED_DIM = -1  # `?`: unbounded dynamic dimension


@dataclass(frozen=True)
class Shape:
    """An array shape (``element_type`` is a type name) or a tuple (``element_type`` is
    ``"tuple"`` and ``tuple_shapes`` holds the elements)."""

    element_type: str
    dimensions: tuple[int, ...] = ()
    dynamic_dimensions: tuple[bool, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple["Shape", ...] = ()

    # ---- construction -------------------------------------------------------------
    @staticmethod
    def array(element_type: str, dimensions: Sequence[int], layout: Layout | Sequence[int] | None = None,
              dynamic: Sequence[bool] | None = None) -> "Shape":
        dims = tuple(int(d) for d in dimensions)
        if layout is None and is_array_type(element_type):
            layout = default_layout(len(dims))
        elif layout is not None and not isinstance(layout, Layout):
            layout = Layout(tuple(layout))
        dyn = tuple(dynamic) if dynamic is not None else (False,) * len(dims)
        return Shape(TYPE_ALIASES.get(element_type, element_type), dims, dyn, layout)

    @staticmethod
    def tuple_of(shapes: Sequence["Shape"]) -> "Shape":
        return Shape("tuple", tuple_shapes=tuple(shapes))

    def with_layout(self, layout: Layout | Sequence[int]) -> "Shape":
        if not isinstance(layout, Layout):
            layout = Layout(tuple(layout))
        return replace(self, layout=layout)

    def with_element_type(self, element_type: str) -> "Shape":
        return replace(self, element_type=element_type)

    def without_layout(self) -> "Shape":
        if self.is_tuple:
            return Shape.tuple_of([s.without_layout() for s in self.tuple_shapes])
        return replace(self, layout=None)

    # ---- queries ------------------------------------------------------------------
    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    @property
    def is_array(self) -> bool:
        return not self.is_tuple and self.element_type != "buffer" and is_array_type(self.element_type)

    @property
    def is_token(self) -> bool:
        return self.element_type == "token"

    @property
    def rank(self) -> int:
        return len(self.dimensions)

    @property
    def is_scalar(self) -> bool:
        return self.is_array and not self.dimensions

    def element_count(self) -> int:
        return reduce(lambda a, b: a * b, self.dimensions, 1)

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        return self.layout.minor_to_major if self.layout is not None else default_layout(self.rank).minor_to_major

    def has_default_layout(self) -> bool:
        return self.layout is None or (self.minor_to_major == default_layout(self.rank).minor_to_major
                                       and not self.layout.tiles)

    def is_dynamic(self) -> bool:
        return any(self.dynamic_dimensions)

    def leaves(self) -> Iterator[tuple[tuple[int, ...], "Shape"]]:
        """(shape index, array shape) for every non-tuple leaf, depth first."""
        if self.is_tuple:
            for i, s in enumerate(self.tuple_shapes):
                for idx, leaf in s.leaves():
                    yield (i,) + idx, leaf
        else:
            yield (), self

    def subshape(self, index: Sequence[int]) -> "Shape":
        s = self
        for i in index:
            s = s.tuple_shapes[i]
        return s

    def compatible(self, other: "Shape") -> bool:
        """Equal ignoring layouts (XLA's ShapeUtil::Compatible)."""
        if self.is_tuple or other.is_tuple:
            return (self.is_tuple and other.is_tuple and len(self.tuple_shapes) == len(other.tuple_shapes)
                    and all(a.compatible(b) for a, b in zip(self.tuple_shapes, other.tuple_shapes)))
        return (self.element_type == other.element_type and self.dimensions == other.dimensions
                and self.dynamic_dimensions == other.dynamic_dimensions)

    def same_dimensions(self, other: "Shape") -> bool:
        return self.dimensions == other.dimensions

    # ---- tiling (see tiling.py) ---------------------------------------------------
    def linear_index(self, index: Sequence[int]) -> int:
        return tiling.linear_index(self, index)

    def physical_size(self) -> int:
        return tiling.physical_size(self)

    def logical_index(self, linear: int) -> tuple[int, ...] | None:
        return tiling.logical_index(self, linear)

    # ---- text ---------------------------------------------------------------------
    def dims_text(self) -> str:
        out = []
        for d, dyn in zip(self.dimensions, self.dynamic_dimensions):
            if d == UNBOUNDED_DIM and dyn:
                out.append("?")
            elif dyn:
                out.append(f"<={d}")
            else:
                out.append(str(d))
        return "[" + ",".join(out) + "]"

    def to_text(self, print_layout: bool = True) -> str:
        if self.is_tuple:
            return "(" + ", ".join((f"/*index={i}*/" if i and i % 5 == 0 else "") + s.to_text(print_layout)
                                   for i, s in enumerate(self.tuple_shapes)) + ")"
        if self.element_type == "buffer":
            return "b(" + self.tuple_shapes[0].to_text(print_layout) + ")"
        text = self.element_type + self.dims_text()
        if print_layout and self.layout is not None and (self.rank > 0 or self.layout.has_suffixes()):
            text += self.layout.to_text()
        return text

    def __str__(self) -> str:
        return self.to_text()


def is_type_name(name: str) -> bool:
    return name in ELEMENT_TYPES or name in TYPE_ALIASES
