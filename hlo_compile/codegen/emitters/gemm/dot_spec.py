"""The plan of a tiled dot kernel: the canonical view of ``dot_general`` (``DotGeometry``), the
spec, its thread -> data maps for both paths and its report (see ``dot.py``)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from ....hlo import HloInstruction
from ....indexing import affine as A
from ....indexing.indexing_map import IndexingMap
from ...kernel import KernelSpec
from ...model.thread_maps import expr_delinearize, work_item_map
from .dot_config import DotTiling
from .dot_staging import OperandStaging, TileReuse
from .mma_layout import (MMA_M, MMA_N, MMA_SHARED_BYTES, MMA_TYPES, SMEM_STRIDE, TILES_M, TILES_N, WARP_SIZE,
                         WARPS_M, WARPS_N, WM, WN, WarpLayout, acc_position, config_warp_layout, warp_origin)
from .tiles import BK, BM, BN, NUM_THREADS, RM, RN, TX, TY, output_element, staged_element


class DotPath(StrEnum):
    """The two ways a dot kernel is emitted (chosen per target when emitted)."""

    TILED = "tiled"
    MMA = "mma"


@dataclass(frozen=True)
class DotGeometry:
    batch: tuple[int, ...]       # sizes of the batch dims (output order)
    m_dims: tuple[int, ...]      # lhs free dim sizes
    n_dims: tuple[int, ...]      # rhs free dim sizes
    k_dims: tuple[int, ...]      # contracting dim sizes
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contract: tuple[int, ...]
    rhs_contract: tuple[int, ...]
    lhs_free: tuple[int, ...]
    rhs_free: tuple[int, ...]

    @staticmethod
    def of(dot: HloInstruction) -> "DotGeometry":
        dn = dot.dot_dimension_numbers
        lhs, rhs = (o.shape for o in dot.operands)
        lb, rb = tuple(dn.lhs_batch_dimensions), tuple(dn.rhs_batch_dimensions)
        lc, rc = tuple(dn.lhs_contracting_dimensions), tuple(dn.rhs_contracting_dimensions)
        lf = tuple(i for i in range(lhs.rank) if i not in lb + lc)
        rf = tuple(i for i in range(rhs.rank) if i not in rb + rc)
        return DotGeometry(tuple(lhs.dimensions[d] for d in lb), tuple(lhs.dimensions[d] for d in lf),
                           tuple(rhs.dimensions[d] for d in rf), tuple(lhs.dimensions[d] for d in lc),
                           lb, rb, lc, rc, lf, rf)

    @property
    def B(self) -> int:
        return math.prod(self.batch)

    @property
    def M(self) -> int:
        return math.prod(self.m_dims)

    @property
    def N(self) -> int:
        return math.prod(self.n_dims)

    @property
    def K(self) -> int:
        return math.prod(self.k_dims)


@dataclass(frozen=True, kw_only=True)
class DotKernelSpec(KernelSpec):
    dot: HloInstruction
    root: HloInstruction
    geometry: DotGeometry
    acc_type: str
    static_shared_bytes: int
    # the Triton config's tiling (``dot_config.py``); None: the fixed tiling of ``tiles.py``
    tiling: DotTiling | None = None
    # with a config tiling: how the lhs and rhs tiles are staged (``dot_staging.py``)
    staging: tuple[OperandStaging, OperandStaging] | None = None
    # with a config tiling: the size of the dot's last N dim where adjacent columns are adjacent
    # in the root's buffer, else 1 (``dot_config.contiguous_output``: the epilogue's vector stores)
    store_columns: int = 1
    # with a config tiling of one stage: both operand tiles in one buffer, part of the first read
    # into registers before the other is staged over it (``dot_staging.tile_reuse``)
    tile_reuse: TileReuse | None = None
    # dot (excluded) to root: one path of elementwise ops and element moves; None: the root is
    # elementwise over the dot at the dot's own index
    epilogue_chain: tuple[HloInstruction, ...] | None = None
    # which path the last emission took (tiled or mma), for the report and summary.json
    emitted: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def tensor_core_refusal(self) -> str | None:
        """Why this dot cannot take the tensor-core path on any target (None: it can)."""
        types = [o.shape.element_type for o in self.dot.operands]
        if types[0] != types[1] or types[0] not in MMA_TYPES:
            return f"operands {types[0]} x {types[1]} (tensor cores need both f16 or both bf16)"
        if self.acc_type != "f32":
            return f"accumulation in {self.acc_type}, not f32"
        return None

    @property
    def config_warp_layout(self) -> WarpLayout | str | None:
        """The tensor-core warp layout of the config tiling (``mma_layout.config_warp_layout``),
        the reason it has none, or None without a config tiling."""
        t = self.tiling
        return None if t is None else config_warp_layout(t.bm, t.bn, t.bk, t.num_warps)

    @property
    def config_mma_refusal(self) -> str | None:
        """Why the config tiling cannot take the tensor-core path (None: it can, on a target
        with tensor cores); only with a config tiling."""
        why = self.tensor_core_refusal
        if why is not None:
            return why
        lay = self.config_warp_layout
        return lay if isinstance(lay, str) else None

    @property
    def epilogue_moves(self) -> bool:
        """Whether the root reads the dot through a transpose, bitcast or reshape."""
        return bool(self.epilogue_chain) and any(i.opcode in ("transpose", "bitcast", "reshape")
                                                 for i in self.epilogue_chain)

    @property
    def path(self) -> DotPath:
        """What the last emission produced (tiled before any)."""
        return self.emitted.get("path", DotPath.TILED)

    # ---- thread -> data maps ----------------------------------------------------------------
    def thread_to_output_map(self, leaf: int | None = None) -> IndexingMap:
        """``(th_x, ..., bl_z)[i, j] -> output index`` of the tiled path: output ``(m0 + ty +
        16 i, n0 + tx + 16 j)`` of the block's tile (``mma_thread_to_output_map``: the
        tensor-core path's). With a config tiling: thread ``tid`` (1-D) at ``(tid % tx, tid //
        tx)`` (``(tid // ty, tid % ty)`` where ``m_fastest``) of block ``(batch, M tile, N
        tile)``, register ``(i, j)`` at row ``vm ty_id + ty vm (i // vm) + i % vm``, column ``vn
        tx_id + tx vn (j // vn) + j % vn`` (``DotTiling.row``/``column``)."""
        t = self.tiling
        if t is None:
            return self._output_map(*output_element())
        pid, tm, tn = self._config_block()
        if t.m_fastest:
            tx_id, ty_id = A.floordiv(A.dim(0), t.ty), A.mod(A.dim(0), t.ty)
        else:
            tx_id, ty_id = A.mod(A.dim(0), t.tx), A.floordiv(A.dim(0), t.tx)
        row = A.add(A.mul(ty_id, t.vm), A.add(A.mul(A.floordiv(A.sym(0), t.vm), t.ty * t.vm), A.mod(A.sym(0), t.vm)))
        col = A.add(A.mul(tx_id, t.vn), A.add(A.mul(A.floordiv(A.sym(1), t.vn), t.tx * t.vn), A.mod(A.sym(1), t.vn)))
        m = A.add(A.mul(tm, t.bm), row)
        n = A.add(A.mul(tn, t.bn), col)
        return self._output_map(m, n, [(0, t.rm - 1), (0, t.rn - 1)], batch=pid,
                                extra=[(row, 0, t.bm - 1), (col, 0, t.bn - 1)])

    def _config_block(self) -> tuple[A.Expr, A.Expr, A.Expr]:
        """(batch, M tile, N tile) of the block, as affine expressions of the work-item dims."""
        t, g = self.tiling, self.geometry
        tm, tn = t.tiles(g.M, g.N)
        grid = self.launch.grid
        pid = A.dim(3)
        if grid[1] == 1 and grid[2] == 1:
            return A.floordiv(pid, tm * tn), A.mod(A.floordiv(pid, tn), tm), A.mod(pid, tn)
        batch = A.dim(5) if grid[1] == 1 else A.add(A.mul(A.dim(5), grid[1]), A.dim(4))
        return batch, A.floordiv(pid, tn), A.mod(pid, tn)

    def mma_thread_to_output_map(self) -> IndexingMap:
        """``(th_x, ..., bl_z)[tm, tn, r] -> output index`` of the tensor-core path: accumulator
        ``r`` of the warp's mma tile ``(tm, tn)`` (``mma_layout``'s maps, on affine values)."""
        tid = _Affine(A.add(A.dim(0), A.mul(A.dim(1), TX)))
        lane, warp = tid % WARP_SIZE, tid // WARP_SIZE
        wm0, wn0 = warp_origin(warp)
        dm, dn = acc_position(lane, _Affine(A.sym(2)))
        m = _Affine(A.mul(A.dim(4), BM)) + wm0 + _Affine(A.sym(0)) * MMA_M + dm
        n = _Affine(A.mul(A.dim(3), BN)) + wn0 + _Affine(A.sym(1)) * MMA_N + dn
        return self._output_map(m.e, n.e, [(0, TILES_M - 1), (0, TILES_N - 1), (0, 3)])

    def _output_map(self, m: A.Expr, n: A.Expr, ranges: list[tuple[int, int]], batch: A.Expr | None = None,
                    extra: list | None = None) -> IndexingMap:
        g = self.geometry
        index = [*expr_delinearize(A.dim(5) if batch is None else batch, g.batch), *expr_delinearize(m, g.m_dims),
                 *expr_delinearize(n, g.n_dims)]
        return work_item_map(index, self.launch, ranges, [(m, 0, g.M - 1), (n, 0, g.N - 1), *(extra or [])])

    def thread_to_input_map(self, hero: int = 0, operand: int | None = None) -> IndexingMap:
        """``(th_x, ..., bl_z)[k step, s] -> index`` of the dot's lhs (operand 0, default) or
        rhs that the thread stages into shared memory: element ``tid + 256 s`` of the block's
        BM x BK lhs tile (k fastest) or BK x BN rhs tile (n fastest), both paths. With a
        config tiling ``[k step, s, lane]``: lane ``lane`` of the thread's chunk ``tid +
        threads s`` of ``vec`` elements along the operand's contiguous dim
        (``dot_staging.OperandStaging``). Each element is staged by every block of the other
        operand's tiles (grid x or y): not a bijection."""
        g, lhs = self.geometry, operand in (None, 0)
        batch: A.Expr = A.dim(5)
        extra: list = []
        if self.tiling is None:
            free, k, ranges = staged_element(lhs, g.K)
        else:
            t, st = self.tiling, self.staging[0 if lhs else 1]
            batch, tm, tn = self._config_block()
            fast = st.chunks[0]
            lin = A.add(A.dim(0), A.mul(A.sym(1), t.threads))
            f0 = A.mul(A.mod(lin, fast), st.vec)
            slow = A.floordiv(lin, fast)
            ff, kk = (slow, A.add(f0, A.sym(2))) if st.along_k else (A.add(f0, A.sym(2)), slow)
            free = A.add(A.mul(tm if lhs else tn, st.tile), ff)
            k = A.add(A.mul(A.sym(0), t.bk), kk)
            ranges = [(0, -(-g.K // t.bk) - 1), (0, -(-st.count // t.threads) - 1), (0, st.vec - 1)]
            extra = [(lin, 0, st.count - 1)]
        shape = self.dot.operands[0 if lhs else 1].shape
        index: list = [None] * shape.rank
        for dims, values in ((g.lhs_batch if lhs else g.rhs_batch, expr_delinearize(batch, g.batch)),
                             (g.lhs_contract if lhs else g.rhs_contract, expr_delinearize(k, g.k_dims)),
                             (g.lhs_free if lhs else g.rhs_free,
                              expr_delinearize(free, g.m_dims if lhs else g.n_dims))):
            for dim, v in zip(dims, values):
                index[dim] = v
        return work_item_map(index, self.launch, ranges,
                             [(free, 0, (g.M if lhs else g.N) - 1), (k, 0, g.K - 1), *extra])

    # ---- report ------------------------------------------------------------------------------
    def report_lines(self) -> list[str]:
        g = self.geometry
        if self.tiling is not None:
            t = self.tiling
            return [f"dot %{self.dot.name}: B={g.B} M={g.M} N={g.N} K={g.K}, accumulation {self.acc_type}, "
                    f"epilogue root %{self.root.name}",
                    f"{t.text()}: tile {t.bm}x{t.bn}x{t.bk}, {t.threads} threads (1-D, as {t.tx}x{t.ty}, "
                    f"{t.rm}x{t.rn} outputs per thread, {self._store_text()}), {self.path} path (XLA's Triton launch)",
                    self._config_mma_line(),
                    self._staging_line(),
                    f"index type {self.index_type}",
                    *self.partitioned.to_text().splitlines()]
        shared = (self._mma_shared_line() if self.path == DotPath.MMA else
                  f"shared tiles {BK}x{BM} + {BK}x{BN}: {self.static_shared_bytes} B static, "
                  f"index type {self.index_type}")
        return [f"dot %{self.dot.name}: B={g.B} M={g.M} N={g.N} K={g.K}, accumulation {self.acc_type}, "
                f"epilogue root %{self.root.name}",
                f"tile {BM}x{BN}x{BK} ({NUM_THREADS} threads as {TX}x{TY}, {RM}x{RN} outputs per thread), "
                + (f"{self.path} path" if "path" in self.emitted or self.tensor_core_refusal
                   else "tiled path, or mma if the target enables tensor cores (chosen when emitted)"),
                self._mma_report_line(),
                shared,
                *self.partitioned.to_text().splitlines()]

    def summary_fields(self) -> dict:
        shared = MMA_SHARED_BYTES if self.path == DotPath.MMA else self.static_shared_bytes
        if self.tiling is not None:
            t = self.tiling
            sa, sb = self.staging or (None, None)
            return {"tile": [t.bm, t.bn, t.bk], "threads_per_block": t.threads, "register_tile": [t.rm, t.rn],
                    "accumulation_type": self.acc_type, "path": self.path, "config": t.text(),
                    "tensor_cores": self.config_mma_refusal or "eligible",
                    "num_stages": t.num_stages, "dynamic_shared_bytes": self.launch.shared_bytes,
                    "load_vector": [sa.vec if sa else 1, sb.vec if sb else 1],
                    "store_vector": (max(t.vn, t.vm) if self.path != DotPath.MMA
                                     else (2 if self.store_columns % 2 == 0 else 1)),
                    "tile_reuse": (None if self.tile_reuse is None else
                                   {"first": self.tile_reuse.first, "from_k": self.tile_reuse.from_k,
                                    "register_values": self.tile_reuse.register_values}),
                    "static_shared_bytes": self.static_shared_bytes, "index_type": str(self.index_type)}
        return {"tile": [BM, BN, BK], "threads_per_block": NUM_THREADS, "register_tile": [RM, RN],
                "accumulation_type": self.acc_type, "path": self.path,
                "tensor_cores": self.tensor_core_refusal or "eligible",
                "static_shared_bytes": shared, "index_type": str(self.index_type)}

    def _store_text(self) -> str:
        t = self.tiling
        if self.path == DotPath.MMA:
            return "stores of 2 adjacent columns" if self.store_columns % 2 == 0 else "scalar stores"
        if t.vm > 1:
            return f"stores of {t.vm} adjacent rows"
        return f"stores of {t.vn} adjacent columns" if t.vn > 1 else "scalar stores"

    def _staging_line(self) -> str:
        t = self.tiling
        parts = []
        for s in self.staging or ():
            dim = "k" if s.along_k else ("m" if s.lhs else "n")
            parts.append(f"{'lhs' if s.lhs else 'rhs'} {t.bk}x{s.tile} {s.element_type} "
                         f"({s.vec}-element loads along {dim})")
        r = self.tile_reuse
        if r is not None:
            return (f"shared tiles {' + '.join(parts)} in one buffer ({r.first} first, its k >= {r.from_k} rows "
                    f"read into registers ({r.register_values} per thread) before the other lands at byte "
                    f"{r.second_offset}): {self.launch.shared_bytes} B dynamic")
        return (f"shared tiles {' + '.join(parts)} x {t.num_stages} stage(s): {self.launch.shared_bytes} B "
                f"dynamic")

    def _config_mma_line(self) -> str:
        why = self.config_mma_refusal
        if why is not None:
            return f"tensor cores: not used, FMA path ({why})"
        et = self.dot.operands[0].shape.element_type
        lay = self.config_warp_layout
        assert isinstance(lay, WarpLayout)
        return (f"tensor cores: mma.sync m16n8k16 {et} -> f32, {lay.text()}, fragments by ld.shared from the "
                f"staged tiles; on sm_80+ with dot_tensor_cores (the host emulates the warp MMA)")

    def _mma_shared_line(self) -> str:
        et = self.dot.operands[0].shape.element_type
        return (f"shared tiles {BM}x{SMEM_STRIDE} + {BN}x{SMEM_STRIDE} {et} (K-contiguous, rows padded to "
                f"{SMEM_STRIDE}): {MMA_SHARED_BYTES} B static, index type {self.index_type}")

    def _mma_report_line(self) -> str:
        why = self.tensor_core_refusal
        if why is not None:
            return f"tensor cores: not eligible ({why})"
        et = self.dot.operands[0].shape.element_type
        return (f"tensor cores: eligible (mma.sync m16n8k16 {et} -> f32, {WARPS_M}x{WARPS_N} warps of "
                f"{WM}x{WN}) on sm_80+ with dot_tensor_cores")


class _Affine:
    """An affine expression with Python arithmetic, so ``mma_layout``'s maps (written for ints
    and IR values) evaluate to the thread -> output map."""

    def __init__(self, e: A.ExprLike):
        self.e = A.as_expr(e)

    @staticmethod
    def _of(x) -> A.Expr:
        return x.e if isinstance(x, _Affine) else A.as_expr(x)

    def __add__(self, o):
        return _Affine(A.add(self.e, self._of(o)))

    __radd__ = __add__

    def __mul__(self, k: int):
        return _Affine(A.mul(self.e, k))

    __rmul__ = __mul__

    def __floordiv__(self, k: int):
        return _Affine(A.floordiv(self.e, k))

    def __mod__(self, k: int):
        return _Affine(A.mod(self.e, k))
