"""Affine expressions of the indexing analysis as LLVM integer arithmetic.

``floordiv``/``ceildiv``/``mod`` have floor semantics (``mod`` is never negative). Where the
interval of the dividend is known to be non-negative (the usual case: indices inside their
domain), they become plain ``udiv``/``urem``; otherwise the floor correction is emitted.
Additions and multiplications carry ``nsw`` when the expression's interval fits the index
type, which lets LLVM fold the address arithmetic.
"""
from __future__ import annotations

from typing import Callable, Sequence

from llvmlite import ir

from ...indexing import affine as A
from ...indexing.affine import Const, DivMod, Expr, Interval, MinMax, Sum, Var
from ..kernel_builder import KernelBuilder


class AffineEmitter:
    """Emits expressions over dims/symbols/runtime values with known bounds."""

    def __init__(self, kb: KernelBuilder, dims: Sequence[ir.Value], syms: Sequence[ir.Value] = (),
                 rts: Sequence[ir.Value] = (), bounds: Callable[[Var], Interval] | None = None):
        self.kb = kb
        self.values = (list(dims), list(syms), list(rts))
        self.bounds = bounds or (lambda v: (-(2**62), 2**62))
        self.cache: dict[Expr, ir.Value] = {}
        self._intervals: dict[Expr, Interval] = {}  # (the bounds are fixed: intervals are too)

    def interval(self, e: Expr) -> Interval:
        iv = self._intervals.get(e)
        if iv is None:
            iv = self._intervals[e] = A.interval(e, self.bounds)
        return iv

    def emit(self, e: Expr) -> ir.Value:
        v = self.cache.get(e)
        if v is None:
            v = self._emit(e)
            self.cache[e] = v
        return v

    def emit_all(self, exprs: Sequence[Expr]) -> list[ir.Value]:
        return [self.emit(e) for e in exprs]

    def _emit(self, e: Expr) -> ir.Value:
        kb, b = self.kb, self.kb.b
        if isinstance(e, Const):
            return kb.index(e.value)
        if isinstance(e, Var):
            return self.values[e.kind][e.index]
        if isinstance(e, Sum):
            flags = self._no_wrap(e)
            out: ir.Value | None = None
            for atom, k in e.terms:
                term = self.emit(atom)
                if k == -1 and out is not None:
                    out = b.sub(out, term)
                    continue
                if k != 1:
                    term = b.mul(term, kb.index(k), flags=flags)
                out = term if out is None else b.add(out, term, flags=flags)
            if e.const or out is None:
                out = kb.index(e.const) if out is None else b.add(out, kb.index(e.const), flags=flags)
            return out
        if isinstance(e, DivMod):
            return self._divmod(e)
        assert isinstance(e, MinMax)
        lhs, rhs = self.emit(e.lhs), self.emit(e.rhs)
        pick = b.icmp_signed("<" if e.op == "min" else ">", lhs, rhs)
        return b.select(pick, lhs, rhs)

    def _no_wrap(self, e: Sum) -> tuple[str, ...]:
        """``nuw nsw`` when every partial sum provably stays in ``[0, max]`` of the index type:
        non-negative terms with positive coefficients and a total that fits. The flags let
        LLVM see that consecutive elements have consecutive addresses (vector loads)."""
        limit = 2 ** (self.kb.index_type.width - 1) - 1
        if e.const < 0 or any(k <= 0 for _, k in e.terms):
            return ()
        if any(self.interval(a)[0] < 0 for a, _ in e.terms):
            return ()
        lo, hi = self.interval(e)
        return ("nuw", "nsw") if lo >= 0 and hi <= limit else ()

    def _divmod(self, e: DivMod) -> ir.Value:
        kb, b = self.kb, self.kb.b
        lo, _ = self.interval(e.lhs)
        x = self.emit(e.lhs)
        m = kb.index(e.rhs)
        if e.rhs == 1:
            return x if e.op != "mod" else kb.index(0)
        if lo >= 0:
            if e.op == "floordiv":
                return b.udiv(x, m)
            if e.op == "mod":
                return b.urem(x, m)
            return b.udiv(b.add(x, kb.index(e.rhs - 1)), m)
        # signed dividend: floor division = sdiv adjusted down when the remainder is negative
        q = b.sdiv(x, m)
        r = b.srem(x, m)
        neg = b.icmp_signed("<", r, kb.index(0))
        if e.op == "mod":
            return b.select(neg, b.add(r, m), r)
        floor_q = b.select(neg, b.sub(q, kb.index(1)), q)
        if e.op == "floordiv":
            return floor_q
        # ceildiv(x, m) = -floordiv(-x, m)
        nx = b.sub(kb.index(0), x)
        q2, r2 = b.sdiv(nx, m), b.srem(nx, m)
        f2 = b.select(b.icmp_signed("<", r2, kb.index(0)), b.sub(q2, kb.index(1)), q2)
        return b.sub(kb.index(0), f2)

    def in_bounds(self, constraints: Sequence[tuple[Expr, Interval]]) -> list[ir.Value]:
        """One ``i1`` per constraint ``e in [lo, hi]`` that the bounds alone do not prove."""
        b, kb = self.kb.b, self.kb
        out = []
        for e, (lo, hi) in constraints:
            elo, ehi = self.interval(e)
            if elo >= lo and ehi <= hi:
                continue
            v = self.emit(e)
            if lo == hi:
                out.append(b.icmp_signed("==", v, kb.index(lo)))
                continue
            if elo < lo:
                out.append(b.icmp_signed(">=", v, kb.index(lo)))
            if ehi > hi:
                out.append(b.icmp_signed("<=", v, kb.index(hi)))
        return out
