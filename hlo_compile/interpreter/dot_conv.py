"""dot (dot_general: batch and contracting dims, any operand types) and convolution
(dim_labels, strides, padding, lhs/rhs dilation, window reversal, feature and batch groups).
Narrow floats multiply and accumulate in f32 and round once, as XLA:CPU does."""
from __future__ import annotations

import itertools

import numpy as np

from ..hlo.attributes import PaddingDim
from ..hlo.element_types import is_complex, is_float
from .numerics import compute, kind, result
from .registry import op
from .shape_ops import pad_array


def _acc_dtype(et_out: str, et_in: str) -> np.dtype:
    if is_complex(et_out):
        return np.dtype(np.complex128 if et_out == "c128" else np.complex64)
    if is_float(et_out):
        return np.dtype(np.float64 if et_out == "f64" else np.float32)
    if et_out == "pred":
        return np.dtype(np.int64)
    from .numerics import dtype_of
    return dtype_of(et_out)


def _operand(x, et_in: str, acc: np.dtype) -> np.ndarray:
    x = compute(np.asarray(x), et_in)
    if kind(et_in) == "pred":
        x = x.astype(np.int64)
    return x.astype(acc, copy=False)


@op("dot")
def _dot(ev, inst, ops):
    dn = inst.dot_dimension_numbers
    et = inst.shape.element_type
    acc = _acc_dtype(et, inst.operands[0].shape.element_type)
    lhs = _operand(ops[0], inst.operands[0].shape.element_type, acc)
    rhs = _operand(ops[1], inst.operands[1].shape.element_type, acc)
    lb, rb = list(dn.lhs_batch_dimensions), list(dn.rhs_batch_dimensions)
    lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    bshape = [lhs.shape[d] for d in lb]
    k = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
    m = int(np.prod([lhs.shape[d] for d in lf], dtype=np.int64))
    n = int(np.prod([rhs.shape[d] for d in rf], dtype=np.int64))
    b = int(np.prod(bshape, dtype=np.int64))
    l2 = np.transpose(lhs, lb + lf + lc).reshape(b, m, k)
    r2 = np.transpose(rhs, rb + rc + rf).reshape(b, k, n)
    if acc.kind in "iu":  # numpy integer matmul wraps like XLA
        out = np.einsum("bmk,bkn->bmn", l2, r2)
    else:
        out = np.matmul(l2, r2)
    out = out.reshape(bshape + [lhs.shape[d] for d in lf] + [rhs.shape[d] for d in rf])
    if et == "pred":
        return out != 0
    return result(out, et)


@op("convolution")
def _convolution(ev, inst, ops):
    dn = inst.convolution_dimension_numbers
    et = inst.shape.element_type
    acc = _acc_dtype(et, inst.operands[0].shape.element_type)
    lhs = _operand(ops[0], inst.operands[0].shape.element_type, acc)
    rhs = _operand(ops[1], inst.operands[1].shape.element_type, acc)
    window = inst.attr("window", ())
    if not window:
        from ..hlo.attributes import WindowDim
        window = tuple(WindowDim(size=rhs.shape[d]) for d in dn.kernel_spatial_dimensions)
    fgc = inst.attr("feature_group_count", 1)
    bgc = inst.attr("batch_group_count", 1)
    # canonical layouts: lhs (N, C, S...), rhs (O, I, S...)
    x = np.transpose(lhs, [dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions])
    w = np.transpose(rhs, [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                           *dn.kernel_spatial_dimensions])
    rev = [2 + i for i, wd in enumerate(window) if wd.window_reversal]
    if rev:
        w = np.flip(w, axis=rev)
    pads = [PaddingDim(0, 0, 0), PaddingDim(0, 0, 0)] + [
        PaddingDim(wd.padding_low, wd.padding_high, wd.base_dilation - 1) for wd in window]
    x = pad_array(x, np.zeros((), x.dtype), pads)
    out_sp = [inst.shape.dimensions[d] for d in dn.output_spatial_dimensions]
    N, C = x.shape[0], x.shape[1]
    O, I = w.shape[0], w.shape[1]
    G = fgc
    out_b = N // bgc
    # groups: x (bgc, N/bgc, G, C/G, S...), w (bgc*G... ) -> out (N/bgc, O, S...)
    xg = x.reshape((bgc, out_b, G, C // G) + x.shape[2:])
    og = O // (G * bgc)
    wg = w.reshape((bgc, G, og, I) + w.shape[2:])
    out = np.zeros((out_b, bgc, G, og) + tuple(out_sp), dtype=acc)
    for pos in itertools.product(*(range(wd.size) for wd in window)):
        sl = tuple(slice(k * wd.window_dilation, k * wd.window_dilation + (o - 1) * wd.stride + 1, wd.stride)
                   if o > 0 else slice(0, 0) for k, wd, o in zip(pos, window, out_sp))
        xs = xg[(slice(None),) * 4 + sl]  # (bgc, out_b, G, C/G, S...)
        ws = wg[(slice(None),) * 4 + tuple(pos)]  # (bgc, G, og, I)
        if xs.size == 0 or ws.size == 0:
            continue
        if acc.kind in "iu":
            contrib = np.einsum("yngc...,ygoc->nygo...", xs, ws)
        else:
            contrib = np.einsum("yngc...,ygoc->nygo...", xs, ws, optimize=True)
        out += contrib
    out = out.reshape((out_b, O) + tuple(out_sp))
    # back to the output dim labels
    perm_src = [dn.output_batch_dimension, dn.output_feature_dimension, *dn.output_spatial_dimensions]
    out = np.transpose(out, np.argsort(perm_src))
    if et == "pred":
        return out != 0
    return result(out, et)
