"""The HLO front end: element types, shapes and layouts, the IR, parser, printer, verifier.

The names below are imported on first use (PEP 562): ``hlo_compile.hlo.errors`` alone, as a
warm ``hlo-compile`` reads its result from the cache, loads neither numpy nor the parser."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .errors import HloError, HloParseError, HloUnsupportedError, HloVerifyError, SourceLocation
    from .ir import HloComputation, HloInstruction, HloModule
    from .parser import parse_module, parse_modules, parse_shape
    from .shape import Layout, Shape, Tile

_WHERE = {"HloError": "errors", "HloParseError": "errors", "HloUnsupportedError": "errors",
          "HloVerifyError": "errors", "SourceLocation": "errors", "HloComputation": "ir", "HloInstruction": "ir",
          "HloModule": "ir", "parse_module": "parser", "parse_modules": "parser", "parse_shape": "parser",
          "Layout": "shape", "Shape": "shape", "Tile": "shape"}

__all__ = ["HloError", "HloParseError", "HloVerifyError", "HloUnsupportedError", "SourceLocation",
           "HloModule", "HloComputation", "HloInstruction", "Shape", "Layout", "Tile",
           "parse_module", "parse_modules", "parse_shape"]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value
