"""dot and convolution in the elemental emitter: one output element per call, a loop over
the contracted positions (XLA's elemental IR emitter does the same for ops no faster emitter
takes). Correct for every dimension-number combination the interpreter supports; fast
kernels (tiled, tensor cores) are a separate emitter.

Accumulation follows the interpreter (and XLA:CPU): floats in f32 (f64 for f64 results),
integers in the result type, ``pred`` results as an integer count tested against zero,
complex in the complex type itself (``complex_ops.complex_multiply_add``).
"""
from __future__ import annotations

import math
from typing import Sequence

from llvmlite import ir

from ...hlo import HloInstruction
from ...hlo.errors import HloUnsupportedError
from ...indexing.op_maps import output_to_input
from .affine import AffineEmitter
from .convert import emit_convert
from .index_op_table import index_op
from .complex_ops import complex_multiply_add, complex_zero
from ..llvm_types import compute_type, is_complex, is_f8


def accumulation_type(out_et: str) -> str:
    """The element type a dot or convolution of result type ``out_et`` accumulates in."""
    if out_et in ("f16", "bf16", "f32") or is_f8(out_et):
        return "f32"
    if out_et == "pred":
        return "s64"
    return out_et


class _Accumulator:
    """A running sum of products in the accumulation type, kept in an alloca."""

    def __init__(self, fe, out_et: str):
        self.fe, self.b = fe, fe.kb.b
        self.et = accumulation_type(out_et)
        self.out_et = out_et
        t = compute_type(self.et)
        with self.b.goto_entry_block():
            self.slot = self.b.alloca(t)
        self.b.store(self.zero(), self.slot)

    def zero(self) -> ir.Constant:
        """0 in the accumulation type."""
        return complex_zero(self.et) if is_complex(self.et) else ir.Constant(compute_type(self.et), 0)

    def add_product(self, x: ir.Value, x_et: str, y: ir.Value, y_et: str) -> None:
        b = self.b
        if is_complex(self.et):  # XLA's complex dots and convolutions take one complex type throughout
            if x_et != self.et or y_et != self.et:
                raise HloUnsupportedError(f"a contraction of {x_et} and {y_et} into {self.out_et} mixes complex "
                                          "and other types; no code generation")
            b.store(complex_multiply_add(b, self.et, b.load(self.slot), x, y), self.slot)
            return
        x, y = emit_convert(b, x, x_et, self.et), emit_convert(b, y, y_et, self.et)
        cur = b.load(self.slot)
        if self.et.startswith("f"):
            b.store(b.fadd(cur, b.fmul(x, y)), self.slot)
        else:
            b.store(b.add(cur, b.mul(x, y)), self.slot)

    def result(self) -> ir.Value:
        v = self.b.load(self.slot)
        if self.out_et == "pred":
            return self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        return emit_convert(self.b, v, self.et, self.out_et)


def _nest(fe, bounds: Sequence[int], body) -> None:
    """Loops over ``range(n)`` for each bound, calling ``body(ivs)`` innermost."""
    ivs: list = []

    def level(k: int) -> None:
        if k == len(bounds):
            body(list(ivs))
            return
        with fe.kb.loop(0, bounds[k], name=f"c{k}") as iv:
            with fe.scope():
                ivs.append(iv)
                level(k + 1)
                ivs.pop()
    level(0)


@index_op("dot")
def _dot(fe, inst: HloInstruction, index):
    lhs, rhs = inst.operands
    lmap, rmap = (e[0] for e in output_to_input(inst, 0))  # built unsimplified: shared symbols
    acc = _Accumulator(fe, inst.shape.element_type)

    def body(ks):
        ae = AffineEmitter(fe.kb, index, ks, bounds=lambda v: lmap.bound(v))
        x = fe.value(lhs, ae.emit_all(lmap.exprs))
        y = fe.value(rhs, ae.emit_all(rmap.exprs))
        acc.add_product(x, lhs.shape.element_type, y, rhs.shape.element_type)
    _nest(fe, [hi + 1 for _, hi in lmap.ranges], body)
    return acc.result()


@index_op("convolution")
def _convolution(fe, inst: HloInstruction, index):
    b, kb = fe.kb.b, fe.kb
    lhs, rhs = inst.operands
    dn = inst.convolution_dimension_numbers
    nsp = len(dn.input_spatial_dimensions)
    window = inst.attr("window", ())
    sizes = [w.size for w in window] if window else [rhs.shape.dimensions[d] for d in dn.kernel_spatial_dimensions]
    fgc, bgc = int(inst.attr("feature_group_count", 1)), int(inst.attr("batch_group_count", 1))
    out_feat = inst.shape.dimensions[dn.output_feature_dimension]
    in_feat = rhs.shape.dimensions[dn.kernel_input_feature_dimension]
    per_group = out_feat // (fgc * bgc)
    out_batch = inst.shape.dimensions[dn.output_batch_dimension]
    o = index[dn.output_feature_dimension]
    y = b.udiv(o, kb.index(fgc * per_group))               # batch group
    g = b.urem(b.udiv(o, kb.index(per_group)), kb.index(fgc))  # feature group
    batch = b.add(b.mul(y, kb.index(out_batch)), index[dn.output_batch_dimension])
    acc = _Accumulator(fe, inst.shape.element_type)

    def body(ivs):
        *ks, c = ivs
        conds, lidx = [], [None] * lhs.shape.rank
        kidx = [None] * rhs.shape.rank
        for s in range(nsp):
            w = window[s] if window else None
            stride, wdil = (w.stride, w.window_dilation) if w else (1, 1)
            low, bdil = (w.padding_low, w.base_dilation) if w else (0, 1)
            # position in the padded, base-dilated input; the real element where it is one
            p = b.add(b.mul(index[dn.output_spatial_dimensions[s]], kb.index(stride)),
                      b.mul(ks[s], kb.index(wdil)))
            q = b.sub(p, kb.index(low))
            in_size = lhs.shape.dimensions[dn.input_spatial_dimensions[s]]
            if bdil > 1:
                conds.append(b.icmp_signed(">=", q, kb.index(0)))
                conds.append(b.icmp_signed("==", b.srem(q, kb.index(bdil)), kb.index(0)))
                q = b.sdiv(q, kb.index(bdil))
            conds.append(b.icmp_signed(">=", q, kb.index(0)))
            conds.append(b.icmp_signed("<", q, kb.index(in_size)))
            lidx[dn.input_spatial_dimensions[s]] = q
            reversed_ = w is not None and w.window_reversal
            kidx[dn.kernel_spatial_dimensions[s]] = b.sub(kb.index(sizes[s] - 1), ks[s]) if reversed_ else ks[s]
        lidx[dn.input_batch_dimension] = batch
        lidx[dn.input_feature_dimension] = b.add(b.mul(g, kb.index(in_feat)), c)
        kidx[dn.kernel_input_feature_dimension] = c
        kidx[dn.kernel_output_feature_dimension] = o
        if not acc.et.startswith("f"):
            with kb.if_(kb.all_of(conds)), fe.scope():
                acc.add_product(fe.value(lhs, lidx), lhs.shape.element_type, fe.value(rhs, kidx),
                                rhs.shape.element_type)
            return
        # Floats: padding and base-dilation holes are zeros that are multiplied like any input
        # (an inf/NaN weight over them gives NaN, as with XLA's zero-padded input).
        with b.if_else(kb.all_of(conds)) as (inside, outside):
            with inside, fe.scope():
                acc.add_product(fe.value(lhs, lidx), lhs.shape.element_type, fe.value(rhs, kidx),
                                rhs.shape.element_type)
            with outside, fe.scope():
                acc.add_product(acc.zero(), acc.et, fe.value(rhs, kidx), rhs.shape.element_type)
    if math.prod(sizes) * in_feat > 0:
        _nest(fe, [*sizes, in_feat], body)
    return acc.result()
