"""Coalescing analysis: does a warp read (and write) each buffer in consecutive addresses?

XLA:GPU answers this from its emitters' indexing maps (``CoalescingAnalysis``,
``xla/service/gpu/model/coalescing_analysis.cc``); we follow its rule on our maps:

1. For every hero of the kernel and each of the hero's operands, the emitter's thread ->
   operand map (``KernelSpec.thread_to_input_map``) is composed with the fused computation's
   maps from that operand to the fusion's parameters and with each parameter's layout
   (logical index -> linear physical offset). The loop emitter's heroes are its roots, so
   its thread -> output map composed with the output -> parameter maps says the same.
2. The first warp is sampled: lanes 0..31 of block 0 (lanes by linear thread id; XLA takes
   ``thread_x`` alone, the same for its 1-D blocks). Runtime variables take the midpoint of
   their range, every loop symbol but the last its lower bound (XLA: the last symbol is the
   innermost loop). One memory instruction of the warp then reads one address per lane,
   widened to a run of consecutive addresses when the last symbol moves the address by
   exactly one element per step (a thread's vector or unrolled elements, XLA's ``g(s) = s``).
3. The addresses form contiguous intervals; the read is coalesced when the 128-byte
   transactions those intervals need are within 1/0.9 of the minimum for the bytes read
   (XLA's ``EstimateCoalescingViaMemoryTransactionsCount``, threshold 0.9).

Where no map says what a thread reads (data-dependent reads, an op without indexing rules),
XLA falls back to ``IsReadCoalescedHeuristic`` (uncoalesced only when a fused transpose
moves the minor dimension outside a transpose emitter); so do we, and say so (``how``).
A parameter no hero reads is coalesced (XLA: "not used in the fusion cluster").

Ours beyond XLA: the same sample gives an *efficiency* per buffer, the useful bytes over
the bytes of the 64-byte DRAM->L2 segments the warp touches (1.0 for a coalesced f32 warp,
4/64 for one lane per segment: XLA's waste factor for uncoalesced reads), which the cost
model turns into bytes moved; and writes are analysed the same way through the thread ->
output maps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...hlo import HloInstruction
from ...hlo.opcodes import ELEMENTWISE
from ...hlo.shape import Shape
from ...hlo.tiling import physical_size
from ...indexing.fusion import fusion_output_to_input, instruction_to_parameters
from ...indexing.indexing_map import IndexingMap, compose
from ...indexing.layout_maps import linear_index_map
from ..analysis.emitter_kind import EmitterKind
from ..analysis.hero_shapes import bits_of
from ..kernel import KernelSpec, output_leaves

if TYPE_CHECKING:
    from ..compiler import KernelPlan

WARP_SIZE = 32
TRANSACTION_BYTES = 128          # XLA's kBytesPerMemoryTransaction
COALESCED_THRESHOLD = 0.9        # XLA's kIsCoalescedThreshold
SEGMENT_BYTES = 64               # DRAM -> L2 transaction (dram_to_l2_transaction_size_bytes)
_MAX_INNER_STEPS = 64            # the last symbol's steps enumerated (the rest follow the stride)


@dataclass(frozen=True)
class WarpAccess:
    """What one sampled warp instruction touches in one buffer."""

    coalesced: bool
    efficiency: float            # useful bytes / bytes of the 64-byte segments touched (0..1]
    intervals: tuple[tuple[int, int], ...]   # contiguous element ranges, inclusive


@dataclass(frozen=True)
class BufferAccess:
    """One kernel buffer (a fusion operand or an output leaf) and how the threads touch it."""

    index: int                   # fusion operand number, or output leaf number
    name: str
    element_type: str
    coalesced: bool
    efficiency: float
    how: str                     # "map", "heuristic" (no map), "unused", "scalar", "in place"
    bytes_net: int               # distinct bytes touched (at most the buffer's size)
    bytes_total: int             # bytes the threads touch, re-reads included

    def to_json(self) -> dict:
        return {"operand" if self.how != "output" else "output": self.index, "name": self.name,
                "coalesced": self.coalesced, "efficiency": round(self.efficiency, 4), "how": self.how,
                "bytes": self.bytes_net, "bytes_total": self.bytes_total}


@dataclass(frozen=True)
class KernelCoalescing:
    reads: tuple[BufferAccess, ...]
    writes: tuple[BufferAccess, ...]

    @property
    def all_coalesced(self) -> bool:
        return all(b.coalesced for b in self.reads + self.writes)


# ---- one map, one warp ---------------------------------------------------------------------------

def warp_access(m: IndexingMap | None, element_bits: int, lanes: int = WARP_SIZE) -> WarpAccess:
    """The first warp's access through ``m`` (work-item dims, or a single ``thread_x`` dim ->
    one linear physical offset), as described in the module docstring. An undefined map is
    uncoalesced (XLA); a map with no results (a scalar) or no feasible lane is coalesced."""
    if m is None or m.undefined:
        return WarpAccess(False, element_bits / 8 / SEGMENT_BYTES, ())
    if not m.exprs:
        return WarpAccess(True, 1.0, ())
    rts = [(lo + hi) // 2 for lo, hi in m.rts]
    syms = [lo for lo, _ in m.ranges]
    addresses: set[int] = set()
    for lane_dims in _warp_lanes(m, lanes):
        addresses |= _lane_addresses(m, lane_dims, syms, rts)
    intervals = _intervals(sorted(addresses))
    return WarpAccess(_is_coalesced(intervals, element_bits), _efficiency(intervals, element_bits),
                      tuple(intervals))


def _warp_lanes(m: IndexingMap, lanes: int) -> list[list[int]]:
    """Dim values of lanes 0..lanes-1 of block 0 (linear thread id over th_x, th_y, th_z)."""
    block = [hi + 1 for _, hi in m.dims[:3]] if m.num_dims >= 3 else [m.dims[0][1] + 1]
    out = []
    for lane in range(min(lanes, math.prod(block))):
        dims = [lo for lo, _ in m.dims]
        rest = lane
        for i, n in enumerate(block):
            dims[i] = m.dims[i][0] + rest % n
            rest //= n
        out.append(dims)
    return out


def _lane_addresses(m: IndexingMap, dims: list[int], syms: list[int], rts: list[int]) -> set[int]:
    """The addresses one lane touches in one instruction: at the last symbol's lower bound,
    or its whole run when that symbol steps the address by one element (a vector)."""
    def at(s: int | None) -> int | None:
        point = syms if s is None else syms[:-1] + [s]
        return m.evaluate(dims, point, rts)[0] if m.satisfies(dims, point, rts) else None

    if not m.ranges:
        a = at(None)
        return set() if a is None else {a}
    lo, hi = m.ranges[-1]
    steps = [(s, at(s)) for s in range(lo, min(hi, lo + _MAX_INNER_STEPS - 1) + 1)]
    feasible = [(s, a) for s, a in steps if a is not None]
    if not feasible:
        return set()
    s0, a0 = feasible[0]
    if len(feasible) > 1 and all(a - a0 == s - s0 for s, a in feasible):
        out = {a for _, a in feasible}
        if hi - lo + 1 > _MAX_INNER_STEPS:   # the stride holds: the rest of the run follows it
            out |= set(range(a0 + _MAX_INNER_STEPS, a0 + (hi - s0) + 1))
        return out
    first = steps[0][1]
    return set() if first is None else {first}


def _intervals(addresses: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a in addresses:
        if out and a == out[-1][1] + 1:
            out[-1] = (out[-1][0], a)
        else:
            out.append((a, a))
    return out


def _is_coalesced(intervals: list[tuple[int, int]], bits: int) -> bool:
    """XLA's transaction count: each interval rounded up to 128-byte transactions, against
    all the bytes in as few transactions as possible."""
    transactions = sum(-(-(hi - lo + 1) * bits // (8 * TRANSACTION_BYTES)) for lo, hi in intervals)
    if transactions == 0:
        return True
    total = sum(hi - lo + 1 for lo, hi in intervals)
    lower_bound = -(-total * bits // (8 * TRANSACTION_BYTES))
    return lower_bound > transactions * COALESCED_THRESHOLD


def _efficiency(intervals: list[tuple[int, int]], bits: int) -> float:
    """Useful bytes over the bytes of the 64-byte segments the intervals touch (aligned to
    the buffer's start)."""
    if not intervals:
        return 1.0
    segments: set[int] = set()
    useful = 0
    for lo, hi in intervals:
        first, last = lo * bits // (8 * SEGMENT_BYTES), ((hi + 1) * bits - 1) // (8 * SEGMENT_BYTES)
        segments.update(range(first, last + 1))
        useful += (hi - lo + 1) * bits
    return min(1.0, useful / 8 / (len(segments) * SEGMENT_BYTES))


# ---- a kernel ------------------------------------------------------------------------------------

def analyze_kernel(kernel: "KernelPlan") -> KernelCoalescing:
    """Reads (per fusion operand) and writes (per output leaf) of a planned kernel. Kept on the
    plan for its spec and emitter: a dump's fusions report and its summary.json both estimate
    every kernel (a MobileNetV2 training step's 302: about 5 s each), the second with ptxas's
    registers, which change the occupancy but not this."""
    key = (kernel.spec, kernel.analysis.emitter)
    kept = kernel.__dict__.get("_coalescing")
    if kept is not None and kept[0][0] is key[0] and kept[0][1] == key[1]:
        return kept[1]
    out = analyze_spec(*key)
    kernel.__dict__["_coalescing"] = (key, out)
    return out


def analyze_spec(spec: KernelSpec, emitter: str | None) -> KernelCoalescing:
    fusion = spec.fusion
    comp = fusion.fused_computation
    params = comp.parameters
    per_param: dict[int, list[tuple[IndexingMap | None, int]]] = {i: [] for i in range(len(params))}
    for to_hero_operand, hero_operand, hero_operand_elements in _hero_walks(spec, emitter):
        for p, maps in enumerate(hero_operand):
            if maps is None or to_hero_operand is None:
                if maps is None or maps:
                    per_param[p].append((None, hero_operand_elements))
                continue
            for pm in maps:
                per_param[p].append((compose(to_hero_operand, pm), _map_points(pm, hero_operand_elements)))
    heuristic = _heuristic_coalesced(fusion, emitter)
    aliased = set(spec.in_place.values())   # in-place outputs start as these: not read per element
    reads = tuple(BufferAccess(i, params[i].name, _etype(params[i].shape), True, 1.0, "in place", 0, 0)
                  if i in aliased else
                  _read_access(i, params[i], fusion.operands[i].name if i < len(fusion.operands) else params[i].name,
                               per_param[i], heuristic) for i in range(len(params)))
    region = max((r.bytes_net for r in reads), default=0)   # what an in-place kernel writes: its update
    writes = tuple(_write_access(spec, k, shape, root.name, region if k in spec.in_place else None)
                   for k, (root, shape) in enumerate(output_leaves(fusion)))
    return KernelCoalescing(reads, writes)


def _hero_walks(spec: KernelSpec, emitter: str | None):
    """(thread -> hero operand map or None, that operand's maps to each parameter, its element
    count) for every array operand of every hero the spec names; for the loop emitter, its
    roots through the thread -> output maps."""
    comp = spec.fusion.fused_computation
    if emitter == EmitterKind.LOOP or not _spec_heroes(spec):
        for k, (_, shape) in enumerate(output_leaves(spec.fusion)):
            if shape.element_count() == 0:
                continue
            yield spec.thread_to_output_map(k), fusion_output_to_input(spec.fusion, k), shape.element_count()
        return
    for i, hero in enumerate(_spec_heroes(spec)):
        for j, op in enumerate(hero.operands):
            if not op.shape.is_array or op.shape.rank == 0:
                continue
            try:
                m = spec.thread_to_input_map(i, j)
            except (IndexError, KeyError, ValueError):
                m = None
            yield m, instruction_to_parameters(comp, op), op.shape.element_count()


def _spec_heroes(spec: KernelSpec) -> list[HloInstruction]:
    """The heroes whose operands ``thread_to_input_map(hero, operand)`` describes."""
    for attr in ("heroes", "updates"):
        if hasattr(spec, attr):
            return list(getattr(spec, attr))
    for attr in ("dot", "conv", "scatter", "hero"):
        if getattr(spec, attr, None) is not None:
            return [getattr(spec, attr)]
    return []


def _map_points(m: IndexingMap, elements: int) -> int:
    """Elements of the hero operand that read through ``m`` (its dims' extent, each symbol a
    further read), at most ``elements`` times the symbols' extent."""
    dims = math.prod(hi - lo + 1 for lo, hi in m.dims) if m.dims else 1
    syms = math.prod(hi - lo + 1 for lo, hi in m.ranges) if m.ranges else 1
    return min(dims, elements) * syms


def _read_access(i: int, param: HloInstruction, name: str, walks: list, heuristic: bool) -> BufferAccess:
    shape = param.shape
    bits = _bits(shape)
    size = physical_size(shape) * bits // 8 if shape.is_array else 0
    if not shape.is_array or shape.rank == 0:
        return BufferAccess(i, name, _etype(shape), True, 1.0, "scalar", size, size)
    if not walks:
        return BufferAccess(i, name, _etype(shape), True, 1.0, "unused", 0, 0)
    total = sum(points for _, points in walks) * bits // 8
    net = min(size, total)
    if any(m is None for m, _ in walks):
        eff = 1.0 if heuristic else bits / 8 / SEGMENT_BYTES
        return BufferAccess(i, name, _etype(shape), heuristic, eff, "heuristic", net, total)
    linear = linear_index_map(shape)
    coalesced, eff = True, 1.0
    for m, _ in walks:
        w = warp_access(compose(m, linear), bits)
        coalesced &= w.coalesced
        eff = min(eff, w.efficiency)
    return BufferAccess(i, name, _etype(shape), coalesced, eff, "map", net, total)


def _write_access(spec: KernelSpec, k: int, shape: Shape, name: str, region: int | None = None) -> BufferAccess:
    """Output leaf ``k``; ``region``: the bytes an in-place kernel writes into it."""
    bits = _bits(shape)
    size = physical_size(shape) * bits // 8 if region is None else min(region, physical_size(shape) * bits // 8)
    if shape.rank == 0 or shape.element_count() == 0:
        return BufferAccess(k, name, _etype(shape), True, 1.0, "scalar", size, size)
    try:
        m = spec.thread_to_output_map(k)
    except (IndexError, KeyError, ValueError, StopIteration):
        m = None
    if m is None:   # where a thread writes depends on data (scatter, sort by rank, DUS)
        return BufferAccess(k, name, _etype(shape), True, 1.0, "heuristic", size, size)
    w = warp_access(compose(m, linear_index_map(shape)), bits)
    return BufferAccess(k, name, _etype(shape), w.coalesced, w.efficiency, "map", size, size)


def _heuristic_coalesced(fusion: HloInstruction, emitter: str | None) -> bool:
    return read_coalesced_heuristic(emitter, fusion)


def read_coalesced_heuristic(emitter: str | None, producer: HloInstruction,
                             consumer: HloInstruction | None = None) -> bool:
    """XLA's ``IsReadCoalescedHeuristic`` for ``producer`` (fused into ``consumer`` when
    given), each a fusion or a lone instruction: outside the transpose emitter, a transpose
    of the minor dimension (not of a broadcast or iota) breaks coalescing, and so does a
    reduction fused into a reduction."""
    def bad_transpose(inst: HloInstruction) -> bool:
        insts = inst.fused_computation.instructions if inst.opcode == "fusion" else [inst]
        return any(_transposes_minor_dimension(i) and not _is_broadcast(i.operands[0]) for i in insts)

    def reduces(inst: HloInstruction) -> bool:
        insts = inst.fused_computation.instructions if inst.opcode == "fusion" else [inst]
        return any(i.opcode == "reduce" for i in insts)

    pair = [producer] + ([consumer] if consumer is not None else [])
    if emitter != EmitterKind.TRANSPOSE and any(bad_transpose(i) for i in pair):
        return False
    return not (emitter == EmitterKind.REDUCTION and consumer is not None and reduces(producer)
                and reduces(consumer))


def _transposes_minor_dimension(inst: HloInstruction) -> bool:
    """A transpose (or a copy changing the layout) whose output's most minor physical
    dimension is not the operand's."""
    if inst.opcode not in ("transpose", "copy") or not inst.shape.is_array or inst.shape.rank < 2:
        return False
    src = inst.operands[0].shape
    if inst.opcode == "copy":
        return _minor_nontrivial(src) != _minor_nontrivial(inst.shape)
    perm = list(inst.dimensions)
    out_minor = _minor_nontrivial(inst.shape)
    return out_minor is not None and perm[out_minor] != _minor_nontrivial(src)


def _minor_nontrivial(shape: Shape) -> int | None:
    return next((d for d in shape.minor_to_major if shape.dimensions[d] != 1), None)


def _is_broadcast(inst: HloInstruction) -> bool:
    while True:
        if inst.opcode in ("broadcast", "iota"):
            return True
        if len(inst.operands) != 1 or not (inst.opcode == "bitcast" or _elementwise(inst)):
            return False
        inst = inst.operands[0]


def _elementwise(inst: HloInstruction) -> bool:
    return inst.opcode in ELEMENTWISE


def _bits(shape: Shape) -> int:
    return bits_of(shape.element_type) if shape.is_array else 32


def _etype(shape: Shape) -> str:
    return str(shape.element_type) if shape.is_array else "tuple"

