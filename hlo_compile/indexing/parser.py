"""Parser for printed indexing maps and expressions.

Accepts what ``IndexingMap.to_text`` prints and the forms seen in XLA's documentation and
tests: ``floordiv``/``floorDiv``/``/``, ``ceildiv``/``ceilDiv``, ``mod``/``%``, ``min``/``max``,
MLIR-style coefficients (``100d0``), named dims, ``KNOWN EMPTY``/``UNDEFINED``, and domain lists
spread over lines with or without separating commas.
"""
from __future__ import annotations

import re

from . import affine as A
from .affine import Expr, Var
from .indexing_map import IndexingMap

_TOKEN = re.compile(r"\s*(?:(?P<num>\d+)(?=[A-Za-z_])|(?P<int>\d+)|(?P<id>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<arrow>->)|(?P<op>[-+*/%()\[\]{},:]))")
_DIV_OPS = {"floordiv": "floordiv", "floorDiv": "floordiv", "/": "floordiv", "ceildiv": "ceildiv",
            "ceilDiv": "ceildiv", "mod": "mod", "%": "mod"}


class ParseError(ValueError):
    pass


def _tokenize(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ParseError(f"unexpected character at {pos}: {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group("num"):
            out += [m.group("num"), "*"]  # 100d0 means 100 * d0
        else:
            out.append(m.group(m.lastgroup))
    return out


class _Parser:
    def __init__(self, text: str, names: dict[str, Var] | None = None):
        self.toks = _tokenize(text)
        self.i = 0
        self.names: dict[str, Var] = dict(names or {})

    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def take(self, expect: str | None = None) -> str:
        t = self.peek()
        if t is None or (expect is not None and t != expect):
            raise ParseError(f"expected {expect!r}, got {t!r}")
        self.i += 1
        return t

    def accept(self, tok: str) -> bool:
        if self.peek() == tok:
            self.i += 1
            return True
        return False

    # expressions
    def expr(self) -> Expr:
        neg = self.accept("-")
        e = self.term()
        if neg:
            e = A.mul(e, -1)
        while self.peek() in ("+", "-"):
            op = self.take()
            e = A.binop(op, e, self.term())
        return e

    def term(self) -> Expr:
        e = self.factor()
        while self.peek() in ("*",) or self.peek() in _DIV_OPS:
            op = self.take()
            e = A.binop("*" if op == "*" else _DIV_OPS[op], e, self.factor())
        return e

    def factor(self) -> Expr:
        t = self.peek()
        if t == "-":
            self.take()
            return A.mul(self.factor(), -1)
        if t == "(":
            self.take()
            e = self.expr()
            self.take(")")
            return e
        if t in ("min", "max"):
            self.take()
            self.take("(")
            a = self.expr()
            self.take(",")
            b = self.expr()
            self.take(")")
            return A.binop(t, a, b)
        if t is not None and t.isdigit():
            return A.Const(int(self.take()))
        if t is not None and re.match(r"[A-Za-z_]", t):
            self.take()
            return self.var(t)
        raise ParseError(f"unexpected token {t!r}")

    def var(self, name: str) -> Var:
        if name in self.names:
            return self.names[name]
        m = re.fullmatch(r"(d|s|rt)(\d+)", name)
        if not m:
            raise ParseError(f"unknown variable {name!r}")
        kind = {"d": A.DIM, "s": A.SYM, "rt": A.RT}[m.group(1)]
        return Var(kind, int(m.group(2)))

    def integer(self) -> int:
        neg = self.accept("-")
        v = int(self.take())
        return -v if neg else v

    def interval(self) -> tuple[int, int]:
        self.take("[")
        lo = self.integer()
        self.take(",")
        hi = self.integer()
        self.take("]")
        return lo, hi

    def name_list(self, close: str) -> list[str]:
        out: list[str] = []
        while not self.accept(close):
            out.append(self.take())
            self.accept(",")
        return out


def parse_expr(text: str) -> Expr:
    p = _Parser(text)
    e = p.expr()
    if p.peek() is not None:
        raise ParseError(f"trailing input at token {p.peek()!r}")
    return e


def parse_indexing_map(text: str) -> IndexingMap:
    stripped = " ".join(text.split())
    if stripped == "KNOWN EMPTY":
        return IndexingMap((), ((0, -1),))
    if stripped == "UNDEFINED":
        return IndexingMap.undefined_map()
    p = _Parser(text)
    p.take("(")
    dim_names = p.name_list(")")
    sym_names = rt_names = []
    if p.accept("["):
        sym_names = p.name_list("]")
    if p.accept("{"):
        rt_names = p.name_list("}")
    for kind, names in ((A.DIM, dim_names), (A.SYM, sym_names), (A.RT, rt_names)):
        for i, n in enumerate(names):
            p.names[n] = Var(kind, i)
    p.take("->")
    p.take("(")
    exprs: list[Expr] = []
    while not p.accept(")"):
        exprs.append(p.expr())
        p.accept(",")
    bounds: dict[Var, tuple[int, int]] = {}
    constraints: dict[Expr, tuple[int, int]] = {}
    p.accept(",")
    if p.accept("domain"):
        p.take(":")
        while p.peek() is not None:
            e = p.expr()
            p.take("in")
            iv = p.interval()
            if isinstance(e, Var) and e not in bounds and _declared(e, dim_names, sym_names, rt_names):
                bounds[e] = iv
            else:
                constraints[e] = iv
            p.accept(",")
    if p.peek() is not None:
        raise ParseError(f"trailing input at token {p.peek()!r}")

    def ivs(kind: int, n: int) -> list[tuple[int, int]]:
        out = []
        for i in range(n):
            v = Var(kind, i)
            if v not in bounds:
                raise ParseError(f"no bounds for {A.var_name(v)}")
            out.append(bounds[v])
        return out

    m = IndexingMap.make(exprs, ivs(A.DIM, len(dim_names)), ivs(A.SYM, len(sym_names)),
                         ivs(A.RT, len(rt_names)), constraints)
    default = [f"d{i}" for i in range(len(dim_names))]
    if dim_names != default:
        m = IndexingMap(m.exprs, m.dims, m.ranges, m.rts, m.constraints, m.rt_sources, dim_names=tuple(dim_names))
    return m


def _declared(v: Var, dims: list[str], syms: list[str], rts: list[str]) -> bool:
    return v.index < len((dims, syms, rts)[v.kind])
