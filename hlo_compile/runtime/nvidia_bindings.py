"""NVIDIA's Python bindings, imported when a step first needs them.

Each optional library the runtime calls is one entry of ``BINDINGS``: the module to import, the
pip package that provides it (all in the ``[cuda]`` extra) and the flag that avoids it. Steps
import through ``require_binding`` (a refusal naming the instruction when it is missing) and the
planner asks ``binding_missing`` before choosing a library path; the package names live here only.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

from ..hlo import HloInstruction
from ..hlo.errors import HloUnsupportedError


@dataclass(frozen=True)
class Binding:
    module: str        # what to import, e.g. "nvmath.bindings.cublasLt"
    package: str       # the pip package that provides it
    library: str       # the library's name for messages
    avoid: str = ""    # how to do without it, e.g. "compile with --gemm=generated"


BINDINGS: dict[str, Binding] = {
    "cublasLt": Binding("nvmath.bindings.cublasLt", "nvmath-python", "cuBLASLt", "compile with --gemm=generated"),
    "cudnn": Binding("cudnn", "nvidia-cudnn-frontend", "the cuDNN frontend", "use --conv=generated"),
    "cufft": Binding("nvmath.bindings.cufft", "nvmath-python", "cuFFT"),
    "cublas": Binding("nvmath.bindings.cublas", "nvmath-python", "cuBLAS"),
}


def binding_missing(name: str) -> str | None:
    """Why binding ``name`` cannot be imported here (None: its top-level package is installed)."""
    binding = BINDINGS[name]
    if importlib.util.find_spec(binding.module.split(".")[0]) is None:
        return f"the Python package '{binding.package}' is not installed (pip install 'hlo-compile[cuda]')"
    return None


def require_binding(name: str, inst: HloInstruction) -> Any:
    """Import binding ``name`` for the step of ``inst``, or refuse naming the instruction."""
    binding = BINDINGS[name]
    try:
        return importlib.import_module(binding.module)
    except ImportError:
        avoid = f", or {binding.avoid}" if binding.avoid else ""
        raise HloUnsupportedError(
            f"{inst.opcode} '%{inst.name}': {binding.library} bindings are not installed (pip install "
            f"'hlo-compile[cuda]' for {binding.package}{avoid})", inst.location) from None
