"""Every knob of a compilation in one typed place (DESIGN §7); its hash can key a cache."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompileOptions:
    arch: str = "sm_80"      # the GPU the kernels and launch heuristics are for
    opt_level: int = 3       # LLVM optimisation level of the NVPTX pipeline
