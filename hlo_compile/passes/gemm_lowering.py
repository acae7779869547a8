"""The cuBLAS GEMM calls as plain HLO our dot emitter compiles (see ``library_calls.py``).

Each ``__cublas$gemm`` / ``__cublas$lt$matmul`` / ``__cublas$lt$matmul$f8`` call (read by
``hlo/calls/gemm.py``) becomes ONE ``kOutput`` fusion: a ``dot`` accumulating in f32 (f64,
complex or the integer output type where those apply), then the epilogue, elementwise over it
(notes/xla-gpu-calls.md §1.3, §1.5)::

    dot -> * broadcast(alpha [* a_scale * b_scale]) -> + beta*C -> + broadcast(bias) -> act
        -> [* d_scale, clamp to the F8 range] -> convert to D's type

so the tiled dot emitter takes it with the epilogue fused (its root is elementwise over a single
dot) and the result is rounded once. An operand whose batch dims were folded away (XLA's
broadcast folding) is broadcast back inside the fusion. Where the call has a second result the
fusion ends at the value in the compute type and plain HLO after it (fused later by the fusion
pass) makes the leaves: GELU_AUX's aux (X) and D = gelu(X); FP8 amax = reduce(max, |Y|) and
D from Y. Alpha 0 means no product at all (BLAS reads neither A nor B).

Users reading the call through ``get-tuple-element`` read the new leaves instead (a leaf read
once takes the reader's name); the workspace leaf is a zero broadcast, built only when
something reads the whole tuple, which is then rebuilt with the call's name. Every new value
keeps the layout the module declares for its leaf.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ..hlo import HloComputation, HloInstruction
from ..hlo.builder import HloBuilder
from ..hlo.dtypes import numpy_dtype
from ..hlo.element_types import is_complex, is_integral
from ..hlo.calls.gemm import GemmCall, parse_gemm_call
from ..hlo.ir import HloModule
from ..hlo.calls.library_targets import GEMM_TARGETS
from ..hlo.rewrite import (NameScope, add_computation, control_predecessors, insert_instructions, module_of,
                           remove_instructions, replace_instructions, set_control_predecessors, take_name)
from ..hlo.shape import Shape
from .fusion_builder import build_fusion

GELU_C = math.sqrt(2.0 / math.pi)
GELU_CUBE = 0.044715
FUSION_KIND = "kOutput"   # XLA's kind for a dot or convolution with its consumers fused


def lower_gemm_call(comp: HloComputation, inst: HloInstruction) -> None:
    """Replace GEMM call ``inst`` of ``comp`` by plain HLO computing the same leaves."""
    call = parse_gemm_call(inst)
    module = module_of(comp)
    names = NameScope.of_instructions(module.computations)
    acc = compute_type(call, inst)
    inner = Shape.array(acc, call.output.dimensions, layout=call.output.minor_to_major)
    members = _Emitter(comp, inst, names, inner)
    x = _pre_activation(members, call, inst)
    if call.aux_index is not None:
        fused, post = x, "aux"                  # X leaves the fusion; aux and act(X) after it
    else:
        y = _activation(members, x, call.epilogue.activation)
        if call.amax_index is not None:
            fused, post = y, "amax"             # Y leaves the fusion; amax and D after it
        else:
            fused, post = _to_output(members, y, call, inst), None
    fused = members.finish(fused, call.output if post is None else _mid_shape(call, acc))
    fusion = _build(module, comp, members, fused, names, f"{inst.name}.gemm")
    outside = _Emitter(comp, inst, names, inner)
    leaves = {"d": fusion}
    if post == "aux":
        aux_shape = inst.shape.tuple_shapes[call.aux_index]
        leaves["aux"] = outside.finish(fusion, aux_shape)
        y = _activation(outside, fusion, call.epilogue.activation)
        leaves["d"] = outside.finish(_to_output(outside, y, call, inst), call.output)
    elif post == "amax":
        leaves["amax"] = _amax(outside, fusion)
        leaves["d"] = outside.finish(_to_output(outside, fusion, call, inst), call.output)
    insert_instructions(comp, [fusion], before=inst)
    outside.insert()
    _replace_call(comp, inst, call, leaves, names)


LOWERINGS: dict[str, Callable[[HloComputation, HloInstruction], None]] = {t: lower_gemm_call for t in GEMM_TARGETS}


def compute_type(call: GemmCall, inst: HloInstruction) -> str:
    """The element type the product and the epilogue are computed in: f32 for f32 and narrower
    floats, f64 when anything is f64, the complex or integer output type otherwise."""
    out = call.output.element_type
    types = (out, inst.operands[call.a].shape.element_type, inst.operands[call.b].shape.element_type)
    if is_complex(out):
        return "c128" if "c128" in types else "c64"
    if is_integral(out):
        return out
    return "f64" if "f64" in types else "f32"


def _mid_shape(call: GemmCall, acc: str) -> Shape:
    """The shape of a value in the compute type that leaves the fusion: D's own shape when D
    is in the compute type, else D's dims and minor-to-major order in it."""
    if call.output.element_type == acc:
        return call.output
    return Shape.array(acc, call.output.dimensions, layout=call.output.minor_to_major)


# ---- the epilogue, as instructions ------------------------------------------------------------------

def _pre_activation(e: _Emitter, call: GemmCall, inst: HloInstruction) -> HloInstruction:
    """X = alpha * a_scale * b_scale * dot(A, B) + beta * c_scale * C + bias, in the compute type."""
    ops = inst.operands
    if call.alpha_is_zero:
        x = e.splat(0)
    else:
        x = _dot(e, call, inst)
        factor = e.scalar_of(ops[call.a_scale]) if call.a_scale is not None else None
        if call.b_scale is not None:
            b_scale = e.scalar_of(ops[call.b_scale])
            factor = b_scale if factor is None else e.op("multiply", [factor, b_scale])
        if call.alpha != (1.0, 0.0):
            alpha = e.number(_alpha_value(call, e.et))
            factor = alpha if factor is None else e.op("multiply", [alpha, factor])
        if factor is not None:
            x = e.op("multiply", [x, e.broadcast(factor, e.inner)])
    if call.c is not None:
        c = e.in_compute_type(ops[call.c])
        if call.c_scale is not None:
            c = e.op("multiply", [c, e.broadcast(e.scalar_of(ops[call.c_scale]), e.inner)])
        if call.beta != 1:
            c = e.op("multiply", [c, e.splat(call.beta)])
        x = e.op("add", [x, c])
    if call.bias is not None:
        bias = e.in_compute_type(ops[call.bias])
        x = e.op("add", [x, e.broadcast(bias, e.inner, (call.bias_dimension,))])
    return x


def _alpha_value(call: GemmCall, et: str):
    return complex(*call.alpha) if is_complex(et) else call.alpha[0]


def _dot(e: _Emitter, call: GemmCall, inst: HloInstruction) -> HloInstruction:
    """dot(A, B) in the compute type; an operand without batch dims while the other has them
    is broadcast to them first (leading dims), as cuBLAS reuses it for every batch."""
    dn = call.dot_dims
    a, b = inst.operands[call.a], inst.operands[call.b]
    lb, rb = list(dn.lhs_batch_dimensions), list(dn.rhs_batch_dimensions)
    lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
    if bool(lb) != bool(rb):
        nb = max(len(lb), len(rb))
        batch = call.output.dimensions[:nb]
        if not lb:
            a, lb, lc = _batched(e, a, batch), list(range(nb)), [d + nb for d in lc]
        else:
            b, rb, rc = _batched(e, b, batch), list(range(nb)), [d + nb for d in rc]
    return e.dot(a, b, lc, rc, lb, rb, et=e.et, layout=e.inner.layout)


def _batched(e: _Emitter, x: HloInstruction, batch) -> HloInstruction:
    nb, rank = len(batch), x.shape.rank
    shape = Shape.array(x.shape.element_type, tuple(batch) + tuple(x.shape.dimensions))
    return e.broadcast(x, shape, tuple(range(nb, nb + rank)))


def _activation(e: _Emitter, x: HloInstruction, kind: str) -> HloInstruction:
    """relu = max(x, 0); gelu = x * (0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x*x*x)))),
    XLA's tanh form, the only GELU its GEMM rewriter fuses."""
    if kind == "relu":
        return e.op("maximum", [x, e.splat(0)])
    if kind == "gelu":
        cube = e.op("multiply", [e.op("multiply", [x, x]), x])
        inner = e.op("add", [x, e.op("multiply", [e.splat(GELU_CUBE), cube])])
        t = e.op("tanh", [e.op("multiply", [e.splat(GELU_C), inner])])
        half = e.op("multiply", [e.splat(0.5), e.op("add", [e.splat(1), t])])
        return e.op("multiply", [x, half])
    return x


def _to_output(e: _Emitter, y: HloInstruction, call: GemmCall, inst: HloInstruction) -> HloInstruction:
    """Y as D: scaled by d_scale and clamped to the finite range for an F8 output (then
    converted with round-to-nearest-even), else converted once."""
    if call.output_is_f8:
        if call.d_scale is not None:
            y = e.op("multiply", [y, e.broadcast(e.scalar_of(inst.operands[call.d_scale]), e.inner)])
        import ml_dtypes  # (here: a compile without F8 GEMMs never loads it, issue 17)
        top = float(ml_dtypes.finfo(numpy_dtype(call.output.element_type)).max)
        y = e.op("clamp", [e.splat(-top), y, e.splat(top)])
    return e.finish(y, call.output)


def _amax(e: _Emitter, y: HloInstruction) -> HloInstruction:
    """max |y| over every element, as f32[] (0 for an empty output)."""
    mag = e.convert(e.op("abs", [y]), "f32", layout=y.shape.minor_to_major)
    reducer = e.reducer("maximum", "f32", name=f"{e.like.name}.amax_max", scalar_names=("lhs", "rhs", "max"))
    zero = e.constant("f32", "0", name="zero")
    return e.reduce(mag, zero, range(y.shape.rank), reducer, name="amax")


# ---- building ---------------------------------------------------------------------------------------

class _Emitter(HloBuilder):
    """The ``HloBuilder`` of one call (instructions named ``<call>.<what>``); values of the
    output's dims have shape ``inner`` (the compute type, D's dim order)."""

    def __init__(self, comp: HloComputation, like: HloInstruction, names: NameScope, inner: Shape):
        super().__init__(comp, like, names=names)
        self.inner = inner
        self.et = inner.element_type

    def op(self, opcode: str, operands: Sequence[HloInstruction]) -> HloInstruction:
        """Elementwise ``opcode`` of ``operands``: in ``inner``'s layout where of the output's dims."""
        full = any(tuple(o.shape.dimensions) == tuple(self.inner.dimensions) for o in operands)
        return self.instruction(opcode, operands, layout=self.inner.layout if full else None)

    def number(self, value, et: str | None = None) -> HloInstruction:
        """A scalar constant (of the compute type unless ``et``)."""
        et = et or self.et
        return self.constant(et, _literal(value, et))

    def splat(self, value) -> HloInstruction:
        return self.broadcast(self.number(value), self.inner)

    def in_compute_type(self, x: HloInstruction) -> HloInstruction:
        """``x`` in the compute type (itself when it is), in its dimension order."""
        return self.convert(x, self.et, layout=x.shape.minor_to_major)

    def scalar_of(self, x: HloInstruction) -> HloInstruction:
        """A scale operand (a float scalar) in the compute type."""
        return self.in_compute_type(x)

    def finish(self, v: HloInstruction, shape: Shape) -> HloInstruction:
        """``v`` with exactly ``shape``: the last new instruction takes it when only the layout
        or nothing differs, else a convert (or a copy, for a layout alone) makes it."""
        if v.shape == shape:
            return v
        if v.shape.element_type == shape.element_type:
            if self.new and v is self.new[-1] and v.opcode not in ("fusion", "parameter", "reduce"):
                v.shape = shape
                return v
            return self.relayout(v, shape)
        return self.convert(v, shape.element_type, layout=shape.layout)


def _literal(value, et: str) -> str:
    if is_complex(et):
        c = complex(value)
        return f"({_literal(c.real, 'f64')}, {_literal(c.imag, 'f64')})"
    if is_integral(et):
        return str(int(value))
    import numpy as np  # (here: only lowering a GEMM call needs it, issue 17)
    v = float(np.float32(value)) if et == "f32" else float(value)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return str(np.float32(v)) if et == "f32" else repr(v)


def _build(module: HloModule, comp: HloComputation, members: _Emitter, root: HloInstruction, names: NameScope,
           base: str) -> HloInstruction:
    """The fusion of ``members`` (root ``root``) named ``base`` (fresh), its computation
    ``fused_<name>`` added to ``module`` before ``comp``."""
    name = names.fresh(base)
    names.release(root.name)
    root.name = name
    comp_name = NameScope.of_computations(module).fresh(f"fused_{name}")
    fusion = build_fusion(members.new, root, comp_name, FUSION_KIND)
    add_computation(module, fusion.fused_computation, before=comp)
    return fusion


def _replace_call(comp: HloComputation, inst: HloInstruction, call: GemmCall, leaves: dict[str, HloInstruction],
                  names: NameScope) -> None:
    """Point the call's readers at ``leaves`` and remove the call."""
    if not call.result_is_tuple:
        take_name(leaves["d"], inst, names)
        replace_instructions(comp, {inst: leaves["d"]})
        return
    by_index = {i: leaves[role] for role, i in call.result_leaves().items() if role != "workspace"}
    workspace: list[HloInstruction] = []

    def leaf(k: int) -> HloInstruction:
        if k in by_index:
            return by_index[k]
        if not workspace:
            workspace.append(_zero_workspace(comp, inst, inst.shape.tuple_shapes[k], names))
        return workspace[0]

    gtes = [u for u in inst.users if u.opcode == "get-tuple-element"]
    readers: dict[int, list[HloInstruction]] = {}
    for g in gtes:
        readers.setdefault(g.tuple_index, []).append(g)
    replacements = {}
    for k, gs in readers.items():
        value = leaf(k)
        if len(gs) == 1 and value is not inst and value.opcode != "parameter":
            take_name(value, gs[0], names)
        for g in gs:
            replacements[g] = value
    replace_instructions(comp, replacements)
    still_read = (inst.users or comp.root is inst
                  or any(inst is p for i in comp.instructions for p in control_predecessors(i)))
    if still_read:
        values = [leaf(k) for k in range(len(inst.shape.tuple_shapes))]
        b = HloBuilder(comp, inst, names=names)
        whole = b.tuple_of(values)
        b.insert()
        take_name(whole, inst, names)
        replace_instructions(comp, {inst: whole})
        return
    preds = control_predecessors(inst)
    if preds:
        set_control_predecessors(leaves["d"], control_predecessors(leaves["d"]) + preds)
    remove_instructions(comp, [inst])


def _zero_workspace(comp: HloComputation, inst: HloInstruction, shape: Shape, names: NameScope) -> HloInstruction:
    """The workspace leaf (contents undefined): zeros of its shape, placed before ``inst``."""
    e = HloBuilder(comp, inst, names=names)
    zeros = e.broadcast(e.constant(shape.element_type, _literal(0, shape.element_type)), shape)
    e.insert()
    return zeros
