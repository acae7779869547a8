"""Is a difference in an inexact result just the computation's own sensitivity to rounding?

An inexact leaf (``exactness.py``) may legitimately differ beyond the fixed tolerances when the
computation is ill-conditioned: a bf16 sum with cancellation reduced in another order, the
cosine of a large f16 argument that moved by one ulp. To tell that from a wrong result, the
reference is evaluated once more with every float type widened to f64 (same inputs): the
distance between the narrow reference and the wide one measures how much rounding alone moves
that element. A host value within the fixed tolerance plus four times that distance (or at an
element whose NaN/inf status rounding alone changes) is accepted as ``unstable``, not a
mismatch. Garbage (a wrong element read, a missing accumulation) is far outside it.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..hlo import parse_module
from ..hlo.errors import HloError
from ..runtime.compare import TOLERANCE_CLASSES, default_tolerance

_NARROW = re.compile(r"\b(bf16|f16|f32)\[")


def widen_text(text: str) -> str:
    """``text`` with every bf16/f16/f32 array type written f64."""
    return _NARROW.sub("f64[", text)


def widen_args(args, module):
    def widen(a, shape):
        if shape.is_tuple:
            return tuple(widen(x, s) for x, s in zip(a, shape.tuple_shapes))
        a = np.asarray(a)
        return a.astype(np.float64) if shape.element_type in ("bf16", "f16", "f32") else a
    return [widen(a, p.shape) for a, p in zip(args, module.entry.parameters)]


def wide_reference(text: str, args, seed: int):
    """The reference's leaves with every float type widened to f64, or None when the widened
    module does not verify or evaluate (bitcasts of floats, reduce-precision...)."""
    from ..interpreter import evaluate_module
    from ..runtime.literals import flatten
    wide = widen_text(text)
    try:
        narrow_module = parse_module(text, "<fuzz>")
        module = parse_module(wide, "<fuzz-f64>")
        return flatten(evaluate_module(module, widen_args(args, narrow_module), seed=seed))
    except (HloError, ValueError, TypeError, IndexError, KeyError, ArithmeticError):
        return None


def within_envelope(expected: np.ndarray, actual: np.ndarray, wide: np.ndarray, tolerance_type: str | None) -> bool:
    """Whether every element of ``actual`` is within the fixed tolerance of ``expected`` plus
    four times the distance between ``expected`` and the widened reference ``wide``."""
    e = np.asarray(expected).astype(np.float64)
    a = np.asarray(actual).astype(np.float64)
    w = np.asarray(wide).astype(np.float64)
    if e.shape != a.shape or e.shape != w.shape:
        return False
    rtol, atol = default_tolerance(np.asarray(actual).dtype, "model")
    if tolerance_type in TOLERANCE_CLASSES["model"]:
        rtol, atol = max((rtol, atol), TOLERANCE_CLASSES["model"][tolerance_type])
    with np.errstate(all="ignore"):
        spread = np.abs(e - w)
        unstable = (np.isnan(e) != np.isnan(w)) | (np.isinf(e) != np.isinf(w)) | (np.isinf(e) & (e != w))
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        near = np.abs(a - e) <= atol + rtol * np.abs(e) + 4 * np.where(np.isfinite(spread), spread, 0)
        ok = same | unstable | (np.isfinite(a) & np.isfinite(e) & near)
    return bool(ok.all())


def all_within_envelope(text: str, args, seed: int, expected: Sequence[np.ndarray], actual: Sequence[np.ndarray],
                        failing: Sequence[int], infos: Sequence) -> bool:
    """Whether every failing leaf is inexact and within its envelope (see the module doc)."""
    if not failing or any(infos[i] is None for i in failing):
        return False
    wide = wide_reference(text, args, seed)
    if wide is None or len(wide) != len(expected):
        return False
    return all(within_envelope(expected[i], actual[i], wide[i], infos[i]) for i in failing)
