"""The NVPTX target: NVIDIA GPUs through LLVM's NVPTX backend (DESIGN §3, notes/nvptx.md).

- ``target``: ``NvptxTarget``, the target interface with NVPTX intrinsics and libdevice calls
  (and its tensor-core operations); the architectures we know, the NVPTX target machines.
- ``ptx``: LLVM IR → PTX (``compile_to_ptx``), with the checks that keep LLVM from aborting.
- ``libdevice``: the ``__nv_*`` math functions, linked lazily into each module.
- ``ptxas``: PTX → cubin with NVIDIA's ``ptxas``, and the resources it reports.
- ``toolkit``: where libdevice and ptxas are (NVIDIA's wheels, ``CUDA_HOME``...).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .ptx import PtxResult, check_lowerable, compile_to_ptx
    from .target import (MMA_MIN_SM, PTX_ARCHS, NvptxTarget, NvptxWarpMma, UnsupportedArchError,
                         is_ptx_identifier, ptx_identifier, ptx_isa_version, sm_version, target_machine)

__all__ = ["MMA_MIN_SM", "PTX_ARCHS", "NvptxTarget", "NvptxWarpMma", "PtxResult", "UnsupportedArchError",
           "check_lowerable", "compile_to_ptx", "is_ptx_identifier", "ptx_identifier", "ptx_isa_version",
           "sm_version", "target_machine"]


def __getattr__(name: str) -> Any:
    """The names above on first use (PEP 562): ``toolkit`` alone (where libdevice is, for the
    compile cache's key) loads neither llvmlite nor the code generator."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = "ptx" if name in ("PtxResult", "check_lowerable", "compile_to_ptx") else "target"
    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value
