"""The HLO front end: element types, shapes and layouts, the IR, parser, printer, verifier."""
from .errors import HloError, HloParseError, HloUnsupportedError, HloVerifyError, SourceLocation
from .ir import HloComputation, HloInstruction, HloModule
from .parser import parse_module, parse_modules, parse_shape
from .shape import Layout, Shape, Tile

__all__ = ["HloError", "HloParseError", "HloVerifyError", "HloUnsupportedError", "SourceLocation",
           "HloModule", "HloComputation", "HloInstruction", "Shape", "Layout", "Tile",
           "parse_module", "parse_modules", "parse_shape"]
