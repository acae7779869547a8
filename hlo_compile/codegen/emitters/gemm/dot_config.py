"""The tiling of a dot kernel taken from XLA's Triton GEMM config (``DotTiling``).

XLA's Triton GEMM fusions carry their tiling in the fusion's backend config:

- ``__triton_nested_gemm_fusion`` (the generic Triton emitter): ``block_level_fusion_config``
  with ``output_tiles[0].sizes`` (a tile of the fusion's root, one size per root dim),
  ``num_warps`` and ``num_stages``; the dot's own backend config ``sizes`` is ``[block_k]``.
  XLA launches one block of ``num_warps * 32`` threads per root tile: a 1-D grid of
  ``prod(ceil(dim / tile))`` blocks (XLA's thunk_sequence.txt confirms it on every GEMM
  fusion of the corpus). Split-K is already in the module (an extra output dim and a reduce
  fusion), so the fusion computes its own output only.
- ``__triton_gemm`` (the legacy matmul emitter): ``triton_gemm_config`` with ``block_m``,
  ``block_n``, ``block_k``, ``split_k``, ``num_stages``, ``num_warps``; XLA's launch is
  ``(ceil(M / block_m) * ceil(N / block_n), split_k, batch)`` blocks of ``num_warps * 32``.

The root tile is mapped back to the dot's output dims through the epilogue (elementwise ops,
transposes, bitcasts that only permute dims); a config whose tile we cannot place on one M
and one N dim (tiles over several M dims, a batch tile above 1, a bitcast that reshapes) is
not used and the default tiling of ``tiles.py`` runs instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ....hlo import HloInstruction
from ....hlo.backend_config import backend_config, fusion_backend_config
from ....hlo.errors import HloUnsupportedError
from ...kernel_builder import KernelBuilder
from ...target import LaunchDims

WARP = 32
MAX_THREADS = 1024


@dataclass(frozen=True)
class DotTiling:
    """One block computes a ``bm x bn`` output tile of one batch element, K in steps of
    ``bk``, with ``num_warps * 32`` threads laid out ``tx x ty`` (1-D block, thread ``tid``
    at ``(tid % tx, tid // tx)``), each accumulating ``rm x rn`` outputs (rows ``ty_id + ty
    i``, columns ``tx_id + tx j``); operands staged in dynamic shared memory (``bk x bm`` and
    ``bk x bn`` tiles in the operands' types, ``num_stages`` of them: ``dot_staging.py``).
    ``split_k`` (``__triton_gemm`` only) is launch only: XLA's split-K rewriter has already made
    K's split a batch dim of the dot and reduces the partial sums in a fusion of its own, so the
    kernel computes the dot as written on XLA's grid ``(tiles, split_k, batch / split_k)``."""

    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int = 1
    split_k: int = 1
    source: str = ""        # the config kind it came from
    # adjacent output columns (``vn``) or rows (``vm``) per thread, the FMA path's vector stores
    # (at most one of them above 1; it divides ``bn`` or ``bm``)
    vn: int = 1
    vm: int = 1
    # elements of the config's output tile before a tile past a small dim is clamped to it (0:
    # bm x bn): the share per thread of XLA's store layout (``store_vector``)
    config_elements: int = 0

    @property
    def threads(self) -> int:
        return self.num_warps * WARP

    @property
    def store_share(self) -> int:
        """Outputs per thread of the config's tile (XLA's kernel's store layout)."""
        return max(1, (self.config_elements or self.bm * self.bn) // self.threads)

    @property
    def groups(self) -> int:
        """Column groups of ``vn`` adjacent columns in the block tile."""
        return self.bn // self.vn

    @property
    def row_groups(self) -> int:
        """Row groups of ``vm`` adjacent rows in the block tile."""
        return self.bm // self.vm

    @property
    def tx(self) -> int:
        """Threads along N (each over column groups), ``ty`` along M (over row groups)."""
        want = math.sqrt(self.threads * self.groups / self.row_groups)
        return max(1, min(self.groups, self.threads, 1 << max(0, math.ceil(math.log2(want)))))

    @property
    def ty(self) -> int:
        return self.threads // self.tx

    @property
    def rm(self) -> int:
        return self.vm * -(-self.row_groups // self.ty)

    @property
    def rn(self) -> int:
        return self.vn * -(-self.groups // self.tx)

    @property
    def m_fastest(self) -> bool:
        """Whether consecutive threads take consecutive row groups (the output's contiguous dim
        is M: ``vm`` > 1), else consecutive column groups."""
        return self.vm > 1

    def thread_xy(self, tid: int) -> tuple[int, int]:
        """(tx_id, ty_id) of thread ``tid`` (the int model of the emitter's)."""
        return (tid // self.ty, tid % self.ty) if self.m_fastest else (tid % self.tx, tid // self.tx)

    def column(self, tx_id, j: int):
        """Block-tile column of register column ``j`` of the thread at ``tx_id`` (an int):
        group ``j // vn`` of the thread's groups ``tx_id + tx g``, lane ``j % vn`` in it;
        ``vn = 1``: ``tx_id + tx j``."""
        return tx_id * self.vn + ((j // self.vn) * self.tx * self.vn + j % self.vn)

    def row(self, ty_id, i: int):
        """Block-tile row of register row ``i`` of the thread at ``ty_id``, as ``column``."""
        return ty_id * self.vm + ((i // self.vm) * self.ty * self.vm + i % self.vm)

    def column_guarded(self, j: int) -> bool:
        """Whether register column ``j`` may lie past the block tile (more groups than tx x
        groups per thread cover exactly)."""
        return (j // self.vn + 1) * self.tx > self.groups

    def row_guarded(self, i: int) -> bool:
        return (i // self.vm + 1) * self.ty > self.row_groups

    def tiles(self, m: int, n: int) -> tuple[int, int]:
        return -(-m // self.bm), -(-n // self.bn)

    def launch(self, b: int, m: int, n: int, shared_bytes: int = 0) -> LaunchDims:
        """XLA's launch (``shared_bytes``: the dynamic shared memory of the tiles)."""
        tm, tn = self.tiles(m, n)
        if self.source == "__triton_gemm" and self.split_k > 1 and b % self.split_k == 0:
            return LaunchDims((tm * tn, self.split_k, b // self.split_k), (self.threads, 1, 1), shared_bytes)
        if self.source == "__triton_gemm":
            return LaunchDims((tm * tn, 1, b), (self.threads, 1, 1), shared_bytes)
        return LaunchDims((b * tm * tn, 1, 1), (self.threads, 1, 1), shared_bytes)

    def text(self) -> str:
        return (f"{self.source} config: block_m={self.bm} block_n={self.bn} block_k={self.bk} "
                f"num_warps={self.num_warps} num_stages={self.num_stages} split_k={self.split_k}")


def dot_tiling(fusion: HloInstruction, dot: HloInstruction, chain: list[HloInstruction] | None,
               m_dims: tuple[int, ...], n_dims: tuple[int, ...], n_batch: int) -> DotTiling | None:
    """The tiling of the fusion's Triton GEMM config, or None (no config, or one we cannot
    place: see the module doc)."""
    cfg = fusion_backend_config(fusion) or {}
    kind = str(cfg.get("kind", ""))
    legacy = cfg.get("triton_gemm_config")
    if kind == "__triton_gemm" and isinstance(legacy, dict):
        try:
            t = DotTiling(int(legacy["block_m"]), int(legacy["block_n"]), int(legacy["block_k"]),
                          int(legacy.get("num_warps", 4)), int(legacy.get("num_stages", 1)),
                          int(legacy.get("split_k", 1)), kind)
        except (KeyError, TypeError, ValueError):
            return None
        return t if _valid(t) else None
    block = cfg.get("block_level_fusion_config")
    if kind != "__triton_nested_gemm_fusion" or not isinstance(block, dict) or chain is None:
        return None
    try:
        sizes = [int(v) for v in block["output_tiles"][0]["sizes"]]
        warps, stages = int(block.get("num_warps", 4)), int(block.get("num_stages", 1))
        bk = _dot_block_k(dot)
    except (KeyError, IndexError, TypeError, ValueError, HloUnsupportedError):
        return None
    root = chain[-1] if chain else dot
    if bk is None or len(sizes) != root.shape.rank:
        return None
    to_dot = _root_to_dot_dims(dot, chain)
    if to_dot is None:
        return None
    dot_tile = [1] * dot.shape.rank
    config_tile = [1] * dot.shape.rank      # before clamping: the tile XLA's kernel lays out
    for rd, dd in enumerate(to_dot):
        if dd is None:
            if sizes[rd] != 1 and root.shape.dimensions[rd] != 1:
                return None
        else:
            # a tile past the dim: the dim's next power of two (same tile count, fewer idle threads)
            dot_tile[dd] = max(1, min(sizes[rd], 1 << max(0, dot.shape.dimensions[dd] - 1).bit_length()))
            config_tile[dd] = max(1, sizes[rd])
    dims = dot.shape.dimensions
    if any(dot_tile[d] != 1 for d in range(n_batch)):
        return None
    bm = _flat_tile(dot_tile, dims, range(n_batch, n_batch + len(m_dims)))
    bn = _flat_tile(dot_tile, dims, range(n_batch + len(m_dims), dot.shape.rank))
    if bm is None or bn is None:
        return None
    cm = _flat_tile(config_tile, dims, range(n_batch, n_batch + len(m_dims))) or bm
    cn = _flat_tile(config_tile, dims, range(n_batch + len(m_dims), dot.shape.rank)) or bn
    t = DotTiling(bm, bn, bk, warps, stages, 1, kind, config_elements=cm * cn)
    return t if _valid(t) else None


def _valid(t: DotTiling) -> bool:
    return (min(t.bm, t.bn, t.bk, t.num_warps, t.vn, t.vm) >= 1 and t.threads <= MAX_THREADS
            and t.threads % t.tx == 0 and t.bn % t.vn == 0 and t.bm % t.vm == 0 and min(t.vn, t.vm) == 1
            and t.bm * t.bn * t.bk <= 1 << 20)


def _flat_tile(tile: list[int], dims, ds) -> int | None:
    """The tile over the flattened dims ``ds``: the innermost one's, where every outer tile is
    1 (a tile of the flattened range then never straddles an outer index as the innermost
    tile divides its dim, or the innermost dim is the only one)."""
    ds = list(ds)
    if not ds:
        return 1
    if any(tile[d] != 1 for d in ds[:-1]):
        return None
    inner = ds[-1]
    if len([d for d in ds if dims[d] != 1]) > 1 and dims[inner] % tile[inner]:
        return None
    return tile[inner]


def _dot_block_k(dot: HloInstruction) -> int | None:
    cfg = backend_config(dot) if isinstance(dot.attr("backend_config", None), str) else {}
    sizes = cfg.get("sizes") if isinstance(cfg, dict) else None
    return int(sizes[0]) if isinstance(sizes, list) and sizes else None


def _root_to_dot_dims(dot: HloInstruction, chain: list[HloInstruction]) -> list[int | None] | None:
    """For each dim of the root, the dot output dim it is (None: a size-1 dim of neither),
    through transposes and bitcasts/reshapes that keep the non-1 dims in physical order."""
    cur: list[int | None] = list(range(dot.shape.rank))
    prev = dot
    for y in chain:
        if y.opcode == "transpose":
            cur = [cur[p] for p in y.dimensions]
        elif y.opcode in ("bitcast", "reshape"):
            order_in = _major_to_minor(prev.shape) if y.opcode == "bitcast" else list(range(prev.shape.rank))
            order_out = _major_to_minor(y.shape) if y.opcode == "bitcast" else list(range(y.shape.rank))
            src = [d for d in order_in if prev.shape.dimensions[d] != 1]
            dst = [d for d in order_out if y.shape.dimensions[d] != 1]
            if [prev.shape.dimensions[d] for d in src] != [y.shape.dimensions[d] for d in dst]:
                return None
            new: list[int | None] = [None] * y.shape.rank
            for s, d in zip(src, dst):
                new[d] = cur[s]
            cur = new
        prev = y
    return cur


def _major_to_minor(shape) -> list[int]:
    return list(reversed(shape.minor_to_major))


def epilogue_index(kb: KernelBuilder, chain: list[HloInstruction], dot: HloInstruction,
                   index: list[ir.Value]) -> list[ir.Value]:
    """The root's index of the element the dot computes at ``index``, through ``chain``."""
    prev = dot
    for y in chain:
        if y.opcode == "transpose":
            index = [index[p] for p in y.dimensions]
        elif y.opcode == "bitcast":
            lin = kb.linearize(index, prev.shape.dimensions, prev.shape.minor_to_major)
            index = kb.delinearize(lin, y.shape.dimensions, y.shape.minor_to_major)
        elif y.opcode == "reshape":
            lin = kb.linearize(index, prev.shape.dimensions)
            index = kb.delinearize(lin, y.shape.dimensions)
        prev = y
    return index


MAX_STORE_BYTES = 16    # st.global.v4.b32 / v2.b64: the widest single store


def contiguous_output(dot: HloInstruction, root: HloInstruction, chain: list[HloInstruction] | None,
                      n_batch: int, n_m: int) -> tuple[str, int]:
    """``("n", size)`` where adjacent columns of the dot's last N dim are adjacent elements of
    the root's buffer, ``("m", size)`` where adjacent rows of its last M dim are, else ``("",
    1)``: the root's physically minor dim (size-1 dims aside, untiled layout) is that very dim
    (through the epilogue's transposes and bitcasts, ``_root_to_dot_dims``). A vector of ``v``
    adjacent ones starting at a multiple of ``v`` (``v`` dividing ``size``) then lies in one row
    of that dim at an element offset that is a multiple of ``v``: every other dim's stride is a
    multiple of ``size``."""
    shape = root.shape
    if not shape.is_array or shape.layout is None or shape.layout.tiles or shape.element_type == "pred":
        return "", 1
    to_dot = _root_to_dot_dims(dot, chain or [])
    if to_dot is None:
        return "", 1
    minor = next((d for d in shape.minor_to_major if shape.dimensions[d] != 1), None)
    if minor is None or to_dot[minor] is None:
        return "", 1
    rank, d = dot.shape.rank, to_dot[minor]
    if d == rank - 1 and rank > n_batch + n_m:
        return "n", dot.shape.dimensions[d]
    if d == n_batch + n_m - 1 and n_m:
        return "m", dot.shape.dimensions[d]
    return "", 1


def store_vector(columns: int, bn: int, share: int, element_bytes: int) -> int:
    """Adjacent output columns per thread for the FMA path's vector stores: a power of two of
    at most 16 bytes, at most the thread's ``share`` of the config's tile
    (``DotTiling.store_share``, as a Triton store layout's size per thread), dividing ``bn`` and
    ``columns`` (the contiguous row, ``contiguous_output``: a vector then never straddles a
    row or the ragged N edge). Rows alike, with ``bm`` for ``bn``."""
    v = 1
    limit = min(MAX_STORE_BYTES // max(1, element_bytes), bn, share)
    while 2 * v <= limit and bn % (2 * v) == 0 and columns % (2 * v) == 0:
        v *= 2
    return v
