"""Index-transforming ops of the elemental emitter, one small function per opcode.

Each handler gets the ``FusedEmitter``, the instruction and its output index, computes the
index its operand is read at and recurses. Pure index ops use the indexing analysis'
output→input maps (their expressions, and their domains/constraints as the condition under
which an operand is read: pad, concatenate); ops with runtime offsets (dynamic-slice,
dynamic-update-slice, gather) load and clamp their start indices first, as XLA's semantics
require (starts clamped to ``[0, dim - size]``).
"""
from __future__ import annotations

import math
from typing import Sequence

from llvmlite import ir

from ...hlo import HloInstruction
from ...hlo.element_types import bit_width
from ...indexing import affine as A
from ...indexing.indexing_map import IndexingMap
from ...indexing.op_maps import output_to_input
from .affine import AffineEmitter
from .scalar_ops import emit_call_computation, emit_scalar_op
from ..errors import unsupported
from .index_op_table import index_op
from ..llvm_types import compute_type, from_storage, storage_type, to_storage


def _single_map(fe, inst, operand: int = 0) -> IndexingMap:
    entry = output_to_input(inst, 0)[operand]
    if entry is None or len(entry) != 1:
        raise unsupported(inst, "no indexing map for this operand")
    return entry[0]


def _emitter(fe, index: Sequence[ir.Value], m: IndexingMap) -> AffineEmitter:
    return AffineEmitter(fe.kb, index, bounds=lambda v: m.bound(v))


def _domain_condition(fe, ae: AffineEmitter, m: IndexingMap, out_dims: Sequence[int]) -> list[ir.Value]:
    """Conditions for an output index to lie in ``m``'s domain (beyond the output's own bounds)."""
    b, kb = fe.kb.b, fe.kb
    conds = []
    for v, (lo, hi), n in zip(ae.values[0], m.dims, out_dims):
        if lo > 0:
            conds.append(b.icmp_signed(">=", v, kb.index(lo)))
        if hi < n - 1:
            conds.append(b.icmp_signed("<=", v, kb.index(hi)))
    # constraints are checked with the output bounds (the map's dims may be narrower)
    wide = AffineEmitter(fe.kb, ae.values[0], bounds=lambda var: (0, out_dims[var.index] - 1)
                         if var.kind == 0 else m.bound(var))
    return conds + wide.in_bounds(m.constraints)


def mapped_operand_index(fe, inst, index: Sequence[ir.Value]) -> list[ir.Value]:
    """The operand index of a copy, reshape, bitcast, transpose, slice or reverse at ``index``
    (a convert's: ``index`` itself)."""
    if inst.opcode in ("convert", "bitcast-convert"):
        return list(index)
    m = _single_map(fe, inst)
    return _emitter(fe, index, m).emit_all(m.exprs)


@index_op("copy", "reshape", "bitcast", "transpose", "slice", "reverse")
def _mapped(fe, inst, index):
    v = fe.value(inst.operands[0], mapped_operand_index(fe, inst, index))
    src, dst = inst.operands[0].shape.element_type, inst.shape.element_type
    if src != dst:  # a bitcast may also reinterpret the element type (same bit width)
        v = _reinterpret(fe.kb.b, v, src, dst)
    return v


def _reinterpret(b: ir.IRBuilder, v: ir.Value, src: str, dst: str) -> ir.Value:
    st_src, st_dst = storage_type(src), storage_type(dst)
    raw = to_storage(b, v, src)
    if str(st_src) != str(st_dst):
        raw = b.bitcast(raw, st_dst)
    return from_storage(b, raw, dst)


@index_op("bitcast-convert")
def _bitcast_convert(fe, inst, index):
    """Equal widths: the elemental reinterpretation. A width change adds (narrower result) or
    removes (wider result) a minor dimension; piece ``k`` of a wide value is bits
    ``[k*w, (k+1)*w)``, little-endian, as XLA reinterprets memory."""
    op = inst.operands[0]
    src, dst = op.shape.element_type, inst.shape.element_type
    src_bits, dst_bits = bit_width(src), bit_width(dst)
    if src_bits == dst_bits:
        return emit_scalar_op(fe.kb.b, fe.target, inst, [fe.operand_value(inst, 0, index)])
    if min(src_bits, dst_bits) < 8 or "pred" in (src, dst):
        raise unsupported(inst, "bitcast-convert changing the width of pred or sub-byte types")
    b = fe.kb.b
    if src_bits > dst_bits:  # the result's minor dimension picks a piece of the operand element
        wide = _as_bits(b, fe.value(op, list(index[:-1])), src)
        k = b.zext(index[-1], wide.type) if index[-1].type.width < src_bits else b.trunc(index[-1], wide.type)
        piece = b.trunc(b.lshr(wide, b.mul(k, ir.Constant(wide.type, dst_bits))), ir.IntType(dst_bits))
        return _from_bits(b, piece, dst)
    acc = ir.Constant(ir.IntType(dst_bits), 0)
    for k in range(dst_bits // src_bits):
        piece = _as_bits(b, fe.value(op, list(index) + [fe.kb.index(k)]), src)
        acc = b.or_(acc, b.shl(b.zext(piece, acc.type), ir.Constant(acc.type, k * src_bits)))
    return _from_bits(b, acc, dst)


def _as_bits(b: ir.IRBuilder, v: ir.Value, et: str) -> ir.Value:
    """A value of element type ``et`` as an integer of its bit width."""
    return b.bitcast(v, ir.IntType(bit_width(et))) if not isinstance(v.type, ir.IntType) else v


def _from_bits(b: ir.IRBuilder, bits: ir.Value, et: str) -> ir.Value:
    ct = compute_type(et)
    return bits if isinstance(ct, ir.IntType) else b.bitcast(bits, ct)


@index_op("broadcast")
def _broadcast(fe, inst, index):
    return fe.value(inst.operands[0], [index[d] for d in inst.dimensions])


@index_op("iota")
def _iota(fe, inst, index):
    b = fe.kb.b
    v = index[inst.attr("iota_dimension")]
    et = inst.shape.element_type
    t = compute_type(et)
    if isinstance(t, ir.IntType):
        if t.width == 1:
            return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        return b.trunc(v, t) if t.width < v.type.width else (b.zext(v, t) if t.width > v.type.width else v)
    if str(t) in ("half", "bfloat"):
        return b.fptrunc(b.uitofp(v, ir.FloatType()), t)
    return b.uitofp(v, t)


def _clamped(fe, inst, index, exprs, operand) -> list[ir.Value]:
    """``exprs`` over ``inst``'s output index, each clamped into ``operand``'s bounds (where
    the output bounds do not prove it): an index every output element may read at."""
    out_dims = inst.shape.dimensions
    ae = AffineEmitter(fe.kb, index, bounds=lambda v: (0, out_dims[v.index] - 1) if v.kind == 0 else (0, 0))
    clamped = []
    for e, n in zip(exprs, operand.shape.dimensions):
        lo, hi = ae.interval(e)
        if lo < 0:
            e = A.max_(e, 0)
        if hi > n - 1:
            e = A.min_(e, n - 1)
        clamped.append(e)
    return ae.emit_all(clamped)


@index_op("pad")
def _pad(fe, inst, index):
    m = _single_map(fe, inst)
    ae = _emitter(fe, index, m)
    conds = _domain_condition(fe, ae, m, inst.shape.dimensions)
    pad_value = lambda: fe.value(inst.operands[1], ())  # noqa: E731
    if not conds:
        return fe.value(inst.operands[0], ae.emit_all(m.exprs))
    if fe.speculate:
        # in the domain, output i = low + k*step reads element k = floor(i/step) - floor(low/step):
        # one expression whatever low is, so pads of the same operand share its values
        exprs = [A.dim(d) - p.low if p.interior == 0 else A.floordiv(A.dim(d), p.interior + 1) - p.low // (p.interior + 1)
                 for d, p in enumerate(inst.attr("padding"))]
        v = fe.value(inst.operands[0], _clamped(fe, inst, index, exprs, inst.operands[0]))
        return fe.kb.b.select(fe.kb.all_of(conds), v, pad_value())
    return fe.branch(fe.kb.all_of(conds), lambda: fe.value(inst.operands[0], ae.emit_all(m.exprs)), pad_value)


@index_op("concatenate")
def _concatenate(fe, inst, index):
    entries = output_to_input(inst, 0)
    maps = [e[0] for e in entries]
    if fe.speculate:
        vals = [fe.value(op, _clamped(fe, inst, index, m.exprs, op)) for op, m in zip(inst.operands, maps)]
        v = vals[-1]
        for k in reversed(range(len(maps) - 1)):
            conds = _domain_condition(fe, _emitter(fe, index, maps[k]), maps[k], inst.shape.dimensions)
            v = fe.kb.b.select(fe.kb.all_of(conds), vals[k], v)
        return v

    def arm(k: int, ae: AffineEmitter):
        idx = ae.emit_all(maps[k].exprs)
        if fe.prefetch_moves:   # the arm's parameter reads together, where they can merge
            fe.prefetch(inst.operands[k], idx)
        return fe.value(inst.operands[k], idx)

    def pick(k: int):
        m = maps[k]
        ae = _emitter(fe, index, m)
        if k == len(maps) - 1:
            return arm(k, ae)
        conds = _domain_condition(fe, ae, m, inst.shape.dimensions)
        return fe.branch(fe.kb.all_of(conds), lambda: arm(k, ae), lambda: pick(k + 1))
    return pick(0)


def start_index(fe, inst: HloInstruction, operand: int, limit: int) -> ir.Value:
    """A scalar start index operand, clamped to ``[0, limit]``, in the index type."""
    return _start_index_at(fe, inst.operands[operand], (), limit)


@index_op("dynamic-slice")
def _dynamic_slice(fe, inst, index):
    b = fe.kb.b
    src = inst.operands[0]
    sizes = inst.attr("dynamic_slice_sizes")
    starts = [start_index(fe, inst, 1 + d, n - s) for d, (n, s) in enumerate(zip(src.shape.dimensions, sizes))]
    return fe.value(src, [b.add(i, s) for i, s in zip(index, starts)])


@index_op("dynamic-update-slice")
def _dynamic_update_slice(fe, inst, index):
    b, kb = fe.kb.b, fe.kb
    base, upd = inst.operands[0], inst.operands[1]
    udims = upd.shape.dimensions
    starts = [start_index(fe, inst, 2 + d, n - u) for d, (n, u) in enumerate(zip(base.shape.dimensions, udims))]
    rel = [b.sub(i, s) for i, s in zip(index, starts)]
    conds = []
    for r, u in zip(rel, udims):
        # unsigned compare: negative offsets wrap to huge values
        conds.append(b.icmp_unsigned("<", r, kb.index(u)))
    return fe.branch(kb.all_of(conds), lambda: fe.value(upd, rel), lambda: fe.value(base, index))


@index_op("gather")
def _gather(fe, inst, index):
    b, kb = fe.kb.b, fe.kb
    g = inst.gather_dimension_numbers
    operand, indices = inst.operands
    sizes = inst.attr("slice_sizes")
    offset_dims = list(g.offset_dims)
    batch_index = [v for d, v in enumerate(index) if d not in offset_dims]
    ivd = g.index_vector_dim
    starts = [kb.index(0)] * operand.shape.rank
    for k, od in enumerate(g.start_index_map):
        idx = list(batch_index)
        if ivd < indices.shape.rank:
            idx.insert(ivd, kb.index(k))
        limit = operand.shape.dimensions[od] - sizes[od]
        starts[od] = _start_index_at(fe, indices, idx, limit)
    for od, sd in zip(g.operand_batching_dims, g.start_indices_batching_dims):
        # a batching dim reads the operand at the batch position itself (slice size 1)
        starts[od] = batch_index[sd if ivd >= indices.shape.rank or sd < ivd else sd - 1]
    window_dims = [d for d in range(operand.shape.rank)
                   if d not in g.collapsed_slice_dims and d not in g.operand_batching_dims]
    offsets = [kb.index(0)] * operand.shape.rank
    for od, out_d in zip(window_dims, offset_dims):
        offsets[od] = index[out_d]
    return fe.value(operand, [b.add(s, o) for s, o in zip(starts, offsets)])


def _start_index_at(fe, indices: HloInstruction, idx: Sequence[ir.Value], limit: int) -> ir.Value:
    """Element ``idx`` of an index array, clamped to ``[0, limit]`` and in the index type."""
    b, kb = fe.kb.b, fe.kb
    raw = fe.value(indices, idx)
    signed = indices.shape.element_type.startswith("s")
    wide = ir.IntType(max(raw.type.width, kb.index_type.width) + 1)
    v = b.sext(raw, wide) if signed else b.zext(raw, wide)
    v = b.select(b.icmp_signed("<", v, ir.Constant(wide, 0)), ir.Constant(wide, 0), v)
    v = b.select(b.icmp_signed(">", v, ir.Constant(wide, max(limit, 0))), ir.Constant(wide, max(limit, 0)), v)
    return b.trunc(v, kb.index_type)


UNROLLED_REDUCE_ELEMENTS = 64   # an elemental reduce over at most this many elements: no loop
_UNROLLED_OPERAND_NODES = 16    # ... whose operands' computation is at most this many instructions
_UNROLLED_NODES = UNROLLED_REDUCE_ELEMENTS * _UNROLLED_OPERAND_NODES   # ... or, over nested reduces, in all
_NOT_UNROLLED_INSIDE = frozenset({"reduce", "reduce-window", "dot", "convolution", "scatter", "sort", "while",
                                  "call", "conditional", "select-and-scatter"})


def _cheap_to_unroll(operands: Sequence[HloInstruction], elements: int) -> bool:
    """Whether a reduce over ``elements`` elements of ``operands`` is unrolled: the
    instructions computing the operands inside the fusion are few and hold no loop of their
    own (unrolling copies them once per element); a short reduce among them (unrolled in
    turn) counts as its elements times its own operands' instructions, so a reduce over an
    unrolled reduce unrolls while the whole stays within ``_UNROLLED_NODES`` (a scan's levels
    multiply and soon exceed it; n-body's 12 x 3 pairwise sums do not, as in XLA's kernels)."""
    return _unrolls(_unrolled_cost(operands), elements)


def _unrolls(cost: tuple[int, bool] | None, elements: int) -> bool:
    if cost is None:
        return False
    nodes, nested = cost
    return nodes <= _UNROLLED_OPERAND_NODES or (nested and elements * nodes <= _UNROLLED_NODES)


def _unrolled_cost(operands: Sequence[HloInstruction]) -> tuple[int, bool] | None:
    """(instructions emitted for one element of ``operands``, whether a nested reduce is among
    them), or None where a loop that is not unrolled is among them."""
    seen: set[int] = set()
    todo = list(operands)
    nodes, nested = 0, False
    while todo:
        inst = todo.pop()
        if id(inst) in seen or inst.opcode == "parameter" or inst.opcode == "constant":
            continue
        seen.add(id(inst))
        if inst.opcode == "reduce":
            n = len(inst.operands) // 2
            reduced = inst.operands[0].shape.dimensions
            count = math.prod(reduced[d] for d in inst.dimensions)
            inner = _unrolled_cost(inst.operands[:n])
            if count > UNROLLED_REDUCE_ELEMENTS or inner is None or not _unrolls(inner, count):
                return None
            nodes += 1 + count * inner[0]
            nested = True
            todo.extend(inst.operands[n:])
        elif inst.opcode in _NOT_UNROLLED_INSIDE:
            return None
        else:
            nodes += 1
            todo.extend(inst.operands)
        if nodes > _UNROLLED_NODES:
            return None
    return nodes, nested


@index_op("reduce")
def _reduce(fe, inst, index):
    """One thread computes the whole reduction of its output element (XLA's elemental reduce)."""
    b, kb = fe.kb.b, fe.kb
    n = len(inst.operands) // 2
    inputs, inits = inst.operands[:n], inst.operands[n:]
    in_dims = inputs[0].shape.dimensions
    reduced = sorted(inst.dimensions)
    types = [compute_type(i.shape.element_type) for i in inputs]
    with b.goto_entry_block():
        accs = [b.alloca(t) for t in types]
    for acc, init in zip(accs, inits):
        b.store(fe.value(init, ()), acc)
    kept = iter(index)
    operand_index: list = [None if d in reduced else next(kept) for d in range(len(in_dims))]

    def nest(k: int) -> None:
        if k == len(reduced):
            vals = [fe.value(x, operand_index) for x in inputs]
            cur = [b.load(a) for a in accs]
            new = emit_call_computation(b, fe.target, inst.to_apply, cur + vals)
            for a, v in zip(accs, new):
                b.store(v, a)
            return
        d = reduced[k]
        if unroll:
            for i in range(in_dims[d]):
                with fe.scope():
                    operand_index[d] = kb.index(i)
                    nest(k + 1)
            return
        with kb.loop(0, in_dims[d], name=f"{inst.name}.r{d}") as iv:
            with fe.scope():
                operand_index[d] = iv
                nest(k + 1)
    # a short reduction unrolled in full, as XLA's kernels have it (every load independent, in
    # flight at once; the reducer still applied in the same order)
    elements = math.prod(in_dims[d] for d in reduced)
    unroll = elements <= UNROLLED_REDUCE_ELEMENTS and _cheap_to_unroll(inst.operands[:n], elements)
    nest(0)
    out = [b.load(a) for a in accs]
    return out if n > 1 else out[0]


@index_op("map")
def _map(fe, inst, index):
    vals = [fe.operand_value(inst, i, index) for i in range(len(inst.operands))]
    return emit_call_computation(fe.kb.b, fe.target, inst.to_apply, vals)[0]


@index_op("tuple")
def _tuple(fe, inst, index):
    return [fe.value(op, index) for op in inst.operands]


@index_op("get-tuple-element")
def _gte(fe, inst, index):
    whole = fe.value(inst.operands[0], index)
    return whole[inst.tuple_index]


@index_op("reduce-window")
def _reduce_window(fe, inst, index):
    """One thread reduces the window of its output element; positions the window map's
    constraints exclude (padding, base-dilation holes) are skipped, which is the same as
    reducing the init value there when the init is the reducer's identity (XLA's elemental
    emitter does the same)."""
    b, kb = fe.kb.b, fe.kb
    m = _single_map(fe, inst)
    n = len(inst.operands) // 2
    inputs, inits = inst.operands[:n], inst.operands[n:]
    if m.is_known_empty():  # every window lies in padding or base-dilation holes
        out = [fe.value(init, ()) for init in inits]
        return out if n > 1 else out[0]
    types = [compute_type(i.shape.element_type) for i in inputs]
    with b.goto_entry_block():
        accs = [b.alloca(t) for t in types]
    for acc, init in zip(accs, inits):
        b.store(fe.value(init, ()), acc)
    window: list = [None] * len(m.ranges)
    out_dims = (inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape).dimensions
    # the simplifier may narrow the map's dims instead of keeping a constraint: outputs outside
    # them read nothing; constraints are checked with the output's own bounds
    domain = [c for v, (lo, hi), size in zip(index, m.dims, out_dims)
              for c in ([b.icmp_signed(">=", v, kb.index(lo))] if lo > 0 else []) +
              ([b.icmp_signed("<=", v, kb.index(hi))] if hi < size - 1 else [])]

    def wide(var):
        return (0, out_dims[var.index] - 1) if var.kind == 0 else m.bound(var)

    def accumulate() -> None:
        ae = AffineEmitter(kb, index, window, bounds=lambda v: m.bound(v))
        operand_index = ae.emit_all(m.exprs)
        vals = [fe.value(x, operand_index) for x in inputs]
        cur = [b.load(a) for a in accs]
        for a, v in zip(accs, emit_call_computation(b, fe.target, inst.to_apply, cur + vals)):
            b.store(v, a)

    def nest(k: int) -> None:
        if k == len(window):
            conds = domain + AffineEmitter(kb, index, window, bounds=wide).in_bounds(m.constraints)
            if conds:
                with kb.if_(kb.all_of(conds)), fe.scope():
                    accumulate()
            else:
                accumulate()
            return
        lo, hi = m.ranges[k]
        if unroll:
            for i in range(lo, hi + 1):
                with fe.scope():
                    window[k] = kb.index(i)
                    nest(k + 1)
            return
        with kb.loop(lo, hi + 1, name=f"{inst.name}.w{k}") as iv:
            with fe.scope():
                window[k] = iv
                nest(k + 1)
    # a small window unrolled in full (as ``_reduce``; positions still skipped where excluded)
    elements = math.prod(hi - lo + 1 for lo, hi in m.ranges)
    unroll = elements <= UNROLLED_REDUCE_ELEMENTS and _cheap_to_unroll(inst.operands[:n], elements)
    nest(0)
    out = [b.load(a) for a in accs]
    return out if n > 1 else out[0]
