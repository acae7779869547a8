"""``batch-norm-training``, ``batch-norm-inference`` and ``batch-norm-grad`` in numpy.

Written from the ops' definitions (XLA's operation semantics), apart from the rewrite it checks
(``passes/batch_norm_expander.py``): the statistics over every dimension but ``feature_index``,
the variance as ``E[x^2] - E[x]^2`` (the biased estimate XLA computes), each step rounded to the
element type as the expanded HLO rounds each op (narrow floats computed in f32).
"""
from __future__ import annotations

import numpy as np

from .numerics import compute, result
from .registry import op


class _Frame:
    """The operand's element type, the reduced axes and the broadcast of a per-feature vector."""

    def __init__(self, inst, x: np.ndarray):
        self.et = inst.operands[0].shape.element_type
        self.feature = int(inst.attr("feature_index"))
        self.axes = tuple(d for d in range(x.ndim) if d != self.feature)
        self.count = int(np.prod([x.shape[d] for d in self.axes], dtype=np.int64))
        self.view = tuple(x.shape[d] if d == self.feature else 1 for d in range(x.ndim))
        self.epsilon = float(inst.attr("epsilon"))

    def r(self, v) -> np.ndarray:
        """``v`` rounded to the element type, in the type arithmetic happens in."""
        return compute(result(v, self.et), self.et)

    def wide(self, v: np.ndarray) -> np.ndarray:
        return v.reshape(self.view)

    def sum(self, v: np.ndarray) -> np.ndarray:
        return self.r(np.sum(v, axis=self.axes))

    def n(self) -> np.ndarray:
        return self.r(np.asarray(self.count))

    def eps(self) -> np.ndarray:
        return self.r(np.asarray(self.epsilon))

    def rsqrt(self, v: np.ndarray) -> np.ndarray:
        return self.r(1 / np.sqrt(v))


def _inputs(inst, ops) -> tuple[_Frame, list[np.ndarray]]:
    f = _Frame(inst, np.asarray(ops[0]))
    return f, [compute(np.asarray(o), f.et) for o in ops]


@op("batch-norm-training")
def _training(ev, inst, ops):
    f, (x, scale, offset) = _inputs(inst, ops)
    with np.errstate(all="ignore"):
        mean = f.r(f.sum(x) / f.n())
        var = f.r(f.r(f.sum(f.r(x * x)) / f.n()) - f.r(mean * mean))
        normalized = f.r(f.r(x - f.wide(mean)) * f.rsqrt(f.r(f.wide(var) + f.eps())))
        y = f.r(f.r(normalized * f.wide(scale)) + f.wide(offset))
    return result(y, f.et), result(mean, f.et), result(var, f.et)


@op("batch-norm-inference")
def _inference(ev, inst, ops):
    f, (x, scale, offset, mean, var) = _inputs(inst, ops)
    with np.errstate(all="ignore"):
        true_scale = f.r(scale * f.rsqrt(f.r(var + f.eps())))
        true_shift = f.r(offset - f.r(mean * true_scale))
        y = f.r(f.r(x * f.wide(true_scale)) + f.wide(true_shift))
    return result(y, f.et)


@op("batch-norm-grad")
def _grad(ev, inst, ops):
    f, (x, scale, mean, var, dy) = _inputs(inst, ops)
    with np.errstate(all="ignore"):
        centered = f.r(x - f.wide(mean))
        d_offset = f.sum(dy)
        c = f.sum(f.r(dy * centered))
        d_scale = f.r(c * f.rsqrt(f.r(var + f.eps())))
        var_eps = f.r(f.wide(var) + f.eps())
        factor = f.r(f.r(f.wide(scale) * f.rsqrt(var_eps)) / f.n())
        inner = f.r(f.r(f.r(dy * f.n()) - f.wide(d_offset)) - f.r(f.r(f.wide(c) * centered) / var_eps))
        dx = f.r(factor * inner)
    return result(dx, f.et), result(d_scale, f.et), result(d_offset, f.et)
