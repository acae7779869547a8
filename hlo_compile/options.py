"""Every knob of a compilation in one typed place (DESIGN §7).

``CompileOptions`` is frozen and hashable: it is passed into the pipeline and down to whatever
needs a knob, never copied onto a target or platform object, so its hash (with the module's
fingerprint and the tool versions) can key a compile cache. A changed knob is a new value
(``dataclasses.replace``), e.g. the cuda platform's arch of the GPU that is there.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompileOptions:
    arch: str = "sm_80"      # the GPU the kernels and launch heuristics are for
    opt_level: int = 3       # LLVM optimisation level of the NVPTX pipeline
    # f16/bf16 dots on NVPTX sm_80+ through mma.sync tensor cores (emitters/dot_mma.py); off
    # until validated on a GPU. The llvm stage passes it to the NvptxTarget it creates.
    dot_tensor_cores: bool = False
    # producer-consumer fusion of lone instructions (passes/fusion.py); off: one kernel per op
    fusion: bool = True
