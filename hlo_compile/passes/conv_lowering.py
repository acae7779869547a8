"""The cuDNN convolution calls as plain HLO (see ``library_calls.py``; notes/xla-gpu-calls.md §2).

Each call becomes one fusion that our implicit-GEMM convolution emitter
(``codegen/emitters/gemm/conv.py``) compiles, or the loop emitter where it declines:

- forward: ``convolution(x, w)`` with the call's window, dim_labels and feature groups (s8
  convolutions accumulate in s32, then convert);
- bias-activation: the convolution in the compute type (f32; f64 for f64; s32 then f32 for
  s8) followed by the epilogue ops ``conv_result_scale · conv + side_input_scale · side +
  broadcast(bias)``, the activation (maximum, minimum, select/compare with
  exponential-minus-one or a multiply) and one convert to the result type, all elementwise
  over the convolution so the emitter fuses them into its epilogue;
- backward input: ``dx = convolution(dy, w)`` with the kernel reversed (window reversal), lhs
  dilation = the forward stride, rhs dilation = the forward dilation, padding low ``d(k-1) - p``
  and high whatever gives dx's size, kernel input/output features swapped; grouped ones first
  regroup the kernel ``[O, C/G] -> [O/G, C]`` with transpose/reshape inside the fusion;
- backward filter: ``dw = convolution(x, dy)`` with x's batch and feature roles swapped (the
  batch is contracted), window = dy's spatial size, stride = the forward dilation, rhs dilation
  = the forward stride, ``batch_group_count`` = the call's feature groups; a reversed (true)
  convolution reverses the result.

Users that read the call's first leaf through ``get-tuple-element`` read the fusion instead
(which takes the call's name); the scratch leaf (contents undefined) becomes zeros only where
something reads it or the tuple as a whole. Every call is checked by ``parse_conv_call`` first,
so what the interpreter refuses the lowering refuses too, with the same message.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..hlo import HloComputation, HloInstruction, Shape
from ..hlo.attributes import ConvDimensionNumbers, WindowDim
from ..hlo.builder import HloBuilder
from ..hlo.calls.conv import TARGET_KINDS, ConvCall, ConvKind, parse_conv_call
from ..hlo.rewrite import (NameScope, add_computation, control_predecessors, insert_instructions, module_of,
                           remove_dead, replace_instructions, replace_uses, take_name)
from .fusion_builder import build_fusion


def lower_conv_call(comp: HloComputation, inst: HloInstruction) -> None:
    """Replace cuDNN convolution call ``inst`` of ``comp`` by its fusion, in place."""
    call = parse_conv_call(inst)
    module = module_of(comp)
    names = NameScope.of_instructions(module.computations)
    b = _Members(comp, inst, names)
    build = {ConvKind.BACKWARD_INPUT: _backward_input, ConvKind.BACKWARD_FILTER: _backward_filter}.get(
        call.kind, _forward)
    root = build(b, call, list(inst.operands))
    fused_name = NameScope.of_computations(module).fresh(f"fused_{inst.name}")
    fusion = build_fusion(b.new, root, fused_name, "kOutput")
    add_computation(module, fusion.fused_computation, before=comp)
    insert_instructions(comp, [fusion], before=inst)
    _replace_call(comp, inst, call, fusion, names)


LOWERINGS: dict[str, Callable[[HloComputation, HloInstruction], None]] = {t: lower_conv_call for t in TARGET_KINDS}


# ---- the fused computation ---------------------------------------------------------------------

class _Members(HloBuilder):
    """The ``HloBuilder`` of the new fusion's instructions (copied into it by
    ``build_fusion``): named ``<call>.<what>``, each in its first operand's layout."""

    def __init__(self, comp: HloComputation, call: HloInstruction, names: NameScope):
        super().__init__(comp, call, names=names, keep_layout=True)

    def scalar(self, et: str, value: float) -> HloInstruction:
        return self.constant(et, _literal(et, value))

    def splat(self, et: str, value: float, shape: Shape) -> HloInstruction:
        return self.broadcast(self.scalar(et, value), shape)

    def conv(self, shape: Shape, lhs: HloInstruction, rhs: HloInstruction, window: Sequence[WindowDim],
             dn: ConvDimensionNumbers, feature_groups: int = 1, batch_groups: int = 1) -> HloInstruction:
        """The convolution, accumulating in ``shape``'s type and laid out as ``shape``."""
        return self.convolution(lhs, rhs, window, dn, feature_groups, batch_groups, et=shape.element_type,
                                layout=shape.layout)


def _like_result(call: ConvCall, et: str) -> Shape:
    """The result's shape in type ``et``: its own (layout and all) for the result's type, else
    its dimensions and dimension order (minor_to_major; no tiles)."""
    res = call.result
    if et == res.element_type:
        return res
    layout = res.layout.minor_to_major if res.layout is not None else None
    return Shape.array(et, res.dimensions, layout)


def _forward(b: _Members, call: ConvCall, ops: list[HloInstruction]) -> HloInstruction:
    x, w = ops[0], ops[1]
    out_et = call.result.element_type
    if call.kind is ConvKind.FORWARD:
        conv_et = "s32" if call.is_integer else out_et
        conv = b.conv(_like_result(call, conv_et), x, w, call.window, call.dnums, call.feature_group_count)
        return b.convert(conv, out_et)
    ct = call.compute_type
    conv_et = "s32" if call.is_integer else ct
    full = _like_result(call, ct)
    t = b.convert(b.conv(_like_result(call, conv_et), x, w, call.window, call.dnums,
                                call.feature_group_count), ct)
    if call.conv_result_scale != 1.0:
        t = b.binary("multiply", t, b.splat(ct, call.conv_result_scale, full))
    if call.uses_side_input:
        side = b.convert(ops[call.operand_index("side_input")], ct)
        if call.side_input_scale != 1.0:
            side = b.binary("multiply", side, b.splat(ct, call.side_input_scale, full))
        t = b.binary("add", t, side)
    bias = b.convert(ops[call.operand_index("bias")], ct)
    t = b.binary("add", t, b.broadcast(bias, full, [call.dnums.output_feature_dimension]))
    t = _activation(b, call, t, full)
    return b.convert(t, out_et)


def _activation(b: _Members, call: ConvCall, t: HloInstruction, full: Shape) -> HloInstruction:
    ct = full.element_type
    act = call.activation
    if act == "kNone":
        return t
    zero = b.splat(ct, 0.0, full)
    if act == "kRelu":
        return b.binary("maximum", t, zero)
    if act == "kRelu6":
        return b.binary("minimum", b.binary("maximum", t, zero), b.splat(ct, 6.0, full))
    positive = b.compare(t, zero, "GT")
    if act == "kElu":
        negative = b.unary("exponential-minus-one", t)
    else:  # kLeakyRelu
        negative = b.binary("multiply", t, b.splat(ct, call.leakyrelu_alpha, full))
    return b.select(positive, t, negative)


def _backward_input(b: _Members, call: ConvCall, ops: list[HloInstruction]) -> HloInstruction:
    dy, w = ops
    D = call.dnums
    window = []
    for k, wd in enumerate(call.window):
        x_size = call.x.dimensions[D.input_spatial_dimensions[k]]
        y_size = call.y.dimensions[D.output_spatial_dimensions[k]]
        span = wd.window_dilation * (wd.size - 1)
        low = span - wd.padding_low
        high = x_size - (y_size - 1) * wd.stride - 1 - low + span
        window.append(WindowDim(wd.size, 1, low, high, wd.window_dilation, wd.stride, not call.reversed))
    G = call.feature_group_count
    lhs_labels = (D.output_batch_dimension, D.output_feature_dimension, D.output_spatial_dimensions)
    out_labels = (D.input_batch_dimension, D.input_feature_dimension, D.input_spatial_dimensions)
    if G == 1:
        kernel = w
        kernel_labels = (D.kernel_output_feature_dimension, D.kernel_input_feature_dimension,
                         D.kernel_spatial_dimensions)
    else:
        kernel = _regroup_kernel(b, call, w)
        kernel_labels = (0, 1, tuple(range(2, 2 + call.spatial_rank)))
    dn = ConvDimensionNumbers(*lhs_labels, *kernel_labels, *out_labels)
    return b.conv(call.result, dy, kernel, window, dn, feature_groups=G)


def _regroup_kernel(b: _Members, call: ConvCall, w: HloInstruction) -> HloInstruction:
    """w[o, ci, K] (o = g·O/G + oo) as the backward convolution's kernel W[oo, g·C_in + ci, K]
    (input features O/G, output features C), in that dimension order."""
    D, G = call.dnums, call.feature_group_count
    wd = call.w.dimensions
    O, ci = wd[D.kernel_output_feature_dimension], wd[D.kernel_input_feature_dimension]
    spatial = [wd[d] for d in D.kernel_spatial_dimensions]
    order = (D.kernel_output_feature_dimension, D.kernel_input_feature_dimension, *D.kernel_spatial_dimensions)
    t = b.transpose(w, order)
    t = b.reshape(t, [G, O // G, ci, *spatial])
    swap = (1, 0) + tuple(range(2, 3 + len(spatial)))
    t = b.transpose(t, swap)
    return b.reshape(t, [O // G, G * ci, *spatial])


def _backward_filter(b: _Members, call: ConvCall, ops: list[HloInstruction]) -> HloInstruction:
    x, dy = ops
    D = call.dnums
    window = []
    for k, wd in enumerate(call.window):
        x_size = call.x.dimensions[D.input_spatial_dimensions[k]]
        y_size = call.y.dimensions[D.output_spatial_dimensions[k]]
        high = (wd.size - 1) * wd.window_dilation + (y_size - 1) * wd.stride + 1 - x_size - wd.padding_low
        window.append(WindowDim(y_size, wd.window_dilation, wd.padding_low, high, wd.stride, 1, False))
    dn = ConvDimensionNumbers(
        D.input_feature_dimension, D.input_batch_dimension, D.input_spatial_dimensions,
        D.output_batch_dimension, D.output_feature_dimension, D.output_spatial_dimensions,
        D.kernel_input_feature_dimension, D.kernel_output_feature_dimension, D.kernel_spatial_dimensions)
    conv = b.conv(call.result, x, dy, window, dn, batch_groups=call.feature_group_count)
    if not call.reversed:
        return conv
    return b.reverse(conv, D.kernel_spatial_dimensions)


# ---- replacing the call ------------------------------------------------------------------------

def _replace_call(comp: HloComputation, inst: HloInstruction, call: ConvCall, value: HloInstruction,
                  names: NameScope) -> None:
    """Point the call's users at ``value`` (leaf 0) and, where needed, at zeros (the scratch
    leaf) or a tuple of both; the call leaves ``comp`` and its name goes to what replaces it."""
    scratch: list[HloInstruction] = []

    def zeros() -> HloInstruction:
        if not scratch:
            scratch.append(_zeros(comp, inst, call.scratch, names))
        return scratch[0]

    redirect: dict[HloInstruction, HloInstruction] = {}
    for user in list(inst.users):
        if user.opcode != "get-tuple-element" or control_predecessors(user) or user.operands[0] is not inst:
            continue
        leaf = call.result if user.tuple_index == 0 else call.scratch
        if user.shape != leaf:
            continue
        redirect[user] = value if user.tuple_index == 0 else zeros()
    replace_uses(comp, redirect)
    remove_dead(comp, redirect)
    if inst is comp.root or any(inst in u.operands for u in comp.instructions):
        t = HloBuilder(comp, inst, names=names)
        replacement = t.tuple_of([value, zeros()])
        t.insert()
    else:
        replacement = value
    replace_instructions(comp, {inst: replacement})
    take_name(replacement, inst, names)


def _zeros(comp: HloComputation, like: HloInstruction, shape: Shape, names: NameScope) -> HloInstruction:
    """u8 zeros of ``shape`` placed before ``like``: a broadcast constant (an empty literal when
    the scratch has no bytes)."""
    b = HloBuilder(comp, like, names=names)
    if shape.element_count() == 0:
        out = b.instruction("constant", shape=shape, literal="{}", name="scratch")
    else:
        out = b.broadcast(b.constant(shape.element_type, "0", name="zero"), shape, name="scratch")
    b.insert()
    return out


# ---- literals ----------------------------------------------------------------------------

def _literal(et: str, value: float) -> str:
    """A scalar literal's text that reads back as ``value`` rounded to ``et``."""
    import numpy as np  # (here: only lowering a convolution call needs it, issue 17)
    v = float(np.float32(value)) if et == "f32" else float(value)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)
