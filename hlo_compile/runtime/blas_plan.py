"""How a cuBLAS GEMM call's buffers are handed to BLAS (XLA's ``matmul_utils.cc`` and
``gpu_blas_lt.cc``; notes/xla-gpu-calls.md §1.4). Pure: shapes and layouts in, strides out.

- ``batch_row_col``: an operand seen as a logical (batch, rows, cols) array. For the lhs the
  rows are its non-contracting dims and the cols its contracting dims; for the rhs the rows
  are the contracting dims and the cols the non-contracting ones; for D (and C) batch, lhs
  rows, rhs cols. Each group must be physically contiguous and in order (its last dim most
  minor); a group with no dims is placed most major.
- ``matrix_layout``: that (B, R, C) array as a strided BLAS matrix: row- or column-major, the
  leading dimension and the batch stride, by which of the four legal physical orders it has
  (batch most minor is refused). A batch of one has batch stride 0.
- ``blas_plan``: every operand's layout; the batch count of the larger side given to both
  (an operand with no batch dims then has stride 0: reused per batch); and, since BLAS writes
  column-major, D row-major means computing D^T = B^T A^T: A and B (with their scales) swap
  and every layout is transposed (``MakeOutputColumnMajor``).

Physical buffers are plain dense arrays here: a layout with tiles or a memory space is refused.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..hlo.errors import HloUnsupportedError
from ..hlo.calls.gemm import F8_TYPES, GemmCall
from ..hlo.shape import Shape

ROW, COLUMN = "row", "column"


@dataclass(frozen=True)
class MatrixLayout:
    """A batch of ``batch`` matrices of ``rows`` x ``cols`` elements of ``element_type``:
    element (b, r, c) at ``b * batch_stride + r * ld + c`` (row-major) or ``b * batch_stride +
    c * ld + r`` (column-major)."""

    element_type: str
    rows: int
    cols: int
    order: str
    batch: int
    ld: int
    batch_stride: int

    def transposed(self) -> MatrixLayout:
        """The same memory seen as the transposed matrix."""
        return replace(self, rows=self.cols, cols=self.rows, order=ROW if self.order == COLUMN else COLUMN)

    def offset(self, b: int, r: int, c: int) -> int:
        """The element offset of (b, r, c)."""
        inner = r * self.ld + c if self.order == ROW else c * self.ld + r
        return b * self.batch_stride + inner


@dataclass(frozen=True)
class BlasPlan:
    """The matrices BLAS sees: D (column-major) = A x B (+ C); ``swapped`` when A is XLA's
    rhs and B its lhs (D was row-major). ``m``, ``n``, ``k`` are BLAS's sizes."""

    a: MatrixLayout
    b: MatrixLayout
    c: MatrixLayout
    d: MatrixLayout
    swapped: bool

    @property
    def batch(self) -> int:
        return self.d.batch

    @property
    def m(self) -> int:
        return self.d.rows

    @property
    def n(self) -> int:
        return self.d.cols

    @property
    def k(self) -> int:
        return self.a.cols


def _unsupported(what: str, why: str) -> HloUnsupportedError:
    return HloUnsupportedError(f"{what}: {why}")


def batch_row_col(shape: Shape, batch_dims: Sequence[int], row_dims: Sequence[int], col_dims: Sequence[int],
                  what: str = "operand") -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """((batch, rows, cols) sizes, their minor-to-major order) of ``shape`` grouped so; refused
    when a group is not physically contiguous and in order."""
    if shape.layout is not None and (shape.layout.tiles or shape.layout.has_suffixes()):
        raise _unsupported(what, f"layout {shape.to_text()} is not a dense strided matrix")
    m2m = list(shape.minor_to_major)
    groups = {1: list(row_dims), 2: list(col_dims), 0: list(batch_dims)}
    order: list[int] = []
    i = 0
    while i < len(m2m):
        dim = m2m[i]
        label = next((g for g in (1, 2, 0) if groups[g] and groups[g][-1] == dim), None)
        if label is None:
            raise _unsupported(what, f"dims of {shape.to_text()} are not physically grouped as batch "
                                     f"{list(batch_dims)}, rows {list(row_dims)}, cols {list(col_dims)}")
        for d in reversed(groups[label]):
            if i >= len(m2m) or m2m[i] != d:
                raise _unsupported(what, f"dims {groups[label]} of {shape.to_text()} are not physically "
                                         "sequential")
            i += 1
        order.append(label)
    order += [g for g in (2, 1, 0) if not groups[g]]

    def size(dims: Sequence[int]) -> int:
        n = 1
        for d in dims:
            n *= shape.dimensions[d]
        return n
    return (size(batch_dims), size(row_dims), size(col_dims)), tuple(order)


def matrix_layout(element_type: str, sizes: tuple[int, int, int], minor_to_major: tuple[int, int, int],
                  what: str = "operand") -> MatrixLayout:
    """The BLAS view of a (batch, rows, cols) array with ``minor_to_major`` over those three."""
    batch, rows, cols = sizes
    order, ld, stride = ROW, cols, rows * cols
    major_to_minor = tuple(reversed(minor_to_major))
    if major_to_minor == (0, 1, 2):        # (B, R, C)
        pass
    elif major_to_minor == (0, 2, 1):      # (B, C, R); a single column stays row-major
        if cols != 1:
            order, ld = COLUMN, rows
    elif major_to_minor == (1, 0, 2):      # (R, B, C)
        ld, stride = batch * cols, cols
    elif major_to_minor == (2, 0, 1):      # (C, B, R)
        order, ld, stride = COLUMN, batch * rows, rows
    else:
        raise _unsupported(what, "the batch dimension is physically most minor: no BLAS matrix layout")
    if batch == 1:
        stride = 0
    return MatrixLayout(element_type, rows, cols, order, batch, ld, stride)


def layout_for(shape: Shape, batch_dims: Sequence[int], row_dims: Sequence[int], col_dims: Sequence[int],
               what: str = "operand") -> MatrixLayout:
    sizes, m2m = batch_row_col(shape, batch_dims, row_dims, col_dims, what)
    return matrix_layout(shape.element_type, sizes, m2m, what)


def xla_layouts(call: GemmCall, operand_shapes: Sequence[Shape]) -> tuple[MatrixLayout, ...]:
    """(lhs, rhs, C, D) layouts as XLA's ``GemmConfig::For`` makes them, before any swap."""
    dn = call.dot_dims
    a, b = operand_shapes[call.a], operand_shapes[call.b]
    lb, rb = list(dn.lhs_batch_dimensions), list(dn.rhs_batch_dimensions)
    lc, rc = list(dn.lhs_contracting_dimensions), list(dn.rhs_contracting_dimensions)
    lrows = [d for d in range(a.rank) if d not in lb + lc]
    rcols = [d for d in range(b.rank) if d not in rb + rc]
    lhs = layout_for(a, lb, lrows, lc, f"%{call.name} lhs")
    rhs = layout_for(b, rb, rc, rcols, f"%{call.name} rhs")
    nb = max(len(lb), len(rb))
    out = call.output
    dims = list(range(out.rank))
    groups = (dims[:nb], dims[nb:nb + len(lrows)], dims[nb + len(lrows):])
    d = layout_for(out, *groups, what=f"%{call.name} output")
    c_shape = operand_shapes[call.c] if call.c is not None else out
    if call.c is None and call.is_f8 and call.output_is_f8:
        # cuBLASLt wants C typed as the bias (or bf16) even when it reads none
        bias_et = operand_shapes[call.bias].element_type if call.bias is not None else "bf16"
        c_shape = c_shape.with_element_type(bias_et)
    c = layout_for(c_shape, *groups, what=f"%{call.name} C")
    if a.element_type not in F8_TYPES and lhs.cols != rhs.rows:
        raise _unsupported(f"%{call.name}", f"lhs has {lhs.cols} columns but rhs {rhs.rows} rows")
    return lhs, rhs, c, d


def blas_plan(call: GemmCall, operand_shapes: Sequence[Shape]) -> BlasPlan:
    """The matrices BLAS is given for ``call`` (operands of ``operand_shapes``)."""
    lhs, rhs, c, d = xla_layouts(call, operand_shapes)
    batch = max(lhs.batch, rhs.batch)
    lhs, rhs = replace(lhs, batch=batch), replace(rhs, batch=batch)
    swapped = d.order != COLUMN
    if swapped:
        lhs, rhs = rhs.transposed(), lhs.transposed()
        c, d = c.transposed(), d.transposed()
    return BlasPlan(lhs, rhs, c, d, swapped)
