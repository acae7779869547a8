"""What the generator may draw: sizes, probabilities, and the features that are switched off
by default because they hit known open bugs (``KNOWN_BUG_FEATURES``)."""
from __future__ import annotations

from dataclasses import dataclass

# Features that reproduce bugs already reported and being fixed elsewhere; off unless asked for.
KNOWN_BUG_FEATURES = {
    "boundary-layouts": "layouts that differ across while/conditional/fusion/call/tuple boundaries",
    "bitcast-convert-width": "bitcast-convert between element types of different widths (u32[2,2] -> u64[2])",
    "rng-bit-generator": "rng-bit-generator (its expansion pass ignores a non-default layout of the bits output)",
    "degenerate-broadcast": "binary ops whose same-rank operands differ in size-1 dims (the verifier accepts them)",
    # found by this fuzzer, reported, in files it may not change:
    "root-not-last": "a computation whose ROOT is not its last instruction (compiler.py assign_in_place_buffers "
                     "KeyError)",
    "zero-size-reduce": "reduce of an operand with a zero-size dimension (fusion_analysis.py multi_row_vector_size "
                        "ZeroDivisionError)",
    "zero-size-transpose": "transpose of an array with a zero-size dimension (hero_shapes.py _packed_tile "
                           "ZeroDivisionError)",
    "conv-nonfinite-weights": "convolution weights that are inf/NaN where the window covers padding or lhs-dilation "
                              "holes (XLA multiplies them by 0: NaN; elemental_contraction.py skips those taps)",
}


@dataclass(frozen=True)
class FuzzConfig:
    max_ops: int = 10            # ops drawn for ENTRY (nested computations draw fewer)
    max_elements: int = 1024     # elements of one array (a few ops may reach 4x)
    p_big: float = 0.12          # a module draws large dims (up to big_elements): other emitters, tiles
    big_elements: int = 16384
    max_rank: int = 6
    p_layout: float = 0.3        # a value gets a non-default layout
    p_tiles: float = 0.02        # ... a tiled one
    p_zero_dim: float = 0.02     # a drawn dimension is 0
    p_fusion: float = 0.6        # a computation gets explicit fusion/call instructions
    max_depth: int = 2           # nesting of while/conditional bodies
    xla_compatible: bool = False  # only what XLA:CPU can run through xla_ref (no bitcast, tuple params...)
    known_bugs: frozenset = frozenset()
    only_ops: frozenset | None = None  # restrict the op generators to these names

    def allows(self, feature: str) -> bool:
        return feature in self.known_bugs
