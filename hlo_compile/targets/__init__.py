"""Targets: the only code that knows a machine (DESIGN §1, §3).

Each implements the target interface of ``codegen/target.py``, the one place emitters reach
a target through:

- ``nvptx/``: NVIDIA GPUs (NVPTX intrinsics, libdevice, PTX, ptxas, the CUDA toolkit).
- ``host/``: the CPU simulation (the same kernels JIT-compiled with drivers and coroutines).
- ``linking``: several kernel modules linked into one, for any target.
"""
from __future__ import annotations


def reserved_kernel_symbols() -> frozenset[str]:
    """Names no kernel may take: every target's ``linked_symbols``, since a plan's kernels keep
    one name on every target (``plan_module``'s ``reserved_symbols``)."""
    from .host.linked_names import LINKED_SYMBOLS as host_symbols  # the host's table alone: no JIT loaded
    from .nvptx import NvptxTarget
    return host_symbols | NvptxTarget.linked_symbols
