"""The generated matrix products: the tiled dot (``dot.py``, with its tensor-core path
``dot_mma.py``) and the implicit-GEMM convolution (``conv.py``), both on the tiled GEMM of
``tiles.py``. XLA sends these fusions to cuBLAS, Triton or cuDNN; the fusion analysis picks
them by hero rules of their own (a single dot or convolution under an elementwise epilogue)."""
from __future__ import annotations

from .conv import ConvKernelSpec, emit_conv_kernel, plan_conv_kernel
from .dot import PATHS, emit_dot_kernel, plan_dot_kernel
from .dot_spec import DotKernelSpec, DotPath

__all__ = ["PATHS", "ConvKernelSpec", "DotKernelSpec", "DotPath", "emit_conv_kernel", "emit_dot_kernel",
           "plan_conv_kernel", "plan_dot_kernel"]
