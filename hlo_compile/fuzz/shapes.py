"""Element types, shapes and layouts as the fuzzer draws them, and their HLO text.

``FShape`` is an array shape with an optional non-default layout (``m2m``: minor-to-major)
and optional tiles; ``FTuple`` a tuple of them. Both print as HLO shape text with the
layout always written, so the text says exactly what the generator meant.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

FLOATS = ("f32", "f16", "bf16", "f64")
SIGNED = ("s8", "s16", "s32", "s64")
UNSIGNED = ("u8", "u16", "u32", "u64")
INTS = SIGNED + UNSIGNED
SUB_BYTE = ("s4", "u4")
ALL_TYPES = FLOATS + INTS + ("pred",)

BITS = {"pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64,
        "u64": 64, "f16": 16, "bf16": 16, "f32": 32, "f64": 64}


def is_float(et: str) -> bool:
    return et in FLOATS


def is_int(et: str) -> bool:
    return et in INTS or et in SUB_BYTE


def is_signed(et: str) -> bool:
    return et.startswith("s")


def same_width_types(et: str) -> list[str]:
    """Element types ``bitcast-convert`` can reach without changing the width (pred excluded)."""
    return [t for t in FLOATS + INTS if BITS[t] == BITS[et] and t != et and et != "pred"]


@dataclass(frozen=True)
class FShape:
    et: str
    dims: tuple[int, ...]
    m2m: tuple[int, ...] | None = None  # None: the default (descending) layout
    tiles: str = ""                      # e.g. "T(2,2)"; only with an explicit layout

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def layout(self) -> tuple[int, ...]:
        return self.m2m if self.m2m is not None else tuple(range(self.rank - 1, -1, -1))

    @property
    def size(self) -> int:
        return prod(self.dims)

    @property
    def is_tuple(self) -> bool:
        return False

    @property
    def default_layout(self) -> bool:
        return self.layout == tuple(range(self.rank - 1, -1, -1)) and not self.tiles

    def with_et(self, et: str) -> "FShape":
        return replace(self, et=et, tiles="" if BITS.get(et) != BITS.get(self.et) else self.tiles)

    def with_dims(self, dims, m2m=None) -> "FShape":
        return FShape(self.et, tuple(dims), m2m)

    def with_layout(self, m2m, tiles: str = "") -> "FShape":
        return replace(self, m2m=tuple(m2m) if m2m is not None else None, tiles=tiles)

    def plain(self) -> "FShape":
        """Same type and dims, default layout."""
        return FShape(self.et, self.dims)

    def text(self) -> str:
        if not self.dims:
            return f"{self.et}[]"
        lay = ",".join(map(str, self.layout))
        if self.tiles:
            lay += ":" + self.tiles
        return f"{self.et}[{','.join(map(str, self.dims))}]{{{lay}}}"

    def bare(self) -> str:
        return f"{self.et}[{','.join(map(str, self.dims))}]"


@dataclass(frozen=True)
class FTuple:
    elements: tuple

    @property
    def is_tuple(self) -> bool:
        return True

    def text(self) -> str:
        return "(" + ", ".join(e.text() for e in self.elements) + ")"

    def leaves(self) -> list[FShape]:
        out = []
        for e in self.elements:
            out += e.leaves() if e.is_tuple else [e]
        return out


def scalar(et: str) -> FShape:
    return FShape(et, ())
