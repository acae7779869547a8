"""The numpy meaning of the cuDNN convolution calls (see ``library_calls.py``;
notes/xla-gpu-calls.md §2.2, §2.3), computed from the formulas, not from the plain HLO the
compiler lowers them to (passes/conv_lowering.py), so that the two check each other.

In canonical order x[n, c, X], w[o, ci, K], y[n, o, Y], with G feature groups, C_in = C / G,
g(o) = o div (O / G) and, per spatial dimension, window size k, stride s, dilation d, padding
low p (the result shape fixes every range):

    forward          y[n, o, Y]   = sum_{ci, K} x[n, g(o)·C_in + ci, Y·s + K·d - p] · w[o, ci, K]
    backward input   dx[n, c, X]  = sum_{o in c's group, Y·s + K·d - p = X} dy[n, o, Y] · w[o, c mod C_in, K]
    backward filter  dw[o, ci, K] = sum_{n, Y} dy[n, o, Y] · x[n, g(o)·C_in + ci, Y·s + K·d - p]

x reads outside [0, size) are 0; a reversed window (a true convolution) flips w. The three
share one gather: the x values every window position K reads, for all output positions.
Accumulation as the interpreter's convolution: f32 for f16/bf16/f32, f64 for f64, exact
integers for s8. Bias/activation (§2.3), in the compute type (f32, f64 for f64) and rounded
once to the result type, as cuDNN's fused graph does:
``act(conv_result_scale · conv + side_input_scale · side_input + bias[o])``.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..hlo.calls.conv import ConvCall, ConvKind, parse_conv_call
from .library_calls import library_call
from .numerics import compute, dtype_of, result


@library_call("__cudnn$convForward", "__cudnn$convBiasActivationForward", "__cudnn$convBackwardInput",
              "__cudnn$convBackwardFilter")
def _conv_call(ev, inst, ops):
    call = parse_conv_call(inst)
    value = evaluate_conv_call(call, [np.asarray(v) for v in ops])
    return value, np.zeros(call.scratch.dimensions, np.uint8)


def evaluate_conv_call(call: ConvCall, operands: list[np.ndarray]) -> np.ndarray:
    """The call's first result (in its dims' logical order) from its operand values."""
    acc = _acc_dtype(call)
    args = {role: v for role, v in zip(call.operand_roles, operands)}
    dn = call.dnums
    x_perm = [dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions]
    w_perm = [dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension, *dn.kernel_spatial_dimensions]
    y_perm = [dn.output_batch_dimension, dn.output_feature_dimension, *dn.output_spatial_dimensions]
    canon = {"x": x_perm, "w": w_perm, "y": y_perm}
    shapes = {"x": call.x, "w": call.w, "y": call.y}
    t = {role: np.transpose(_operand(args[role], shapes[role].element_type, acc), canon[role])
         for role in ("x", "w", "y") if role in args}
    if call.reversed and "w" in t:
        t["w"] = np.flip(t["w"], axis=tuple(range(2, t["w"].ndim)))
    role = call.result_role
    out_shape = [shapes[role].dimensions[d] for d in canon[role]]
    if call.kind is ConvKind.BACKWARD_INPUT:
        out = _backward_input(call, t["y"], t["w"], out_shape, acc)
    elif call.kind is ConvKind.BACKWARD_FILTER:
        out = _backward_filter(call, t["x"], t["y"], out_shape, acc)
        if call.reversed:
            out = np.flip(out, axis=tuple(range(2, out.ndim)))
    else:
        out = _forward(call, t["x"], t["w"], out_shape, acc)
    out = np.transpose(out, np.argsort(canon[role]))
    if call.kind is ConvKind.BIAS_ACTIVATION:
        return _epilogue(call, out, args["bias"], args.get("side_input"))
    return result(out, call.result.element_type)


# ---- the three convolutions, in canonical order ------------------------------------------------

def _acc_dtype(call: ConvCall) -> np.dtype:
    if call.is_integer:
        return np.dtype(np.int64)
    return np.dtype(np.float64 if call.x.element_type == "f64" else np.float32)


def _operand(v: np.ndarray, et: str, acc: np.dtype) -> np.ndarray:
    return compute(v, et).astype(acc, copy=False)


def _positions(call: ConvCall, pos: tuple[int, ...], x_sizes, y_sizes) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per spatial dimension, for window position ``pos``: (the y positions Y whose x index
    Y·s + K·d - p lies inside x, those x indices)."""
    out = []
    for k, wd, xs, ys in zip(pos, call.window, x_sizes, y_sizes):
        idx = np.arange(ys) * wd.stride + k * wd.window_dilation - wd.padding_low
        ok = (idx >= 0) & (idx < xs)
        out.append((np.nonzero(ok)[0], idx[ok]))
    return out


def _at(spatial) -> tuple:
    """The index of every (batch, group, feature) at the given positions of each spatial dim."""
    return (slice(None),) * 3 + np.ix_(*spatial)


def _window_positions(call: ConvCall):
    return itertools.product(*(range(wd.size) for wd in call.window))


def _forward(call: ConvCall, x: np.ndarray, w: np.ndarray, y_shape, acc) -> np.ndarray:
    n = x.shape[0]
    o, ci = w.shape[:2]
    g = call.feature_group_count
    y = np.zeros([n, g, o // g] + list(y_shape[2:]), acc)
    xg = x.reshape((n, g, ci) + x.shape[2:])
    wg = w.reshape((g, o // g, ci) + w.shape[2:])
    for pos in _window_positions(call):
        sel = _positions(call, pos, x.shape[2:], y_shape[2:])
        if any(len(ys) == 0 for ys, _ in sel):
            continue
        xs = xg[_at(xi for _, xi in sel)]
        contrib = _einsum("ngc...,goc->ngo...", xs, wg[(slice(None),) * 3 + pos])
        y[_at(yi for yi, _ in sel)] += contrib
    return y.reshape(y_shape)


def _backward_input(call: ConvCall, dy: np.ndarray, w: np.ndarray, x_shape, acc) -> np.ndarray:
    n, o = dy.shape[:2]
    ci = w.shape[1]
    g = call.feature_group_count
    dx = np.zeros([n, g, ci] + list(x_shape[2:]), acc)
    dyg = dy.reshape((n, g, o // g) + dy.shape[2:])
    wg = w.reshape((g, o // g, ci) + w.shape[2:])
    for pos in _window_positions(call):
        sel = _positions(call, pos, x_shape[2:], dy.shape[2:])
        if any(len(ys) == 0 for ys, _ in sel):
            continue
        dys = dyg[_at(yi for yi, _ in sel)]
        contrib = _einsum("ngo...,goc->ngc...", dys, wg[(slice(None),) * 3 + pos])
        # for one window position, distinct Y read distinct X: no two updates collide
        dx[_at(xi for _, xi in sel)] += contrib
    return dx.reshape(x_shape)


def _backward_filter(call: ConvCall, x: np.ndarray, dy: np.ndarray, w_shape, acc) -> np.ndarray:
    n, c = x.shape[:2]
    o = dy.shape[1]
    g = call.feature_group_count
    ci = c // g
    dw = np.zeros([g, o // g, ci] + list(w_shape[2:]), acc)
    xg = x.reshape((n, g, ci) + x.shape[2:])
    dyg = dy.reshape((n, g, o // g) + dy.shape[2:])
    for pos in _window_positions(call):
        sel = _positions(call, pos, x.shape[2:], dy.shape[2:])
        if any(len(ys) == 0 for ys, _ in sel):
            continue
        xs = xg[_at(xi for _, xi in sel)]
        dys = dyg[_at(yi for yi, _ in sel)]
        spatial = "".join(chr(ord("p") + k) for k in range(len(pos)))
        dw[(slice(None),) * 3 + pos] += _einsum(f"ngc{spatial},ngo{spatial}->goc", xs, dys)
    return dw.reshape(w_shape)


def _einsum(spec: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":  # exact integer sums (numpy's BLAS path is float only)
        return np.einsum(spec, a, b)
    return np.einsum(spec, a, b, optimize=True)


# ---- bias / side input / activation ------------------------------------------------------------

def _epilogue(call: ConvCall, conv: np.ndarray, bias: np.ndarray, side: np.ndarray | None) -> np.ndarray:
    ct = dtype_of(call.compute_type)
    t = conv.astype(ct)
    if call.conv_result_scale != 1.0:
        t = t * ct.type(call.conv_result_scale)
    if side is not None and call.side_input_scale != 0.0:
        s = compute(side, call.side_input.element_type).astype(ct)
        if call.side_input_scale != 1.0:
            s = s * ct.type(call.side_input_scale)
        t = t + s
    shape = [1] * t.ndim
    shape[call.dnums.output_feature_dimension] = -1
    t = t + compute(bias, call.bias.element_type).astype(ct).reshape(shape)
    t = _activation(call, t, ct)
    return result(t, call.result.element_type)


def _activation(call: ConvCall, t: np.ndarray, ct: np.dtype) -> np.ndarray:
    zero = ct.type(0)
    with np.errstate(over="ignore", invalid="ignore"):
        if call.activation == "kRelu":
            return np.maximum(t, zero)
        if call.activation == "kRelu6":
            return np.minimum(np.maximum(t, zero), ct.type(6))
        if call.activation == "kElu":
            return np.where(t > zero, t, np.expm1(t))
        if call.activation == "kLeakyRelu":
            return np.where(t > zero, t, t * ct.type(call.leakyrelu_alpha))
    return t
