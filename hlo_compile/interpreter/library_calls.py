"""The numpy meaning of XLA:GPU's library calls (notes/xla-gpu-calls.md §1-3).

Each family registers its targets with ``@library_call``: ``gemm_calls.py`` (cuBLAS),
``conv_calls.py`` (cuDNN convolutions), ``fmha_calls.py`` (cuDNN attention); the evaluator
imports them. Written from
XLA's definitions, independently of the lowering the compiler uses (passes/*_lowering.py), so
that the two check each other.
"""
from __future__ import annotations

from typing import Any, Callable

Handler = Callable[[Any, Any, list], Any]

LIBRARY_CALLS: dict[str, Handler] = {}


def library_call(*targets: str) -> Callable[[Handler], Handler]:
    """Register ``fn(ev, inst, operands)`` as the meaning of every custom-call target in ``targets``."""
    def wrap(fn: Handler) -> Handler:
        for t in targets:
            if t in LIBRARY_CALLS:
                raise ValueError(f"custom-call target {t} registered twice")
            LIBRARY_CALLS[t] = fn
        return fn
    return wrap

