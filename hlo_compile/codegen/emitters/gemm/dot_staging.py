"""How the config-tiled dot kernel stages its operand tiles (``dot_tiled.py``): what XLA's
Triton GEMM kernels do, without Triton.

- Tiles are kept in shared memory in the *operand's* element type (its storage type: a bf16
  tile is half an f32 one) and converted to the accumulation type when read; the lhs tile is
  ``bk x bm`` (element (mm, kk) at ``kk * bm + mm``), the rhs ``bk x bn`` (``kk * bn + nn``).
- ``num_stages`` copies of both tiles, in dynamic shared memory (``LaunchDims.shared_bytes``,
  as XLA launches its Triton kernels): with ``S`` stages, K step ``s + S - 1`` is staged while
  step ``s`` is computed (one barrier per step: buffer ``(s - 1) % S``, the one written, was
  last read before the previous step's barrier). ``num_stages = 1``: stage, barrier, compute,
  barrier.
- Global loads as wide as the operand allows (``OperandStaging``): where the dot operand is a
  fusion parameter, or elementwise ops over parameters of its dims (converts, a bias add...),
  whose physically minor dim (size-1 dims aside) is the innermost contracting dim or the
  innermost free dim, each thread loads ``vec`` consecutive elements of each such parameter at once (16 bytes at most; ``vec`` divides that dim's size
  and the tile's extent along it, so a vector is aligned and wholly inside or wholly outside
  the bounds: the bounds-checked tail loads zeros as one). Elsewhere one element per load, the
  minor dim still fastest among consecutive threads where it is a GEMM dim (coalesced).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ....hlo import HloInstruction
from ....hlo.opcodes import ELEMENTWISE
from ...llvm_types import storage_bytes

MAX_VECTOR_BYTES = 16


@dataclass(frozen=True)
class OperandStaging:
    """How one operand's ``tile x bk`` tile is staged: ``along_k`` whether the contracting dim
    is the fastest among a thread's consecutive slots (else the free dim), ``vec`` the elements
    of one global load along it, ``leaves`` the parameters read by vector loads (``vec`` > 1)."""

    lhs: bool
    tile: int          # bm (lhs) or bn (rhs)
    bk: int
    along_k: bool
    vec: int = 1
    element_type: str = "f32"      # the dot operand's: the shared tile's element type
    leaves: tuple[HloInstruction, ...] = ()

    @property
    def element_bytes(self) -> int:
        return storage_bytes(self.element_type)

    @property
    def tile_bytes(self) -> int:
        """One stage's tile, rounded up to 16 bytes."""
        return -(-self.tile * self.bk * self.element_bytes // 16) * 16

    @property
    def chunks(self) -> tuple[int, int]:
        """(chunks along the fastest dim, along the other): the vectors of one tile."""
        fast, slow = (self.bk, self.tile) if self.along_k else (self.tile, self.bk)
        return fast // self.vec, slow

    @property
    def count(self) -> int:
        fast, slow = self.chunks
        return fast * slow

    def chunk_origin(self, c: int) -> tuple[int, int]:
        """(free, k) in the tile of chunk ``c``'s first element (an int model of the emitter's)."""
        fast, _ = self.chunks
        f, s = c % fast, c // fast
        return (s, f * self.vec) if self.along_k else (f * self.vec, s)


def operand_staging(dot: HloInstruction, lhs: bool, tile: int, bk: int, g) -> OperandStaging:
    """The staging of the dot's lhs or rhs (``g``: the dot's ``DotGeometry``)."""
    operand = dot.operands[0 if lhs else 1]
    et = operand.shape.element_type
    contract = g.lhs_contract if lhs else g.rhs_contract
    free = g.lhs_free if lhs else g.rhs_free
    default = OperandStaging(lhs, tile, bk, lhs, 1, et)
    minor = _physical_minor(operand)
    if minor is None:
        return default
    if contract and minor == contract[-1]:
        along_k, extent = True, bk
    elif free and minor == free[-1]:
        along_k, extent = False, tile
    else:
        return default
    scalar = OperandStaging(lhs, tile, bk, along_k, 1, et)
    leaves = _vector_leaves(operand)
    if not leaves or any(_physical_minor(p) != minor for p in leaves):
        return scalar
    size = operand.shape.dimensions[minor]
    vec = MAX_VECTOR_BYTES // max(storage_bytes(p.shape.element_type) for p in leaves)
    while vec > 1 and (size % vec or extent % vec):
        vec //= 2
    if vec < 2:
        return scalar
    return OperandStaging(lhs, tile, bk, along_k, vec, et, leaves)


def _physical_minor(inst: HloInstruction) -> int | None:
    """The minor-most dim of ``inst``'s layout above size 1 (stride 1), None for tiled or
    suffixed layouts (or no dim above size 1)."""
    shape = inst.shape
    if not shape.is_array or shape.layout is None or shape.layout.tiles or shape.rank == 0:
        return None
    for d in shape.minor_to_major:
        if shape.dimensions[d] != 1:
            return d
    return None


def _vector_leaves(operand: HloInstruction) -> tuple[HloInstruction, ...]:
    """The fusion parameters ``operand`` reads at its own index: those of its dims reached
    through elementwise ops of its dims (the operand itself where it is one). Their lanes are
    seeded into the fused emitter, so whatever else the prologue reads (broadcasts, slices...)
    is still read element by element. Empty where one of them has sub-byte, ``pred`` or
    complex elements."""
    dims = operand.shape.dimensions
    found: list[HloInstruction] = []
    seen: set[int] = set()
    todo = [operand]
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if cur.opcode == "parameter":
            found.append(cur)
        elif cur.opcode in ELEMENTWISE:
            todo.extend(o for o in cur.operands if o.shape.is_array and o.shape.dimensions == dims)
    for p in found:
        et = p.shape.element_type
        if et == "pred" or et in ("s1", "s2", "s4", "u1", "u2", "u4") or et.startswith("c"):
            return ()
        nbytes = storage_bytes(et)
        if nbytes > 8 or nbytes & (nbytes - 1):
            return ()
    return tuple(sorted(found, key=lambda p: p.parameter_number))


def stage_shared_bytes(a: OperandStaging, b: OperandStaging, stages: int, reuse: "TileReuse | None" = None) -> int:
    """The dynamic shared memory of the tiles: ``stages`` x (lhs tile + rhs tile); with
    ``reuse`` (one stage, ``tile_reuse``) the larger tile only."""
    if reuse is not None:
        return reuse.shared_bytes
    return max(1, stages) * (a.tile_bytes + b.tile_bytes)


MAX_REGISTER_TILE = 64      # values per thread read into registers before the other tile lands


@dataclass(frozen=True)
class TileReuse:
    """One buffer for both operand tiles of a K step (``tile_reuse``): the ``first`` operand's
    tile at byte 0, the other's at ``second_offset`` (the buffer's end), over the first's rows
    ``k >= from_k``: each thread reads its values of those rows into registers before the second
    is staged (``dot_tiled.reused_tile_mainloop``); rows ``k < from_k`` stay in shared memory."""

    first_lhs: bool
    from_k: int
    second_offset: int
    shared_bytes: int
    register_values: int

    @property
    def first(self) -> str:
        return "lhs" if self.first_lhs else "rhs"


def tile_reuse(dot: HloInstruction, tiling, a: OperandStaging, b: OperandStaging) -> TileReuse | None:
    """How the FMA path holds both tiles of a one-stage f32 dot in the larger one's bytes, or
    None (both tiles at once). XLA's Triton kernels for f32 dots of one stage (tf32 ``mma``)
    have one operand tile at a time in shared memory: each is copied there and read into
    registers before the next is written (Triton's shared allocator reuses bytes whose users
    are done), so their dynamic shared memory is the larger tile, not the sum (1024 B for
    XLA's 16 x 8 x 16 f32 tiles, not 1536 B) where K is a multiple of block_k (in the corpus
    267 of 271 such f32 kernels; with a ragged K, whose last step's loads are masked, 66 of 68
    keep both tiles at once: the sum); with bf16 or f16 operands both tiles are live until the
    ``mma`` (the sum), and with several stages the pipeline keeps every stage's tiles.
    Of the two orders the one with fewer values per thread in registers (``rm`` or ``rn`` per
    overlapped row of the first tile), at most ``MAX_REGISTER_TILE``."""
    if max(1, tiling.num_stages) != 1 or any(o.shape.element_type != "f32" for o in dot.operands):
        return None
    lhs = dot.operands[0].shape.dimensions
    if math.prod(lhs[d] for d in dot.dot_dimension_numbers.lhs_contracting_dimensions) % tiling.bk:
        return None
    size = max(a.tile_bytes, b.tile_bytes)
    best = None
    for first, second, per_row in ((a, b, tiling.rm), (b, a, tiling.rn)):
        offset = size - second.tile_bytes
        row_bytes = first.tile * first.element_bytes
        from_k = min(first.bk, offset // row_bytes)
        plan = TileReuse(first.lhs, from_k, offset, size, per_row * (first.bk - from_k))
        if best is None or plan.register_values < best.register_values:
            best = plan
    return best if best is not None and best.register_values <= MAX_REGISTER_TILE else None


def slots_per_thread(s: OperandStaging, threads: int) -> int:
    return math.ceil(s.count / threads)
