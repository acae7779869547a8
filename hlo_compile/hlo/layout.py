"""Layouts, as XLA defines them: minor_to_major plus every suffix of XLA's text format (tiles,
tail padding ``L``, index/pointer types ``#``/``*``, element size ``E``, memory space ``S``, split
configs ``SC``, physical shape ``P``, dynamic-metadata prefix ``M``, dim-level types ``D``).

Kept apart from ``shape.py`` so that the tiling math (``tiling.py``), which ``Shape`` delegates
to, can read tiles without importing ``Shape``.
"""
from __future__ import annotations

from dataclasses import dataclass

COMBINE_DIM = -(2**63)  # `*` inside a tile: combine this dimension with the next minor one


@dataclass(frozen=True)
class Tile:
    dims: tuple[int, ...]

    def to_text(self) -> str:
        return "(" + ",".join("*" if d == COMBINE_DIM else str(d) for d in self.dims) + ")"


@dataclass(frozen=True)
class Layout:
    minor_to_major: tuple[int, ...]
    tiles: tuple[Tile, ...] = ()
    dim_level_types: str = ""  # raw text inside D(...); parsed by XLA and then dropped
    tail_padding_alignment: int = 1  # L(n), in elements
    index_primitive_type: str = ""  # #(u32)
    pointer_primitive_type: str = ""  # *(u32)
    element_size_in_bits: int = 0  # E(n)
    memory_space: int = 0  # S(n)
    split_configs: str = ""  # raw text of the SC(...)... suffix
    physical_shape: str = ""  # raw text inside P(...)
    dynamic_shape_metadata_prefix_bytes: int = 0  # M(n)

    def has_suffixes(self) -> bool:
        return self != Layout(self.minor_to_major)

    def to_text(self) -> str:
        parts: list[str] = []
        if self.dim_level_types:
            parts.append(f"D({self.dim_level_types})")
        if self.tiles:
            parts.append("T" + "".join(t.to_text() for t in self.tiles))
        if self.tail_padding_alignment != 1:
            parts.append(f"L({self.tail_padding_alignment})")
        if self.index_primitive_type:
            parts.append(f"#({self.index_primitive_type})")
        if self.pointer_primitive_type:
            parts.append(f"*({self.pointer_primitive_type})")
        if self.element_size_in_bits:
            parts.append(f"E({self.element_size_in_bits})")
        if self.memory_space:
            parts.append(f"S({self.memory_space})")
        if self.split_configs:
            parts.append(self.split_configs)
        if self.physical_shape:
            parts.append(f"P({self.physical_shape})")
        if self.dynamic_shape_metadata_prefix_bytes:
            parts.append(f"M({self.dynamic_shape_metadata_prefix_bytes})")
        text = ",".join(str(d) for d in self.minor_to_major)
        if parts:
            text += ":" + "".join(parts)
        return "{" + text + "}"


def default_layout(rank: int) -> Layout:
    return Layout(tuple(range(rank - 1, -1, -1)))


def unit_stride(shape, dim: int) -> bool:
    """Whether consecutive indices along ``dim`` of array ``shape`` are consecutive elements in
    memory: an untiled layout with only size-1 dimensions more minor than ``dim``."""
    if shape.layout is not None and shape.layout.tiles:
        return False
    for d in shape.minor_to_major:
        if d == dim:
            return True
        if shape.dimensions[d] != 1:
            return False
    return False
