"""The numpy meaning of XLA:GPU's cuBLAS GEMM calls (notes/xla-gpu-calls.md §1.3, §1.5).

For a call read by ``hlo/calls/gemm.py``::

    P   = dot_general(A, B)                  in the compute type (f32 for f32 and narrower
                                             floats, f64, complex, or integers)
    X   = alpha * a_scale * b_scale * P      (0 when alpha is 0: BLAS reads no A or B then)
          + beta * c_scale * C               (when beta != 0)
          + bias along D's most-minor dim    (BIAS* epilogues)
    aux = X                                  (GELU_AUX kinds; rounded to the aux type)
    Y   = act(X)                             identity, relu = max(x, 0), or XLA's tanh gelu
    amax = max |Y|                           (FP8 with damax_output; f32, before d_scale)
    D   = saturate(d_scale * Y) as F8        (FP8 output) or Y rounded once to D's type

Scales are 1 where not passed; d_scale only applies to an FP8 output, as on CUDA. The workspace
leaf (contents undefined) is zeros. Written from XLA's definitions, independently of the
lowering in ``passes/gemm_lowering.py`` that it checks.
"""
from __future__ import annotations

import math
import string

import ml_dtypes
import numpy as np

from ..hlo.element_types import is_complex, is_integral
from ..hlo.calls.gemm import GemmCall, parse_gemm_call
from ..hlo.calls.library_targets import GEMM_TARGETS
from .library_calls import library_call
from .numerics import dtype_of

GELU_C = math.sqrt(2.0 / math.pi)
GELU_CUBE = 0.044715


@library_call(*sorted(GEMM_TARGETS))
def _gemm(ev, inst, ops):
    call = parse_gemm_call(inst)
    return evaluate_gemm(call, inst, ops)


def compute_dtype(call: GemmCall, inst) -> np.dtype:
    """The type products and the epilogue are computed in."""
    out = call.output.element_type
    a, b = (inst.operands[i].shape.element_type for i in (call.a, call.b))
    if is_complex(out):
        return np.dtype(np.complex128 if "c128" in (out, a, b) else np.complex64)
    if is_integral(out):
        return np.dtype(np.int64)
    return np.dtype(np.float64 if "f64" in (out, a, b) else np.float32)


def evaluate_gemm(call: GemmCall, inst, ops: list) -> np.ndarray | tuple:
    """The call's result (a tuple of leaves, or D alone for a bare array result)."""
    acc = compute_dtype(call, inst)

    def operand(role: str) -> np.ndarray:
        return np.asarray(ops[getattr(call, role)]).astype(acc)

    def scale(role: str) -> np.ndarray:
        i = getattr(call, role)
        return np.asarray(ops[i]).astype(acc) if i is not None else acc.type(1)

    alpha = acc.type(complex(*call.alpha) if acc.kind == "c" else call.alpha[0])
    shape = tuple(call.output.dimensions)
    if call.alpha_is_zero:
        x = np.zeros(shape, acc)
    else:
        product = dot_general(operand("a"), operand("b"), call)
        x = product * (alpha * (scale("a_scale") * scale("b_scale")))
    if call.c is not None:
        c = operand("c") * scale("c_scale")
        x = x + (c if call.beta == 1 else c * acc.type(call.beta))
    if call.bias is not None:
        view = [1] * len(shape)
        view[call.bias_dimension] = shape[call.bias_dimension]
        x = x + operand("bias").reshape(view)
    y = activation(x, call.epilogue.activation)
    leaves: dict[str, np.ndarray] = {}
    out_dt = dtype_of(call.output.element_type)
    if call.output_is_f8:
        scaled = y * scale("d_scale") if call.d_scale is not None else y
        top = float(ml_dtypes.finfo(out_dt).max)
        leaves["d"] = np.clip(scaled, -top, top).astype(out_dt)
    else:
        leaves["d"] = _round(y, out_dt)
    if not call.result_is_tuple:
        return leaves["d"]
    result_shapes = inst.shape.tuple_shapes
    if call.aux_index is not None:
        leaves["aux"] = _round(x, dtype_of(result_shapes[call.aux_index].element_type))
    if call.amax_index is not None:
        leaves["amax"] = np.asarray(np.max(np.abs(y)) if y.size else 0, np.float32).reshape(())
    if call.workspace_index is not None:
        ws = result_shapes[call.workspace_index]
        leaves["workspace"] = np.zeros(ws.dimensions, dtype_of(ws.element_type))
    by_index = {i: leaves[role] for role, i in call.result_leaves().items()}
    return tuple(by_index[i] for i in range(len(result_shapes)))


def _round(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``x`` rounded once to ``dt`` (integers wrap, as the GEMM's integer arithmetic does)."""
    return x.astype(dt)


def dot_general(a: np.ndarray, b: np.ndarray, call: GemmCall) -> np.ndarray:
    """dot_general by the call's dimension numbers, in ``a``'s (already computed) type. An
    operand without batch dims (its broadcast folded into the call) is reused for every batch."""
    dn = call.dot_dims
    letters = iter(string.ascii_letters)
    sa = [""] * a.ndim
    sb = [""] * b.ndim
    batch = []
    nb = max(len(dn.lhs_batch_dimensions), len(dn.rhs_batch_dimensions))
    for i in range(nb):
        ch = next(letters)
        batch.append(ch)
        if dn.lhs_batch_dimensions:
            sa[dn.lhs_batch_dimensions[i]] = ch
        if dn.rhs_batch_dimensions:
            sb[dn.rhs_batch_dimensions[i]] = ch
    for x, y in zip(dn.lhs_contracting_dimensions, dn.rhs_contracting_dimensions):
        sa[x] = sb[y] = next(letters)
    free = []
    for s in (sa, sb):
        for d in range(len(s)):
            if not s[d]:
                s[d] = next(letters)
                free.append(s[d])
    spec = f"{''.join(sa)},{''.join(sb)}->{''.join(batch + free)}"
    return np.einsum(spec, a, b, optimize=a.dtype.kind != "i")


def activation(x: np.ndarray, kind: str) -> np.ndarray:
    """identity, relu (``max(x, 0)``, NaN stays NaN) or XLA's tanh GELU
    ``x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``, in ``x``'s type."""
    if kind == "relu":
        return np.maximum(x, x.dtype.type(0))
    if kind == "gelu":
        t = x.dtype.type
        inner = t(GELU_C) * (x + t(GELU_CUBE) * (x * x * x))
        return x * (t(0.5) * (t(1) + np.tanh(inner)))
    return x
