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
    # XLA:GPU's library calls: "library" keeps them as calls the cuda platform runs through
    # NVIDIA's libraries (cuBLAS/cuBLASLt for GEMMs, cuDNN for convolutions and attention);
    # "generated" lowers them to plain HLO our emitters compile (passes/library_calls.py).
    # The host platform always generates; the cuda platform falls back to generated where
    # the library bindings are not installed.
    gemm: str = "library"
    conv: str = "library"   # every cuDNN call: convolutions and fused attention
    # cuDNN's fused attention alone: "generated" while ``conv`` is "library" when the platform
    # has a convolution step but no attention step (``cuda_compile_options``); ``conv`` set to
    # "generated" generates attention too. Not a flag of its own.
    fmha: str = "library"
    # the GPU the cost model (codegen/model/perf_model.py) estimates for: "a100", "h100", "h200";
    # None: the one ``arch`` plans for (sm_80 -> A100, sm_90 -> H100). Plans do not change.
    device: str | None = None
    # passes of ``passes.run_passes`` not run, by the names ``hlo-compile --list-passes`` prints
    # (XLA's --xla_disable_hlo_passes/--xla_enable_hlo_passes_only), sorted: a tuple, not a set,
    # so that its repr (part of the compile cache's keys) is the same in every process
    skip_passes: tuple[str, ...] = ()

    def generated_call_families(self) -> frozenset[str]:
        """The library-call families (``hlo/calls/library_targets.py``) lowered to plain HLO."""
        out = set()
        if self.gemm == "generated":
            out.add("gemm")
        if self.conv == "generated":
            out.update(("conv", "fmha"))
        if self.fmha == "generated":
            out.add("fmha")
        return frozenset(out)
