"""The ``triangular-solve`` op and XLA:GPU's ``__cublas$triangularSolve`` call (the same solve,
returning ``(solution, workspace)``; ``hlo/calls/triangular_solve.py`` reads both), in numpy.

Written from XLA's definition, apart from the lowering it checks
(``passes/triangular_solve_lowering.py``): the matrix that is read (the triangle ``lower``
names, the diagonal taken as 1 with ``unit_diagonal``) is made explicit, ``op`` applied to it,
and the system solved by substitution along its triangle, one unknown at a time, vectorised over
the batch and the right-hand sides, in the element type (trsm does not pivot; a zero on the
diagonal gives inf/nan as it does, where ``np.linalg.solve`` would raise). The workspace leaf
(contents undefined) is zeros.
"""
from __future__ import annotations

import numpy as np

from ..hlo.calls.triangular_solve import (TRIANGULAR_SOLVE_TARGET, Cholesky, TriangularSolve, parse_cholesky,
                                         parse_triangular_solve)
from .library_calls import library_call
from .numerics import dtype_of
from .registry import op


@op("triangular-solve")
def _triangular_solve(ev, inst, ops):
    return solve(parse_triangular_solve(inst), ops[0], ops[1])


@library_call(TRIANGULAR_SOLVE_TARGET)
def _cublas_triangular_solve(ev, inst, ops):
    info = parse_triangular_solve(inst)
    workspace = inst.shape.tuple_shapes[1]
    return solve(info, ops[0], ops[1]), np.zeros(workspace.dimensions, dtype=dtype_of(workspace.element_type))


def solve(info: TriangularSolve, a, b) -> np.ndarray:
    """``x`` with ``op(a) x = b`` (left side) or ``x op(a) = b``, over the leading batch dims."""
    dt = dtype_of(info.element_type)
    a = np.asarray(a, dtype=dt)
    b = np.asarray(b, dtype=dt)
    k = a.shape[-1]
    rows, cols = np.indices((k, k))
    read = cols <= rows if info.lower else cols >= rows
    m = np.where(read, a, np.zeros((), dt))
    if info.unit_diagonal:
        m = np.where(rows == cols, np.ones((), dt), m)
    if info.transpose_a != "NO_TRANSPOSE":
        m = np.swapaxes(m, -1, -2)
    if info.transpose_a == "ADJOINT":
        m = np.conj(m)
    lower = info.lower == (info.transpose_a == "NO_TRANSPOSE")     # op(a)'s triangle
    if info.left_side:
        return _left_solve(m, b, info.unit_diagonal, upper=not lower)
    # x op(a) = b  <=>  op(a)^T x^T = b^T
    x = _left_solve(np.swapaxes(m, -1, -2), np.swapaxes(b, -1, -2), info.unit_diagonal, upper=lower)
    return np.ascontiguousarray(np.swapaxes(x, -1, -2))


def _left_solve(m: np.ndarray, b: np.ndarray, unit: bool, *, upper: bool) -> np.ndarray:
    """``x`` with ``m x = b`` for ``m [..., k, k]`` upper (else lower) triangular."""
    k = m.shape[-1]
    order = range(k - 1, -1, -1) if upper else range(k)
    x = np.zeros(b.shape, dtype=b.dtype)
    with np.errstate(all="ignore"):
        for i in order:
            known = slice(i + 1, k) if upper else slice(0, i)
            rest = b[..., i, :] - np.einsum("...j,...jn->...n", m[..., i, known], x[..., known, :])
            x[..., i, :] = rest if unit else rest / m[..., i, i][..., None]
    return x


@op("cholesky")
def _cholesky(ev, inst, ops):
    return cholesky(parse_cholesky(inst), ops[0])


def cholesky(info: Cholesky, a) -> np.ndarray:
    """The factor in the triangle ``lower`` names, zeros in the other; a matrix whose pivots
    are not all positive (a NaN square root) is NaN throughout, as XLA's expander makes it."""
    dt = dtype_of(info.element_type)
    a = np.asarray(a, dtype=dt)
    if not info.lower:                       # u^H u = a  <=>  l l^H = a with l = u^H
        a = np.conj(np.swapaxes(a, -1, -2))
    k = a.shape[-1]
    factor = np.zeros(a.shape, dtype=dt)
    bad = np.zeros(a.shape[:-2], dtype=bool)
    with np.errstate(all="ignore"):
        for j in range(k):
            done = factor[..., :j]                                            # [..., k, j]
            v = a[..., j:, j] - np.einsum("...ip,...p->...i", done[..., j:, :], np.conj(done[..., j, :]))
            pivot = np.sqrt(np.real(v[..., 0])).astype(np.real(np.zeros((), dt)).dtype)
            bad |= np.isnan(pivot)
            factor[..., j, j] = pivot
            factor[..., j + 1:, j] = v[..., 1:] / pivot[..., None]
    factor = np.where(bad[..., None, None], np.array(np.nan, dtype=dt), factor)
    if not info.lower:
        factor = np.conj(np.swapaxes(factor, -1, -2))
    return np.ascontiguousarray(factor)
