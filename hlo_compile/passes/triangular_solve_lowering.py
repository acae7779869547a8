"""Triangular solves as plain HLO our emitters run: the ``triangular-solve`` op and XLA:GPU's
``__cublas$triangularSolve`` call (read by ``hlo/calls/triangular_solve.py``), on every
platform (we do not call cuBLAS trsm).

XLA's semantics: ``op(a) x = b`` (``left_side``) or ``x op(a) = b``, ``op`` the identity, the
transpose or the conjugate transpose (ADJOINT); only the triangle of ``a`` that ``lower`` names
is read, and with ``unit_diagonal`` not the diagonal either (taken as 1). What is built, all in
the element type and the default layout:

- ``a`` masked to its triangle (``select`` on iota compares: the other triangle may hold
  anything, NaN included), its diagonal set to 1 for ``unit_diagonal``;
- the solve made a left-side one, ``M x' = c``, with ``M`` explicit: ``op(a)`` and ``c = b``
  on the left; on the right ``x op(a) = b`` is ``op(a)^T x^T = b^T``, so ``M = op(a)^T``
  (``a^T``, ``a`` or ``conj(a)``), ``c = b^T`` and the solution is transposed back. ``M`` is lower
  triangular when ``lower`` and ``M`` is ``a`` or ``conj(a)``, or when ``!lower`` and it is a
  transpose;
- a ``while`` over the ``k`` rows of ``M`` (forward substitution for a lower ``M``, backward
  for an upper one), carrying ``X`` (zeros at first): row ``r`` takes
  ``x_r = (c_r - M_r' . X) / M_rr`` (no division for a unit diagonal), where ``M_r'`` is row
  ``r`` of ``M`` without its diagonal (``dynamic-slice`` of the row, diagonal masked: the rows
  not yet solved are still zero in ``X`` and meet zeros in ``M_r'``), the product a ``dot``
  over the batch dimensions, and ``x_r`` written with ``dynamic-update-slice``;
- the solution copied to the layout the instruction declares; for the call, readers of the
  solution leaf read it, and the workspace leaf (``s8[0]``, contents undefined) is zeros.

The ``cholesky`` op (``hlo/calls/triangular_solve.py``: XLA's expander's conventions) is lowered
here too, as a ``while`` over columns (left-looking): with ``A`` the lower form of the input
(``a``, or ``conj(a^T)`` for an upper one: ``u = l^H``) and ``L`` zeros at first, column ``j``
takes ``v = A[:, j] - L . conj(L[j, :])`` (a ``dot``: the columns not yet made are zero),
``p = sqrt(re v_j)``, ``L[j, j] = p`` and ``L[i, j] = v_i / p`` below it (zeros above); a NaN
pivot marks the matrix, which then comes back NaN throughout. Only the triangle ``lower`` names
is read: column ``j`` reads rows ``>= j`` of ``A``.
"""
from __future__ import annotations

from ..hlo import HloComputation, HloInstruction, HloModule
from ..hlo.element_types import is_complex
from ..hlo.rewrite import insert_instructions, remove_dead, replace_instructions, take_name
from ..hlo.shape import Shape
from ..hlo.calls.triangular_solve import (Cholesky, TriangularSolve, is_triangular_solve, parse_cholesky,
                                         parse_triangular_solve)
from .attention_math import AttentionBuilder, braces
from .fmha_chunked import while_loop
from .fmha_lowering import replace_call

_REAL_OF = {"c64": "f32", "c128": "f64"}


def lower_triangular_solves(module: HloModule) -> HloModule:
    """Replace every triangular solve (op or cuBLAS call) and every ``cholesky`` outside fused
    computations by the plain HLO that computes it; in place."""
    fused = {id(i.fused_computation) for c in module.computations for i in c.instructions if i.opcode == "fusion"}
    for comp in list(module.computations):
        if id(comp) in fused:
            continue
        for inst in [i for i in comp.instructions if is_triangular_solve(i) or i.opcode == "cholesky"]:
            if inst.opcode == "cholesky":
                lower_cholesky(comp, inst)
            else:
                lower_triangular_solve(comp, inst)
    return module


def lower_triangular_solve(comp: HloComputation, inst: HloInstruction) -> None:
    """Replace the triangular solve ``inst`` of ``comp`` by plain HLO."""
    info = parse_triangular_solve(inst)
    b = AttentionBuilder(comp, inst)
    x = b.relayout(_solve(b, info), info.result)
    if info.is_call:
        replace_call(b, [x], inst.shape.tuple_shapes)
        return
    _replace(b, x)


def lower_cholesky(comp: HloComputation, inst: HloInstruction) -> None:
    """Replace the ``cholesky`` ``inst`` of ``comp`` by plain HLO."""
    info = parse_cholesky(inst)
    b = AttentionBuilder(comp, inst)
    _replace(b, b.relayout(_cholesky(b, info), inst.shape))


def _replace(b: AttentionBuilder, x: HloInstruction) -> None:
    """Put ``b``'s instructions before its instruction and ``x`` in its place."""
    comp, inst = b.comp, b.call
    insert_instructions(comp, b.new, before=inst)
    take_name(x, inst, b.names)
    replace_instructions(comp, {inst: x})
    remove_dead(comp, b.new)


def _solve(b: AttentionBuilder, info: TriangularSolve) -> HloInstruction:
    """The solution, default layout."""
    a = b.relayout(b.operands[0], _default(info.a))
    rhs = b.relayout(b.operands[1], _default(info.b))
    a = _triangle(b, info, a)
    nb = info.batch_rank
    transposed = info.transpose_a != "NO_TRANSPOSE"        # op(a) is a transpose of a
    if not info.left_side:
        transposed = not transposed                         # M = op(a)^T
        rhs = _swap_last(b, rhs)
    m = _swap_last(b, a) if transposed else a
    if info.transpose_a == "ADJOINT":
        m = _conj(b, m)
    lower = info.lower != transposed
    x = _substitute(b, m, rhs, lower=lower, unit=info.unit_diagonal, nb=nb)
    return x if info.left_side else _swap_last(b, x)


def _default(shape: Shape) -> Shape:
    return Shape.array(shape.element_type, shape.dimensions)


def _zero(b: AttentionBuilder, et: str) -> HloInstruction:
    return b.constant(et, "(0, 0)" if is_complex(et) else "0")


def _one(b: AttentionBuilder, et: str) -> HloInstruction:
    return b.constant(et, "(1, 0)" if is_complex(et) else "1")


def _triangle(b: AttentionBuilder, info: TriangularSolve, a: HloInstruction) -> HloInstruction:
    """``a`` with the other triangle zero and, for a unit diagonal, ones on the diagonal."""
    dims, et, nb = a.shape.dimensions, a.shape.element_type, info.batch_rank
    rows, cols = b.iota(dims, nb), b.iota(dims, nb + 1)
    keep = b.compare(cols, rows, "LE" if info.lower else "GE")
    a = b.select(keep, a, b.splat(_zero(b, et), dims))
    if info.unit_diagonal:
        a = b.select(b.compare(rows, cols, "EQ"), b.splat(_one(b, et), dims), a)
    return a


def _swap_last(b: AttentionBuilder, x: HloInstruction) -> HloInstruction:
    r = x.shape.rank
    return b.transpose(x, list(range(r - 2)) + [r - 1, r - 2])


def _conj(b: AttentionBuilder, x: HloInstruction) -> HloInstruction:
    """The complex conjugate (``x`` itself for a real type)."""
    et = x.shape.element_type
    if not is_complex(et):
        return x
    part = Shape.array(_REAL_OF[et], x.shape.dimensions)
    re = b.add("real", "real", part, [x])
    im = b.add("imag", "imag", part, [x])
    neg = b.add("negate", "negate", part, [im])
    return b.add("complex", "complex", x.shape, [re, neg])


def _substitute(b: AttentionBuilder, m: HloInstruction, c: HloInstruction, *, lower: bool, unit: bool,
                nb: int) -> HloInstruction:
    """``x`` with ``m x = c``, ``m [..., k, k]`` lower (else upper) triangular, by a loop over rows."""
    et = m.shape.element_type
    k = m.shape.dimensions[-1]
    batch = tuple(c.shape.dimensions[:nb])
    n = c.shape.dimensions[-1]
    x0 = b.splat(_zero(b, et), c.shape.dimensions)

    def step(bb: AttentionBuilder, i: HloInstruction, v: dict[str, HloInstruction]) -> dict[str, HloInstruction]:
        s32 = "s32"
        row = i if lower else bb.binary("subtract", bb.constant(s32, str(k - 1)), i)
        zero = bb.constant(s32, "0")
        lead = [zero] * nb
        row_dims = batch + (1, k)
        mrow = bb.add("dynamic-slice", "dynamic-slice", Shape.array(et, row_dims), [v["m"], *lead, row, zero],
                      dynamic_slice_sizes=braces(row_dims))
        on_diag = bb.compare(bb.iota(row_dims, nb + 1), bb.splat(row, row_dims), "EQ")
        strict = bb.select(on_diag, bb.splat(_zero(bb, et), row_dims), mrow)
        out_dims = batch + (1, n)
        nbatch = braces(range(nb))
        prod = bb.add("dot", "dot", Shape.array(et, out_dims), [strict, v["x"]], lhs_batch_dims=nbatch,
                      rhs_batch_dims=nbatch, lhs_contracting_dims=braces([nb + 1]),
                      rhs_contracting_dims=braces([nb]))
        crow = bb.add("dynamic-slice", "dynamic-slice", Shape.array(et, out_dims), [v["c"], *lead, row, zero],
                      dynamic_slice_sizes=braces(out_dims))
        xrow = bb.binary("subtract", crow, prod)
        if not unit:
            diag_dims = batch + (1, 1)
            d = bb.add("dynamic-slice", "dynamic-slice", Shape.array(et, diag_dims), [v["m"], *lead, row, row],
                       dynamic_slice_sizes=braces(diag_dims))
            d = bb.reshape(d, batch)
            xrow = bb.binary("divide", xrow, bb.broadcast(d, out_dims, range(nb)))
        x = bb.add("dynamic-update-slice", "dynamic-update-slice", v["x"].shape, [v["x"], xrow, *lead, row, zero])
        return {"x": x}

    out = while_loop(b, "rows", {"m": m, "c": c, "x": x0}, k, step)
    return out["x"]


def _cholesky(b: AttentionBuilder, info: Cholesky) -> HloInstruction:
    """The factor, default layout."""
    a = b.relayout(b.operands[0], _default(info.a))
    nb, et = info.batch_rank, info.element_type
    if not info.lower:
        a = _conj(b, _swap_last(b, a))
    dims = a.shape.dimensions
    batch, k = tuple(dims[:nb]), dims[-1]
    real = _REAL_OF.get(et, et)
    flag_dims = batch + (1, 1)
    carried = {"a": a, "l": b.splat(_zero(b, et), dims),
               "bad": b.splat(b.constant("pred", "false"), Shape.array("pred", flag_dims))}

    def step(bb: AttentionBuilder, j: HloInstruction, v: dict[str, HloInstruction]) -> dict[str, HloInstruction]:
        zero = bb.constant("s32", "0")
        lead = [zero] * nb
        row_dims, col_dims = batch + (1, k), batch + (k, 1)
        lrow = bb.add("dynamic-slice", "dynamic-slice", Shape.array(et, row_dims), [v["l"], *lead, j, zero],
                      dynamic_slice_sizes=braces(row_dims))
        nbatch = braces(range(nb))
        done = bb.add("dot", "dot", Shape.array(et, col_dims), [v["l"], _conj(bb, lrow)], lhs_batch_dims=nbatch,
                      rhs_batch_dims=nbatch, lhs_contracting_dims=braces([nb + 1]),
                      rhs_contracting_dims=braces([nb + 1]))
        acol = bb.add("dynamic-slice", "dynamic-slice", Shape.array(et, col_dims), [v["a"], *lead, zero, j],
                      dynamic_slice_sizes=braces(col_dims))
        rest = bb.binary("subtract", acol, done)
        d = bb.add("dynamic-slice", "dynamic-slice", Shape.array(et, flag_dims), [rest, *lead, j, zero],
                   dynamic_slice_sizes=braces(flag_dims))
        if is_complex(et):
            d = bb.add("real", "real", Shape.array(real, flag_dims), [d])
        pivot = bb.unary("sqrt", d)
        bad = bb.binary("or", v["bad"], bb.compare(pivot, pivot, "NE"))
        if is_complex(et):
            pivot = bb.add("complex", "complex", Shape.array(et, flag_dims),
                           [pivot, bb.splat(bb.constant(real, "0"), flag_dims)])
        wide = bb.broadcast(bb.reshape(pivot, batch), col_dims, range(nb))
        rows = bb.iota(col_dims, nb)
        at = bb.splat(j, col_dims)
        col = bb.select(bb.compare(rows, at, "GT"), bb.binary("divide", rest, wide),
                        bb.select(bb.compare(rows, at, "EQ"), wide, bb.splat(_zero(bb, et), col_dims)))
        lnew = bb.add("dynamic-update-slice", "dynamic-update-slice", v["l"].shape, [v["l"], col, *lead, zero, j])
        return {"l": lnew, "bad": bad}

    out = while_loop(b, "columns", carried, k, step)
    bad = b.broadcast(b.reshape(out["bad"], batch), dims, range(nb))
    nan = b.splat(b.constant(et, "(nan, 0)" if is_complex(et) else "nan"), dims)
    factor = b.select(bad, nan, out["l"])
    return _conj(b, _swap_last(b, factor)) if not info.lower else factor
