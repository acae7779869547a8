"""Where the CUDA pieces we need live: libdevice (``libdevice.10.bc``) and ``ptxas``.

Search order, first hit wins (every place looked at is remembered for the error message):

1. ``$HLO_COMPILE_CUDA_HOME``, then ``$CUDA_HOME``, then ``$CUDA_PATH``
   (``$X/nvvm/libdevice/libdevice.10.bc``, ``$X/bin/ptxas``);
2. NVIDIA's pip wheels, found through the ``nvidia`` namespace package's ``__path__``:
   CUDA 13 (``nvidia/cu13/nvvm/libdevice/...`` from ``nvidia-nvvm``, ``nvidia/cu13/bin/ptxas``
   from ``nvidia-cuda-nvcc``) and CUDA 12 (``nvidia/cuda_nvcc/nvvm/libdevice/...``,
   ``nvidia/cuda_nvcc/bin/ptxas``);
3. ``/usr/local/cuda``;
4. ``ptxas`` on ``PATH`` (for libdevice: the toolkit that ``ptxas`` belongs to, when the
   ``ptxas`` found is a real file inside one).

A root named by an environment variable that lacks the file is skipped, not an error: a
``CUDA_HOME`` pointing at a toolkit without libdevice should not hide a pip wheel that has it.
Nothing is cached here; callers that need a path often (the libdevice loader) keep it.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from ..hlo.errors import HloError

ENV_VARS = ("HLO_COMPILE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH")
SYSTEM_ROOTS: tuple[Path, ...] = (Path("/usr/local/cuda"),)

_LIBDEVICE = Path("nvvm", "libdevice", "libdevice.10.bc")
_PTXAS = Path("bin", "ptxas")
# Sub-directories of the ``nvidia`` namespace package that are toolkit roots, newest first.
_WHEEL_ROOTS = ("cu13", "cuda_nvcc")


class ToolkitNotFound(HloError):
    """A CUDA component is missing; the message lists every place searched."""


def _env_roots() -> list[tuple[str, Path]]:
    return [(f"${name}", Path(os.environ[name])) for name in ENV_VARS if os.environ.get(name)]


def nvidia_package_dirs() -> list[Path]:
    """The directories of the ``nvidia`` namespace package (one per site-packages holding an
    NVIDIA wheel), without importing any wheel's code."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _wheel_roots() -> list[tuple[str, Path]]:
    return [(f"pip wheel ({d / sub})", d / sub) for d in nvidia_package_dirs() for sub in _WHEEL_ROOTS]


def _toolkit_roots() -> list[tuple[str, Path]]:
    """(label, root) in search order, before the PATH fallback."""
    return _env_roots() + _wheel_roots() + [(str(r), r) for r in SYSTEM_ROOTS]


def _is_executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _ptxas_on_path() -> Path | None:
    found = shutil.which("ptxas")
    return Path(found) if found else None


def find_ptxas() -> Path | None:
    """The ``ptxas`` executable, or None when there is none (callers then skip the cubin)."""
    for _, root in _toolkit_roots():
        if _is_executable(root / _PTXAS):
            return root / _PTXAS
    return _ptxas_on_path()


def find_libdevice() -> Path:
    """The libdevice bitcode; raises ``ToolkitNotFound`` listing the places searched."""
    looked: list[str] = []
    for label, root in _toolkit_roots():
        candidate = root / _LIBDEVICE
        if candidate.is_file():
            return candidate
        looked.append(f"{candidate}  [{label}]")
    ptxas = _ptxas_on_path()
    if ptxas is not None:
        candidate = ptxas.resolve().parent.parent / _LIBDEVICE
        if candidate.is_file():
            return candidate
        looked.append(f"{candidate}  [toolkit of ptxas on PATH]")
    else:
        looked.append("(no ptxas on PATH)")
    raise ToolkitNotFound(
        "libdevice (libdevice.10.bc) not found; it is needed for transcendental math on NVPTX.\n"
        "Looked in:\n  " + "\n  ".join(looked) + "\n"
        "Fix: `pip install nvidia-nvvm`, or set CUDA_HOME (or HLO_COMPILE_CUDA_HOME) to a CUDA "
        "toolkit that has nvvm/libdevice/libdevice.10.bc."
    )
