"""Comparison of one result leaf against the reference: bit for bit when the value is exact
(``exactness.py``), within tolerances otherwise (``runtime.compare``, the "model" class)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..runtime.compare import TOLERANCE_CLASSES, compare_arrays, default_tolerance

# XLA:CPU is compared as an outside reference: looser, and blind to the sign of zero
XLA_CLASS = "model"


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.itemsize in (1, 2, 4, 8) \
        else np.ascontiguousarray(a).view(np.uint8)


def _looser(tolerance_type: str | None, dtype: np.dtype) -> tuple[float, float] | tuple[None, None]:
    """(rtol, atol) of ``tolerance_type`` when it is looser than ``dtype``'s own, else the defaults."""
    if tolerance_type is None:
        return None, None
    own = default_tolerance(dtype, "model")
    theirs = TOLERANCE_CLASSES["model"].get(tolerance_type)
    if theirs is None or theirs <= own:
        return None, None
    return theirs


def compare_leaf(expected: np.ndarray, actual: np.ndarray, exact: bool, name: str = "out",
                 tolerance_type: str | None = None) -> tuple[bool, str]:
    """(ok, report) for one leaf; an inexact leaf is compared with the tolerances of
    ``tolerance_type`` when those are looser than its own type's (its error came from there)."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.dtype.kind == "V" and actual.dtype.itemsize == expected.dtype.itemsize:
        expected = expected.view(actual.dtype)
    if expected.shape != actual.shape:
        return False, f"{name}: shape {list(actual.shape)}, expected {list(expected.shape)}"
    if expected.dtype != actual.dtype:
        return False, f"{name}: dtype {actual.dtype}, expected {expected.dtype}"
    if expected.size == 0:
        return True, ""
    is_float = expected.dtype.kind == "f" or expected.dtype.name == "bfloat16"
    if not exact and is_float:
        rtol, atol = _looser(tolerance_type, actual.dtype)
        res = compare_arrays(expected, actual, name=name, klass="model", rtol=rtol, atol=atol)
        return res.ok, "" if res.ok else res.report()
    if is_float:
        nan_e = np.isnan(expected.astype(np.float64))
        nan_a = np.isnan(actual.astype(np.float64))
        bad = (_bits(expected) != _bits(actual)) & ~(nan_e & nan_a)
    else:
        bad = expected != actual
    if not bad.any():
        return True, ""
    idx = [tuple(int(i) for i in np.unravel_index(f, expected.shape)) for f in np.flatnonzero(bad.reshape(-1))[:6]]
    lines = [f"{name}: MISMATCH (exact) in {int(bad.sum())} of {expected.size} elements "
             f"({expected.dtype.name}{list(expected.shape)}); first (index: expected, actual):"]
    for i in idx:
        lines.append(f"    {i}: {expected[i]!r}, {actual[i]!r}")
    return False, "\n".join(lines)


def compare_xla(expected: np.ndarray, actual: np.ndarray, name: str = "out") -> tuple[bool, str]:
    """XLA:CPU against the interpreter: tolerances everywhere, integers exact."""
    expected, actual = np.asarray(expected), np.asarray(actual)
    if actual.dtype.kind == "V" and expected.dtype.itemsize == actual.dtype.itemsize:
        actual = actual.view(expected.dtype)
    res = compare_arrays(expected, actual, name=name, klass=XLA_CLASS)
    return res.ok, "" if res.ok else res.report()


def compare_all(expected: Sequence[np.ndarray], actual: Sequence[np.ndarray], infos: Sequence) -> dict[int, str]:
    """{leaf: report} of the leaves that differ (-1: the leaf counts differ); ``infos`` from
    ``exactness.module_infos``."""
    if len(expected) != len(actual):
        return {-1: f"{len(actual)} outputs, expected {len(expected)}"}
    reports = {}
    for i, (e, a, info) in enumerate(zip(expected, actual, infos)):
        ok, rep = compare_leaf(e, a, info is None, f"out{i}", info)
        if not ok:
            reports[i] = rep
    return reports
