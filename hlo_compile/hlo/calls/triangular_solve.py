"""A triangular solve (and a ``cholesky``) read once, from either of its two spellings, so that the interpreter and
the lowering (``passes/triangular_solve_lowering.py``) read and check it the same way:

- the HLO op ``triangular-solve(a, b)``, attributes ``left_side``, ``lower``,
  ``unit_diagonal``, ``transpose_a``; its result is the solution, shaped like ``b``;
- XLA:GPU's cuBLAS call ``custom-call(a, b), custom_call_target="__cublas$triangularSolve"``,
  the same options in its JSON ``backend_config``; its result is the tuple
  ``(solution, s8[workspace])``.

XLA's semantics (TriangularSolveOptions): ``a`` is ``[..., k, k]``, ``b`` ``[..., m, n]``, the
batch dimensions equal; ``left_side`` solves ``op(a) x = b`` (``k == m``), else ``x op(a) = b``
(``k == n``); ``op`` is the identity, the transpose, or the conjugate transpose (ADJOINT).
Only the triangle of ``a`` named by ``lower`` is read (the other is ignored, whatever it holds),
and with ``unit_diagonal`` neither is the diagonal: it is taken as 1. Types: f32, f64, c64, c128
(cuBLAS trsm's).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..backend_config import backend_config
from ..errors import HloUnsupportedError, HloVerifyError
from ..ir import HloInstruction
from .library_targets import TRIANGULAR_SOLVE_TARGET
from ..shape import Shape

__all__ = ["TRIANGULAR_SOLVE_TARGET", "Cholesky", "TriangularSolve", "is_triangular_solve", "parse_cholesky",
           "parse_triangular_solve"]
TRANSPOSE_KINDS = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")
SOLVE_TYPES = ("f32", "f64", "c64", "c128")


class _OnMatrices:
    """What both ops read off their ``a [..., k, k]``: the batch rank and the element type."""

    a: Shape

    @property
    def batch_rank(self) -> int:
        return self.a.rank - 2

    @property
    def element_type(self) -> str:
        return self.a.element_type


@dataclass(frozen=True)
class TriangularSolve(_OnMatrices):
    left_side: bool
    lower: bool
    unit_diagonal: bool
    transpose_a: str          # NO_TRANSPOSE, TRANSPOSE or ADJOINT
    a: Shape                  # [..., k, k]
    b: Shape                  # [..., m, n]
    result: Shape             # the solution's shape (b's dimensions, the declared layout)
    is_call: bool             # the cuBLAS custom call (a tuple result with a workspace)


def is_triangular_solve(inst: HloInstruction) -> bool:
    """Whether ``inst`` is a triangular solve, in either spelling."""
    if inst.opcode == "triangular-solve":
        return True
    return inst.opcode == "custom-call" and inst.attr("custom_call_target", None) == TRIANGULAR_SOLVE_TARGET


def parse_triangular_solve(inst: HloInstruction) -> TriangularSolve:
    """The solve ``inst`` describes; HloVerifyError for shapes XLA rejects, HloUnsupportedError
    for options or types it does not define."""
    what = f"{inst.opcode} '%{inst.name}'"
    if inst.opcode == "custom-call":
        cfg = backend_config(inst)
        options = {k: cfg.get(k) for k in ("left_side", "lower", "unit_diagonal", "transpose_a")}
        is_call = True
    else:
        options = {k: inst.attr(k, None) for k in ("left_side", "lower", "unit_diagonal", "transpose_a")}
        is_call = False
    transpose = options["transpose_a"]
    if transpose not in TRANSPOSE_KINDS:
        raise HloUnsupportedError(f"{what}: transpose_a must be one of {', '.join(TRANSPOSE_KINDS)}, "
                                  f"got {transpose!r}", inst.location)
    if len(inst.operands) != 2:
        raise HloVerifyError(f"{what}: a triangular solve takes 2 operands (a, b), got {len(inst.operands)}",
                             inst.location)
    a, b = (op.shape for op in inst.operands)
    result = inst.shape
    if is_call:
        if not result.is_tuple or len(result.tuple_shapes) != 2:
            raise HloVerifyError(f"{what}: the cuBLAS call returns (solution, workspace), got "
                                 f"{result.to_text(False)}", inst.location)
        result = result.tuple_shapes[0]
    for s in (a, b, result):
        if not s.is_array:
            raise HloVerifyError(f"{what}: operands and result must be arrays", inst.location)
    et = a.element_type
    if et not in SOLVE_TYPES:
        raise HloUnsupportedError(f"{what}: triangular solves of {et} are not supported "
                                  f"(only {', '.join(SOLVE_TYPES)})", inst.location)
    if b.element_type != et or result.element_type != et:
        raise HloVerifyError(f"{what}: a, b and the result must have one element type, got "
                             f"{et}, {b.element_type}, {result.element_type}", inst.location)
    if a.rank < 2 or a.rank != b.rank:
        raise HloVerifyError(f"{what}: a and b must have the same rank, at least 2, got "
                             f"{a.to_text(False)} and {b.to_text(False)}", inst.location)
    k = a.dimensions[-1]
    solved = b.dimensions[-2] if options["left_side"] else b.dimensions[-1]
    if a.dimensions[-2] != k or solved != k or a.dimensions[:-2] != b.dimensions[:-2]:
        raise HloVerifyError(f"{what}: a must be square batches [..., k, k] matching b "
                             f"({'[..., k, n]' if options['left_side'] else '[..., m, k]'}), got "
                             f"{a.to_text(False)} and {b.to_text(False)}", inst.location)
    if result.dimensions != b.dimensions:
        raise HloVerifyError(f"{what}: the solution must be shaped like b ({b.to_text(False)}), got "
                             f"{result.to_text(False)}", inst.location)
    return TriangularSolve(bool(options["left_side"]), bool(options["lower"]), bool(options["unit_diagonal"]),
                           transpose, a, b, result, is_call)


@dataclass(frozen=True)
class Cholesky(_OnMatrices):
    """``cholesky(a), lower=L``: ``a [..., k, k]`` Hermitian positive definite, of which only the
    triangle ``lower`` names is read; the factor (``l l^H = a`` or ``u^H u = a``) comes back in
    that triangle. XLA leaves the other triangle and a matrix that is not positive definite
    implementation-defined; its expander (XLA:CPU's and XLA:GPU's) gives zeros there, and NaN
    everywhere in a matrix whose factorisation takes the square root of a negative (or NaN)
    pivot, which is what we give too."""

    lower: bool
    a: Shape


def parse_cholesky(inst: HloInstruction) -> Cholesky:
    what = f"cholesky '%{inst.name}'"
    if len(inst.operands) != 1:
        raise HloVerifyError(f"{what}: takes 1 operand, got {len(inst.operands)}", inst.location)
    a = inst.operands[0].shape
    if not a.is_array or a.rank < 2 or a.dimensions[-1] != a.dimensions[-2]:
        raise HloVerifyError(f"{what}: the operand must be square matrices [..., k, k], got {a.to_text(False)}",
                             inst.location)
    if a.element_type not in SOLVE_TYPES:
        raise HloUnsupportedError(f"{what}: Cholesky of {a.element_type} is not supported "
                                  f"(only {', '.join(SOLVE_TYPES)})", inst.location)
    if not inst.shape.is_array or inst.shape.dimensions != a.dimensions or inst.shape.element_type != a.element_type:
        raise HloVerifyError(f"{what}: the result must be shaped like the operand ({a.to_text(False)}), got "
                             f"{inst.shape.to_text(False)}", inst.location)
    return Cholesky(bool(inst.attr("lower", False)), a)
