"""Vector global accesses of a thread's adjacent elements along the sort dim.

XLA's sort kernels have each thread copy ``kUnrollFactor`` (4) adjacent elements of a row between
global and shared memory, so that its loads and stores are vectors (``ld.global.v4.b32``,
``st.global.v4.b32``). Here the emitters say which elements go together (a *group*: ``g``
adjacent positions ``first .. first + g - 1`` along the sort dim of one row) and these helpers
access them as explicit LLVM vectors instead of hoping that LLVM merges scalar accesses whose
offsets it cannot always prove adjacent and aligned.

When a buffer of ``shape`` can take vectors of ``k`` elements (``chunk``):

- the sort dim is unit-stride in its layout (only size-1 dims more minor, no tiles);
- the row length ``n`` is a multiple of ``k``: every dim more major than the sort dim then has
  a stride that is a multiple of ``n``, and the group's first position a multiple of ``g`` (a
  multiple of ``k``), so every vector starts at an element offset that is a multiple of ``k``;
- ``k`` elements are at most 16 bytes (the widest access: ``v4.b32``/``v2.b64``), and kernel
  buffers are 16-byte aligned (the targets declare every kernel pointer ``align 16``), so each
  vector is aligned to its own size.

Otherwise ``k`` is 1 and the accesses are scalars, as before. A parameter is read as vectors
where the sort operands read it at their own index: the operand itself, or through elementwise
ops of the operands' shape (``params_at_operand_index``); the vector's lanes are seeded into the
fused emitter at each element's index, so the prologue computes on them unchanged.
"""
from __future__ import annotations

from typing import Sequence

from llvmlite import ir

from ....hlo import HloInstruction
from ....hlo.opcodes import ELEMENTWISE
from ....hlo.layout import unit_stride
from ....hlo.shape import Shape
from ...elemental.fused_emitter import FusedEmitter
from ...llvm_types import from_storage, storage_bytes, storage_type
from ...target import KernelParam

MAX_VECTOR_BYTES = 16        # ld/st.global.v4.b32, v2.b64: the widest single access
BUFFER_ALIGN = KernelParam.align  # every kernel pointer is declared with this alignment (16)



def group_size(row_length: int, slots: int) -> int:
    """The most adjacent slots (a power of two, at most ``slots``) whose positions are either
    all inside the row or all past it: the largest power of two dividing both."""
    g = 1
    while g * 2 <= slots and slots % (g * 2) == 0 and row_length % (g * 2) == 0:
        g *= 2
    return g


def _vectorizable_type(et: str) -> bool:
    t = storage_type(et)
    return isinstance(t, (ir.IntType, ir.HalfType, ir.FloatType, ir.DoubleType)) or str(t) == "bfloat"


def chunk(shape: Shape, sort_dim: int, group: int) -> int:
    """Elements per vector access to a buffer of ``shape`` for groups of ``group`` adjacent
    positions along ``sort_dim`` (``group`` divides the row length): 1 where it takes no
    vectors (module docstring)."""
    et = shape.element_type
    if group < 2 or not unit_stride(shape, sort_dim) or not _vectorizable_type(et):
        return 1
    k = group
    while k > 1 and k * storage_bytes(et) > min(MAX_VECTOR_BYTES, BUFFER_ALIGN):
        k //= 2
    return k


def params_at_operand_index(hero: HloInstruction, dims: Sequence[int]) -> list[HloInstruction]:
    """Fusion parameters that the hero's operands read at the operands' own index: an operand
    that is a parameter, and parameters reached from an operand through elementwise ops, every
    one of the operands' dims (they pass the index on unchanged)."""
    dims = tuple(dims)
    out: list[HloInstruction] = []
    seen: set[int] = set()
    stack = list(hero.operands)
    while stack:
        inst = stack.pop()
        if id(inst) in seen or not inst.shape.is_array or tuple(inst.shape.dimensions) != dims:
            continue
        seen.add(id(inst))
        if inst.opcode == "parameter":
            out.append(inst)
        elif inst.opcode in ELEMENTWISE:
            stack.extend(inst.operands)
    return sorted(out, key=lambda p: p.parameter_number)


def _lane_pointer(b: ir.IRBuilder, base: ir.Value, st: ir.Type, lane: int, index_type: ir.IntType) -> ir.Value:
    return base if lane == 0 else b.gep(base, [ir.Constant(index_type, lane)], inbounds=True, source_etype=st)


def load_group(fe: FusedEmitter, param: HloInstruction, indices: Sequence[Sequence[ir.Value]], k: int) -> list:
    """Parameter ``param`` at the group's ``indices`` (adjacent along the sort dim, the first
    one first), as vectors of ``k`` elements (``chunk``), in compute types."""
    b, kb = fe.kb.b, fe.kb
    et = param.shape.element_type
    st = storage_type(et)
    base = b.gep(fe.parameter_pointer(param), [fe.offset(param.shape, indices[0])], inbounds=True,
                 source_etype=st)
    vt = ir.VectorType(st, k)
    out: list = []
    for c in range(0, len(indices), k):
        vec = b.load(_lane_pointer(b, base, st, c, kb.index_type), typ=vt, align=k * storage_bytes(et))
        fe.target.mark_invariant(vec)
        out += [from_storage(b, b.extract_element(vec, ir.Constant(ir.IntType(32), e)), et) for e in range(k)]
    return out


def store_group(fe: FusedEmitter, shape: Shape, ptr: ir.Value, first: Sequence[ir.Value],
                stored: Sequence[ir.Value], k: int) -> None:
    """Store ``stored`` (storage-type values of adjacent positions along the sort dim, the
    first at index ``first``) into output buffer ``ptr`` of ``shape`` as vectors of ``k``."""
    b, kb = fe.kb.b, fe.kb
    et = shape.element_type
    st = storage_type(et)
    base = b.gep(ptr, [fe.offset(shape, first)], inbounds=True, source_etype=st)
    vt = ir.VectorType(st, k)
    for c in range(0, len(stored), k):
        vec: ir.Value = ir.Constant(vt, None)
        for e in range(k):
            vec = b.insert_element(vec, stored[c + e], ir.Constant(ir.IntType(32), e))
        b.store(vec, _lane_pointer(b, base, st, c, kb.index_type), align=k * storage_bytes(et))
