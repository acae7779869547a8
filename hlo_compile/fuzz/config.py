"""What the generator may draw: sizes, probabilities, and optional features.

``FEATURES`` are constructs that hit bugs at some point. Those in ``KNOWN_BUG_FEATURES`` are
off by default (the bug is open: reported, being fixed elsewhere); ``--known-bugs FEATURE``
turns one on. The others are on by default (their bug is fixed) and ``--without FEATURE``
turns one off."""
from __future__ import annotations

from dataclasses import dataclass

FEATURES = {
    # known when the fuzzer was written
    "boundary-layouts": "layouts that differ across while/conditional/fusion/call/tuple boundaries "
                        "(fixed: passes/layout_boundaries.py)",
    "bitcast-convert-width": "bitcast-convert between element types of different widths (u32[2,2] -> u64[2]) "
                             "(fixed: codegen/elemental/index_ops.py)",
    "rng-bit-generator": "rng-bit-generator, with any layout of its bits output (fixed: the expansion relays "
                         "the bits out to the declared layout)",
    "degenerate-broadcast": "binary ops whose same-rank operands differ in size-1 dims, which the verifier accepts "
                            "(fixed: the host read past the operand; size-1 dims now read index 0)",
    # found by this fuzzer
    "root-not-last": "a computation whose ROOT is not its last instruction (assign_in_place_buffers KeyError)",
    "zero-size-reduce": "reduce of an operand with a zero-size dimension (fixed: multi_row_vector_size "
                        "ZeroDivisionError; such reduces take the loop emitter)",
    "zero-size-transpose": "transpose of an 8-bit array with a zero-size dimension (fixed: _packed_tile "
                           "ZeroDivisionError; such transposes take the loop emitter)",
    "bitcast-type-change": "a bitcast that changes the element type (same width) in ENTRY, read by an in-place "
                           "dynamic-update-slice or scatter (fixed: the runtime's copy refused int32 -> uint32)",
    "conv-nonfinite-weights": "convolution weights that are inf/NaN where the window covers padding or lhs-dilation "
                              "holes (fixed: the elemental convolution skipped those taps; zeros times inf are NaN)",
}
# features of bugs that are open: off unless --known-bugs asks for them
KNOWN_BUG_FEATURES: dict[str, str] = {}
DEFAULT_FEATURES = frozenset(FEATURES) - frozenset(KNOWN_BUG_FEATURES)


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
    known_bugs: frozenset = frozenset()  # KNOWN_BUG_FEATURES turned on
    without: frozenset = frozenset()     # DEFAULT_FEATURES turned off
    only_ops: frozenset | None = None    # restrict the op generators to these names
    spmd: bool = False           # modules on R x P participants (R*P in 2, 4, 8) with collectives

    def allows(self, feature: str) -> bool:
        if feature in self.known_bugs:
            return True
        return feature in DEFAULT_FEATURES and feature not in self.without
