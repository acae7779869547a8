"""The architectures the NVPTX target knows and the PTX ISA each needs (no LLVM here: the
command lines check ``--arch`` with this before loading anything heavy)."""
from __future__ import annotations

MAX_PTX_ISA = 90  # the GPU image's driver (CUDA 13.0) JITs PTX up to ISA 9.0

# The PTX ISA version each architecture first appears in (what LLVM 22 picks by default).
# sm_70 and older are gone from CUDA 13's ptxas; sm_101 was renamed sm_110 in CUDA 13.
MIN_PTX_ISA: dict[str, int] = {
    "sm_75": 63, "sm_80": 70, "sm_86": 71, "sm_87": 74, "sm_88": 90, "sm_89": 78,
    "sm_90": 78, "sm_90a": 80,
    "sm_100": 86, "sm_100a": 86, "sm_100f": 88, "sm_101": 86, "sm_101a": 86,
    "sm_103": 88, "sm_103a": 88, "sm_103f": 88, "sm_110": 90, "sm_110a": 90, "sm_110f": 90,
    "sm_120": 87, "sm_120a": 87, "sm_120f": 88, "sm_121": 88, "sm_121a": 88, "sm_121f": 88,
}
SUPPORTED_ARCHS: tuple[str, ...] = tuple(a for a, v in MIN_PTX_ISA.items() if v <= MAX_PTX_ISA)
