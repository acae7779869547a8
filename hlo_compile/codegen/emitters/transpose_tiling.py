"""The tile of the transpose emitter and the index arithmetic between normalised and real shapes.

``TransposeTiling`` is XLA's tiling of the normalised transpose (notes/xla.md §b.4): 32·v on
the two swapped dims (v: the vector size, > 1 only for narrow types whose minor dim moves),
128 threads (32 × 4 rows), the shared tile padded by one element on the operand-minor tiled
dim. Each thread handles v consecutive elements of the tile's minor dim per loop turn. The
helpers (de)linearise indices in the kernel's index type.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir

from ..kernel_builder import KernelBuilder

TILE = 32
NUM_ROWS = 4
NUM_THREADS = TILE * NUM_ROWS  # 128
MAX_BLOCKS = 2**31 - 1


@dataclass(frozen=True)
class TransposeTiling:
    """Tile of the normalised operand ``dims``; output dim i is operand dim ``perm[i]``."""

    dims: tuple[int, ...]       # normalised operand dims
    perm: tuple[int, ...]
    tile: tuple[int, ...]       # tile extent per operand dim
    pad_dim: int                # operand dim padded by one element in shared memory
    vector: int = 1             # consecutive elements per thread and loop turn (minor dim moves)

    @staticmethod
    def for_transpose(dims: Sequence[int], perm: Sequence[int], vector: int = 1) -> "TransposeTiling":
        n = len(dims)
        tile = [1] * n
        if perm[-1] != n - 1:                      # minor dim moves: 021, 210, ...
            swapped = (n - 1, perm[-1])
        else:                                       # minor dim kept: 102; whole minor dim in the tile
            swapped = (n - 2, perm[-2])
            tile[n - 1] = dims[n - 1]
        if perm[-1] == n - 1:
            vector = 1                              # XLA: vector size = the kept minor dim
        for d in swapped:
            tile[d] = min(TILE * vector, dims[d])
        return TransposeTiling(tuple(dims), tuple(perm), tuple(tile), swapped[0], vector)

    @property
    def per_turn(self) -> int:
        """Tile elements the block covers per loop turn (128·v)."""
        return NUM_THREADS * self.vector

    @property
    def out_dims(self) -> tuple[int, ...]:
        return tuple(self.dims[p] for p in self.perm)

    @property
    def out_tile(self) -> tuple[int, ...]:
        return tuple(self.tile[p] for p in self.perm)

    @property
    def block_counts(self) -> tuple[int, ...]:
        return tuple(-(-d // t) for d, t in zip(self.dims, self.tile))

    @property
    def num_blocks(self) -> int:
        return math.prod(self.block_counts)

    @property
    def tile_elements(self) -> int:
        return math.prod(self.tile)

    @property
    def iterations(self) -> int:
        """Loop turns of each thread per phase (8·v for a full 32v × 32v tile)."""
        return -(-self.tile_elements // self.per_turn)

    @property
    def shmem_shape(self) -> tuple[int, ...]:
        return tuple(t + (1 if d == self.pad_dim else 0) for d, t in enumerate(self.tile))

    @property
    def shmem_elements(self) -> int:
        return math.prod(self.shmem_shape)

    @property
    def shmem_strides(self) -> tuple[int, ...]:
        out, s = [], 1
        for n in reversed(self.shmem_shape):
            out.append(s)
            s *= n
        return tuple(reversed(out))


# ---- index arithmetic ------------------------------------------------------------------------

def delinearize(kb: KernelBuilder, linear: ir.Value, dims: Sequence[int]) -> list[ir.Value]:
    """Row-major coordinates of ``linear`` in ``dims`` (size-1 dims are constant 0)."""
    return delinearize_order(kb, linear, dims, range(len(dims) - 1, -1, -1))


def delinearize_order(kb: KernelBuilder, linear: ir.Value, dims: Sequence[int],
                      minor_to_major: Sequence[int]) -> list[ir.Value]:
    b = kb.b
    out: list[ir.Value] = [kb.index(0)] * len(dims)
    order = [d for d in minor_to_major if dims[d] != 1]
    for k, d in enumerate(order):
        out[d] = linear if k == len(order) - 1 else b.urem(linear, kb.index(dims[d]))
        if k < len(order) - 1:
            linear = b.udiv(linear, kb.index(dims[d]))
    return out


NO_WRAP = ("nuw", "nsw")   # index arithmetic of in-range, non-negative indices


def linearize(kb: KernelBuilder, index: Sequence[ir.Value], dims: Sequence[int]) -> ir.Value:
    """Row-major offset of ``index`` in ``dims`` (``nuw nsw``: the index type holds every offset
    of the kernel, and consecutive elements get provably consecutive offsets: vector loads)."""
    b = kb.b
    out, stride = None, 1
    for v, n in reversed(list(zip(index, dims))):
        if n != 1:
            term = v if stride == 1 else b.mul(v, kb.index(stride), flags=NO_WRAP)
            out = term if out is None else b.add(out, term, flags=NO_WRAP)
        stride *= n
    return out if out is not None else kb.index(0)


def reshape_index(kb: KernelBuilder, index: Sequence[ir.Value], src: Sequence[int],
                  dst: Sequence[int]) -> list[ir.Value]:
    """The row-major index in ``dst`` of the element at ``index`` in ``src`` (same count)."""
    if tuple(src) == tuple(dst):
        return list(index)
    if [n for n in src if n != 1] == [n for n in dst if n != 1]:   # only unit dims differ
        it = iter(v for v, n in zip(index, src) if n != 1)
        return [kb.index(0) if n == 1 else next(it) for n in dst]
    return delinearize(kb, linearize(kb, index, src), dst)


class Guarded:
    """``kb.if_(all of conds)``, or nothing when there is no condition."""

    def __init__(self, kb: KernelBuilder, conds: list[ir.Value]):
        self.kb, self.conds, self.ctx = kb, conds, None

    def __enter__(self):
        if self.conds:
            self.ctx = self.kb.if_(self.kb.all_of(self.conds))
            self.ctx.__enter__()

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc) if self.ctx is not None else False




# ---- the same arithmetic as affine expressions (thread -> data indexing maps) ----------------

def expr_delinearize(linear, dims: Sequence[int], minor_to_major: Sequence[int] | None = None) -> list:
    """``delinearize_order`` as affine expressions (row-major when ``minor_to_major`` is None)."""
    from ...indexing import affine as A
    order = list(minor_to_major) if minor_to_major is not None else list(range(len(dims) - 1, -1, -1))
    out: list = [A.const(0)] * len(dims)
    stride, total = 1, math.prod(dims)
    for d in order:
        n = dims[d]
        if n != 1:
            q = A.floordiv(linear, stride) if stride != 1 else A.as_expr(linear)
            out[d] = q if stride * n == total else A.mod(q, n)
        stride *= n
    return out


def expr_linearize(index: Sequence, dims: Sequence[int], minor_to_major: Sequence[int] | None = None):
    from ...indexing import affine as A
    order = list(minor_to_major) if minor_to_major is not None else list(range(len(dims) - 1, -1, -1))
    out, stride = A.const(0), 1
    for d in order:
        if dims[d] != 1:
            out = A.add(out, A.mul(index[d], stride))
        stride *= dims[d]
    return out


def thread_map(exprs: Sequence, launch, ranges: Sequence[tuple[int, int]], constraints: Sequence[tuple]):
    """An IndexingMap over ``(th_x, th_y, th_z, bl_x, bl_y, bl_z)`` of ``launch``, simplified;
    constraints are ``(expr, lo, hi)``."""
    from dataclasses import replace
    from ...indexing.indexing_map import IndexingMap
    from ...indexing.simplifier import simplify
    from ..launch import WORK_ITEM_DIM_NAMES
    dims = [(0, n - 1) for n in launch.block] + [(0, n - 1) for n in launch.grid]
    m = IndexingMap.make(exprs, dims, ranges, (), [(e, (lo, hi)) for e, lo, hi in constraints])
    return replace(simplify(replace(m, dim_names=WORK_ITEM_DIM_NAMES)), dim_names=WORK_ITEM_DIM_NAMES)


# ---- vector accesses -------------------------------------------------------------------------

def _unit_stride(shape, dim: int) -> bool:
    """Whether consecutive indices along ``dim`` are consecutive in memory."""
    if shape.layout is not None and shape.layout.tiles:
        return False
    for d in shape.minor_to_major:
        if d == dim:
            return True
        if shape.dimensions[d] != 1:
            return False
    return False


class VectorLoads:
    """Parameter loads of a thread's v consecutive elements addressed from one base pointer.

    The emitters register the v indices of a vector (``register``); a fusion parameter read at
    one of them (through elementwise prologue ops, which pass the index on unchanged) whose
    layout makes that index's differing dim unit-stride is loaded at ``gep(base, e)``, the
    base being element 0's address. LLVM's load/store vectorizer then sees v loads at constant
    distances from one pointer and merges them (``ld.global.nc.v2.b16``); offsets computed
    separately per element get reassociated and are not always recognised. Other reads take
    the usual path."""

    def __init__(self, fe):
        self.fe = fe
        self.hints: dict = {}
        self.bases: dict = {}
        for p in fe.params:
            if p.shape.is_array and p.shape.rank:
                fe.inject(p, self._loader(p))

    @staticmethod
    def key(index) -> tuple:
        return tuple(id(x) for x in index)

    def register(self, indices: Sequence[Sequence[ir.Value]]) -> None:
        first = list(indices[0])
        for e, index in enumerate(indices[1:], 1):
            diff = [j for j, (x, y) in enumerate(zip(first, index)) if x is not y]
            if len(diff) == 1:
                self.hints[self.key(index)] = (first, e, diff[0])
                self.hints.setdefault(self.key(first), (first, 0, diff[0]))

    def clear(self) -> None:
        self.hints.clear()
        self.bases.clear()

    def _loader(self, p):
        from ..fused_emitter import from_storage
        from ..llvm_types import storage_type
        fe = self.fe

        def value_at(index):
            hint = self.hints.get(self.key(index))
            if hint is None or not _unit_stride(p.shape, hint[2]):
                return fe.load_parameter(p, index)
            first, e, _ = hint
            b, et = fe.kb.b, p.shape.element_type
            st = storage_type(et)
            base = self.bases.get((id(p), self.key(first)))
            if base is None:
                base = b.gep(fe.parameter_pointer(p), [fe.offset(p.shape, first)], inbounds=True,
                             source_etype=st)
                self.bases[(id(p), self.key(first))] = base
            ptr = base if e == 0 else b.gep(base, [fe.kb.index(e)], inbounds=True, source_etype=st)
            load = b.load(ptr, typ=st)
            fe.target.mark_invariant(load)
            return from_storage(b, load, et)
        return value_at


def element_pointer(kb: KernelBuilder, ptr: ir.Value, etype: ir.Type, linear: ir.Value,
                    first: ir.Value | None = None, e: int = 0) -> ir.Value:
    """Address of element ``linear`` of ``ptr``; for the e-th element of a vector whose element 0
    is at ``first`` (so ``linear = first + e``), ``gep(gep(ptr, first), e)``: adjacent stores
    from one base, which LLVM merges (``st.global.v2.b16``)."""
    b = kb.b
    if first is None:
        return b.gep(ptr, [linear], inbounds=True, source_etype=etype)
    base = b.gep(ptr, [first], inbounds=True, source_etype=etype)
    return base if e == 0 else b.gep(base, [kb.index(e)], inbounds=True, source_etype=etype)


def maps_report_lines(spec) -> list[str]:
    """The report lines every transpose spec shares: side outputs, thread maps, partition."""
    side = ', '.join('%' + leaf.root.name for leaf in spec.leaves if leaf.hero is None) or '-'
    lines = [f"side outputs (phase 1): {side}",
             f"thread -> input (%{spec.heroes[0].operands[0].name}): {spec.thread_to_input_map()}"]
    lines += [f"thread -> output {i} (%{leaf.root.name}): {spec.thread_to_output_map(i)}"
              for i, leaf in enumerate(spec.leaves)]
    return lines + spec.partitioned.to_text().splitlines()
