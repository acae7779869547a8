"""Comparison of results against a reference, used by every platform.

``|actual - expected| <= atol + rtol * |expected|`` elementwise for floats; integers and pred
exactly; NaNs must be in the same places and infinities equal. Default tolerances follow the
JAX corpus classes (elementwise / accumulate / model). A failed comparison reports the worst
elements (index, expected, actual, absolute and relative error) and a histogram of the
errors by decade, as run_hlo_module does."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# (rtol, atol) per class and dtype family
TOLERANCE_CLASSES: dict[str, dict[str, tuple[float, float]]] = {
    "elementwise": {"f64": (1e-12, 1e-13), "f32": (1e-5, 1e-6), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1e-2),
                    "f8": (1.3e-1, 6e-2)},
    "accumulate": {"f64": (1e-10, 1e-10), "f32": (1e-4, 1e-4), "f16": (5e-3, 5e-3), "bf16": (3e-2, 3e-2),
                   "f8": (2.5e-1, 1.2e-1)},
    "model": {"f64": (1e-8, 1e-8), "f32": (5e-4, 5e-4), "f16": (1e-2, 1e-2), "bf16": (6e-2, 6e-2),
              "f8": (2.5e-1, 2.5e-1)},
}


def _family(dtype: np.dtype) -> str | None:
    dt = np.dtype(dtype)
    name = dt.name
    if name == "bfloat16":
        return "bf16"
    if name.startswith(("float8_", "float6_", "float4_")):   # ml_dtypes' names ("float64" is not one)
        return "f8"
    if dt == np.float16:
        return "f16"
    if dt in (np.float32, np.complex64):
        return "f32"
    if dt in (np.float64, np.complex128):
        return "f64"
    return None


def default_tolerance(dtype: np.dtype, klass: str = "accumulate") -> tuple[float, float]:
    """(rtol, atol) for ``dtype`` in tolerance class ``klass``; (0, 0) for exact types."""
    fam = _family(dtype)
    if fam is None:
        return 0.0, 0.0
    return TOLERANCE_CLASSES[klass][fam]


def is_exact(dtype: np.dtype) -> bool:
    return _family(dtype) is None


@dataclass
class LeafComparison:
    name: str
    ok: bool
    count: int = 0
    mismatches: int = 0
    rtol: float = 0.0
    atol: float = 0.0
    message: str = ""
    worst: list[tuple] = field(default_factory=list)  # (index, expected, actual, abs, rel)
    histogram: list[tuple[str, int]] = field(default_factory=list)
    max_abs: float = 0.0
    max_rel: float = 0.0

    def report(self) -> str:
        head = (f"{self.name}: {'OK' if self.ok else 'MISMATCH'} "
                f"({self.mismatches} of {self.count} elements outside atol={self.atol:g} rtol={self.rtol:g}; "
                f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g})")
        lines = [head]
        if self.message:
            lines.append("  " + self.message)
        if self.worst:
            lines.append("  worst elements (index: expected, actual, abs error, rel error):")
            for idx, e, a, ab, rel in self.worst:
                lines.append(f"    {idx}: {e!r}, {a!r}, {ab:.3g}, {rel:.3g}")
        if self.histogram:
            lines.append("  relative error histogram:")
            for label, n in self.histogram:
                lines.append(f"    {label:>16}: {n}")
        return "\n".join(lines)


@dataclass
class Comparison:
    leaves: list[LeafComparison]
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.message and all(c.ok for c in self.leaves)

    def report(self) -> str:
        parts = [self.message] if self.message else []
        parts += [c.report() for c in self.leaves]
        return "\n".join(parts)


def _as_float(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    return x.astype(np.float64)


def _histogram(rel: np.ndarray) -> list[tuple[str, int]]:
    rel = rel[np.isfinite(rel)]
    if rel.size == 0:
        return []
    edges = [0.0] + [10.0 ** e for e in range(-8, 1)] + [np.inf]
    counts, _ = np.histogram(rel, bins=edges)
    out = []
    for lo, hi, n in zip(edges[:-1], edges[1:], counts):
        label = f"[{lo:.0e}, {hi:.0e})" if np.isfinite(hi) else f"[{lo:.0e}, inf)"
        out.append((label, int(n)))
    return out


def _exact_error_extent(expected: np.ndarray, actual: np.ndarray) -> tuple[float, float]:
    """(max abs, max rel) error over mismatching integer/pred elements, computed exactly in
    Python integers (u64 and s64 values beyond 2**53 would round in float64)."""
    diffs = [abs(int(e) - int(a)) for e, a in zip(expected.tolist(), actual.tolist())]
    rels = [d / max(abs(int(e)), 1) for d, e in zip(diffs, expected.tolist())]
    return float(max(diffs, default=0)), float(max(rels, default=0.0))


def _float_errors(e: np.ndarray, a: np.ndarray, rtol: float, atol: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per element of float64 ``e`` (expected) and ``a``: NaN in one only, an infinity not
    matched, |a - e| (0 where both are NaN or the same infinity), the relative error, and
    whether the element fails ``|a - e| > atol + rtol * |e|`` (NaN against NaN passes)."""
    e_nan, a_nan = np.isnan(e), np.isnan(a)
    nan_bad = e_nan != a_nan
    both_nan = e_nan & a_nan
    e_inf, a_inf = np.isinf(e), np.isinf(a)
    inf_bad = (e_inf | a_inf) & ~(e == a) & ~both_nan
    with np.errstate(all="ignore"):
        diff = np.abs(a - e)
        diff = np.where(both_nan | ((e_inf | a_inf) & (e == a)), 0.0, diff)
        rel = diff / np.abs(e)
        rel = np.where(diff == 0, 0.0, rel)
        bad = (nan_bad | inf_bad | (diff > atol + rtol * np.abs(e))) & ~both_nan
    return nan_bad, inf_bad, diff, rel, bad


_BLOCK = 1 << 18  # elements per block of ``_passed_by_blocks``


def _passed_by_blocks(expected: np.ndarray, actual: np.ndarray, rtol: float, atol: float
                      ) -> tuple[float, float] | None:
    """(max abs, max rel error) of a float comparison in which every element passes, computed
    block by block with ``compare_arrays``' formulas (temporaries of a few MB instead of a dozen
    float64 arrays of the whole size: most of the time of a comparison of 1e8 elements went to
    allocating and faulting them in); None as soon as an element fails (the caller then makes
    the whole report)."""
    ex, ac = expected.reshape(-1), actual.reshape(-1)
    max_abs, any_finite, max_rels = 0.0, False, []
    for start in range(0, ex.size, _BLOCK):
        e, a = _as_float(ex[start:start + _BLOCK]), _as_float(ac[start:start + _BLOCK])
        nan_bad, inf_bad, diff, rel, bad = _float_errors(e, a, rtol, atol)
        if bad.any():
            return None
        finite = ~(nan_bad | inf_bad) & np.isfinite(diff)
        if finite.any():
            max_abs, any_finite = max(max_abs, float(diff[finite].max())), True
        max_rels.append(np.nanmax(np.where(finite, rel, 0.0)))
    return (max_abs if any_finite else 0.0), float(np.nanmax(max_rels))


def compare_arrays(expected: np.ndarray, actual: np.ndarray, *, rtol: float | None = None,
                   atol: float | None = None, name: str = "out", klass: str = "accumulate",
                   worst: int = 5) -> LeafComparison:
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.dtype.kind == "V" and actual.dtype.itemsize == expected.dtype.itemsize:
        expected = expected.view(actual.dtype)
    if expected.shape != actual.shape:
        return LeafComparison(name, False, expected.size, expected.size,
                              message=f"shape mismatch: expected {list(expected.shape)}, got {list(actual.shape)}")
    d_rtol, d_atol = default_tolerance(actual.dtype, klass)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    n = expected.size
    if is_exact(actual.dtype) or is_exact(expected.dtype):
        e = expected.astype(np.int64) if expected.dtype.kind in "biu" and expected.dtype != np.uint64 else expected
        a = actual.astype(np.int64) if actual.dtype.kind in "biu" and actual.dtype != np.uint64 else actual
        bad = e != a
        res = LeafComparison(name, not bad.any(), n, int(bad.sum()), 0.0, 0.0)
        if bad.any():
            flat = np.flatnonzero(bad.reshape(-1))[:worst]
            for f in flat:
                idx = np.unravel_index(f, expected.shape)
                ev, av = expected[idx].item(), actual[idx].item()
                d_abs, d_rel = _exact_error_extent(np.array([ev]), np.array([av]))
                res.worst.append((tuple(int(i) for i in idx), ev, av, d_abs, d_rel))
            res.message = "integer/pred results must match exactly"
            res.max_abs, res.max_rel = _exact_error_extent(e[bad], a[bad])
        return res
    if n > _BLOCK:
        passed = _passed_by_blocks(expected, actual, rtol, atol)
        if passed is not None:  # every element within tolerance: what the code below gives, in less time
            res = LeafComparison(name, True, n, 0, rtol, atol)
            res.max_abs, res.max_rel = passed
            return res
    e, a = _as_float(expected), _as_float(actual)
    nan_bad, inf_bad, diff, rel, bad = _float_errors(e, a, rtol, atol)
    finite = ~(nan_bad | inf_bad) & np.isfinite(diff)
    res = LeafComparison(name, not bad.any(), n, int(bad.sum()), rtol, atol)
    res.max_abs = float(diff[finite].max()) if finite.any() else 0.0
    res.max_rel = float(np.nanmax(np.where(finite, rel, 0.0))) if n else 0.0
    if nan_bad.any():
        res.message = f"{int(nan_bad.sum())} NaN positions differ"
    if bad.any():
        with np.errstate(all="ignore"):
            score = np.where(nan_bad | inf_bad, np.inf, diff / (atol + rtol * np.abs(e) + 1e-300))
        score = np.where(bad, score, -1.0).reshape(-1)
        top = np.argsort(-score, kind="stable")[:worst]
        for f in top:
            if score[f] < 0:
                break
            idx = np.unravel_index(f, expected.shape)
            res.worst.append((tuple(int(i) for i in idx), expected[idx].item(), actual[idx].item(),
                              float(diff[idx]), float(rel[idx])))
        res.histogram = _histogram(rel.reshape(-1))
    return res


def compare_results(expected: list[np.ndarray], actual: list[np.ndarray], *,
                    tolerances: list[tuple[float | None, float | None]] | None = None,
                    klass: str = "accumulate") -> Comparison:
    """Compare result leaves; ``tolerances`` is (rtol, atol) per leaf (None: the default)."""
    if len(expected) != len(actual):
        return Comparison([], f"expected {len(expected)} result arrays, got {len(actual)}")
    tolerances = tolerances or [(None, None)] * len(expected)
    return Comparison([compare_arrays(e, a, rtol=t[0], atol=t[1], name=f"out{i}", klass=klass)
                       for i, (e, a, t) in enumerate(zip(expected, actual, tolerances))])
