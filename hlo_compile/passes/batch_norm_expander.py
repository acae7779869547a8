"""Rewrite ``batch-norm-training``, ``batch-norm-inference`` and ``batch-norm-grad`` into ordinary
HLO, as XLA's ``BatchNormExpander`` does on XLA:GPU and XLA:CPU (neither has a kernel for them).

XLA's optimized modules never hold these ops, but the modules users write or take from a
framework before XLA's passes do (XLA's own ``mobilenet_v2.hlo`` benchmark). With this pass the
expansion becomes reduces, broadcasts and elementwise ops, which fusion groups and the usual
emitters compile. The interpreter computes the three ops itself (``interpreter/batch_norm.py``)
from the unexpanded module, so it checks this rewrite.

For an operand ``x`` with feature dimension ``f`` (``feature_index``), ``N`` the number of
elements per feature (the product of the other dimensions), every value in ``x``'s element
type, the reductions ``sum`` over every dimension but ``f`` and ``b(v)`` the broadcast of a
per-feature vector along ``f``, the formulas are XLA's:

- training ``(x, scale, offset)``: ``mean = sum(x) / N``, ``var = sum(x * x) / N - mean * mean``,
  ``y = (x - b(mean)) * rsqrt(b(var) + eps) * b(scale) + b(offset)``; result ``(y, mean, var)``.
- inference ``(x, scale, offset, mean, var)``: ``s = scale * rsqrt(var + eps)``,
  ``t = offset - mean * s``, ``y = x * b(s) + b(t)``.
- grad ``(x, scale, mean, var, dy)``: ``d_offset = sum(dy)``, ``c = sum(dy * (x - b(mean)))``,
  ``d_scale = c * rsqrt(var + eps)``, ``dx = (b(scale) * rsqrt(b(var) + eps) / N) *
  (dy * N - b(d_offset) - (x - b(mean)) * b(c) / (b(var) + eps))``; result
  ``(dx, d_scale, d_offset)``.

The instructions keep the operand's layout (the builder's ``keep_layout``; broadcasts to the
operand's shape). The replacement (a ``tuple``, or the inference result) takes the op's name
and place, in every computation of the module.
"""
from __future__ import annotations

import math

from hlo_compile.hlo.builder import HloBuilder
from hlo_compile.hlo.ir import HloComputation, HloInstruction, HloModule
from hlo_compile.hlo.rewrite import NameScope, replace_instructions, take_name

BATCH_NORM_OPS = ("batch-norm-training", "batch-norm-inference", "batch-norm-grad")


def expand_batch_norms(module: HloModule) -> HloModule:
    """Replace every batch-norm op of every computation of ``module`` by the HLO computing it;
    rewrites in place and returns the module."""
    names = NameScope.of_instructions(module.computations)
    for comp in module.computations:
        for inst in [i for i in comp.instructions if i.opcode in BATCH_NORM_OPS]:
            _expand(comp, inst, names)
    return module


class _Builder(HloBuilder):
    """The builder of one batch-norm op: its per-feature broadcasts and reductions."""

    def __init__(self, comp: HloComputation, bn: HloInstruction, names: NameScope):
        super().__init__(comp, bn, names=names, keep_layout=True)
        self.x = bn.operands[0]
        self.et = self.x.shape.element_type
        self.feature = int(bn.attr("feature_index"))
        self.others = [d for d in range(self.x.shape.rank) if d != self.feature]
        self.count = math.prod(self.x.shape.dimensions[d] for d in self.others)

    def scalar(self, value: float | int) -> HloInstruction:
        return self.constant(self.et, repr(float(value)) if isinstance(value, float) else str(value))

    def spread(self, feature_vector: HloInstruction) -> HloInstruction:
        """A per-feature vector broadcast along the feature dimension of the operand's shape."""
        return self.broadcast(feature_vector, self.x.shape, (self.feature,))

    def fill(self, value: HloInstruction, like: HloInstruction) -> HloInstruction:
        """Scalar ``value`` broadcast to ``like``'s shape."""
        return self.broadcast(value, like.shape, ())

    def sum(self, v: HloInstruction) -> HloInstruction:
        return self.reduce(v, self.scalar(0), self.others, "add")

    def mean(self, v: HloInstruction) -> HloInstruction:
        return self.binary("divide", v, self.fill(self.scalar(self.count), v))

    def plus_epsilon(self, v: HloInstruction) -> HloInstruction:
        return self.binary("add", v, self.fill(self.scalar(float(self.like.attr("epsilon"))), v))


def _expand(comp: HloComputation, bn: HloInstruction, names: NameScope) -> None:
    b = _Builder(comp, bn, names)  # shape inference has checked the operands (float, feature sizes)
    result = _BUILD[bn.opcode](b, list(bn.operands))
    if result.shape != bn.shape:  # the declared result layout, where it differs from the operand's
        result = _relaid(b, result, bn)
    take_name(result, bn, names)
    b.insert()
    replace_instructions(comp, {bn: result})


def _relaid(b: _Builder, value: HloInstruction, bn: HloInstruction) -> HloInstruction:
    if not bn.shape.is_tuple:
        return b.relayout(value, bn.shape)
    parts = [b.get_tuple_element(value, i) for i in range(len(bn.shape.tuple_shapes))]
    return b.tuple_of([p if p.shape == s else b.relayout(p, s) for p, s in zip(parts, bn.shape.tuple_shapes)])


def _training(b: _Builder, ops: list[HloInstruction]) -> HloInstruction:
    x, scale, offset = ops
    mean = b.mean(b.sum(x))
    square_mean = b.mean(b.sum(b.binary("multiply", x, x)))
    var = b.binary("subtract", square_mean, b.binary("multiply", mean, mean))
    rsqrt = b.unary("rsqrt", b.plus_epsilon(b.spread(var)))
    normalized = b.binary("multiply", b.binary("subtract", x, b.spread(mean)), rsqrt)
    y = b.binary("add", b.binary("multiply", normalized, b.spread(scale)), b.spread(offset))
    return b.tuple_of([y, mean, var])


def _inference(b: _Builder, ops: list[HloInstruction]) -> HloInstruction:
    x, scale, offset, mean, var = ops
    true_scale = b.binary("multiply", scale, b.unary("rsqrt", b.plus_epsilon(var)))
    true_shift = b.binary("subtract", offset, b.binary("multiply", mean, true_scale))
    return b.binary("add", b.binary("multiply", x, b.spread(true_scale)), b.spread(true_shift))


def _grad(b: _Builder, ops: list[HloInstruction]) -> HloInstruction:
    x, scale, mean, var, dy = ops
    var_wide = b.spread(var)
    centered = b.binary("subtract", x, b.spread(mean))
    d_offset = b.sum(dy)
    c = b.sum(b.binary("multiply", dy, centered))
    d_scale = b.binary("multiply", c, b.unary("rsqrt", b.plus_epsilon(var)))
    factor = b.mean(b.binary("multiply", b.spread(scale), b.unary("rsqrt", b.plus_epsilon(var_wide))))
    i1 = b.binary("multiply", dy, b.fill(b.scalar(b.count), dy))
    i5 = b.binary("divide", b.binary("multiply", b.spread(c), centered), b.plus_epsilon(var_wide))
    i6 = b.binary("subtract", b.binary("subtract", i1, b.spread(d_offset)), i5)
    return b.tuple_of([b.binary("multiply", factor, i6), d_scale, d_offset])


_BUILD = {"batch-norm-training": _training, "batch-norm-inference": _inference, "batch-norm-grad": _grad}
