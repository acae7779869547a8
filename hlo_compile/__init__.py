"""hlo-compile: XLA HLO text to NVIDIA GPUs, with a numpy reference interpreter.

The names below are imported on first use (PEP 562), so that the command lines start
without loading numpy, the parser or LLVM until they need them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .hlo import (HloComputation, HloError, HloInstruction, HloModule, HloParseError, HloUnsupportedError,
                      HloVerifyError, Layout, Shape, Tile, parse_module, parse_modules, parse_shape)

__version__ = "0.1.0"
__all__ = ["HloError", "HloParseError", "HloVerifyError", "HloUnsupportedError", "HloModule", "HloComputation",
           "HloInstruction", "Shape", "Layout", "Tile", "parse_module", "parse_modules", "parse_shape"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import hlo
    value = getattr(hlo, name)
    globals()[name] = value
    return value
