"""Scalar computations the generated ops call: reducers, comparators, combiners, map bodies.

Shared ones (a reducer of one kind and type) are built once per module and cached on the
``ModuleBuilder``."""
from __future__ import annotations

from typing import Sequence

from .builder import Comp, ModuleBuilder, Value
from .shapes import FTuple, is_float, scalar

REDUCER_KINDS = {"float": ("add", "maximum", "minimum", "multiply"),
                 "int": ("add", "maximum", "minimum", "multiply", "and", "or", "xor"),
                 "pred": ("and", "or", "maximum", "minimum")}


def family(et: str) -> str:
    return "pred" if et == "pred" else "float" if is_float(et) else "int"


def reducer(mb: ModuleBuilder, kind: str, et: str) -> Comp:
    """``(a, b) -> kind(a, b)`` on scalars of ``et``."""
    key = ("reducer", kind, et)
    if key not in mb.cache:
        c = mb.comp(f"{kind[:3]}_{et}", "scalar")
        a, b = c.param(scalar(et)), c.param(scalar(et))
        mb.finish(c, c.add(kind, scalar(et), [a, b]))
        mb.cache[key] = c
    return mb.cache[key]


def overwrite(mb: ModuleBuilder, et: str) -> Comp:
    """``(a, b) -> b``: a scatter that assigns."""
    key = ("overwrite", et)
    if key not in mb.cache:
        c = mb.comp(f"assign_{et}", "scalar")
        c.param(scalar(et))
        b = c.param(scalar(et))
        mb.finish(c, b)
        mb.cache[key] = c
    return mb.cache[key]


def multi_reducer(mb: ModuleBuilder, kinds: Sequence[str], ets: Sequence[str]) -> Comp:
    """A variadic reducer combining each of its N accumulators independently."""
    c = mb.comp("multi_red", "scalar")
    acc = [c.param(scalar(et)) for et in ets]
    new = [c.param(scalar(et)) for et in ets]
    outs = [c.add(k, scalar(et), [a, b]) for k, et, a, b in zip(kinds, ets, acc, new)]
    mb.finish(c, c.add("tuple", FTuple(tuple(scalar(et) for et in ets)), outs))
    return c


def argbest(mb: ModuleBuilder, et: str, index_et: str, largest: bool) -> Comp:
    """(value, index) pairs: keep the larger (smaller) value, NaN above everything, ties (and two
    NaNs) to the lower index. A total order with index tie-breaks, so the reducer is associative
    and commutative and the order of reduction cannot change the result (JAX's argmax reducer
    is not when two NaNs meet: it keeps the first)."""
    c = mb.comp("argmax" if largest else "argmin", "scalar")
    va, ia, vb, ib = (c.param(scalar(t)) for t in (et, index_et, et, index_et))
    p = scalar("pred")
    better = c.add("compare", p, [va, vb], ["direction=GT" if largest else "direction=LT"])
    same = c.add("compare", p, [va, vb], ["direction=EQ"])
    if is_float(et):
        nan_a = c.add("compare", p, [va, va], ["direction=NE"])
        nan_b = c.add("compare", p, [vb, vb], ["direction=NE"])
        only_a = c.add("and", p, [nan_a, c.add("not", p, [nan_b])])
        better = c.add("or", p, [better, only_a])
        same = c.add("or", p, [same, c.add("and", p, [nan_a, nan_b])])
    lower = c.add("compare", p, [ia, ib], ["direction=LT"])
    tie = c.add("and", p, [same, lower])
    take_a = c.add("or", p, [better, tie])
    v = c.add("select", scalar(et), [take_a, va, vb])
    i = c.add("select", scalar(index_et), [take_a, ia, ib])
    mb.finish(c, c.add("tuple", FTuple((scalar(et), scalar(index_et))), [v, i]))
    return c


def comparator(mb: ModuleBuilder, ets: Sequence[str], direction: str, total_order: bool) -> Comp:
    """A sort comparator on the first operand's pair of parameters."""
    c = mb.comp("cmp", "scalar")
    params = [c.param(scalar(et)) for et in ets for _ in range(2)]
    attrs = [f"direction={direction}"] + (["type=TOTALORDER"] if total_order and is_float(ets[0]) else [])
    mb.finish(c, c.add("compare", scalar("pred"), [params[0], params[1]], attrs))
    return c


def select_comp(mb: ModuleBuilder, et: str, direction: str) -> Comp:
    c = mb.comp("select", "scalar")
    a, b = c.param(scalar(et)), c.param(scalar(et))
    mb.finish(c, c.add("compare", scalar("pred"), [a, b], [f"direction={direction}"]))
    return c


__all__ = ["REDUCER_KINDS", "family", "reducer", "overwrite", "multi_reducer", "argbest", "comparator",
           "select_comp", "Value"]
