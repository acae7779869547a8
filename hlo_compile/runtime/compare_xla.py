"""run_hlo_module's comparison rule (XLA's ``literal_comparison::Near``), for ``hlo-run
--error-rule=xla``.

An element fails only when **both** bounds are exceeded: ``|a - e| > abs_bound`` and
``|a - e| / |e| > rel_bound`` (relative error infinite where ``e`` is 0 and ``a`` is not).
Equal values (bit for bit, or +0/-0) pass; a NaN on one side only, or an infinity that the
other side does not have, fails with infinite errors; NaN on both sides passes. Integers and
pred compare exactly. Complex numbers compare their real and imaginary parts this way, and an
element fails when either part does. Defaults are run_hlo_module's: 1e-3 for each bound.

The other rule (``allclose``, ``compare.py``) fails an element when
``|a - e| > atol + rtol * |e|``, with defaults per element type.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .compare import Comparison, LeafComparison, compare_arrays, is_exact

DEFAULT_ABS_BOUND = 1e-3
DEFAULT_REL_BOUND = 1e-3
RULE = "an element fails when |a-e| > abs bound and |a-e|/|e| > rel bound (run_hlo_module's rule)"


@dataclass
class XlaLeafComparison(LeafComparison):
    def report(self) -> str:
        head = (f"{self.name}: {'OK' if self.ok else 'MISMATCH'} ({self.mismatches} of {self.count} elements "
                f"exceed both abs bound {self.atol:g} and rel bound {self.rtol:g}; "
                f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g})")
        lines = [head]
        if self.message:
            lines.append("  " + self.message)
        if self.worst:
            lines.append("  top relative error mismatches (index: expected, actual, abs error, rel error):")
            for idx, e, a, ab, rel in self.worst:
                lines.append(f"    {idx}: {e!r}, {a!r}, {ab:.3g}, {rel:.3g}")
        return "\n".join(lines)


def _errors(e: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(abs error, rel error, NaN mismatch) elementwise, as XLA's NearComparator computes them."""
    with np.errstate(all="ignore"):
        equal = (e == a) | (np.isnan(e) & np.isnan(a))
        nan_bad = np.isnan(e) != np.isnan(a)
        inf_bad = (np.isinf(e) | np.isinf(a)) & ~equal & ~nan_bad
        abs_err = np.abs(a - e)
        rel_err = np.where(e != 0, abs_err / np.abs(e), np.inf)
    abs_err = np.where(equal, 0.0, np.where(nan_bad | inf_bad, np.inf, abs_err))
    rel_err = np.where(equal, 0.0, np.where(nan_bad | inf_bad, np.inf, rel_err))
    return abs_err, rel_err, nan_bad


def compare_arrays_xla(expected: np.ndarray, actual: np.ndarray, *, abs_bound: float = DEFAULT_ABS_BOUND,
                       rel_bound: float = DEFAULT_REL_BOUND, name: str = "out", worst: int = 5) -> LeafComparison:
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.dtype.kind == "V" and actual.dtype.itemsize == expected.dtype.itemsize:
        expected = expected.view(actual.dtype)
    if expected.shape != actual.shape or is_exact(actual.dtype) or is_exact(expected.dtype):
        return compare_arrays(expected, actual, name=name)  # shape mismatch, or exact types
    if expected.dtype.kind == "c" or actual.dtype.kind == "c":
        e = expected.astype(np.complex128)
        a = actual.astype(np.complex128)
        parts = [_errors(e.real, a.real), _errors(e.imag, a.imag)]
    else:
        parts = [_errors(expected.astype(np.float64), actual.astype(np.float64))]
    bad = np.zeros(expected.shape, dtype=bool)
    nan_bad = np.zeros(expected.shape, dtype=bool)
    abs_err = np.zeros(expected.shape)
    rel_err = np.zeros(expected.shape)
    for ab, rel, nans in parts:
        bad |= (ab > abs_bound) & (rel > rel_bound)
        nan_bad |= nans
        abs_err = np.maximum(abs_err, ab)
        rel_err = np.maximum(rel_err, rel)
    res = XlaLeafComparison(name, not bad.any(), int(expected.size), int(bad.sum()), rel_bound, abs_bound)
    finite_abs = abs_err[np.isfinite(abs_err)]
    finite_rel = rel_err[np.isfinite(rel_err)]
    res.max_abs = float(finite_abs.max()) if finite_abs.size else 0.0
    res.max_rel = float(finite_rel.max()) if finite_rel.size else 0.0
    if nan_bad.any():
        res.message = f"{int(nan_bad.sum())} NaN positions differ"
    if bad.any():
        score = np.where(bad, rel_err, -1.0).reshape(-1)
        for f in np.argsort(-score, kind="stable")[:worst]:
            if score[f] < 0:
                break
            idx = np.unravel_index(f, expected.shape)
            res.worst.append((tuple(int(i) for i in idx), expected[idx].item(), actual[idx].item(),
                              float(abs_err[idx]), float(rel_err[idx])))
    return res


def compare_results_xla(expected: list[np.ndarray], actual: list[np.ndarray], *,
                        abs_bound: float | None = None, rel_bound: float | None = None) -> Comparison:
    """Compare result leaves with XLA's rule; None bounds are run_hlo_module's defaults."""
    abs_bound = DEFAULT_ABS_BOUND if abs_bound is None else abs_bound
    rel_bound = DEFAULT_REL_BOUND if rel_bound is None else rel_bound
    if len(expected) != len(actual):
        return Comparison([], f"expected {len(expected)} result arrays, got {len(actual)}")
    return Comparison([compare_arrays_xla(e, a, abs_bound=abs_bound, rel_bound=rel_bound, name=f"out{i}")
                       for i, (e, a) in enumerate(zip(expected, actual))])
