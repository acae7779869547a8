"""Where the CUDA pieces we need live: libdevice (``libdevice.10.bc``) and ``ptxas``.

Search order, first hit wins (every place looked at is remembered for the error message):

1. ``$HLO_COMPILE_CUDA_HOME`` (``$X/nvvm/libdevice/libdevice.10.bc``, ``$X/bin/ptxas``): an
   explicit choice for this compiler alone;
2. NVIDIA's ``cuda-pathfinder`` (a dependency): NVIDIA's pip wheels (``nvidia-nvvm`` for
   libdevice, ``nvidia-cuda-nvcc`` for ptxas, CUDA 13 ``nvidia/cu13`` and CUDA 12 layouts),
   Conda, then ``$CUDA_PATH``/``$CUDA_HOME``;
3. our own search, for when cuda-pathfinder is missing, too old or finds nothing: the wheels
   through the ``nvidia`` namespace package's ``__path__`` (``nvidia/cu13``,
   ``nvidia/cuda_nvcc``), ``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda``, and last
   ``ptxas`` on ``PATH`` (for libdevice: the toolkit that ``ptxas`` belongs to).

A root named by an environment variable that lacks the file is skipped, not an error: a
``CUDA_HOME`` pointing at a toolkit without libdevice should not hide a pip wheel that has it.
Nothing is cached here (cuda-pathfinder caches its own answers); callers that need a path
often (the libdevice loader) keep it.

libdevice is only needed for PTX of kernels with transcendental math; it comes with
``pip install 'hlo-compile[libdevice]'`` (or ``[cuda]``, ``[test]``), and the message when it is
missing says so.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from ...hlo.errors import HloError

OWN_ENV = "HLO_COMPILE_CUDA_HOME"
ENV_VARS = (OWN_ENV, "CUDA_HOME", "CUDA_PATH")
SYSTEM_ROOTS: tuple[Path, ...] = (Path("/usr/local/cuda"),)

_LIBDEVICE = Path("nvvm", "libdevice", "libdevice.10.bc")
_PTXAS = Path("bin", "ptxas")
# Sub-directories of the ``nvidia`` namespace package that are toolkit roots, newest first.
_WHEEL_ROOTS = ("cu13", "cuda_nvcc")

LIBDEVICE_EXTRA = "pip install 'hlo-compile[libdevice]'"
PTXAS_EXTRA = "pip install 'hlo-compile[ptxas]'"
LIBDEVICE_MISSING = (f"libdevice not found ({LIBDEVICE_EXTRA}, i.e. NVIDIA's nvidia-nvvm wheel; or set CUDA_HOME "
                     "to a CUDA toolkit)")


class ToolkitNotFound(HloError):
    """A CUDA component is missing; the message lists every place searched."""


def _env_root(name: str) -> list[tuple[str, Path]]:
    value = os.environ.get(name)
    return [(f"${name}", Path(value))] if value else []


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


def _fallback_roots() -> list[tuple[str, Path]]:
    """(label, root) of our own search, in order, before the PATH fallback."""
    return (_wheel_roots() + _env_root("CUDA_HOME") + _env_root("CUDA_PATH")
            + [(str(r), r) for r in SYSTEM_ROOTS])


def pathfinder_lookup(kind: str) -> tuple[Path | None, str]:
    """(path, note) from NVIDIA's cuda-pathfinder for ``"libdevice"`` or ``"ptxas"``; the note
    says why there is no path (not installed, too old, nothing found). A seam for tests."""
    if kind == "libdevice":
        found = pathfinder_wheel_libdevice()
        if found is not None:
            return found, ""
    try:
        import cuda.pathfinder as pathfinder
    except ImportError:
        return None, "cuda-pathfinder is not installed"
    try:
        if kind == "libdevice":
            found = pathfinder.find_bitcode_lib("device")
        else:
            found = pathfinder.find_nvidia_binary_utility("ptxas")
    except Exception as e:  # noqa: BLE001 - any failure of a third-party search means "not found there"
        return None, f"cuda-pathfinder: {type(e).__name__}: {e}".splitlines()[0]
    if not found:
        return None, "cuda-pathfinder found nothing"
    return Path(found), ""


# The folders, under each site-packages directory, where cuda-pathfinder's
# ``find_bitcode_lib("device")`` looks first (its ``site_packages_dirs``, in its order).
PATHFINDER_LIBDEVICE_DIRS = (("nvidia", "cu13", "nvvm", "libdevice"), ("nvidia", "cuda_nvcc", "nvvm", "libdevice"))


def pathfinder_wheel_libdevice() -> Path | None:
    """What cuda-pathfinder's first step finds for libdevice (NVIDIA's wheels in the
    site-packages directories, its order of folders and directories, the path resolved), without
    importing it: importing cuda-pathfinder costs ~25 ms of every start-up, warm ones
    included (issue 17). None where no wheel has it (or cuda-pathfinder is not installed):
    cuda-pathfinder then searches itself (Conda, ``$CUDA_PATH``...). ``tests/driver/test_start_up.py``
    checks the two agree."""
    try:
        if importlib.util.find_spec("cuda.pathfinder") is None:
            return None
    except (ImportError, ValueError):
        return None
    import site
    import sys
    parents = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        user = site.getusersitepackages()
        if user:  # after a virtual environment's own site-packages, else first (as cuda-pathfinder)
            parents.insert(1 if sys.prefix != sys.base_prefix else 0, user)
    for folder in PATHFINDER_LIBDEVICE_DIRS:
        for parent in parents:
            candidate = Path(parent, *folder, _LIBDEVICE.name)
            if candidate.is_file():
                return candidate.resolve()
    return None


def _is_executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _ptxas_on_path() -> Path | None:
    found = shutil.which("ptxas")
    return Path(found) if found else None


def find_ptxas() -> Path | None:
    """The ``ptxas`` executable, or None when there is none (callers then skip the cubin)."""
    for _, root in _env_root(OWN_ENV):
        if _is_executable(root / _PTXAS):
            return root / _PTXAS
    found, _ = pathfinder_lookup("ptxas")
    if found is not None and _is_executable(found):
        return found
    for _, root in _fallback_roots():
        if _is_executable(root / _PTXAS):
            return root / _PTXAS
    return _ptxas_on_path()


def ptxas_missing_reason() -> str:
    """Why there is no cubin stage, and how to get one."""
    return (f"ptxas not found ({PTXAS_EXTRA}, i.e. NVIDIA's nvidia-cuda-nvcc wheel; or set CUDA_HOME "
            "to a CUDA toolkit; or put ptxas on PATH)")


def find_libdevice() -> Path:
    """The libdevice bitcode; raises ``ToolkitNotFound`` listing the places searched."""
    looked: list[str] = []
    for label, root in _env_root(OWN_ENV):
        candidate = root / _LIBDEVICE
        if candidate.is_file():
            return candidate
        looked.append(f"{candidate}  [{label}]")
    found, note = pathfinder_lookup("libdevice")
    if found is not None and found.is_file():
        return found
    looked.append(f"NVIDIA wheels, Conda, $CUDA_PATH, $CUDA_HOME  [{note or 'cuda-pathfinder'}]")
    for label, root in _fallback_roots():
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
        "libdevice (libdevice.10.bc) not found; it is needed for the PTX of kernels with "
        "transcendental math (exp, log, tanh...).\n"
        "Looked in:\n  " + "\n  ".join(looked) + "\n"
        f"Fix: {LIBDEVICE_EXTRA} (NVIDIA's wheel: pip install nvidia-nvvm), or set CUDA_HOME "
        f"(or {OWN_ENV}) to a CUDA toolkit that has nvvm/libdevice/libdevice.10.bc."
    )
