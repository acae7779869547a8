"""The NVPTX target: NVIDIA GPUs through LLVM's NVPTX backend (DESIGN §3, notes/nvptx.md).

- ``target``: ``NvptxTarget``, the target interface with NVPTX intrinsics and libdevice calls
  (and its tensor-core operations); the architectures we know, the NVPTX target machines.
- ``ptx``: LLVM IR → PTX (``compile_to_ptx``), with the checks that keep LLVM from aborting.
- ``libdevice``: the ``__nv_*`` math functions, linked lazily into each module.
- ``ptxas``: PTX → cubin with NVIDIA's ``ptxas``, and the resources it reports.
- ``toolkit``: where libdevice and ptxas are (NVIDIA's wheels, ``CUDA_HOME``...).
"""
from .ptx import PtxResult, check_lowerable, compile_to_ptx
from .target import (MMA_MIN_SM, SUPPORTED_ARCHS, NvptxTarget, NvptxWarpMma, UnsupportedArchError,
                     is_ptx_identifier, ptx_identifier, ptx_isa_version, sm_version, target_machine)

__all__ = ["MMA_MIN_SM", "SUPPORTED_ARCHS", "NvptxTarget", "NvptxWarpMma", "PtxResult", "UnsupportedArchError",
           "check_lowerable", "compile_to_ptx", "is_ptx_identifier", "ptx_identifier", "ptx_isa_version",
           "sm_version", "target_machine"]
