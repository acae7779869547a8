"""Column reductions (XLA's ``ColumnReductionFusion``; small columns: ``small_column.py``).

Normalised shape ``[a, b, c]`` reduced to ``[a, c]``. Blocks ``[a, ceil(c / (32·v))]``
(linearised on ``blockIdx.x``, as XLA's ``Product(num_blocks_)``) of
32×32 threads (thread t: ``tx = t mod 32`` picks ``v`` adjacent columns, ``ty = t div 32``
the rows ``ty, ty + 32, ...``). Each thread folds its rows into ``v`` accumulators, writes
them into XLA's ``[32][32·v + 1]`` shared tile at ``[tx][ty·v + j]`` (padding against bank conflicts; the tiles
of several reduced values are reused in rounds when they would not fit: ``spec.SharedTiles``), barrier;
warp ``ty`` then reads ``[ty][tx·v + j]``: column ``ty·v + j`` (lane tx holds row-lane tx's partial), shuffles
16..1, and lane 0 writes the column's result.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ....indexing import affine as A
from ...analysis.emitter_kind import ReductionVariant
from ...analysis.fusion_analysis import FusionAnalysis, ReductionDimensions
from ...target import Target
from .emitter import WARP, ReductionEmitter, normalized_linear
from .spec import ReductionKernelSpec, ReductionPath, VectorSizeFn
from .triton_tiling import is_power_of_two, next_power_of_two, triton_tiling


def emit_column_kernel(target: Target, spec: ReductionKernelSpec) -> ir.Module:
    body = _emit_triton_column_group if "row_lanes" in spec.geometry else _emit_column_group
    return ReductionEmitter(target, spec).emit_groups(lambda e: body(target, spec, e))


def _emit_triton_column_group(target: Target, spec: ReductionKernelSpec, e: ReductionEmitter) -> None:
    """XLA's Triton kernel's launch (``triton_column_geometry``): thread ``t`` folds columns
    ``cx·v + j`` (``cx = t mod L``) of rows ``ry, ry + R, ...`` (``ry = t div L``); partials to the
    shared tile ``[R][C + 1]`` at ``[ry][cx·v + j]``, barrier; then for each ``s < v`` thread
    ``t`` reads ``q = t + s·T``: row ``q mod R`` of column ``q div R`` (runs of R lanes, R <= 32, a
    power of two), shuffles from ``R/2`` and the lane with ``t mod R == 0`` writes."""
    g = spec.geometry
    v, n_threads, lanes, r_n, cols = g["vector_size"], g["threads"], g["column_lanes"], g["row_lanes"], g["columns"]
    _, b_n, c_n = spec.rd.dimensions
    kb, b = e.kb, e.b
    t = kb.thread_id(0)
    cx = b.urem(t, kb.index(lanes))
    ry = b.udiv(t, kb.index(lanes))
    col_blocks = g["blocks"][1]
    a = b.udiv(kb.block_id(0), kb.index(col_blocks)) if col_blocks > 1 else kb.block_id(0)
    c_block = b.urem(kb.block_id(0), kb.index(col_blocks)) if col_blocks > 1 else kb.index(0)
    c_base = b.mul(c_block, kb.index(cols))
    accs = e.new_accumulators(v)
    c0 = b.add(c_base, b.mul(cx, kb.index(v)))
    with kb.loop(0, g["rows_per_thread"], name="rows") as k, e.fe.scope():
        row = b.add(ry, b.mul(k, kb.index(r_n)))
        ok = b.and_(b.icmp_unsigned("<", row, kb.index(b_n)), b.icmp_unsigned("<", c0, kb.index(c_n)))
        with kb.if_(ok), e.fe.scope():   # c_n % v == 0: the thread's v columns are all in range or all out
            e.accumulate_vector(accs, list(range(v)), normalized_linear(kb, spec.rd, a, row, c0))
    pitch = cols + 1

    def store(arrays):
        for j in range(v):
            e.store_shared(arrays, b.add(b.mul(ry, kb.index(pitch)), b.add(b.mul(cx, kb.index(v)), kb.index(j))),
                           e.load(accs, j))

    def load(arrays):
        out = []
        for s in range(v):
            q = b.add(t, kb.index(s * n_threads)) if s else t
            index = b.add(b.mul(b.urem(q, kb.index(r_n)), kb.index(pitch)), b.udiv(q, kb.index(r_n)))
            out.append(e.load_shared(arrays, index, None))
        return out

    writer = b.icmp_unsigned("==", b.urem(t, kb.index(r_n)), kb.index(0))
    for s, vals in enumerate(e.exchange("column_tile", store, load)):
        q = b.add(t, kb.index(s * n_threads)) if s else t
        c = b.add(c_base, b.udiv(q, kb.index(r_n)))
        vals = e.warp_reduce(vals, r_n // 2)
        with kb.if_(b.and_(writer, b.icmp_unsigned("<", c, kb.index(c_n)))):
            e.write_results(vals, normalized_linear(kb, spec.rd, a, kb.index(0), c))


def _emit_column_group(target: Target, spec: ReductionKernelSpec, e: ReductionEmitter) -> None:
    v = spec.geometry["vector_size"]
    a_n, b_n, c_n = spec.rd.dimensions
    kb, b = e.kb, e.b
    t = kb.thread_id(0)
    tx = b.urem(t, kb.index(WARP))
    ty = b.udiv(t, kb.index(WARP))
    col_blocks = spec.geometry["blocks"][1]
    a = b.udiv(kb.block_id(0), kb.index(col_blocks)) if col_blocks > 1 else kb.block_id(0)
    c_block = b.urem(kb.block_id(0), kb.index(col_blocks)) if col_blocks > 1 else kb.index(0)
    c_base = b.mul(c_block, kb.index(WARP * v))
    accs = e.new_accumulators(v)
    rows = -(-b_n // WARP)
    with kb.loop(0, rows, name="rows") as k, e.fe.scope():
        row = b.add(ty, b.mul(k, kb.index(WARP)))
        with kb.if_(b.icmp_unsigned("<", row, kb.index(b_n))), e.fe.scope():
            c0 = b.add(c_base, b.mul(tx, kb.index(v)))
            if c_n % v == 0:   # the thread's v columns are all in range or all out of it
                with kb.if_(b.icmp_unsigned("<", c0, kb.index(c_n))), e.fe.scope():
                    first = normalized_linear(kb, spec.rd, a, row, c0)
                    e.accumulate_vector(accs, list(range(v)), first)
            else:
                for j in range(v):
                    c = b.add(c0, kb.index(j)) if j else c0
                    with kb.if_(b.icmp_unsigned("<", c, kb.index(c_n))), e.fe.scope():
                        e.accumulate(accs, j, normalized_linear(kb, spec.rd, a, row, c))
    pitch = WARP * v + 1

    def store(arrays):   # XLA's write map: tile[tx][ty·v + j] holds row ty's partial of column tx·v + j
        for j in range(v):
            slot = b.add(b.mul(ty, kb.index(v)), kb.index(j))
            e.store_shared(arrays, b.add(b.mul(tx, kb.index(pitch)), slot), e.load(accs, j))

    def load(arrays):    # XLA's read map: lane tx of warp ty reads tile[ty][tx·v + j]: row tx of column ty·v + j
        return [e.load_shared(arrays, b.add(b.mul(ty, kb.index(pitch)), b.add(b.mul(tx, kb.index(v)), kb.index(j))),
                              None) for j in range(v)]

    for j, vals in enumerate(e.exchange("column_tile", store, load)):
        col = b.add(b.mul(ty, kb.index(v)), kb.index(j))
        vals = e.warp_reduce(vals, WARP // 2)
        c = b.add(c_base, col)
        ok = b.and_(b.icmp_unsigned("==", tx, kb.index(0)), b.icmp_unsigned("<", c, kb.index(c_n)))
        with kb.if_(ok):
            e.write_results(vals, normalized_linear(kb, spec.rd, a, kb.index(0), c))


def column_shared_elements(rd: ReductionDimensions, geometry: dict) -> int:
    """One tile ``[32][32·v + 1]`` per reduced value (``spec.SharedTiles``), as XLA's (Triton's
    launch: ``[R][C + 1]``)."""
    if "row_lanes" in geometry:
        return geometry["row_lanes"] * (geometry["columns"] + 1)
    return WARP * (WARP * geometry["vector_size"] + 1)


def triton_column_geometry(rd: ReductionDimensions, analysis: FusionAnalysis | None) -> dict | None:
    """The launch of XLA's Triton kernel for a column reduction it runs with its block-level
    emitter (``triton_tiling.py``), or None: one block of ``T`` threads per tile of ``C``
    consecutive kept columns of one ``a`` (grid ``a · ceil(c / C)``); vector ``v`` = Triton's
    perThread over the tile ``[b padded, C padded]`` (dividing ``C`` and ``c``); ``L = C / v``
    column lanes and ``R = T / L`` row lanes (a power of two of at most a warp: the partials of
    a column are shuffled within ``R`` lanes)."""
    tiling = triton_tiling(analysis)
    if tiling is None:
        return None
    a, b, c = rd.dimensions
    run = tiling.contiguous(c)
    if run is None:
        return None
    cols, padded = run
    v = tiling.per_thread(padded * next_power_of_two(b), math.gcd(cols, c))
    lanes = cols // v
    if tiling.threads % lanes:
        return None
    rows = tiling.threads // lanes
    if not is_power_of_two(rows) or rows > WARP:
        return None
    return {"vector_size": v, "threads": tiling.threads, "blocks": [a, -(-c // cols)], "rows_per_thread": -(-b // rows),
            "columns": cols, "column_lanes": lanes, "row_lanes": rows}


def column_geometry(rd: ReductionDimensions, vector_size_fn: VectorSizeFn,
                    analysis: FusionAnalysis | None = None) -> dict:
    """XLA's column reduction launch (of its Triton kernel for a ``__triton`` fusion:
    ``triton_column_geometry``)."""
    triton = triton_column_geometry(rd, analysis)
    if triton is not None:
        return triton
    a, _, c = rd.dimensions
    v = vector_size_fn(c, WARP)
    return {"vector_size": v, "threads": WARP * WARP, "blocks": [a, -(-c // (WARP * v))],
            "rows_per_thread": -(-rd.dimensions[1] // WARP)}


def column_walks(spec: ReductionKernelSpec):
    """The column kernel's thread -> normalised-position description (as
    ``emit_column_kernel``): ``(input linear L, symbol ranges [row loop, vector],
    constraints)`` and ``(output linear L with b = 0, [vector], writing-thread constraints)``."""
    if "row_lanes" in spec.geometry:
        return _triton_column_walks(spec)
    v = spec.geometry["vector_size"]
    _, b_n, c_n = spec.rd.dimensions
    col_blocks = spec.geometry["blocks"][1]
    th, a, blk = A.dim(0), A.floordiv(A.dim(3), col_blocks), A.mod(A.dim(3), col_blocks)
    tx, ty = A.mod(th, WARP), A.floordiv(th, WARP)
    c_base = A.mul(blk, WARP * v)
    row = A.add(ty, A.mul(A.sym(0), WARP))
    c_in = A.add(c_base, A.add(A.mul(tx, v), A.sym(1)))
    inp = (A.add(A.mul(A.add(A.mul(a, b_n), row), c_n), c_in),
           [(0, -(-b_n // WARP) - 1), (0, v - 1)], [(row, 0, b_n - 1), (c_in, 0, c_n - 1)])
    c_out = A.add(c_base, A.add(A.mul(ty, v), A.sym(0)))
    out = (A.add(A.mul(a, b_n * c_n), c_out), [(0, v - 1)], [(tx, 0, 0), (c_out, 0, c_n - 1)])
    return inp, out


def _triton_column_walks(spec: ReductionKernelSpec):
    """``column_walks`` of the Triton launch (``_emit_triton_column_group``)."""
    g = spec.geometry
    v, n_threads, lanes, r_n, cols = g["vector_size"], g["threads"], g["column_lanes"], g["row_lanes"], g["columns"]
    _, b_n, c_n = spec.rd.dimensions
    col_blocks = g["blocks"][1]
    th, a, blk = A.dim(0), A.floordiv(A.dim(3), col_blocks), A.mod(A.dim(3), col_blocks)
    c_base = A.mul(blk, cols)
    row = A.add(A.floordiv(th, lanes), A.mul(A.sym(0), r_n))
    c_in = A.add(c_base, A.add(A.mul(A.mod(th, lanes), v), A.sym(1)))
    inp = (A.add(A.mul(A.add(A.mul(a, b_n), row), c_n), c_in),
           [(0, g["rows_per_thread"] - 1), (0, v - 1)], [(row, 0, b_n - 1), (c_in, 0, c_n - 1)])
    c_out = A.add(c_base, A.floordiv(A.add(th, A.mul(A.sym(0), n_threads)), r_n))
    out = (A.add(A.mul(a, b_n * c_n), c_out), [(0, v - 1)], [(A.mod(th, r_n), 0, 0), (c_out, 0, c_n - 1)])
    return inp, out


COLUMN = ReductionPath(ReductionVariant.COLUMN, column_geometry, lambda geometry: math.prod(geometry["blocks"]),
                       emit_column_kernel, column_walks, column_shared_elements)
