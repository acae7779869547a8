"""What NVIDIA's libraries take, as our library steps call them: per family, why one call cannot
go to the library (None: it can).

The cuda platform keeps library calls as calls (``--gemm=library``, ``--conv=library``); a call
the library would refuse, or worse compute wrongly, is lowered to our kernels instead
(``passes/library_calls.py``), so what runs is always right and the steps (``runtime/*_steps.py``)
never meet such a call. Facts measured on the first GPU run (H200, cuBLASLt 13, cuDNN 9 through
the frontend 1.20):

- cuDNN: the filter must be KCRS or KRSC, the activations NCHW or NHWC, each packed (XLA's layout
  assignment gives its cuDNN calls nothing else). A filter in HWIO, the default layout of
  ``b01f_01io->b01f``, ran and returned values unrelated to the convolution (relative error 1.2
  to 1.6 on 24 cases), so it must never reach cuDNN. Bias-activation: only relu?(conv +
  side_input + bias) with unit scales is built as a cuDNN graph.
- cuBLASLt: FP8 E4M3 x E4M3 with an E5M2 D is CUBLAS_STATUS_NOT_SUPPORTED; amax of a D that is
  not FP8 is CUBLAS_STATUS_INVALID_VALUE (XLA asks amax only of FP8 outputs).
"""
from __future__ import annotations

from typing import Callable

from .conv import ConvCall, ConvKind, parse_conv_call
from .gemm import F8_TYPES, GemmCall, parse_gemm_call
from ..ir import HloInstruction
from .library_targets import library_family


def cudnn_dims_strides(call: ConvCall, role: str) -> tuple[list[int], list[int]]:
    """``role``'s dims in cuDNN's order (N, C, spatial... / K, C, spatial...) and the element
    strides of its buffer (its layout's minor_to_major); 1-D gets a unit dim before the spatial one."""
    dn = call.dnums
    shape = {"x": call.x, "w": call.w, "y": call.y}[role]
    order = {"x": (dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions),
             "w": (dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                   *dn.kernel_spatial_dimensions),
             "y": (dn.output_batch_dimension, dn.output_feature_dimension, *dn.output_spatial_dimensions)}[role]
    strides = [0] * shape.rank
    step = 1
    for d in shape.minor_to_major:
        strides[d] = step
        step *= shape.dimensions[d]
    dim = [shape.dimensions[d] for d in order]
    stride = [strides[d] for d in order]
    if call.spatial_rank == 1:
        dim.insert(2, 1)
        stride.insert(2, stride[2] * dim[3])
    return dim, stride


def _packed(dim: list[int], stride: list[int], order: list[int]) -> bool:
    """Whether ``stride`` is the packed layout whose dims, major to minor, are ``order``
    (unit dims may have any stride)."""
    step = 1
    for d in reversed(order):
        if dim[d] != 1 and stride[d] != step:
            return False
        step *= dim[d]
    return True


def cudnn_layout_refusal(call: ConvCall) -> str | None:
    """None when x, w and y are each channels-first (NCHW/KCRS) or channels-last (NHWC/KRSC) packed."""
    for role in ("x", "w", "y"):
        dim, stride = cudnn_dims_strides(call, role)
        n = len(dim)
        first, last = list(range(n)), [0, *range(2, n), 1]
        if not (_packed(dim, stride, first) or _packed(dim, stride, last)):
            shape = {"x": call.x, "w": call.w, "y": call.y}[role]
            what = "filter" if role == "w" else "input" if role == "x" else "output"
            return (f"the {what} {shape.to_text()} is neither channels-first nor channels-last packed "
                    f"({'KCRS/KRSC' if role == 'w' else 'NCHW/NHWC'})")
    return None


def cudnn_conv_refusal(call: ConvCall) -> str | None:
    """Why our cuDNN step does not take ``call`` (None: it does)."""
    if call.reversed:
        return "reversed windows (true convolutions) are not passed to cuDNN here"
    if any(d.layout is not None and d.layout.has_suffixes() for d in (call.x, call.w, call.y)):
        return "tiled or annotated layouts"
    if call.kind is ConvKind.BIAS_ACTIVATION:
        if call.conv_result_scale != 1.0 or call.side_input_scale not in (0.0, 1.0):
            return "scales other than 1 (only relu?(conv + side_input + bias) is built)"
        if call.activation not in ("kNone", "kRelu"):
            return f"activation {call.activation}"
    return cudnn_layout_refusal(call)


def cublaslt_refusal(call: GemmCall, inst: HloInstruction) -> str | None:
    """Why cuBLASLt does not take ``call`` (None: as far as we know, it does)."""
    if not call.is_f8:
        return None
    types = [inst.operands[call.a].shape.element_type, inst.operands[call.b].shape.element_type]
    if types == ["f8e4m3fn", "f8e4m3fn"] and call.output.element_type == "f8e5m2":
        return "FP8 E4M3 x E4M3 with an E5M2 result (CUBLAS_STATUS_NOT_SUPPORTED)"
    if call.amax_index is not None and call.output.element_type not in F8_TYPES:
        return f"the amax of a {call.output.element_type} result (amax is for FP8 results)"
    return None


LIBRARY_LIMITS: dict[str, Callable[[HloInstruction], str | None]] = {
    "conv": lambda inst: cudnn_conv_refusal(parse_conv_call(inst)),
    "gemm": lambda inst: cublaslt_refusal(parse_gemm_call(inst), inst),
}


def library_refusal(inst: HloInstruction) -> str | None:
    """Why the library of ``inst``'s family does not take this call (None: it does, or we do
    not know of a reason)."""
    check = LIBRARY_LIMITS.get(library_family(inst.attr("custom_call_target", None)) or "")
    return check(inst) if check is not None else None
