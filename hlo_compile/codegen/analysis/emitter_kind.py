"""The names of fusion emitters and of XLA's emitter variants.

Logic names an emitter by ``EmitterKind`` only; the value is the name reports, dumps
(``summary.json``'s ``"emitter"``) and the fuzzer print (``"reduction/row"`` is
``f"{kind}/{variant}"``). Both enums are ``str`` subclasses, so a value compares equal to
its name and serialises as it.
"""
from __future__ import annotations

from enum import StrEnum


class EmitterKind(StrEnum):
    """A kind of fusion emitter: XLA's (``HloFusionAnalysis::EmitterFusionKind``, and the
    kinds ``GetFusionEmitter`` refines kLoop into), and ours for what XLA hands to libraries
    (dot, convolution). ``codegen/emitters`` has an emitter for some of them."""

    LOOP = "loop"
    MEMCPY = "memcpy"
    IN_PLACE_DUS = "in-place-dus"
    TRANSPOSE = "transpose"
    REDUCTION = "reduction"
    CONCATENATE = "concatenate"
    SCATTER = "scatter"
    SORT = "sort"
    CUSTOM = "custom"
    TRITON = "triton"
    CUDNN = "cudnn"
    DOT = "dot"
    CONVOLUTION = "convolution"


class ReductionVariant(StrEnum):
    """XLA's four reduction emitters (``CreateReductionFusion``, notes/xla.md §b.5)."""

    ROW = "row"
    MULTI_ROW = "multi-row"
    COLUMN = "column"
    SMALL_COLUMN = "small-column"


class TransposeVariant(StrEnum):
    """XLA's two transpose emitters (notes/xla.md §b.4)."""

    TILED = "tiled"
    PACKED = "packed"
