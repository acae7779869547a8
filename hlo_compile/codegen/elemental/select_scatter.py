"""select-and-scatter in the elemental emitter, computed per *operand* element (so no two
threads write one element and no atomics are needed).

For operand position ``p``: start from ``init``; for every window that contains ``p``
(window offsets ``k``: the window starts at ``p + pad_low - k``, which must be a multiple of
the stride and inside the source), find the window's selected position exactly as XLA
does — the first position is the initial choice, every later *valid* (non-padding) position
replaces it when the current choice is padding or ``select(current, candidate)`` is false —
and, when it is ``p``, combine the window's source value with ``scatter``. Windows are
visited in row-major order of the source, the order the interpreter combines them in.
Costs window-count × window-size per element: fine for pooling windows.
"""
from __future__ import annotations

import itertools
import math

from llvmlite import ir

from ...hlo import HloInstruction
from .scalar_ops import emit_call_computation
from ..errors import unsupported
from .index_op_table import index_op
from ..llvm_types import I1, compute_type


def _row_major(kb, idx, dims) -> ir.Value:
    b = kb.b
    out = kb.index(0)
    for v, n in zip(idx, dims):
        out = b.add(b.mul(out, kb.index(n)), v)
    return out


@index_op("select-and-scatter")
def _select_and_scatter(fe, inst: HloInstruction, index):
    b, kb = fe.kb.b, fe.kb
    operand, source, init = inst.operands
    window = inst.attr("window", ())
    if any(w.base_dilation != 1 or w.window_dilation != 1 for w in window):
        raise unsupported(inst, "select-and-scatter with dilated windows is not supported yet")
    dims, sdims = operand.shape.dimensions, source.shape.dimensions
    sizes = [w.size for w in window]
    et = operand.shape.element_type
    t = compute_type(et)
    with b.goto_entry_block():
        acc, cur_v, cur_i, cur_ok = b.alloca(t), b.alloca(t), b.alloca(kb.index_type), b.alloca(I1)
    b.store(fe.value(init, ()), acc)
    me = _row_major(kb, index, dims)

    def selected(w) -> ir.Value:
        """Row-major operand index of window ``w``'s selected element (-1: padding)."""
        first = True
        for j in _positions(sizes):
            q = [b.sub(b.add(b.mul(wd, kb.index(win.stride)), kb.index(jd)), kb.index(win.padding_low))
                 for wd, jd, win in zip(w, j, window)]
            conds = [c for qd, n in zip(q, dims)
                     for c in (b.icmp_signed(">=", qd, kb.index(0)), b.icmp_signed("<", qd, kb.index(n)))]
            valid = kb.all_of(conds)
            if first:
                with fe.scope():
                    v = fe.branch(valid, lambda: fe.value(operand, q), lambda: ir.Constant(t, 0))  # noqa: B023 - called here
                b.store(v, cur_v)
                b.store(b.select(valid, _row_major(kb, q, dims), kb.index(-1)), cur_i)
                b.store(valid, cur_ok)
                first = False
                continue
            with kb.if_(valid), fe.scope():
                v = fe.value(operand, q)
                keep = emit_call_computation(b, fe.target, inst.attr("select"), [b.load(cur_v), v])[0]
                take = b.or_(b.not_(b.load(cur_ok)), b.not_(keep))
                with kb.if_(take):
                    b.store(v, cur_v)
                    b.store(_row_major(kb, q, dims), cur_i)
                    b.store(ir.Constant(I1, 1), cur_ok)
        return b.load(cur_i)

    def visit(k) -> None:
        # the window starting at p + pad_low - k, when that is a whole stride inside the source
        w, conds = [], []
        for pd, kd, win, n in zip(index, k, window, sdims):
            start = b.sub(b.add(pd, kb.index(win.padding_low)), kd)
            conds += [b.icmp_signed(">=", start, kb.index(0)),
                      b.icmp_signed("==", b.srem(start, kb.index(win.stride)), kb.index(0))]
            wd = b.sdiv(start, kb.index(win.stride))
            conds.append(b.icmp_signed("<", wd, kb.index(n)))
            w.append(wd)
        with kb.if_(kb.all_of(conds)), fe.scope():
            with kb.if_(b.icmp_signed("==", selected(w), me)), fe.scope():
                src = fe.value(source, w)
                b.store(emit_call_computation(b, fe.target, inst.attr("scatter"), [b.load(acc), src])[0], acc)

    # offsets from the largest down: windows in increasing (row-major) source order
    def nest(d: int, k: list) -> None:
        if d == len(sizes):
            visit(k)
            return
        with kb.loop(0, sizes[d], name=f"{inst.name}.k{d}") as i:
            with fe.scope():
                nest(d + 1, k + [b.sub(kb.index(sizes[d] - 1), i)])
    if math.prod(sizes) > 0:
        nest(0, [])
    return b.load(acc)


def _positions(sizes):
    """Window positions in row-major order (unrolled: windows are small)."""
    return itertools.product(*(range(n) for n in sizes))
