"""hlo-compile: XLA HLO text to NVIDIA GPUs, with a numpy reference interpreter."""
from .hlo import (HloComputation, HloError, HloInstruction, HloModule, HloParseError, HloUnsupportedError,
                  HloVerifyError, Layout, Shape, Tile, parse_module, parse_modules, parse_shape)

__version__ = "0.1.0"
__all__ = ["HloError", "HloParseError", "HloVerifyError", "HloUnsupportedError", "HloModule", "HloComputation",
           "HloInstruction", "Shape", "Layout", "Tile", "parse_module", "parse_modules", "parse_shape"]
