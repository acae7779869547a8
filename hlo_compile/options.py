"""Every knob of a compilation in one typed place (DESIGN §7); its hash can key a cache."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompileOptions:
    arch: str = "sm_80"      # the GPU the kernels and launch heuristics are for
    opt_level: int = 3       # LLVM optimisation level of the NVPTX pipeline
    # f16/bf16 dots on NVPTX sm_80+ through mma.sync tensor cores (emitters/dot_mma.py); off
    # until validated on a GPU. Whoever creates the NvptxTarget copies it onto the target
    # (``target.dot_tensor_cores = options.dot_tensor_cores``): the dot spec reads it there.
    dot_tensor_cores: bool = False
    # producer-consumer fusion of lone instructions (passes/fusion.py); off: one kernel per op
    fusion: bool = True
