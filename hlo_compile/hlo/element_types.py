"""XLA element (primitive) types: names, bit widths and kinds.

Element types are represented by their HLO text name (``"f32"``, ``"bf16"``...); this
module answers questions about them. The table follows ``xla_data.proto``'s
``PrimitiveType``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ElementType:
    name: str
    bits: int
    kind: str  # "pred" | "signed" | "unsigned" | "float" | "complex" | "token" | "opaque"


def _table() -> dict[str, ElementType]:
    rows: list[tuple[str, int, str]] = [("pred", 8, "pred")]
    for b in (1, 2, 4, 8, 16, 32, 64):
        rows.append((f"s{b}", b, "signed"))
        rows.append((f"u{b}", b, "unsigned"))
    rows += [
        ("f16", 16, "float"), ("bf16", 16, "float"), ("f32", 32, "float"), ("f64", 64, "float"),
        ("f8e5m2", 8, "float"), ("f8e4m3", 8, "float"), ("f8e4m3fn", 8, "float"),
        ("f8e4m3b11fnuz", 8, "float"), ("f8e3m4", 8, "float"), ("f8e5m2fnuz", 8, "float"),
        ("f8e4m3fnuz", 8, "float"), ("f8e8m0fnu", 8, "float"),
        ("f6e3m2fn", 6, "float"), ("f6e2m3fn", 6, "float"), ("f4e2m1fn", 4, "float"),
        ("c64", 64, "complex"), ("c128", 128, "complex"),
        ("token", 0, "token"), ("opaque", 0, "opaque"),
    ]
    return {n: ElementType(n, b, k) for n, b, k in rows}


ELEMENT_TYPES: dict[str, ElementType] = _table()
# `opaque_type` is accepted as an alias of `opaque` by XLA's lexer.
TYPE_ALIASES: dict[str, str] = {"opaque_type": "opaque"}


def element_type(name: str) -> ElementType:
    return ELEMENT_TYPES[TYPE_ALIASES.get(name, name)]


def bit_width(name: str) -> int:
    return element_type(name).bits


def is_float(name: str) -> bool:
    return element_type(name).kind == "float"


def is_complex(name: str) -> bool:
    return element_type(name).kind == "complex"


def is_integral(name: str) -> bool:
    return element_type(name).kind in ("signed", "unsigned")


def is_signed(name: str) -> bool:
    return element_type(name).kind == "signed"


def is_unsigned(name: str) -> bool:
    return element_type(name).kind == "unsigned"


def is_array_type(name: str) -> bool:
    return element_type(name).kind not in ("token", "opaque")


