"""The library custom-call targets XLA:GPU writes, by family (notes/xla-gpu-calls.md §1-3).

Kept in the front end so that the interpreter, the passes that lower a call to plain HLO, the
runtime steps that call the NVIDIA library and the compile stages (which must refuse what no
step runs) all name the same targets.
"""
from __future__ import annotations

# cuBLAS / cuBLASLt GEMMs (legacy cuBLAS, cuBLASLt, cuBLASLt with FP8 per-tensor scales)
GEMM_TARGETS = frozenset({"__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8"})
# cuDNN convolutions: the window and dim_labels always describe the forward convolution
CONV_TARGETS = frozenset({"__cudnn$convForward", "__cudnn$convBackwardInput", "__cudnn$convBackwardFilter",
                          "__cudnn$convBiasActivationForward"})
# cuDNN fused attention, forward and backward
FMHA_TARGETS = frozenset({"__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxDropout", "__cudnn$fmhaScaleBiasSoftmax",
                          "__cudnn$fmhaScaleBiasSoftmaxDropout", "__cudnn$fmhaSoftmaxBackward",
                          "__cudnn$fmhaSoftmaxDropoutBackward", "__cudnn$fmhaScaleBiasSoftmaxBackward",
                          "__cudnn$fmhaScaleBiasSoftmaxDropoutBackward"})
LIBRARY_TARGETS = GEMM_TARGETS | CONV_TARGETS | FMHA_TARGETS
# operand-less calls XLA uses to allocate a workspace (cuDNN fusions, custom kernels): contents undefined
SCRATCH_TARGETS = frozenset({"__nop", "__custom_kernel_fusion$workspace"})


def library_family(target: str) -> str | None:
    """'gemm', 'conv' or 'fmha' for a library target, else None."""
    if target in GEMM_TARGETS:
        return "gemm"
    if target in CONV_TARGETS:
        return "conv"
    if target in FMHA_TARGETS:
        return "fmha"
    return None


_LIBRARY_OF = {"__cublas$gemm": "cuBLAS", "__cublas$lt$matmul": "cuBLASLt", "__cublas$lt$matmul$f8": "cuBLASLt"}
_FLAG_OF = {"gemm": "--gemm", "conv": "--conv", "fmha": "--conv"}


def library_name(target: str) -> str:
    """The NVIDIA library that runs ``target`` (cuBLAS, cuBLASLt, cuDNN)."""
    return _LIBRARY_OF.get(target, "cuDNN")


def library_reason(target: str) -> str:
    """Why a library call stays a call, for the reports."""
    family = library_family(target)
    return (f"{family} library call run by {library_name(target)} ({_FLAG_OF[family]}=library); "
            f"{_FLAG_OF[family]}=generated compiles it with our emitters")


# Transformer Engine's cuDNN attention through XLA's typed FFI (hlo/calls/te_attention.py): no
# library step runs it; it is always lowered to plain HLO (passes/te_attention_lowering.py)
TE_ATTENTION_FORWARD = "te_fused_attn_forward_ffi"
TE_ATTENTION_BACKWARD = "te_fused_attn_backward_ffi"
TE_ATTENTION_TARGETS = frozenset({TE_ATTENTION_FORWARD, TE_ATTENTION_BACKWARD})

# cuBLAS trsm (hlo/calls/triangular_solve.py): no library step runs it; it is always lowered to
# plain HLO, as the triangular-solve op is (passes/triangular_solve_lowering.py)
TRIANGULAR_SOLVE_TARGET = "__cublas$triangularSolve"
