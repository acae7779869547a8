"""Per-instruction indexing maps, output→input and input→output.

``output_to_input(inst, output)`` returns one entry per operand; ``input_to_output(inst,
operand)`` one entry per output (tuple results have several). An entry is a list of maps (a
set, usually one map) or ``None`` for "unknown indexing": ops without a rule never get a guessed
map. Maps are built as XLA builds them: plain for most ops, simplified for reshape/bitcast
(point dims kept), reduce-window and convolution.
"""
from __future__ import annotations

from typing import Callable, Optional

from hlo_compile.hlo.opcodes import ELEMENTWISE

from . import affine as A
from .affine import Expr
from .indexing_map import IndexingMap, RTSource, dims_of
from .reshape_maps import bitcast_map, reshape_map
from .simplifier import fold_rt_vars, simplify, split_clamped_iota_rt_vars
from .window_maps import convolution_maps, reduce_window_maps

Entry = Optional[list[IndexingMap]]
OutToIn = Callable[[object, int], list[Entry]]
InToOut = Callable[[object, int], list[Entry]]


def _array_dims(shape) -> tuple[int, ...]:
    return tuple(shape.dimensions)


def result_shapes(inst) -> list:
    return list(inst.shape.tuple_shapes) if inst.shape.is_tuple else [inst.shape]


def _ds(shape) -> list[tuple[int, int]]:
    return list(dims_of(_array_dims(shape)))


def scalar_read_map(out_shape) -> IndexingMap:
    """Every output element reads the one element of a scalar operand: ``(d..) -> ()``."""
    return IndexingMap.make([], _ds(out_shape))


def scalar_broadcast_map(out_shape) -> IndexingMap:
    """A scalar feeds every output element: ``()[s..] -> (s..)``."""
    n = len(out_shape.dimensions)
    return IndexingMap.make([A.sym(i) for i in range(n)], [], _ds(out_shape))


# ---- output → input -----------------------------------------------------------------------
def _elementwise(inst, out: int) -> list[Entry]:
    res = []
    for op in inst.operands:
        if op.shape.rank == 0 and inst.shape.rank != 0:
            res.append([scalar_read_map(inst.shape)])
        elif tuple(op.shape.dimensions) != tuple(inst.shape.dimensions):
            res.append(_degenerate_read_map(op.shape, inst.shape))
        else:
            res.append([IndexingMap.identity(inst.shape.dimensions)])
    return res


def _degenerate_read_map(op_shape, out_shape) -> Entry:
    """Same-rank operand whose size-1 dims stretch over the result's (the verifier accepts
    this degenerate broadcast; XLA's builder would have written a broadcast): those dims read
    index 0, ``(d0, d1) -> (d0, 0)``."""
    if op_shape.rank != out_shape.rank:
        return None
    exprs = []
    for i, (a, b) in enumerate(zip(op_shape.dimensions, out_shape.dimensions)):
        if a == b:
            exprs.append(A.dim(i))
        elif a == 1:
            exprs.append(A.const(0))
        else:
            return None
    return [IndexingMap.make(exprs, _ds(out_shape))]


def _broadcast(inst, out: int) -> list[Entry]:
    return [[IndexingMap.make([A.dim(d) for d in inst.dimensions], _ds(inst.shape))]]


def _transpose(inst, out: int) -> list[Entry]:
    perm = inst.dimensions
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [[IndexingMap.make([A.dim(inv[j]) for j in range(len(perm))], _ds(inst.shape))]]


def _reverse(inst, out: int) -> list[Entry]:
    dims = inst.shape.dimensions
    exprs = [(-A.dim(i) + (n - 1)) if i in inst.dimensions else A.dim(i) for i, n in enumerate(dims)]
    return [[IndexingMap.make(exprs, _ds(inst.shape))]]


def _slice(inst, out: int) -> list[Entry]:
    exprs = [A.dim(i) * s.stride + s.start for i, s in enumerate(inst.attr("slice"))]
    return [[IndexingMap.make(exprs, _ds(inst.shape))]]


def _reshape(inst, out: int) -> list[Entry]:
    m = reshape_map(_array_dims(inst.shape), _array_dims(inst.operands[0].shape))
    return [[m]]


def _bitcast(inst, out: int) -> list[Entry]:
    m = bitcast_map(inst.shape, inst.operands[0].shape)
    return [None if m is None else [m]]


def _concatenate(inst, out: int) -> list[Entry]:
    axis = inst.dimensions[0]
    res: list[Entry] = []
    offset = 0
    for op in inst.operands:
        n = op.shape.dimensions[axis]
        dims = _ds(inst.shape)
        dims[axis] = (offset, offset + n - 1)
        exprs = [A.dim(i) - (offset if i == axis else 0) for i in range(inst.shape.rank)]
        res.append([IndexingMap.make(exprs, dims)])
        offset += n
    return res


def _reduce(inst, out: int) -> list[Entry]:
    n = len(inst.operands) // 2
    red = set(inst.dimensions)
    in_dims = inst.operands[0].shape.dimensions
    exprs: list[Expr] = []
    ranges = []
    kept = 0
    for i, size in enumerate(in_dims):
        if i in red:
            exprs.append(A.sym(len(ranges)))
            ranges.append((0, size - 1))
        else:
            exprs.append(A.dim(kept))
            kept += 1
    out_shape = result_shapes(inst)[out]
    m = IndexingMap.make(exprs, _ds(out_shape), ranges)
    return [[m] for _ in range(n)] + [[scalar_read_map(out_shape)] for _ in range(n)]


def _dot(inst, out: int) -> list[Entry]:
    dn = inst.dot_dimension_numbers
    lhs, rhs = inst.operands
    nb = len(dn.lhs_batch_dimensions)
    lfree = [i for i in range(lhs.shape.rank) if i not in dn.lhs_batch_dimensions + dn.lhs_contracting_dimensions]
    rfree = [i for i in range(rhs.shape.rank) if i not in dn.rhs_batch_dimensions + dn.rhs_contracting_dimensions]
    ranges = [(0, lhs.shape.dimensions[c] - 1) for c in dn.lhs_contracting_dimensions]

    def side(rank, batch, contracting, free, first_free):
        exprs: list[Expr] = [A.Const(0)] * rank
        for k, b in enumerate(batch):
            exprs[b] = A.dim(k)
        for k, c in enumerate(contracting):
            exprs[c] = A.sym(k)
        for k, f in enumerate(free):
            exprs[f] = A.dim(first_free + k)
        return IndexingMap.make(exprs, _ds(inst.shape), ranges)

    return [[side(lhs.shape.rank, dn.lhs_batch_dimensions, dn.lhs_contracting_dimensions, lfree, nb)],
            [side(rhs.shape.rank, dn.rhs_batch_dimensions, dn.rhs_contracting_dimensions, rfree, nb + len(lfree))]]


def _pad(inst, out: int) -> list[Entry]:
    exprs: list[Expr] = []
    dims = []
    cons: dict[Expr, tuple[int, int]] = {}
    for i, (p, n, o) in enumerate(zip(inst.attr("padding"), inst.operands[0].shape.dimensions,
                                      inst.shape.dimensions)):
        step = p.interior + 1
        x = A.dim(i) - p.low
        hi = p.low + (n - 1) * step
        dims.append((max(p.low, 0), min(hi, o - 1)))
        if step > 1:
            exprs.append(A.floordiv(x, step))
            cons[A.mod(x, step)] = (0, 0)
        else:
            exprs.append(x)
    return [[IndexingMap.make(exprs, dims, constraints=cons)], [scalar_read_map(inst.shape)]]


def _dynamic_slice(inst, out: int) -> list[Entry]:
    src = inst.operands[0]
    sizes = inst.attr("dynamic_slice_sizes")
    offsets = inst.operands[1:]
    read = scalar_read_map(inst.shape)
    rts = [(0, n - s) for n, s in zip(src.shape.dimensions, sizes)]
    exprs = [A.dim(i) + A.rt(i) for i in range(inst.shape.rank)]
    srcs = [RTSource(o, read) for o in offsets]
    return [[IndexingMap.make(exprs, _ds(inst.shape), rts=rts, rt_sources=srcs)]] + [[read] for _ in offsets]


def _dynamic_update_slice(inst, out: int) -> list[Entry]:
    upd = inst.operands[1]
    offsets = inst.operands[2:]
    read = scalar_read_map(inst.shape)
    rts = [(0, n - u) for n, u in zip(inst.shape.dimensions, upd.shape.dimensions)]
    exprs = [A.dim(i) - A.rt(i) for i in range(inst.shape.rank)]
    srcs = [RTSource(o, read) for o in offsets]
    return ([[IndexingMap.identity(inst.shape.dimensions)],
             [IndexingMap.make(exprs, _ds(inst.shape), rts=rts, rt_sources=srcs)]] + [[read] for _ in offsets])


def _is_simplified_gather(inst) -> bool:
    g = inst.gather_dimension_numbers
    op, idx = inst.operands
    return (idx.shape.rank == 2 and g.index_vector_dim == 1 and not g.collapsed_slice_dims
            and not g.operand_batching_dims and tuple(g.offset_dims) == tuple(range(1, op.shape.rank + 1))
            and len(g.start_index_map) == idx.shape.dimensions[1])


def _gather(inst, out: int) -> list[Entry]:
    if not _is_simplified_gather(inst):
        return [None, None]
    g = inst.gather_dimension_numbers
    op, idx = inst.operands
    sizes = inst.attr("slice_sizes")
    exprs: list[Expr] = [A.dim(j + 1) for j in range(op.shape.rank)]
    rts, srcs = [], []
    for k, j in enumerate(g.start_index_map):
        exprs[j] = exprs[j] + A.rt(k)
        rts.append((0, op.shape.dimensions[j] - sizes[j]))
        srcs.append(RTSource(idx, IndexingMap.make([A.dim(0), k], _ds(inst.shape))))
    operand_map = IndexingMap.make(exprs, _ds(inst.shape), rts=rts, rt_sources=srcs)
    index_map = IndexingMap.make([A.dim(0), A.sym(0)], _ds(inst.shape), [(0, idx.shape.dimensions[1] - 1)])
    # start indices that are constants or an iota are known (XLA's FoldRTVarsAndConstructIndexingMap)
    return [split_clamped_iota_rt_vars(fold_rt_vars(operand_map).remove_unused_symbols()), [index_map]]


def _reduce_window(inst, out: int) -> list[Entry]:
    return reduce_window_maps(inst, result_shapes(inst)[out])


def _convolution(inst, out: int) -> list[Entry]:
    return convolution_maps(inst)


OUTPUT_TO_INPUT: dict[str, OutToIn] = {
    "broadcast": _broadcast, "transpose": _transpose, "reverse": _reverse, "slice": _slice,
    "reshape": _reshape, "bitcast": _bitcast, "concatenate": _concatenate, "reduce": _reduce, "dot": _dot,
    "pad": _pad, "dynamic-slice": _dynamic_slice, "dynamic-update-slice": _dynamic_update_slice,
    "gather": _gather, "reduce-window": _reduce_window, "convolution": _convolution, "map": _elementwise,
}
for _op in ELEMENTWISE:
    OUTPUT_TO_INPUT[_op] = _elementwise


def output_to_input(inst, output: int = 0) -> list[Entry]:
    """Maps from output ``output`` of ``inst`` to each operand (None: unknown)."""
    fn = OUTPUT_TO_INPUT.get(inst.opcode)
    if fn is None or any(not s.is_array for s in result_shapes(inst)):
        return [None for _ in inst.operands]
    try:
        return fn(inst, output)
    except (KeyError, ValueError, IndexError, TypeError):
        return [None for _ in inst.operands]


# ---- input → output -----------------------------------------------------------------------
def _i_elementwise(inst, k: int) -> list[Entry]:
    op = inst.operands[k]
    if op.shape.rank == 0 and inst.shape.rank != 0:
        return [[scalar_broadcast_map(inst.shape)]]
    if tuple(op.shape.dimensions) != tuple(inst.shape.dimensions):
        return [None]
    return [[IndexingMap.identity(inst.shape.dimensions)]]


def _i_broadcast(inst, k: int) -> list[Entry]:
    exprs: list[Expr] = []
    ranges = []
    for j, n in enumerate(inst.shape.dimensions):
        if j in inst.dimensions:
            exprs.append(A.dim(inst.dimensions.index(j)))
        else:
            exprs.append(A.sym(len(ranges)))
            ranges.append((0, n - 1))
    return [[IndexingMap.make(exprs, _ds(inst.operands[0].shape), ranges)]]


def _i_transpose(inst, k: int) -> list[Entry]:
    return [[IndexingMap.make([A.dim(p) for p in inst.dimensions], _ds(inst.operands[0].shape))]]


def _i_reverse(inst, k: int) -> list[Entry]:
    return _reverse(inst, 0)


def _i_slice(inst, k: int) -> list[Entry]:
    exprs: list[Expr] = []
    dims = []
    cons: dict[Expr, tuple[int, int]] = {}
    for i, (s, o) in enumerate(zip(inst.attr("slice"), inst.shape.dimensions)):
        x = A.dim(i) - s.start
        dims.append((s.start, s.start + (o - 1) * s.stride))
        if s.stride > 1:
            exprs.append(A.floordiv(x, s.stride))
            cons[A.mod(x, s.stride)] = (0, 0)
        else:
            exprs.append(x)
    return [[IndexingMap.make(exprs, dims, constraints=cons)]]


def _i_reshape(inst, k: int) -> list[Entry]:
    return [[reshape_map(_array_dims(inst.operands[0].shape), _array_dims(inst.shape))]]


def _i_bitcast(inst, k: int) -> list[Entry]:
    m = bitcast_map(inst.operands[0].shape, inst.shape)
    return [None if m is None else [m]]


def _i_concatenate(inst, k: int) -> list[Entry]:
    axis = inst.dimensions[0]
    offset = sum(op.shape.dimensions[axis] for op in inst.operands[:k])
    exprs = [A.dim(i) + (offset if i == axis else 0) for i in range(inst.shape.rank)]
    return [[IndexingMap.make(exprs, _ds(inst.operands[k].shape))]]


def _i_reduce(inst, k: int) -> list[Entry]:
    n = len(inst.operands) // 2
    outs = result_shapes(inst)
    if k >= n:
        return [[scalar_broadcast_map(s)] for s in outs]
    red = set(inst.dimensions)
    exprs = [A.dim(i) for i in range(inst.operands[k].shape.rank) if i not in red]
    m = IndexingMap.make(exprs, _ds(inst.operands[k].shape))
    return [[m] for _ in outs]


def _i_dot(inst, k: int) -> list[Entry]:
    dn = inst.dot_dimension_numbers
    lhs, rhs = inst.operands
    lfree = [i for i in range(lhs.shape.rank) if i not in dn.lhs_batch_dimensions + dn.lhs_contracting_dimensions]
    rfree = [i for i in range(rhs.shape.rank) if i not in dn.rhs_batch_dimensions + dn.rhs_contracting_dimensions]
    me, other_free = (lhs, rfree) if k == 0 else (rhs, lfree)
    batch = dn.lhs_batch_dimensions if k == 0 else dn.rhs_batch_dimensions
    my_free = lfree if k == 0 else rfree
    other = rhs if k == 0 else lhs
    exprs: list[Expr] = [A.dim(b) for b in batch]
    sym_part = [A.sym(j) for j in range(len(other_free))]
    ranges = [(0, other.shape.dimensions[f] - 1) for f in other_free]
    mine = [A.dim(f) for f in my_free]
    exprs += (mine + sym_part) if k == 0 else (sym_part + mine)
    return [[IndexingMap.make(exprs, _ds(me.shape), ranges)]]


def _i_pad(inst, k: int) -> list[Entry]:
    if k == 1:
        return [[scalar_broadcast_map(inst.shape)]]
    exprs: list[Expr] = []
    cons: dict[Expr, tuple[int, int]] = {}
    for i, (p, o) in enumerate(zip(inst.attr("padding"), inst.shape.dimensions)):
        e = A.dim(i) * (p.interior + 1) + p.low
        exprs.append(e)
        if p.low < 0 or p.high < 0:
            cons[e] = (0, o - 1)
    return [[IndexingMap.make(exprs, _ds(inst.operands[0].shape), constraints=cons)]]


def _i_dynamic_slice(inst, k: int) -> list[Entry]:
    if k > 0:
        return [[scalar_broadcast_map(inst.shape)]]
    src = inst.operands[0]
    sizes = inst.attr("dynamic_slice_sizes")
    rts = [(0, n - s) for n, s in zip(src.shape.dimensions, sizes)]
    exprs = [A.dim(i) - A.rt(i) for i in range(src.shape.rank)]
    cons = {e: (0, s - 1) for e, s in zip(exprs, sizes)}
    srcs = [RTSource(o, None) for o in inst.operands[1:]]
    return [[IndexingMap.make(exprs, _ds(src.shape), rts=rts, constraints=cons, rt_sources=srcs)]]


def _i_dynamic_update_slice(inst, k: int) -> list[Entry]:
    if k == 0:
        return [[IndexingMap.identity(inst.shape.dimensions)]]
    if k >= 2:
        return [[scalar_broadcast_map(inst.shape)]]
    upd = inst.operands[1]
    rts = [(0, n - u) for n, u in zip(inst.shape.dimensions, upd.shape.dimensions)]
    srcs = [RTSource(o, None) for o in inst.operands[2:]]
    exprs = [A.dim(i) + A.rt(i) for i in range(upd.shape.rank)]
    return [[IndexingMap.make(exprs, _ds(upd.shape), rts=rts, rt_sources=srcs)]]


INPUT_TO_OUTPUT: dict[str, InToOut] = {
    "broadcast": _i_broadcast, "transpose": _i_transpose, "reverse": _i_reverse, "slice": _i_slice,
    "reshape": _i_reshape, "bitcast": _i_bitcast, "concatenate": _i_concatenate, "reduce": _i_reduce,
    "dot": _i_dot, "pad": _i_pad, "dynamic-slice": _i_dynamic_slice,
    "dynamic-update-slice": _i_dynamic_update_slice, "map": _i_elementwise,
}
for _op in ELEMENTWISE:
    INPUT_TO_OUTPUT[_op] = _i_elementwise


def input_to_output(inst, operand: int) -> list[Entry]:
    """Maps from operand ``operand`` of ``inst`` to each output (None: unknown)."""
    outs = result_shapes(inst)
    fn = INPUT_TO_OUTPUT.get(inst.opcode)
    if fn is None or any(not s.is_array for s in outs) or not inst.operands[operand].shape.is_array:
        return [None for _ in outs]
    try:
        return fn(inst, operand)
    except (KeyError, ValueError, IndexError, TypeError):
        return [None for _ in outs]


def simplified(entry: Entry, fold_point_dims: bool = True) -> Entry:
    if entry is None:
        return None
    out: dict = {}
    for m in entry:
        for s in split_clamped_iota_rt_vars(simplify(m, fold_point_dims).remove_unused_symbols(), fold_point_dims):
            out.setdefault(s.key(), s)
    return list(out.values())
