"""Range-based simplification of indexing maps (XLA's IndexingMap::Simplify, in our words).

Expressions: a node whose range is one value becomes that constant; ``mod`` disappears when
its dividend stays inside one period; ``floordiv``/``mod`` drop summands that are multiples
of the divisor and summands too small to change the result, and fold nested divisions;
``(x floordiv c) * (c*k) + (x mod c) * k`` recombines to ``x * k``; min/max with ordered
ranges pick a side. Constraints: simplified like results, moved onto bare variables where
possible (``e + c``, ``k * e``, ``e floordiv c``), dropped when always true, and an
unsatisfiable one makes the map KNOWN EMPTY.
"""
from __future__ import annotations

from dataclasses import replace
from math import gcd
from typing import Callable

from . import affine as A
from .affine import DIM, RT, Const, DivMod, Expr, Interval, MinMax, Sum, Var
from .indexing_map import IndexingMap
from .memo import BoundedMemo

RangeFn = Callable[[Expr], Interval]


class ExprSimplifier:
    """Simplifies expressions given variable bounds and known constraint ranges."""

    def __init__(self, m: IndexingMap, fold_point_dims: bool = True):
        self.m = m
        self.fold_point_dims = fold_point_dims
        self.known = dict(m.constraints)

    def bounds(self, v: Var) -> Interval:
        return self.m.bound(v)

    def range(self, e: Expr) -> Interval:
        return A.interval(e, self.bounds, self.known.get)

    def simplify(self, e: Expr) -> Expr:
        for _ in range(8):
            new = A.rebuild(e, self._rewrite)
            if new == e:
                return new
            e = new
        return e

    # one node, children already simplified
    def _rewrite(self, e: Expr) -> Expr:
        if isinstance(e, Const):
            return e
        if isinstance(e, Var):
            lo, hi = self.bounds(e)
            if lo == hi and (self.fold_point_dims or e.kind != DIM):
                return Const(lo)
            return e
        lo, hi = self.range(e)
        if lo == hi:
            return Const(lo)
        if isinstance(e, DivMod):
            return self._divmod(e)
        if isinstance(e, MinMax):
            (a0, a1), (b0, b1) = self.range(e.lhs), self.range(e.rhs)
            if e.op == "min":
                return e.lhs if a1 <= b0 else e.rhs if b1 <= a0 else e
            return e.lhs if a0 >= b1 else e.rhs if b0 >= a1 else e
        return e

    def _divmod(self, e: DivMod) -> Expr:
        m, x = e.rhs, e.lhs
        lo, hi = self.range(x)
        if e.op == "ceildiv":
            return e
        if lo // m == hi // m:  # one period
            q = lo // m
            return Const(q) if e.op == "floordiv" else A.add(x, -q * m)
        if isinstance(x, DivMod) and e.op == "floordiv":
            if x.op == "floordiv":  # (y floordiv a) floordiv b = y floordiv ab
                return A.floordiv(x.lhs, x.rhs * m)
            if x.op == "mod" and x.rhs % m == 0:  # (y mod ab) floordiv a = (y floordiv a) mod b
                return A.mod(A.floordiv(x.lhs, m), x.rhs // m)
        if isinstance(x, DivMod) and e.op == "mod" and x.op == "mod" and x.rhs % m == 0:
            return A.mod(x.lhs, m)
        terms, c = A.linear_parts(x)
        outer = {a: k // m for a, k in terms.items() if k % m == 0}
        rest = {a: k for a, k in terms.items() if k % m != 0}
        if e.op == "floordiv":
            q, c = divmod(c, m)
        else:
            q = 0
            if c % m == 0:
                c = 0
        out_part = A.add(A.make_sum(outer, 0), q)
        inner = A.make_sum(rest, c)
        if e.op == "floordiv":
            split = self._split(inner, m, "floordiv")
            if split is not None:
                return A.add(out_part, split)
            if outer or q:
                return A.add(out_part, A.floordiv(inner, m))
            return e
        split = self._split(inner, m, "mod")
        if split is not None:
            return split
        if outer:
            return A.mod(inner, m)
        return e

    def _split(self, x: Expr, m: int, op: str) -> Expr | None:
        """``x = g*y + r`` with ``g | m`` and ``r`` in [0, g): ``x floordiv m = y floordiv
        (m/g)`` and ``x mod m = (y mod (m/g)) * g + r``."""
        terms, c = A.linear_parts(x)
        lo, hi = self.range(x)
        if 0 <= lo and hi < m:
            return Const(0) if op == "floordiv" else x
        order = sorted(terms.items(), key=lambda t: -abs(t[1]))
        for k in range(1, len(order) + 1):
            big = dict(order[:k])
            g = m
            for v in big.values():
                g = gcd(g, v)
            if g <= 1:
                continue
            small = A.make_sum(dict(order[k:]), c)
            slo, shi = self.range(small)
            if not (0 <= slo and shi < g):
                continue
            y = A.make_sum({a: v // g for a, v in big.items()}, 0)
            if op == "floordiv":
                return A.floordiv(y, m // g)
            return A.add(A.mul(A.mod(y, m // g), g), small)
        return None


# simplify() is a pure function of the map's fields; a compile asks for the same few maps
# many times over (one module's layouts, reshapes and thread maps: ResNet-50, 1,929 calls of
# which 104 distinct), so results are kept. The key is every field the result depends on or
# carries (exprs, domain, constraints in their order, rt_sources, dim_names) and the flag;
# maps whose runtime variables have sources (instructions) are not kept. IndexingMap and
# Expr are frozen, so a kept result can be shared.
_MEMO: BoundedMemo[IndexingMap] = BoundedMemo(4096)


def simplify(m: IndexingMap, fold_point_dims: bool = True) -> IndexingMap:
    """Simplify constraints and results to a fixpoint (``fold_point_dims=False`` keeps dims
    with a one-value interval as variables, as reshape and bitcast maps do)."""
    if m.undefined:
        return m
    if any(src is not None for src in m.rt_sources):
        return _simplify(m, fold_point_dims)
    key = (m.exprs, m.dims, m.ranges, m.rts, m.constraints, m.rt_sources, m.dim_names, fold_point_dims)
    return _MEMO.get(key, lambda: _simplify(m, fold_point_dims))


def _simplify(m: IndexingMap, fold_point_dims: bool) -> IndexingMap:
    for _ in range(12):
        if m.is_known_empty():
            return m.known_empty_like()
        new = _simplify_constraints(m, fold_point_dims)
        if new.is_known_empty():
            return new.known_empty_like()
        new = fold_rt_vars(new)
        s = ExprSimplifier(new, fold_point_dims)
        new = replace(new, exprs=tuple(s.simplify(e) for e in new.exprs))
        new = _fold_point_symbols(new)
        if new.key() == m.key():
            return new
        m = new
    return m


def _fold_point_symbols(m: IndexingMap) -> IndexingMap:
    def fn(v: Var) -> Expr:
        if v.kind != DIM:
            lo, hi = m.bound(v)
            if lo == hi:
                return Const(lo)
        return v
    return m.replace_vars(fn)


def fold_rt_vars(m: IndexingMap) -> IndexingMap:
    """Replace runtime variables whose source is a scalar constant (inside the feasible
    interval) or an iota whose values all lie inside it."""
    if not m.rts or not m.rt_sources:
        return m
    subst: dict[int, Expr] = {}
    for i, src in enumerate(m.rt_sources):
        if src is None or getattr(src.instruction, "opcode", None) is None:
            continue
        inst = src.instruction
        lo, hi = m.rts[i]
        if inst.opcode == "constant" and inst.shape.is_array and inst.shape.rank == 0:
            try:
                v = int(inst.literal)
            except (TypeError, ValueError):
                continue
            if lo <= v <= hi:
                subst[i] = Const(v)
        elif inst.opcode == "iota" and src.map is not None and not src.map.ranges and not src.map.rts:
            d = inst.attr("iota_dimension", 0)
            n = inst.shape.dimensions[d]
            if 0 <= lo and n - 1 <= hi:
                subst[i] = src.map.exprs[d]
    if not subst:
        return m

    def fn(v: Var) -> Expr:
        return subst.get(v.index, v) if v.kind == RT else v
    return m.replace_vars(fn)


def _iota_rt_var(m: IndexingMap) -> tuple[int, Expr, int] | None:
    """(the runtime variable, the iota value it reads as an expression of the map's dims,
    the iota's largest value) of the first runtime variable whose source is an iota with values
    outside the variable's feasible interval; None when there is none."""
    for i, src in enumerate(m.rt_sources):
        if i >= len(m.rts) or src is None or getattr(src.instruction, "opcode", None) != "iota":
            continue
        if src.map is None or src.map.ranges or src.map.rts or src.map.undefined or src.map.constraints:
            continue
        d = src.instruction.attr("iota_dimension", 0)
        n = src.instruction.shape.dimensions[d]
        lo, hi = m.rts[i]
        if n > 0 and not (0 <= lo and n - 1 <= hi) and d < len(src.map.exprs):
            return i, src.map.exprs[d], n - 1
    return None


def split_clamped_iota_rt_vars(m: IndexingMap, fold_point_dims: bool = True) -> list[IndexingMap]:
    """``m`` as maps without runtime variables read from an iota, exactly.

    A runtime variable is a start index clamped to its feasible interval ``[lo, hi]`` (gather,
    dynamic-slice). Read from an iota, its value is known: the iota's value ``e`` (an
    expression of the dims), clamped. Where every value of the iota is inside ``[lo, hi]``
    the variable is ``e`` (``simplify`` folds it: XLA's map). Where not, XLA still folds it to
    ``e`` (``OptimizeHloRTVar``; notes/xla.md, surprises 2), a map that names elements out of
    bounds and misses the clamped ones; we split the domain instead: ``e`` where ``e`` is in
    ``[lo, hi]``, the constant ``lo`` below, ``hi`` above, each piece simplified, empty
    pieces dropped."""
    found = _iota_rt_var(m) if not m.undefined and not m.is_known_empty() else None
    if found is None:
        return [m]
    i, e, top = found
    lo, hi = m.rts[i]
    out: list[IndexingMap] = []
    for clo, chi, value in ((0, lo - 1, Const(lo)), (max(lo, 0), hi, e), (hi + 1, top, Const(hi))):
        if clo > chi:
            continue

        def fn(v: Var, value=value) -> Expr:
            return value if v.kind == RT and v.index == i else v
        piece = m.with_constraint(e, clo, chi).replace_vars(fn)
        piece = simplify(piece, fold_point_dims).remove_unused_symbols()
        if not piece.is_known_empty():
            out.extend(split_clamped_iota_rt_vars(piece, fold_point_dims))
    return out or [m.known_empty_like()]


def _simplify_constraints(m: IndexingMap, fold_point_dims: bool) -> IndexingMap:
    dims, ranges, rts = list(m.dims), list(m.ranges), list(m.rts)
    work = list(m.constraints)
    for _ in range(8):
        cur = replace(m, dims=tuple(dims), ranges=tuple(ranges), rts=tuple(rts), constraints=tuple(work))
        s = ExprSimplifier(replace(cur, constraints=()), True)
        out: dict[Expr, Interval] = {}
        changed = False
        for e, (lo, hi) in work:
            e2, lo2, hi2 = _normalise(s.simplify(e), lo, hi)
            if (e2, lo2, hi2) != (e, lo, hi):
                changed = True
            if lo2 > hi2:
                return replace(cur, constraints=((Const(0), (1, 0)),))
            if isinstance(e2, Const):
                if not lo2 <= e2.value <= hi2:
                    return replace(cur, constraints=((Const(0), (1, 0)),))
                changed = True
                continue
            if isinstance(e2, Var):
                store = (dims, ranges, rts)[e2.kind]
                plo, phi = store[e2.index]
                store[e2.index] = (max(plo, lo2), min(phi, hi2))
                changed = True
                continue
            rlo, rhi = s.range(e2)
            if lo2 <= rlo and rhi <= hi2:
                changed = True
                continue
            if rhi < lo2 or rlo > hi2:
                return replace(cur, constraints=((Const(0), (1, 0)),))
            if e2 in out:
                lo2, hi2 = max(lo2, out[e2][0]), min(hi2, out[e2][1])
            out[e2] = (lo2, hi2)
        work = list(out.items())
        if not changed:
            break
    return replace(m, dims=tuple(dims), ranges=tuple(ranges), rts=tuple(rts), constraints=tuple(work))


def _normalise(e: Expr, lo: int, hi: int) -> tuple[Expr, int, int]:
    """Move constants, common factors and outer divisions from ``e`` to the bounds."""
    for _ in range(8):
        if isinstance(e, Sum):
            if e.const:
                lo, hi = lo - e.const, hi - e.const
                e = A.make_sum(dict(e.terms), 0)
                continue
            g = 0
            for _, k in e.terms:
                g = gcd(g, k)
            if all(k < 0 for _, k in e.terms):
                g = -g
            if g not in (0, 1):
                e = A.make_sum({a: k // g for a, k in e.terms}, 0)
                if g < 0:
                    lo, hi, g = -hi, -lo, -g
                lo, hi = -((-lo) // g), hi // g
                continue
        if isinstance(e, DivMod) and e.op == "floordiv":
            lo, hi = lo * e.rhs, hi * e.rhs + e.rhs - 1
            e = e.lhs
            continue
        break
    return e, lo, hi
