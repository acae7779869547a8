"""IndexingMap: an affine map plus the domain of its variables.

``(d0, ...)[s0, ...]{rt0, ...} -> (e0, ...)``: dims ``d`` index the tensor (or grid) mapped
from, range variables ``s`` span the values one element needs (reduced dims, window
positions), runtime variables ``rt`` stand for values known only when the kernel runs (dynamic
offsets, gather indices). Every variable has an inclusive interval; constraints ``expr in
[lo, hi]`` restrict the domain further. Printing follows DESIGN §6.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from . import affine as A
from .affine import DIM, RT, SYM, Expr, Interval, Var
from .memo import BoundedMemo


@dataclass(frozen=True)
class RTSource:
    """Where a runtime variable comes from: an instruction and the map from the consumer's
    dims to the element of that instruction that is read (None when not known)."""

    instruction: Any
    map: "IndexingMap | None" = None

    def describe(self) -> str:
        inst = self.instruction
        name = getattr(inst, "name", None) or str(inst)
        head = f"%{name}" if getattr(inst, "opcode", None) else name
        if getattr(inst, "opcode", None):
            head += f" = {inst.shape} {inst.opcode}"
        return head if self.map is None else f"{head}; {self.map.to_text()}"


@dataclass(frozen=True)
class IndexingMap:
    exprs: tuple[Expr, ...]
    dims: tuple[Interval, ...]
    ranges: tuple[Interval, ...] = ()
    rts: tuple[Interval, ...] = ()
    constraints: tuple[tuple[Expr, Interval], ...] = ()
    rt_sources: tuple[RTSource | None, ...] = ()
    undefined: bool = False
    dim_names: tuple[str, ...] | None = field(default=None, compare=False)

    # ---- construction -------------------------------------------------------------------
    @staticmethod
    def make(exprs: Sequence[A.ExprLike], dims: Sequence[Interval], ranges: Sequence[Interval] = (),
             rts: Sequence[Interval] = (), constraints: dict[Expr, Interval] | Sequence[tuple[Expr, Interval]] = (),
             rt_sources: Sequence[RTSource | None] | None = None) -> "IndexingMap":
        cons = constraints.items() if isinstance(constraints, dict) else constraints
        merged: dict[Expr, Interval] = {}
        for e, (lo, hi) in cons:
            if e in merged:
                plo, phi = merged[e]
                lo, hi = max(lo, plo), min(hi, phi)
            merged[e] = (int(lo), int(hi))
        srcs = tuple(rt_sources) if rt_sources is not None else (None,) * len(rts)
        return IndexingMap(tuple(A.as_expr(e) for e in exprs), tuple(_iv(d) for d in dims),
                           tuple(_iv(r) for r in ranges), tuple(_iv(r) for r in rts),
                           tuple(merged.items()), srcs)

    @staticmethod
    def identity(shape_dims: Sequence[int]) -> "IndexingMap":
        dims = dims_of(shape_dims)  # kept per dims (the map is frozen: callers share it)
        return _IDENTITY.get(dims, lambda: IndexingMap.make([A.dim(i) for i in range(len(dims))], dims))

    @staticmethod
    def undefined_map() -> "IndexingMap":
        return IndexingMap((), (), undefined=True)

    # ---- queries --------------------------------------------------------------------------
    @property
    def num_dims(self) -> int:
        return len(self.dims)

    @property
    def num_results(self) -> int:
        return len(self.exprs)

    def bound(self, v: Var) -> Interval:
        return (self.dims, self.ranges, self.rts)[v.kind][v.index]

    def constraint_dict(self) -> dict[Expr, Interval]:
        return dict(self.constraints)

    def is_known_empty(self) -> bool:
        if self.undefined:
            return False
        return any(lo > hi for lo, hi in itertools.chain(self.dims, self.ranges, self.rts,
                                                        (iv for _, iv in self.constraints)))

    def key(self) -> tuple:
        """Identity for de-duplication: equal keys mean equal maps."""
        if self.is_known_empty():
            return ("empty", len(self.exprs), len(self.dims))
        return (self.exprs, self.dims, self.ranges, self.rts, frozenset(self.constraints), self.undefined)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IndexingMap) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def evaluate(self, dims: Sequence[int], syms: Sequence[int] = (), rts: Sequence[int] = ()) -> tuple[int, ...]:
        return tuple(A.evaluate(e, dims, syms, rts) for e in self.exprs)

    def satisfies(self, dims: Sequence[int], syms: Sequence[int] = (), rts: Sequence[int] = ()) -> bool:
        """Whether a point lies in the domain (variable intervals and constraints)."""
        for vals, ivs in ((dims, self.dims), (syms, self.ranges), (rts, self.rts)):
            if any(not (lo <= v <= hi) for v, (lo, hi) in zip(vals, ivs)):
                return False
        return all(lo <= A.evaluate(e, dims, syms, rts) <= hi for e, (lo, hi) in self.constraints)

    def domain(self) -> Iterator[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """Every (dims, syms, rts) point of the domain (for small maps: tests, checks)."""
        ranges = [range(lo, hi + 1) for lo, hi in itertools.chain(self.dims, self.ranges, self.rts)]
        nd, ns = len(self.dims), len(self.ranges)
        for point in itertools.product(*ranges):
            d, s, r = point[:nd], point[nd:nd + ns], point[nd + ns:]
            if all(lo <= A.evaluate(e, d, s, r) <= hi for e, (lo, hi) in self.constraints):
                yield d, s, r

    def used_vars(self) -> set[Var]:
        out: set[Var] = set()
        for e in self.exprs:
            out |= A.variables(e)
        return out

    # ---- printing -------------------------------------------------------------------------
    def _names(self) -> dict[Var, str]:
        if not self.dim_names:
            return {}
        return {A.dim(i): n for i, n in enumerate(self.dim_names)}

    def to_text(self) -> str:
        if self.undefined:
            return "UNDEFINED"
        if self.is_known_empty():
            return "KNOWN EMPTY"
        names = self._names()
        dim_names = [A.var_name(A.dim(i), names) for i in range(len(self.dims))]
        head = "(" + ", ".join(dim_names) + ")"
        if self.ranges:
            head += "[" + ", ".join(f"s{i}" for i in range(len(self.ranges))) + "]"
        if self.rts:
            head += "{" + ", ".join(f"rt{i}" for i in range(len(self.rts))) + "}"
        head += " -> (" + ", ".join(A.to_text(e, names) for e in self.exprs) + ")"
        if not (self.dims or self.ranges or self.rts):
            return head
        parts = [f"{n} in [{lo}, {hi}]" for n, (lo, hi) in zip(dim_names, self.dims)]
        parts += [f"s{i} in [{lo}, {hi}]" for i, (lo, hi) in enumerate(self.ranges)]
        parts += [f"rt{i} in [{lo}, {hi}]" for i, (lo, hi) in enumerate(self.rts)]
        parts += sorted(f"{A.to_text(e, names)} in [{lo}, {hi}]" for e, (lo, hi) in self.constraints)
        return head + ", domain: " + ", ".join(parts)

    def __str__(self) -> str:
        return self.to_text()

    def to_json(self) -> dict:
        """The MAP object of DESIGN §5."""
        names = self._names()
        cons = sorted(([A.to_text(e, names), lo, hi] for e, (lo, hi) in self.constraints), key=lambda c: c[0])
        return {"dims": [list(d) for d in self.dims], "symbols": [list(r) for r in self.ranges],
                "rt_vars": [list(r) for r in self.rts], "exprs": [A.to_text(e, names) for e in self.exprs],
                "constraints": cons, "known_empty": self.is_known_empty()}

    # ---- transformations -----------------------------------------------------------------
    def with_constraint(self, e: A.ExprLike, lo: int, hi: int) -> "IndexingMap":
        cons = dict(self.constraints)
        e = A.as_expr(e)
        if e in cons:
            plo, phi = cons[e]
            lo, hi = max(lo, plo), min(hi, phi)
        cons[e] = (lo, hi)
        return replace(self, constraints=tuple(cons.items()))

    def replace_vars(self, fn) -> "IndexingMap":
        """Substitute variables in exprs and constraints (bounds untouched)."""
        exprs = tuple(A.substitute(e, fn) for e in self.exprs)
        cons: dict[Expr, Interval] = {}
        for e, (lo, hi) in self.constraints:
            ne = A.substitute(e, fn)
            if ne in cons:
                lo, hi = max(lo, cons[ne][0]), min(hi, cons[ne][1])
            cons[ne] = (lo, hi)
        return replace(self, exprs=exprs, constraints=tuple(cons.items()))

    def remove_unused_symbols(self) -> "IndexingMap":
        """Drop range and runtime variables that neither the results nor a constraint on a
        used variable mention (constraints only on dropped variables go with them)."""
        if self.undefined or self.is_known_empty():
            return self
        used = {v for v in self.used_vars() if v.kind != DIM}
        changed = True
        while changed:
            changed = False
            for e, _ in self.constraints:
                all_vs = A.variables(e)
                vs = {v for v in all_vs if v.kind != DIM}
                # a constraint tying symbols to dims restricts the domain: its symbols stay
                # (dropping ``d1 + s1 in [0, 0]`` would make every d1 valid)
                if (vs & used or any(v.kind == DIM for v in all_vs)) and not vs <= used:
                    used |= vs
                    changed = True
        keep_s = [i for i in range(len(self.ranges)) if A.sym(i) in used]
        keep_r = [i for i in range(len(self.rts)) if A.rt(i) in used]
        if len(keep_s) == len(self.ranges) and len(keep_r) == len(self.rts):
            return self
        smap = {old: new for new, old in enumerate(keep_s)}
        rmap = {old: new for new, old in enumerate(keep_r)}

        def ren(v: Var) -> Expr:
            if v.kind == SYM:
                return A.sym(smap[v.index]) if v.index in smap else v
            if v.kind == RT:
                return A.rt(rmap[v.index]) if v.index in rmap else v
            return v

        cons = []
        for e, iv in self.constraints:
            vs = {v for v in A.variables(e) if v.kind != DIM}
            if vs and not vs <= used:
                continue
            cons.append((A.substitute(e, ren), iv))
        srcs = self.rt_sources or (None,) * len(self.rts)
        return replace(self, exprs=tuple(A.substitute(e, ren) for e in self.exprs),
                       ranges=tuple(self.ranges[i] for i in keep_s), rts=tuple(self.rts[i] for i in keep_r),
                       constraints=tuple(cons), rt_sources=tuple(srcs[i] for i in keep_r))

    def known_empty_like(self) -> "IndexingMap":
        """A KNOWN EMPTY map with the same number of dims and results."""
        return IndexingMap(self.exprs, tuple((0, -1) for _ in self.dims) or ((0, -1),), (), (), (), ())


_IDENTITY: BoundedMemo[IndexingMap] = BoundedMemo(1024)


def _iv(x: Sequence[int]) -> Interval:
    lo, hi = x
    return int(lo), int(hi)


def dims_of(shape_dims: Sequence[int]) -> tuple[Interval, ...]:
    return tuple((0, int(n) - 1) for n in shape_dims)


def compose(consumer: IndexingMap, producer: IndexingMap) -> IndexingMap:
    """``producer ∘ consumer``, as XLA's ComposeIndexingMaps(first=consumer, second=producer).

    ``consumer`` maps into the producer's output index space (its results are the producer's
    dims). The result has the consumer's dims; symbols are ordered [producer ranges, consumer
    ranges] and [producer rts, consumer rts]; constraints are the producer's (substituted),
    the consumer's, and "consumer result i lies in the producer's dim i interval".
    """
    if consumer.undefined or producer.undefined:
        return IndexingMap.undefined_map()
    if len(consumer.exprs) != len(producer.dims):
        raise ValueError(f"cannot compose: {len(consumer.exprs)} results into {len(producer.dims)} dims")
    if any(s is not None for s in consumer.rt_sources) or any(s is not None for s in producer.rt_sources):
        return _compose(consumer, producer)  # sources name instructions: not kept
    # kept per every field the result depends on (not dim_names, which it does not carry);
    # the result is frozen, so callers can share it
    key = (consumer.exprs, consumer.dims, consumer.ranges, consumer.rts, consumer.constraints, consumer.rt_sources,
           producer.exprs, producer.dims, producer.ranges, producer.rts, producer.constraints, producer.rt_sources)
    return _COMPOSED.get(key, lambda: _compose(consumer, producer))


_COMPOSED: BoundedMemo[IndexingMap] = BoundedMemo(4096)


def _compose(consumer: IndexingMap, producer: IndexingMap) -> IndexingMap:
    pr, prt = len(producer.ranges), len(producer.rts)

    def shift(v: Var) -> Expr:
        if v.kind == SYM:
            return A.sym(v.index + pr)
        if v.kind == RT:
            return A.rt(v.index + prt)
        return v

    cexprs = [A.substitute(e, shift) for e in consumer.exprs]

    def into(v: Var) -> Expr:
        return cexprs[v.index] if v.kind == DIM else v

    exprs = [A.substitute(e, into) for e in producer.exprs]
    cons: dict[Expr, Interval] = {}

    def put(e: Expr, lo: int, hi: int) -> None:
        if e in cons:
            lo, hi = max(lo, cons[e][0]), min(hi, cons[e][1])
        cons[e] = (lo, hi)

    for e, (lo, hi) in producer.constraints:
        put(A.substitute(e, into), lo, hi)
    for e, (lo, hi) in consumer.constraints:
        put(A.substitute(e, shift), lo, hi)
    for e, (lo, hi) in zip(cexprs, producer.dims):
        put(e, lo, hi)
    psrc = producer.rt_sources or (None,) * prt
    csrc = consumer.rt_sources or (None,) * len(consumer.rts)
    srcs = [None if s is None else RTSource(s.instruction, None if s.map is None else compose(consumer, s.map))
            for s in psrc] + list(csrc)
    return IndexingMap(tuple(exprs), consumer.dims, producer.ranges + consumer.ranges,
                       producer.rts + consumer.rts, tuple(cons.items()), tuple(srcs))
