"""What the tiled and the packed transpose kernels share.

The output leaves and which of them a transpose hero feeds (``OutputLeaf``), index arithmetic
between the normalised transpose and real shapes (``reshape_index``), the vector accesses
(``VectorLoads``, ``element_pointer``), a leaf's value and store at the hero's physical offset
(``leaf_value``, ``store_value``) and the report lines both specs print.

Normalised ↔ real indices: ``transpose_description`` only accepts heroes whose operand and
output have default (row-major) layouts, so the normalised and the real shapes share their
row-major linear index; a root reached from its hero through intermediate ops (elementwise
keeping the layout, bitcasts) shares the hero's physical offset. Both are plain
(de)linearisations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ....hlo.layout import unit_stride
from ....hlo.shape import Shape
from ...elemental.fused_emitter import FusedEmitter
from ...kernel_builder import KernelBuilder
from ...llvm_types import from_storage, storage_type, to_storage


@dataclass(frozen=True)
class OutputLeaf:
    root: HloInstruction
    shape: Shape
    hero: HloInstruction | None     # the transpose hero (phase 2), or None: side output (phase 1)


def reshape_index(kb: KernelBuilder, index: Sequence[ir.Value], src: Sequence[int],
                  dst: Sequence[int]) -> list[ir.Value]:
    """The row-major index in ``dst`` of the element at ``index`` in ``src`` (same count)."""
    if tuple(src) == tuple(dst):
        return list(index)
    if [n for n in src if n != 1] == [n for n in dst if n != 1]:   # only unit dims differ
        it = iter(v for v, n in zip(index, src) if n != 1)
        return [kb.index(0) if n == 1 else next(it) for n in dst]
    return kb.delinearize(kb.linearize(index, src), dst)


def to_operand_order(c_out: Sequence[ir.Value], perm: Sequence[int]) -> list[ir.Value]:
    """Coordinates in output order as coordinates in operand order."""
    c_in: list = [None] * len(perm)
    for i, p in enumerate(perm):
        c_in[p] = c_out[i]
    return c_in


# ---- a leaf's value and its store ------------------------------------------------------------

def leaf_value(kb: KernelBuilder, fe: FusedEmitter, leaf: OutputLeaf, linear: ir.Value,
               hero_index: list[ir.Value] | None):
    """``leaf``'s root at physical offset ``linear`` (the hero's)."""
    shape = leaf.shape
    default = tuple(shape.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))
    if hero_index is not None and default and tuple(shape.dimensions) == tuple(leaf.hero.shape.dimensions):
        index = hero_index
    else:
        index = kb.delinearize(linear, shape.dimensions, shape.minor_to_major)
    return fe.root_value(leaf.root, index)


def store_value(kb: KernelBuilder, leaf: OutputLeaf, ptr: ir.Value, linear: ir.Value, v,
                first: ir.Value | None = None, e: int = 0) -> None:
    """Store ``v`` at offset ``linear``; ``first``/``e``: element e of a vector (``linear =
    first + e``), addressed from element 0's pointer (vector stores)."""
    b, et = kb.b, leaf.shape.element_type
    b.store(to_storage(b, v, et), element_pointer(kb, ptr, storage_type(et), linear, first, e))


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


# ---- vector loads ----------------------------------------------------------------------------


def _offset(fe: FusedEmitter, shape: Shape, index: Sequence[ir.Value]) -> ir.Value:
    """``fe.offset``, but the linear index itself where ``index`` was delinearised from it in
    ``shape``'s (untiled) layout: the tile row of a transpose whose real operand shape splits
    the normalised one (``[144, 32]`` read as ``[3, 3, 16, 32]``) costs no div/rem chain."""
    if not (shape.layout is not None and shape.layout.tiles):
        linear = fe.kb.linear_of(index, shape.dimensions, shape.minor_to_major)
        if linear is not None:
            return linear
    return fe.offset(shape, index)


def _same_value(x: ir.Value, y: ir.Value) -> bool:
    """The same index value: the same object, or equal constants (index rewrites such as
    ``reshape_index`` make a fresh constant 0 for every unit dim they insert)."""
    if x is y:
        return True
    return (isinstance(x, ir.Constant) and isinstance(y, ir.Constant) and x.type == y.type
            and x.constant == y.constant)


class VectorLoads:
    """Parameter loads of a thread's v consecutive elements addressed from one base pointer.

    The emitters register the v indices of a vector (``register``); a fusion parameter read at
    one of them (through elementwise prologue ops, which pass the index on unchanged) whose
    layout makes that index's differing dim unit-stride is loaded at ``gep(base, e)``, the
    base being element 0's address. LLVM's load/store vectorizer then sees v loads at constant
    distances from one pointer and merges them (``ld.global.nc.v2.b16``); offsets computed
    separately per element get reassociated and are not always recognised. Other reads take
    the usual path."""

    def __init__(self, fe: FusedEmitter):
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
            diff = [j for j, (x, y) in enumerate(zip(first, index)) if not _same_value(x, y)]
            if len(diff) == 1:
                self.hints[self.key(index)] = (first, e, diff[0])
                self.hints.setdefault(self.key(first), (first, 0, diff[0]))

    def clear(self) -> None:
        self.hints.clear()
        self.bases.clear()

    def _loader(self, p: HloInstruction):
        fe = self.fe

        def value_at(index):
            hint = self.hints.get(self.key(index))
            b, et = fe.kb.b, p.shape.element_type
            st = storage_type(et)
            if hint is None or not unit_stride(p.shape, hint[2]):
                load = b.load(b.gep(fe.parameter_pointer(p), [_offset(fe, p.shape, index)], inbounds=True,
                                    source_etype=st), typ=st)
                fe.target.mark_invariant(load)
                return from_storage(b, load, et)
            first, e, _ = hint
            base = self.bases.get((id(p), self.key(first)))
            if base is None:
                base = b.gep(fe.parameter_pointer(p), [_offset(fe, p.shape, first)], inbounds=True,
                             source_etype=st)
                self.bases[(id(p), self.key(first))] = base
            ptr = base if e == 0 else b.gep(base, [fe.kb.index(e)], inbounds=True, source_etype=st)
            load = b.load(ptr, typ=st)
            fe.target.mark_invariant(load)
            return from_storage(b, load, et)
        return value_at


# ---- report ----------------------------------------------------------------------------------

def maps_report_lines(spec) -> list[str]:
    """The report lines every transpose spec shares: side outputs, thread maps, partition."""
    side = ', '.join('%' + leaf.root.name for leaf in spec.leaves if leaf.hero is None) or '-'
    lines = [f"side outputs (phase 1): {side}",
             f"thread -> input (%{spec.heroes[0].operands[0].name}): {spec.thread_to_input_map()}"]
    lines += [f"thread -> output {i} (%{leaf.root.name}): {spec.thread_to_output_map(i)}"
              for i, leaf in enumerate(spec.leaves)]
    return lines + spec.partitioned.to_text().splitlines()
