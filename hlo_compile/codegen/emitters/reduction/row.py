"""Row and multi-row reductions (XLA's ``RowReductionFusion`` / ``MultiRowReductionFusion``).

Normalised shape ``[z, y, x]`` reduced to ``[y]``. A block has ``nk`` kept rows of ``nr``
reducing threads (thread t: ``tx = t mod nr``, ``ty = t div nr``; row ``y = bl_x·nk + ty``).
Each thread folds ``x = (t·nr + tx)·v + j`` for every ``z``, tile step ``t`` and vector lane
``j`` into its accumulators, then:

- row (``nr`` a multiple of 32): warp shuffle tree 16..1; with more than one warp per row,
  lane 0 of each warp writes its partial to shared ``[nk][warps (+1 if a multiple of 32)]``,
  barrier, every warp reads its row's partials (init for missing warps) and shuffles again;
- multi-row (``nr`` a power of two ≤ 32, several rows per warp): one shuffle tree from
  ``nr/2``, no shared memory.

The thread with ``tx == 0`` applies the epilogue and writes. Every thread reaches every
shuffle and barrier (out-of-range threads fold nothing), so nothing diverges.
"""
from __future__ import annotations

from llvmlite import ir

from ....indexing import affine as A
from ...analysis.emitter_kind import ReductionVariant
from ...analysis.fusion_analysis import FusionAnalysis, ReductionDimensions, multi_row_vector_size
from ...target import Target
from .emitter import WARP, ReductionEmitter, normalized_linear
from .spec import ReductionKernelSpec, ReductionPath, VectorSizeFn
from .triton_tiling import is_power_of_two, next_power_of_two, triton_tiling


def emit_row_kernel(target: Target, spec: ReductionKernelSpec) -> ir.Module:
    return ReductionEmitter(target, spec).emit_groups(lambda e: _emit_row_group(target, spec, e))


def _emit_row_group(target: Target, spec: ReductionKernelSpec, e: ReductionEmitter) -> None:
    g = spec.geometry
    nr, nk, tile = g["reduce_threads"], g["kept_threads"], g["tile"]
    z, y_n, x_n = spec.rd.dimensions
    kb, b = e.kb, e.b
    t = kb.thread_id(0)
    tx = b.urem(t, kb.index(nr))
    ty = b.udiv(t, kb.index(nr))
    y = b.add(b.mul(kb.block_id(0), kb.index(nk)), ty)
    y_ok = b.and_(b.icmp_unsigned("<", y, kb.index(y_n)), b.icmp_unsigned("<", ty, kb.index(nk)))
    accs = e.new_accumulators()
    with kb.if_(y_ok):
        with kb.loop(0, z, name="z") as iz, e.fe.scope():
            # the tile steps unrolled (at most 16 / v), as XLA's are: every step's loads are
            # independent, so a thread has them all in flight at once
            for step in range(tile):
                with e.fe.scope():
                    _fold_tile_step(kb, spec, e, accs, iz, y, tx, step)
    vals = e.load(accs, 0)
    if nr < WARP:  # multi-row: rows of nr lanes, nr a power of two
        vals = e.warp_reduce(vals, nr // 2)
    else:
        vals = e.warp_reduce(vals, WARP // 2)
        warps = nr // WARP
        if warps > 1:
            stride = warps + (1 if warps % WARP == 0 else 0)
            lane = b.urem(tx, kb.index(WARP))
            warp = b.udiv(tx, kb.index(WARP))
            row_base = b.mul(ty, kb.index(stride))
            valid = b.icmp_unsigned("<", lane, kb.index(warps))
            slot = b.select(valid, lane, kb.index(0))
            partials = vals

            def store(arrays):
                with kb.if_(b.icmp_unsigned("==", lane, kb.index(0))):
                    e.store_shared(arrays, b.add(row_base, warp), partials)

            def load(arrays):
                return [e.load_shared(arrays, b.add(row_base, slot), valid)]

            vals = e.exchange("row_partials", store, load)[0]
            vals = e.warp_reduce(vals, WARP // 2)
    with kb.if_(b.and_(y_ok, b.icmp_unsigned("==", tx, kb.index(0)))):
        e.write_results(vals, normalized_linear(kb, spec.rd, kb.index(0), y, kb.index(0)))


def _fold_tile_step(kb, spec: ReductionKernelSpec, e: ReductionEmitter, accs, iz, y, tx, step: int) -> None:
    """Fold tile step ``step``'s ``v`` elements of row ``y`` into the thread's accumulators."""
    b = kb.b
    it = kb.index(step)
    nr, v = spec.geometry["reduce_threads"], spec.geometry["vector_size"]
    x_n = spec.rd.dimensions[2]
    base = b.mul(b.add(b.mul(it, kb.index(nr)), tx), kb.index(v))
    row = normalized_linear(kb, spec.rd, iz, y, base)
    if x_n % v == 0:
        # a thread's vector is all in range or all out of it: one check (none where every
        # thread's is in range), then every lane's loads before the reducer (one vector load)
        in_range = [] if (step + 1) * nr * v <= x_n else [b.icmp_unsigned("<", base, kb.index(x_n))]
        with kb.if_all(in_range), e.fe.scope():
            e.accumulate_vector(accs, [0] * v, row)
    else:
        for j in range(v):
            x = b.add(base, kb.index(j)) if j else base
            with kb.if_(b.icmp_unsigned("<", x, kb.index(x_n))), e.fe.scope():
                e.accumulate(accs, 0, normalized_linear(kb, spec.rd, iz, y, x))


TRITON_MAX_STEPS = 16      # tile steps a thread unrolls; beyond, the native geometry


def triton_row_geometry(rd: ReductionDimensions, analysis: FusionAnalysis | None) -> dict | None:
    """The launch of XLA's Triton kernel for a row reduction it runs with its block-level
    emitter (``triton_tiling.py``), or None when the fusion has no such config or the row
    kernel cannot take it: ``nk`` = the tile's rows (consecutive normalised rows), ``nr =
    threads / nk`` threads per row (a power of two), vector ``v`` = Triton's perThread over the
    tile's rows x the row padded to a power of two (``ld.global.v4.b32`` where XLA's native rule
    gives 2), ``tile`` = steps of ``nr·v`` elements (at most ``TRITON_MAX_STEPS``)."""
    tiling = triton_tiling(analysis)
    z, y, x = rd.dimensions
    if tiling is None or z != 1:
        return None
    run = tiling.contiguous(y)
    if run is None:
        return None
    rows, padded = run
    if tiling.threads % rows or not is_power_of_two(tiling.threads // rows):
        return None
    nr = tiling.threads // rows
    v = tiling.per_thread(padded * next_power_of_two(x), x)
    steps = -(-(x // v) // nr)
    if steps > TRITON_MAX_STEPS:
        return None
    return {"reduce_threads": nr, "kept_threads": rows, "vector_size": v, "tile": steps,
            "threads": tiling.threads, "blocks": -(-y // rows), "reduced_blocks": 1}


def row_geometry(rd: ReductionDimensions, vector_size_fn: VectorSizeFn,
                 analysis: FusionAnalysis | None = None) -> dict:
    """XLA's row reduction launch: reducing threads, kept-row threads, vector size, tile (of
    its Triton kernel for a ``__triton`` fusion: ``triton_row_geometry``)."""
    triton = triton_row_geometry(rd, analysis)
    if triton is not None:
        return triton
    _, y, x = rd.dimensions
    nr = min(1024, -((-x // 16) // WARP) * WARP)  # ceil(ceil(x / 16) / WARP) warps
    nk = 1
    if 2 * nr <= 256:
        nk = y if y * nr <= 256 else 256 // nr
    v = vector_size_fn(x, nr)
    tile = min(16 // v, -(-(x // v) // nr))
    blocks_x = -(-(x // v) // (tile * nr))
    assert blocks_x == 1, (rd, nr, tile)  # race-free rows fit one block
    return {"reduce_threads": nr, "kept_threads": nk, "vector_size": v, "tile": tile,
            "threads": nr * nk, "blocks": -(-y // nk), "reduced_blocks": blocks_x}


def multi_row_geometry(rd: ReductionDimensions, vector_size_fn: VectorSizeFn,
                       analysis: FusionAnalysis) -> dict:
    """XLA's ``MultiRowReductionFusion``: rows of ``x / v`` lanes, several rows per warp (of
    its Triton kernel for a ``__triton`` fusion whose rows need at most a warp)."""
    triton = triton_row_geometry(rd, analysis)
    if triton is not None and triton["reduce_threads"] <= WARP:
        return triton
    v = multi_row_vector_size(rd, analysis.smallest_input_bits, analysis.smallest_output_bits, analysis.device)
    _, y, x = rd.dimensions
    nr = x // v
    nk = y if y * nr <= 256 else 256 // nr
    # XLA launches exactly nr·nk threads (a partial warp for tiny rows): every row's nr lanes
    # exist, and the shuffles (distances < nr) never read past the row's own lanes for lane 0
    return {"reduce_threads": nr, "kept_threads": nk, "vector_size": v, "tile": 1,
            "threads": nr * nk, "blocks": -(-y // nk), "reduced_blocks": 1}


def row_walks(spec: ReductionKernelSpec):
    """The row kernel's thread -> normalised-position description (as ``emit_row_kernel``):
    ``(input linear L, symbol ranges [z, tile, vector], constraints)`` and ``(output linear L
    with z = x = 0, [], constraints selecting the writing thread)``."""
    g = spec.geometry
    nr, nk, v, tile = g["reduce_threads"], g["kept_threads"], g["vector_size"], g["tile"]
    z, y_n, x_n = spec.rd.dimensions
    th, bl = A.dim(0), A.dim(3)
    tx, ty = A.mod(th, nr), A.floordiv(th, nr)
    y = A.add(A.mul(bl, nk), ty)
    kept = [(ty, 0, nk - 1), (y, 0, y_n - 1)]
    x = A.add(A.mul(A.add(A.mul(A.sym(1), nr), tx), v), A.sym(2))
    linear = A.add(A.mul(A.add(A.mul(A.sym(0), y_n), y), x_n), x)
    inp = (linear, [(0, z - 1), (0, tile - 1), (0, v - 1)], kept + [(x, 0, x_n - 1)])
    out = (A.mul(y, x_n), [], kept + [(tx, 0, 0)])
    return inp, out


def row_shared_elements(rd: ReductionDimensions, geometry: dict) -> int:
    """The partials tile ``[nk][warps (+1)]`` of a row with several warps (none otherwise)."""
    warps = geometry["reduce_threads"] // WARP
    if warps <= 1:
        return 0
    return geometry["kept_threads"] * (warps + (1 if warps % WARP == 0 else 0))


def _one_row_of_blocks(geometry: dict) -> int:
    return geometry["blocks"]


ROW = ReductionPath(ReductionVariant.ROW, row_geometry, _one_row_of_blocks, emit_row_kernel, row_walks,
                    row_shared_elements)
MULTI_ROW = ReductionPath(ReductionVariant.MULTI_ROW, multi_row_geometry, _one_row_of_blocks, emit_row_kernel,
                          row_walks)
