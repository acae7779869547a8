"""Affine (quasi-affine) integer expressions over dims, range symbols and runtime variables.

An expression is one of: ``Const``, ``Var`` (``d<i>``, ``s<i>`` or ``rt<i>``), ``Sum`` (a linear
combination of non-constant atoms plus a constant; a product by a constant is a one-term
``Sum``), ``DivMod`` (``floordiv``/``ceildiv``/``mod`` by a positive constant) and ``MinMax``.
Constructors fold constants and keep sums flat and ordered, so structurally equal expressions
compare equal and hash alike. Term order follows XLA's documentation: dims, then range
symbols, then runtime variables, then divisions and remainders, constant last.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, Union

DIM, SYM, RT = 0, 1, 2
_PREFIX = {DIM: "d", SYM: "s", RT: "rt"}

Interval = tuple[int, int]  # inclusive bounds


class Expr:
    """Base class; use the module-level constructors (``add``, ``mul``, ...) or operators."""

    __slots__ = ()

    def __add__(self, other: "ExprLike") -> "Expr":
        return add(self, as_expr(other))

    def __radd__(self, other: "ExprLike") -> "Expr":
        return add(as_expr(other), self)

    def __sub__(self, other: "ExprLike") -> "Expr":
        return add(self, mul(as_expr(other), -1))

    def __rsub__(self, other: "ExprLike") -> "Expr":
        return add(as_expr(other), mul(self, -1))

    def __neg__(self) -> "Expr":
        return mul(self, -1)

    def __mul__(self, k: int) -> "Expr":
        return mul(self, k)

    __rmul__ = __mul__

    def floordiv(self, k: int) -> "Expr":
        return floordiv(self, k)

    def ceildiv(self, k: int) -> "Expr":
        return ceildiv(self, k)

    def mod(self, k: int) -> "Expr":
        return mod(self, k)

    def __str__(self) -> str:
        return to_text(self)


ExprLike = Union[Expr, int]


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: int

    def __repr__(self) -> str:
        return f"Const({self.value})"


@dataclass(frozen=True, eq=True)
class Var(Expr):
    kind: int
    index: int

    def __repr__(self) -> str:
        return f"{_PREFIX[self.kind]}{self.index}"


@dataclass(frozen=True, eq=True)
class Sum(Expr):
    terms: tuple[tuple[Expr, int], ...]  # (atom, coefficient), atoms neither Const nor Sum
    const: int = 0

    def __repr__(self) -> str:
        return f"Sum({self.terms!r}, {self.const})"


@dataclass(frozen=True, eq=True)
class DivMod(Expr):
    op: str  # "floordiv" | "ceildiv" | "mod"
    lhs: Expr
    rhs: int  # > 0

    def __repr__(self) -> str:
        return f"({self.lhs!r} {self.op} {self.rhs})"


@dataclass(frozen=True, eq=True)
class MinMax(Expr):
    op: str  # "min" | "max"
    lhs: Expr
    rhs: Expr

    def __repr__(self) -> str:
        return f"{self.op}({self.lhs!r}, {self.rhs!r})"


def as_expr(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    return Const(int(x))


def dim(i: int) -> Var:
    return Var(DIM, i)


def sym(i: int) -> Var:
    return Var(SYM, i)


def rt(i: int) -> Var:
    return Var(RT, i)


def const(v: int) -> Const:
    return Const(int(v))


# ---- ordering ---------------------------------------------------------------------------
_OP_RANK = {"floordiv": 0, "ceildiv": 1, "mod": 2, "min": 3, "max": 4}


def sort_key(e: Expr) -> tuple:
    """Total order used to place the terms of a sum (variables first, constants last)."""
    if isinstance(e, Var):
        return (0, e.kind, e.index)
    if isinstance(e, DivMod):
        return (1, _OP_RANK[e.op], sort_key(e.lhs), e.rhs)
    if isinstance(e, MinMax):
        return (1, _OP_RANK[e.op], sort_key(e.lhs), sort_key(e.rhs))
    if isinstance(e, Sum):
        return (2, tuple((sort_key(a), c) for a, c in e.terms), e.const)
    assert isinstance(e, Const)
    return (3, e.value)


# ---- construction -----------------------------------------------------------------------
def linear_parts(e: Expr) -> tuple[dict[Expr, int], int]:
    """``e`` as {atom: coefficient} plus a constant."""
    if isinstance(e, Const):
        return {}, e.value
    if isinstance(e, Sum):
        return dict(e.terms), e.const
    return {e: 1}, 0


def make_sum(terms: Mapping[Expr, int], c: int) -> Expr:
    """The canonical expression for sum(coeff * atom) + c."""
    coeffs = {a: k for a, k in terms.items() if k != 0}
    if len(coeffs) < 2:  # nothing to combine or order
        if not coeffs:
            return Const(c)
        ((atom, k),) = coeffs.items()
        return atom if k == 1 and c == 0 else Sum(((atom, k),), c)
    while True:
        coeffs, c, changed = _combine_div_mod(coeffs, c)
        if not changed:
            break
    items = sorted(coeffs.items(), key=lambda t: sort_key(t[0]))
    if not items:
        return Const(c)
    if len(items) == 1 and items[0][1] == 1 and c == 0:
        return items[0][0]
    return Sum(tuple(items), c)


def _combine_div_mod(coeffs: dict[Expr, int], c: int) -> tuple[dict[Expr, int], int, bool]:
    """Rewrite ``(x floordiv m) * (m*k) + (x mod m) * k`` as ``x * k``."""
    if len(coeffs) < 2:
        return coeffs, c, False
    for atom, k in coeffs.items():
        if not isinstance(atom, DivMod) or atom.op != "floordiv":
            continue
        m = DivMod("mod", atom.lhs, atom.rhs)
        km = coeffs.get(m, 0)
        if km != 0 and k == km * atom.rhs:
            out = dict(coeffs)
            del out[atom]
            del out[m]
            inner, ic = linear_parts(atom.lhs)
            for a2, k2 in inner.items():
                out[a2] = out.get(a2, 0) + k2 * km
            return {a: v for a, v in out.items() if v != 0}, c + ic * km, True
    return coeffs, c, False


def add(a: ExprLike, b: ExprLike) -> Expr:
    a, b = as_expr(a), as_expr(b)
    terms, ca = linear_parts(a)  # (a new dict)
    tb, cb = linear_parts(b)
    for atom, k in tb.items():
        terms[atom] = terms.get(atom, 0) + k
    return make_sum(terms, ca + cb)


def mul(a: ExprLike, k: int) -> Expr:
    a = as_expr(a)
    k = int(k)
    if k == 0:
        return Const(0)
    if k == 1:
        return a
    if isinstance(a, Const):
        return Const(a.value * k)
    if isinstance(a, Sum):
        # a canonical sum scaled by k != 0 stays canonical: the same atoms in the same order,
        # no zero coefficient, and no (x floordiv m, x mod m) pair that ``_combine_div_mod``
        # would merge (its condition is invariant under scaling both coefficients)
        c = a.const * k
        items = tuple((x, v * k) for x, v in a.terms)
        return items[0][0] if len(items) == 1 and items[0][1] == 1 and c == 0 else Sum(items, c)
    return Sum(((a, k),), 0)


def _floor(a: int, b: int) -> int:
    return a // b


def _ceil(a: int, b: int) -> int:
    return -((-a) // b)


def floordiv(a: ExprLike, k: int) -> Expr:
    a = as_expr(a)
    if k <= 0:
        if k == 0:
            raise ZeroDivisionError("floordiv by zero")
        return floordiv(mul(a, -1), -k)
    if k == 1:
        return a
    if isinstance(a, Const):
        return Const(_floor(a.value, k))
    terms, c = linear_parts(a)
    if all(v % k == 0 for v in terms.values()):
        # (k*x + c) floordiv k = x + c floordiv k
        return add(make_sum({x: v // k for x, v in terms.items()}, 0), _floor(c, k))
    return DivMod("floordiv", a, k)


def ceildiv(a: ExprLike, k: int) -> Expr:
    a = as_expr(a)
    if k <= 0:
        if k == 0:
            raise ZeroDivisionError("ceildiv by zero")
        return ceildiv(mul(a, -1), -k)
    if k == 1:
        return a
    if isinstance(a, Const):
        return Const(_ceil(a.value, k))
    terms, c = linear_parts(a)
    if all(v % k == 0 for v in terms.values()):
        return add(make_sum({x: v // k for x, v in terms.items()}, 0), _ceil(c, k))
    return DivMod("ceildiv", a, k)


def mod(a: ExprLike, k: int) -> Expr:
    a = as_expr(a)
    if k <= 0:
        raise ValueError("mod needs a positive constant divisor")
    if k == 1:
        return Const(0)
    if isinstance(a, Const):
        return Const(a.value % k)
    terms, c = linear_parts(a)
    if all(v % k == 0 for v in terms.values()):
        return Const(c % k)
    return DivMod("mod", a, k)


def min_(a: ExprLike, b: ExprLike) -> Expr:
    a, b = as_expr(a), as_expr(b)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(min(a.value, b.value))
    d = add(a, mul(b, -1))
    if isinstance(d, Const):
        return a if d.value <= 0 else b
    return MinMax("min", a, b)


def max_(a: ExprLike, b: ExprLike) -> Expr:
    a, b = as_expr(a), as_expr(b)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(max(a.value, b.value))
    d = add(a, mul(b, -1))
    if isinstance(d, Const):
        return a if d.value >= 0 else b
    return MinMax("max", a, b)


def binop(op: str, a: Expr, b: Expr) -> Expr:
    """Build ``a op b`` for any printed operator; the divisor of div/mod must be constant."""
    if op == "+":
        return add(a, b)
    if op == "-":
        return add(a, mul(b, -1))
    if op == "*":
        if isinstance(b, Const):
            return mul(a, b.value)
        if isinstance(a, Const):
            return mul(b, a.value)
        raise ValueError("only products with a constant are affine")
    if op in ("min", "max"):
        return (min_ if op == "min" else max_)(a, b)
    if not isinstance(b, Const):
        raise ValueError(f"{op} needs a constant right-hand side")
    return {"floordiv": floordiv, "ceildiv": ceildiv, "mod": mod}[op](a, b.value)


# ---- traversal ----------------------------------------------------------------------------
def substitute(e: Expr, fn: Callable[[Var], Expr]) -> Expr:
    """Replace every variable ``v`` by ``fn(v)`` and rebuild canonically."""
    if isinstance(e, Const):
        return e
    if isinstance(e, Var):
        return fn(e)
    if isinstance(e, Sum):
        out: Expr = Const(e.const)
        for atom, k in e.terms:
            out = add(out, mul(substitute(atom, fn), k))
        return out
    if isinstance(e, DivMod):
        return binop(e.op, substitute(e.lhs, fn), Const(e.rhs))
    assert isinstance(e, MinMax)
    return binop(e.op, substitute(e.lhs, fn), substitute(e.rhs, fn))


def rebuild(e: Expr, fn: Callable[[Expr], Expr]) -> Expr:
    """Bottom-up rewrite: children first, then ``fn`` on the rebuilt node."""
    if isinstance(e, (Const, Var)):
        return fn(e)
    if isinstance(e, Sum):
        out: Expr = Const(e.const)
        for atom, k in e.terms:
            out = add(out, mul(rebuild(atom, fn), k))
        return fn(out) if isinstance(out, Sum) else out
    if isinstance(e, DivMod):
        return fn(binop(e.op, rebuild(e.lhs, fn), Const(e.rhs)))
    assert isinstance(e, MinMax)
    return fn(binop(e.op, rebuild(e.lhs, fn), rebuild(e.rhs, fn)))


def variables(e: Expr) -> set[Var]:
    out: set[Var] = set()
    _collect(e, out)
    return out


def _collect(e: Expr, out: set[Var]) -> None:
    if isinstance(e, Var):
        out.add(e)
    elif isinstance(e, Sum):
        for atom, _ in e.terms:
            _collect(atom, out)
    elif isinstance(e, DivMod):
        _collect(e.lhs, out)
    elif isinstance(e, MinMax):
        _collect(e.lhs, out)
        _collect(e.rhs, out)


def evaluate(e: Expr, dims: Sequence[int], syms: Sequence[int] = (), rts: Sequence[int] = ()) -> int:
    """Integer value with floor semantics for floordiv and a non-negative mod."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return (dims, syms, rts)[e.kind][e.index]
    if isinstance(e, Sum):
        return e.const + sum(k * evaluate(a, dims, syms, rts) for a, k in e.terms)
    if isinstance(e, DivMod):
        v = evaluate(e.lhs, dims, syms, rts)
        if e.op == "floordiv":
            return v // e.rhs
        if e.op == "ceildiv":
            return -((-v) // e.rhs)
        return v % e.rhs
    assert isinstance(e, MinMax)
    a, b = evaluate(e.lhs, dims, syms, rts), evaluate(e.rhs, dims, syms, rts)
    return min(a, b) if e.op == "min" else max(a, b)


def interval(e: Expr, bounds: Callable[[Var], Interval],
             known: Callable[[Expr], Interval | None] | None = None) -> Interval:
    """An inclusive interval containing every value of ``e`` (interval arithmetic)."""
    lo, hi = _interval(e, bounds, known)
    if known is not None and not isinstance(e, (Const, Var)):
        k = known(e)
        if k is not None:
            lo, hi = max(lo, k[0]), min(hi, k[1])
    return lo, hi


def _interval(e: Expr, bounds: Callable[[Var], Interval],
              known: Callable[[Expr], Interval | None] | None) -> Interval:
    if isinstance(e, Const):
        return e.value, e.value
    if isinstance(e, Var):
        return bounds(e)
    if isinstance(e, Sum):
        lo = hi = e.const
        for atom, k in e.terms:
            a, b = interval(atom, bounds, known)
            lo += min(k * a, k * b)
            hi += max(k * a, k * b)
        return lo, hi
    if isinstance(e, DivMod):
        a, b = interval(e.lhs, bounds, known)
        m = e.rhs
        if e.op == "floordiv":
            return a // m, b // m
        if e.op == "ceildiv":
            return _ceil(a, m), _ceil(b, m)
        if a // m == b // m:
            return a % m, b % m
        return 0, m - 1
    assert isinstance(e, MinMax)
    a0, a1 = interval(e.lhs, bounds, known)
    b0, b1 = interval(e.rhs, bounds, known)
    if e.op == "min":
        return min(a0, b0), min(a1, b1)
    return max(a0, b0), max(a1, b1)


# ---- printing -----------------------------------------------------------------------------
def var_name(v: Var, names: Mapping[Var, str] | None = None) -> str:
    if names and v in names:
        return names[v]
    return f"{_PREFIX[v.kind]}{v.index}"


def to_text(e: Expr, names: Mapping[Var, str] | None = None) -> str:
    """Printed form as in XLA's documentation (``floordiv``, ``ceildiv``, ``mod``)."""
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Var):
        return var_name(e, names)
    if isinstance(e, DivMod):
        return f"{_operand(e.lhs, names)} {e.op} {e.rhs}"
    if isinstance(e, MinMax):
        return f"{e.op}({to_text(e.lhs, names)}, {to_text(e.rhs, names)})"
    assert isinstance(e, Sum)
    out = ""
    for i, (atom, k) in enumerate(e.terms):
        body = _term(atom, abs(k) if i else k, names)
        if i == 0:
            out = body
        else:
            out += (" - " if k < 0 else " + ") + body
    if e.const:
        out += (" - " if e.const < 0 else " + ") + str(abs(e.const))
    return out


def _operand(e: Expr, names: Mapping[Var, str] | None) -> str:
    """An operand of a high-precedence operator: parenthesised unless atomic."""
    if isinstance(e, Var) or (isinstance(e, Const) and e.value >= 0) or isinstance(e, MinMax):
        return to_text(e, names)
    return f"({to_text(e, names)})"


def _term(atom: Expr, k: int, names: Mapping[Var, str] | None) -> str:
    if k == 1:
        return to_text(atom, names)
    if k == -1:
        return "-" + _operand(atom, names)
    return f"{_operand(atom, names)} * {k}"
