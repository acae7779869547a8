"""Window ops: reduce-window and convolution (output → input), built from a pad-like map.

Along one spatial dim an output position ``d`` and a window position ``s`` read the padded,
base-dilated input at ``p = d * stride + s * window_dilation``; the real input index is
``(p - pad_low) floordiv base_dilation`` when that division is exact and the result lies in
the input. The maps are simplified (window dims of size one disappear; convolution keeps
output dims of size one as variables, as XLA prints them).

A convolution's window reversal (``rhs_reversal=1``) changes which input element meets which
kernel element, not which elements an output reads (``s`` and ``size - 1 - s`` run over the
same interval), so each operand's map is the one without reversal, as in XLA's
``ComputeOutputToInputConvolutionOpIndexing``, which ignores it. (The code generator's
convolution reverses the kernel itself and never reads these maps; reduce-window's map, which
the code generator does read, stays unknown for a reversed window.)
"""
from __future__ import annotations

from . import affine as A
from .affine import Expr
from .indexing_map import IndexingMap, dims_of
from .simplifier import simplify


def _window_index(d: Expr, s: Expr, w, in_size: int, cons: dict[Expr, tuple[int, int]]) -> Expr:
    x = A.add(A.mul(d, w.stride), A.mul(s, w.window_dilation)) - w.padding_low
    if w.base_dilation > 1:
        cons[A.mod(x, w.base_dilation)] = (0, 0)
        cons[x] = (0, (in_size - 1) * w.base_dilation)
        return A.floordiv(x, w.base_dilation)
    cons[x] = (0, in_size - 1)
    return x


def _finish(exprs, out_dims, ranges, cons, fold_point_dims: bool = True) -> IndexingMap:
    m = IndexingMap.make(exprs, dims_of(out_dims), ranges, constraints=cons)
    return simplify(m, fold_point_dims).remove_unused_symbols()


def reduce_window_maps(inst, out_shape) -> list:
    n = len(inst.operands) // 2
    window = inst.attr("window", ())
    if any(w.window_reversal for w in window):
        # the code generator emits reduce-window from this map: reversed windows stay unknown
        return [None] * len(inst.operands)
    in_dims = inst.operands[0].shape.dimensions
    cons: dict[Expr, tuple[int, int]] = {}
    exprs = [_window_index(A.dim(i), A.sym(i), w, in_dims[i], cons) for i, w in enumerate(window)]
    ranges = [(0, w.size - 1) for w in window]
    m = _finish(exprs, out_shape.dimensions, ranges, cons)
    init = IndexingMap.make([], dims_of(out_shape.dimensions))
    return [[m] for _ in range(n)] + [[init] for _ in range(n)]


def convolution_maps(inst) -> list:
    """lhs: batch (plus a batch-group symbol), spatial dims through the window, input feature
    as a symbol (offset by the feature group); rhs: spatial and input-feature symbols, output
    feature from the output."""
    lhs, rhs = inst.operands
    dn = inst.convolution_dimension_numbers
    window = inst.attr("window", ())
    fgc = int(inst.attr("feature_group_count", 1))
    bgc = int(inst.attr("batch_group_count", 1))
    nsp = len(dn.input_spatial_dimensions)
    if len(window) != nsp or (fgc > 1 and bgc > 1):
        return [None, None]
    out_dims = inst.shape.dimensions
    ob, of = dn.output_batch_dimension, dn.output_feature_dimension
    in_feat = rhs.shape.dimensions[dn.kernel_input_feature_dimension]
    ranges = [(0, w.size - 1) for w in window] + [(0, in_feat - 1)]
    feat_sym = A.sym(nsp)

    cons: dict[Expr, tuple[int, int]] = {}
    lexprs: list[Expr] = [A.Const(0)] * lhs.shape.rank
    for k in range(nsp):
        lexprs[dn.input_spatial_dimensions[k]] = _window_index(
            A.dim(dn.output_spatial_dimensions[k]), A.sym(k), window[k],
            lhs.shape.dimensions[dn.input_spatial_dimensions[k]], cons)
    if fgc > 1:
        out_per_group = out_dims[of] // fgc
        lexprs[dn.input_feature_dimension] = A.floordiv(A.dim(of), out_per_group) * in_feat + feat_sym
    else:
        lexprs[dn.input_feature_dimension] = feat_sym
    lranges = list(ranges)
    if bgc > 1:
        lexprs[dn.input_batch_dimension] = A.dim(ob) + A.sym(nsp + 1) * out_dims[ob]
        lranges.append((0, bgc - 1))
    else:
        lexprs[dn.input_batch_dimension] = A.dim(ob)
    lhs_map = _finish(lexprs, out_dims, lranges, cons, fold_point_dims=False)

    rexprs: list[Expr] = [A.Const(0)] * rhs.shape.rank
    for k in range(nsp):
        rexprs[dn.kernel_spatial_dimensions[k]] = A.sym(k)
    rexprs[dn.kernel_input_feature_dimension] = feat_sym
    rexprs[dn.kernel_output_feature_dimension] = A.dim(of)
    rhs_map = _finish(rexprs, out_dims, ranges, {}, fold_point_dims=False)
    return [[lhs_map], [rhs_map]]
