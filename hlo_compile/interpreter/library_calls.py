"""The numpy meaning of XLA:GPU's library calls (notes/xla-gpu-calls.md §1-3).

Each family registers its targets with ``@library_call``: ``gemm_calls.py`` (cuBLAS),
``conv_calls.py`` (cuDNN convolutions), ``fmha_calls.py`` (cuDNN attention); the evaluator
imports them. Written from
XLA's definitions, independently of the lowering the compiler uses (passes/*_lowering.py), so
that the two check each other.
"""
from __future__ import annotations

from .registry import Handler, registrar

LIBRARY_CALLS: dict[str, Handler] = {}

# ``@library_call(*targets)``: register ``fn(ev, inst, operands)`` as the meaning of each target
library_call = registrar(LIBRARY_CALLS, "custom-call target")
