"""Small column reductions (XLA's ``SmallColumnReductionFusion``, chosen when ``32 % c == 0``).

Normalised shape ``[a, b, c]`` reduced to ``[a, c]``; one block per ``a`` (``bl_x``) of ``T``
threads. The kept-minor dimension is so small that a whole row of ``c`` columns fits in a
few lanes, so the thread loop runs over the flattened ``b·c`` elements of the block's ``a``:
thread ``t`` folds positions ``p = k·(v·T) + t·v + j`` (loop ``k``, vector lane ``j``) into
accumulator ``j``. As ``v·T`` is a multiple of ``c``, accumulator ``j`` only ever sees
column ``(t·v + j) mod c``.

``shared_rows S = v·T/c`` partial results exist per column. Geometry (XLA): ``T = 128``,
``v = GetVectorSizeForMlir(b·c, 32)``; while ``S > 32`` and ``v > 1`` halve both; if still
``S > 32``, ``T /= S/32`` and ``S = 32``. The partials go to a shared tile ``[S][c + pad]``
at ``(t·v + j) div c, (t·v + j) mod c`` with ``pad = ceil(c / (T·v))`` (0 when ``T = 32``
and ``v = 1``), barrier; then for each ``s < v`` thread ``t`` reads the tile at
``q = t + s·T``: row ``q mod S``, column ``q div S``, so each run of ``S`` lanes holds one
column's partials; a shuffle tree from ``S/2`` reduces them and the lane with
``t mod S == 0`` writes output ``[a, q div S]``.
"""
from __future__ import annotations

from llvmlite import ir

from ....indexing import affine as A
from ...analysis.emitter_kind import ReductionVariant
from ...analysis.fusion_analysis import FusionAnalysis, ReductionDimensions
from ...target import Target
from .emitter import WARP, ReductionEmitter
from .spec import ReductionKernelSpec, ReductionPath, VectorSizeFn

THREADS = 128


def small_column_geometry(rd: ReductionDimensions, vector_size_fn: VectorSizeFn,
                          analysis: FusionAnalysis | None = None) -> dict:
    """XLA's ``SmallColumnReductionFusion`` parameters (threads, vector size, shared rows,
    loop trip count, shared-tile padding)."""
    a, b, c = rd.dimensions
    assert WARP % c == 0, rd
    v = vector_size_fn(b * c, WARP)
    threads = THREADS
    shared_rows = v * threads // c
    while shared_rows > WARP and v > 1:
        v //= 2
        shared_rows //= 2
    if shared_rows > WARP:
        threads //= shared_rows // WARP
        shared_rows = WARP
    padding = 0 if (threads == WARP and v == 1) else -(-c // (threads * v))
    return {"vector_size": v, "threads": threads, "blocks": a, "shared_rows": shared_rows,
            "loop_size": -(-(b * c) // (v * threads)), "shared_padding": padding}


def emit_small_column_kernel(target: Target, spec: ReductionKernelSpec) -> ir.Module:
    return ReductionEmitter(target, spec).emit_groups(lambda e: _emit_group(target, spec, e))


SMALL_COLUMN_UNROLL = 8


def _emit_group(target: Target, spec: ReductionKernelSpec, e: ReductionEmitter) -> None:
    g = spec.geometry
    v, n_threads, rows, loops, pad = (g["vector_size"], g["threads"], g["shared_rows"], g["loop_size"],
                                      g["shared_padding"])
    _, b_n, c_n = spec.rd.dimensions
    bc = b_n * c_n
    kb, b = e.kb, e.b
    t = kb.thread_id(0)
    block_base = b.mul(kb.block_id(0), kb.index(bc))     # normalised position of [a, 0, 0]
    accs = e.new_accumulators(v)
    tv = b.mul(t, kb.index(v))
    # the loop's turns unrolled by up to SMALL_COLUMN_UNROLL (XLA's kernels have several loads in
    # flight); the turns past ``loops`` of the last group fail the position check, as would a
    # partial last turn, and the accumulation order is the loop's
    unroll = min(loops, SMALL_COLUMN_UNROLL)
    with kb.loop(0, -(-loops // unroll), name="loop") as kk, e.fe.scope():
        for u in range(unroll):
            k = b.add(b.mul(kk, kb.index(unroll)), kb.index(u)) if unroll > 1 else kk
            with e.fe.scope():
                pos = b.add(b.mul(k, kb.index(v * n_threads)), tv)
                first = b.add(block_base, pos)
                if bc % v == 0:   # a thread's vector is all in range or all out of it
                    with kb.if_(b.icmp_unsigned("<", pos, kb.index(bc))), e.fe.scope():
                        e.accumulate_vector(accs, list(range(v)), first)
                else:
                    for j in range(v):
                        with kb.if_(b.icmp_unsigned("<", b.add(pos, kb.index(j)), kb.index(bc))), e.fe.scope():
                            e.accumulate(accs, j, b.add(first, kb.index(j)) if j else first)
    pitch = c_n + pad

    def store(arrays):
        for j in range(v):
            q = b.add(tv, kb.index(j)) if j else tv
            row, col = b.udiv(q, kb.index(c_n)), b.urem(q, kb.index(c_n))
            e.store_shared(arrays, b.add(b.mul(row, kb.index(pitch)), col), e.load(accs, j))

    def load(arrays):
        out = []
        for s in range(v):
            q = b.add(t, kb.index(s * n_threads)) if s else t
            row, col = b.urem(q, kb.index(rows)), b.udiv(q, kb.index(rows))
            out.append(e.load_shared(arrays, b.add(b.mul(row, kb.index(pitch)), col), None))
        return out

    reads = e.exchange("small_column_tile", store, load)
    writer = b.icmp_unsigned("==", b.urem(t, kb.index(rows)), kb.index(0))
    for s, vals in enumerate(reads):
        q = b.add(t, kb.index(s * n_threads)) if s else t
        col = b.udiv(q, kb.index(rows))
        vals = e.warp_reduce(vals, rows // 2)
        with kb.if_(writer):
            e.write_results(vals, b.add(block_base, col))


def small_column_shared_elements(rd: ReductionDimensions, geometry: dict) -> int:
    """The tile ``[shared_rows][c + padding]`` per reduced value."""
    return geometry["shared_rows"] * (rd.dimensions[2] + geometry["shared_padding"])


def small_column_walks(spec: ReductionKernelSpec):
    """The small-column kernel's thread -> normalised-position description (XLA's
    ``SmallColumnReductionFusion`` input/output indexing): ``(input linear L, symbol ranges
    [loop, vector], constraints)`` and ``(output linear L with b = 0, [vector],
    writing-thread constraints)``."""
    g = spec.geometry
    v, n_threads, rows, loops = g["vector_size"], g["threads"], g["shared_rows"], g["loop_size"]
    _, b_n, c_n = spec.rd.dimensions
    th, a = A.dim(0), A.dim(3)
    pos = A.add(A.add(A.mul(th, v), A.sym(1)), A.mul(A.sym(0), v * n_threads))
    inp = (A.add(A.mul(a, b_n * c_n), pos), [(0, loops - 1), (0, v - 1)], [(pos, 0, b_n * c_n - 1)])
    col = A.floordiv(A.add(th, A.mul(A.sym(0), n_threads)), rows)
    out = (A.add(A.mul(a, b_n * c_n), col), [(0, v - 1)], [(A.mod(th, rows), 0, 0), (col, 0, c_n - 1)])
    return inp, out


SMALL_COLUMN = ReductionPath(ReductionVariant.SMALL_COLUMN, small_column_geometry,
                             lambda geometry: geometry["blocks"], emit_small_column_kernel, small_column_walks,
                             small_column_shared_elements)
