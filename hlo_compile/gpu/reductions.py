"""XLA's facts about a reduce that both the tree-reduction pass and the emitter choice need
(XLA's ``reduction_utils``): its operand as kept/reduced blocks (row or column), whether the
reduction emitter beats one thread per output, and whether it is race-free (at most one block
writes each output, so no atomics)."""
from __future__ import annotations

from typing import NamedTuple, Sequence

from ..hlo.ir import HloInstruction
from ..hlo.shape import Shape
from .device_info import DeviceInfo


class ReductionDimensions(NamedTuple):
    """Row: ``[z reduced, y kept, x reduced]`` -> [y]; column: ``[a kept, b reduced, c kept]``."""

    is_row: bool
    dimensions: tuple[int, int, int]


def _consecutive(minor_to_major: Sequence[int], dims: Sequence[int]) -> bool:
    pos = sorted(minor_to_major.index(d) for d in dims)
    return all(q - p == 1 for p, q in zip(pos, pos[1:]))


def _partition(shape: Shape, middle: Sequence[int]) -> tuple[int, int, int]:
    """(major, middle, minor) products of the dims around the consecutive ``middle`` dims."""
    sizes, segment = [1, 1, 1], 2
    for d in shape.minor_to_major:
        if segment == 2 and d in middle:
            segment = 1
        elif segment == 1 and d not in middle:
            segment = 0
        sizes[segment] *= shape.dimensions[d]
    return sizes[0], sizes[1], sizes[2]


def reduction_dimensions(reduce: HloInstruction) -> ReductionDimensions:
    """XLA's ``GetReductionKindAndContiguousComponents`` for a reduce's first operand layout."""
    shape = reduce.operands[0].shape
    reduced = set(reduce.dimensions)
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not kept:
        return ReductionDimensions(True, (1, 1, shape.element_count()))
    m2m = list(shape.minor_to_major)
    if _consecutive(m2m, kept):
        major, middle, minor = _partition(shape, kept)
        if middle == 1:
            return ReductionDimensions(True, (1, 1, major * minor))
        if minor == 1:
            return ReductionDimensions(False, (1, major, middle))
        return ReductionDimensions(True, (major, middle, minor))
    if not _consecutive(m2m, sorted(reduced)):
        raise ValueError(f"reduce %{reduce.name}: neither kept nor reduced dims are consecutive in the layout")
    major, middle, minor = _partition(shape, sorted(reduced))
    if minor == 1:
        return ReductionDimensions(True, (1, major, middle))
    return ReductionDimensions(False, (major, middle, minor))


def is_reduction_from_or_to_contiguous_dimensions(reduce: HloInstruction,
                                                   device: DeviceInfo | None = None) -> bool:
    """A reduce whose kept or reduced dims are consecutive in the operand layout and for which
    the reduction emitter beats one thread per output element."""
    if reduce.opcode != "reduce":
        return False
    if reduce.operands[0].shape.element_count() == 0:
        return False  # every output is the init value (XLA's simplifier makes it a broadcast)
    try:
        dims = reduction_dimensions(reduce)
    except ValueError:
        return False
    return _faster_than_elemental(dims, device.threads_per_warp if device else 32)


def _faster_than_elemental(rd: ReductionDimensions, warp: int) -> bool:
    _, major, minor = rd.dimensions
    if minor == 0:
        return False  # nothing to reduce into or over
    if rd.is_row:
        return minor >= warp or warp % minor == 0
    prefer_elemental = (major < warp or (major < 2 * warp and minor < warp) or (major < 4 * warp and minor < 8)
                        or (major < 8 * warp and minor < 3))
    return not prefer_elemental


def is_race_free(rd: ReductionDimensions, device: DeviceInfo | None = None) -> bool:
    """At most one block writes each output: row x <= 1024*16 and z <= 8; column b <= 32*128."""
    warp = device.threads_per_warp if device else 32
    if rd.is_row:
        return rd.dimensions[2] <= 1024 * 16 and rd.dimensions[0] <= 8
    return rd.dimensions[1] <= warp * 128
