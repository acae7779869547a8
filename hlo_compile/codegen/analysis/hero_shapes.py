"""Shape predicates of XLA's hero rules: bitcast reshapes and transposes, normalised
transposes (021/210/102, packed tiles) and reduction dimensions (row/column on the operand's
layout). The transpose and reduction emitters build on ``transpose_description`` and
``reduction_dimensions``; ``fusion_analysis`` uses them to choose an emitter."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from hlo_compile.hlo.element_types import ELEMENT_TYPES
from hlo_compile.hlo.ir import HloInstruction
from hlo_compile.hlo.shape import Shape

_INT_MAX = 2**31 - 1


# ---- shape predicates --------------------------------------------------------------------

def bits_of(element_type: str) -> int:
    """Bits per element as XLA's emitters count them (pred is a byte)."""
    return ELEMENT_TYPES[element_type].bits


def same_shape(a: Shape, b: Shape) -> bool:
    """Equal including element type and layout (XLA's ``Shape::operator==``)."""
    return (a.element_type == b.element_type and a.dimensions == b.dimensions
            and (a.layout or _default(a)) == (b.layout or _default(b)))


def _default(shape: Shape):
    return Shape.array(shape.element_type, shape.dimensions).layout


def _strides(dims: Sequence[int], minor_to_major: Sequence[int]) -> list[int]:
    """Element strides of each logical dim when laid out in ``minor_to_major`` order."""
    out, stride = [0] * len(dims), 1
    for d in minor_to_major:
        out[d] = stride
        stride *= dims[d]
    return out


def reshape_is_bitcast(a: Shape, b: Shape) -> bool:
    """Whether reshaping ``a`` to ``b`` moves no element in memory: every unit index of either
    shape lands at the same physical offset in the other (XLA's ``ReshapeIsBitcast``)."""
    if a.element_count() != b.element_count():
        return False
    if (a.layout and a.layout.tiles) or (b.layout and b.layout.tiles):
        return a.dimensions == b.dimensions and a.layout == b.layout
    return a.element_count() == 0 or (_units_agree(a, b) and _units_agree(b, a))


def _units_agree(x: Shape, y: Shape) -> bool:
    phys_x, phys_y = _strides(x.dimensions, x.minor_to_major), _strides(y.dimensions, y.minor_to_major)
    row_x = _strides(x.dimensions, range(x.rank - 1, -1, -1))
    row_y = _strides(y.dimensions, range(y.rank - 1, -1, -1))
    for d, n in enumerate(x.dimensions):
        if n > 1:
            linear = row_x[d]
            offset = sum((linear // s) % m * p for s, m, p in zip(row_y, y.dimensions, phys_y))
            if offset != phys_x[d]:
                return False
    return True


def transpose_is_bitcast(a: Shape, b: Shape, dimensions: Sequence[int]) -> bool:
    """Whether ``transpose(a, dimensions) -> b`` keeps every element's physical position."""
    return tuple(a.minor_to_major) == tuple(dimensions[m] for m in b.minor_to_major)


def is_reshape_or_transpose_bitcast(a: Shape, b: Shape) -> bool:
    """Whether ``a`` and ``b`` (element types ignored) are the same bytes in another logical view."""
    if a.dimensions == b.dimensions and a.minor_to_major == b.minor_to_major:
        return True
    if reshape_is_bitcast(a, b):
        return True
    if a.rank != b.rank:
        return False
    pos_b = {d: k for k, d in enumerate(b.minor_to_major)}
    dims = [a.minor_to_major[pos_b[j]] for j in range(b.rank)]
    return all(b.dimensions[j] == a.dimensions[dims[j]] for j in range(b.rank))


# ---- transposes ------------------------------------------------------------------------------

@dataclass(frozen=True)
class TransposeDescription:
    """A transpose in normalised form: size-1 dims dropped, dims that stay adjacent merged.
    ``dimensions`` are the normalised *output* dims; output dim i is operand dim
    ``permutation[i]``. ``packed_tile`` holds the packed emitter's tile sizes when it applies."""

    instruction: HloInstruction = field(compare=False)
    dimensions: tuple[int, ...]
    permutation: tuple[int, ...]
    bits: int
    shmem_bytes: int
    packed_tile: tuple[int, ...] | None = None

    @property
    def packed(self) -> bool:
        return self.packed_tile is not None

    @property
    def operand_dimensions(self) -> tuple[int, ...]:
        inverse = _inverse(self.permutation)
        return tuple(self.dimensions[inverse[i]] for i in range(len(self.dimensions)))

    @property
    def kind(self) -> str:
        """``"021"``, ``"102"``, ``"210"``...: the permutation, 2-d ones written with a batch of 1."""
        perm = self.permutation if len(self.permutation) != 2 else (0,) + tuple(p + 1 for p in self.permutation)
        return "".join(map(str, perm)) if len(perm) <= 10 else ",".join(map(str, perm))

    def equivalent(self, other: "TransposeDescription") -> bool:
        return (self.dimensions, self.permutation, self.bits) == (other.dimensions, other.permutation, other.bits)


def _inverse(perm: Sequence[int]) -> list[int]:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return out


def _normalize_transpose(inst: HloInstruction) -> tuple[list[int], list[int]]:
    """``ShapeUtil::GetNormalizedLogicalTransposeShape``: (output dims, permutation)."""
    in_dims, out_dims, perm = inst.operands[0].shape.dimensions, inst.shape.dimensions, inst.dimensions
    dropped = [sum(1 for n in in_dims[:i] if n == 1) for i in range(len(in_dims) + 1)]
    kept = [(n, perm[i] - dropped[perm[i]]) for i, n in enumerate(out_dims) if n != 1]
    dims: list[int] = []
    starts: list[int] = []
    for i, (n, p) in enumerate(kept):
        if i and p == kept[i - 1][1] + 1:
            dims[-1] *= n
        else:
            dims.append(n)
            starts.append(p)
    if not dims:
        return [1], [0]
    order = sorted(starts)
    return dims, [order.index(s) for s in starts]


def transpose_description(inst: HloInstruction) -> TransposeDescription | None:
    """``GetDescriptionForTiledTransposeEmitter``: the normalised transpose if a shared-memory
    transpose emitter handles it (packed, minor dim kept, or minor dim swapped), else None."""
    if inst.opcode != "transpose" or inst.shape.element_count() == 0:
        return None  # nothing to move (XLA removes zero-sized instructions before emission)
    for s in (inst.shape, inst.operands[0].shape):
        if tuple(s.minor_to_major) != tuple(range(s.rank - 1, -1, -1)):
            return None  # XLA normalises layouts first; a non-default one is not a logical transpose
    dims, perm = _normalize_transpose(inst)
    if len(perm) < 2:
        return None
    bits = bits_of(inst.shape.element_type)
    op_dims = [dims[i] for i in _inverse(perm)]
    tile = _packed_tile(dims, perm, bits)
    if tile is not None:
        shmem = 32 * 4 * 32 * (32 // bits)
        return TransposeDescription(inst, tuple(dims), tuple(perm), bits, shmem, tile)
    if perm[-1] == len(dims) - 1:
        minor_bits = bits * dims[-1]
        if minor_bits <= 64 and minor_bits * min(op_dims[-2], dims[-2]) >= 8 * 16:
            return TransposeDescription(inst, tuple(dims), tuple(perm), bits, -(-32 * 33 * minor_bits // 8))
        return None
    a, b = op_dims[-1], dims[-1]
    if (a >= 16 and b >= 16) or (a >= 8 and b >= 8 and a * b >= 64 * 128):
        if bits == 4:
            return None  # XLA: the tiled emitter regresses for 4-bit types when the minor dim moves
        return TransposeDescription(inst, tuple(dims), tuple(perm), bits, -(-32 * 33 * bits // 8))
    return None


def _packed_tile(dims: Sequence[int], perm: Sequence[int], bits: int) -> tuple[int, ...] | None:
    """``GetPackedTransposeTileSizes`` on the canonical [.., T2, .., A, T1, B] form."""
    if bits >= 32:
        return None
    out, cperm = list(dims), list(perm)
    if cperm[-1] != len(out) - 1:
        cperm.append(len(out))
        out.append(1)
    r = len(out)
    if cperm[r - 3] != r - 3:
        out.insert(r - 2, 1)
        cperm = [p + 1 if p > r - 3 else p for p in cperm]
        cperm.insert(r - 2, r - 2)
    inv = _inverse(cperm)
    inp = [out[inv[i]] for i in range(len(out))]
    n = len(inp)
    a, t1, b, t2 = inp[n - 3], inp[n - 2], inp[n - 1], inp[cperm[n - 2]]
    v = 32 // bits
    shmem_dim = 32 * v
    tile_t1 = min(t1, shmem_dim)
    tile_a = min(a, shmem_dim // tile_t1)
    tile_t2 = min(t2, shmem_dim)
    rows, cols = tile_t2, tile_a * tile_t1
    if cols < 10 * v or rows < 10 * v:
        return None
    if b != 1 or rows % v or cols % v or t2 % tile_t2 % v:
        return None
    tile = [1] * n
    tile[inv[n - 2]], tile[n - 2], tile[n - 3] = tile_t1, tile_t2, tile_a
    return tuple(tile)


# ---- elementwise / intermediate ops -------------------------------------------------------
