"""The generator's working state for one computation: random draws, shapes, the pool of values
ops may read, and how fresh operands are made. Op generators (``ops_*.py``) receive a ``Gen``
and append instructions through ``Gen.emit``."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from math import prod
from typing import Callable, Sequence

from .builder import Comp, ModuleBuilder, Value
from .config import FuzzConfig
from .shapes import FLOATS, INTS, FShape, FTuple, is_float, is_int, scalar

DIM_CHOICES = (1, 1, 2, 2, 3, 3, 4, 5, 5, 7, 8, 9, 11, 13, 16, 17, 31, 32, 33, 64, 127)
BIG_DIM_CHOICES = DIM_CHOICES + (32, 33, 48, 64, 65, 96, 128, 129, 200, 256, 257, 511, 512, 1024)
ET_WEIGHTS = {"f32": 30, "f16": 6, "bf16": 8, "f64": 4, "s32": 14, "s8": 4, "u8": 4, "s16": 2, "u16": 2,
              "u32": 3, "s64": 3, "u64": 2, "pred": 8}


class GenRefused(Exception):
    """An op generator could not apply here (no suitable operand); the driver draws another."""


@dataclass
class Stats:
    ops: dict = field(default_factory=dict)      # opcode -> count
    features: set = field(default_factory=set)   # "layout", "tiles", "zero-dim", "rank6", "fusion"...
    ranks: set = field(default_factory=set)
    ets: set = field(default_factory=set)

    def note(self, opcode: str) -> None:
        self.ops[opcode] = self.ops.get(opcode, 0) + 1


class Gen:
    def __init__(self, rng: random.Random, cfg: FuzzConfig, mb: ModuleBuilder, comp: Comp, stats: Stats,
                 depth: int = 0):
        self.rng = rng
        self.cfg = cfg
        self.mb = mb
        self.comp = comp
        self.stats = stats
        self.depth = depth
        self.pool: list[Value] = []

    # ---- draws -------------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def choice(self, seq: Sequence):
        return seq[self.rng.randrange(len(seq))]

    def randint(self, a: int, b: int) -> int:
        return self.rng.randint(a, b)

    def weighted(self, table: dict):
        keys = list(table)
        return self.rng.choices(keys, weights=[table[k] for k in keys])[0]

    def subset(self, items: Sequence, k: int | None = None) -> list:
        items = list(items)
        if k is None:
            k = self.randint(0, len(items))
        return sorted(self.rng.sample(items, min(k, len(items))))

    def permutation(self, n: int) -> list[int]:
        p = list(range(n))
        self.rng.shuffle(p)
        return p

    # ---- types and shapes --------------------------------------------------------------------
    def et(self, family: str | None = None, exclude: Sequence[str] = ()) -> str:
        table = {k: w for k, w in ET_WEIGHTS.items() if k not in exclude}
        if family == "float":
            table = {k: w for k, w in table.items() if is_float(k)}
        elif family == "int":
            table = {k: w for k, w in table.items() if is_int(k)}
        elif family == "number":
            table = {k: w for k, w in table.items() if k != "pred"}
        return self.weighted(table)

    def rank(self, lo: int = 0) -> int:
        r = self.weighted({0: 6, 1: 20, 2: 28, 3: 20, 4: 10, 5: 4, 6: 3})
        return max(lo, min(r, self.cfg.max_rank))

    def dims(self, rank: int | None = None, max_elements: int | None = None, lo: int = 0) -> tuple[int, ...]:
        rank = self.rank(lo) if rank is None else rank
        cap = max_elements or self.cfg.max_elements
        out = []
        choices = BIG_DIM_CHOICES if self.cfg.max_elements > 4096 else DIM_CHOICES
        for _ in range(rank):
            d = 0 if self.chance(self.cfg.p_zero_dim) else self.choice(choices)
            out.append(d)
        while prod(out) > cap:  # shrink the largest dims until the array fits
            i = max(range(rank), key=lambda k: out[k])
            out[i] = max(1, out[i] // 2) if out[i] > 1 else 1
        return tuple(out)

    def layout(self, rank: int, et: str = "f32") -> tuple[tuple[int, ...] | None, str]:
        """(minor_to_major or None for the default, tiles text)."""
        if rank >= 2 and self.chance(self.cfg.p_layout):
            m2m = tuple(self.permutation(rank))
            tiles = ""
            if self.chance(self.cfg.p_tiles) and et != "pred":
                tiles = self.choice(["T(2,2)", "T(4,2)", "T(2,8)", "T(8,128)", "T(4)", "T(2,2)(2,1)"])
            return m2m, tiles
        if rank == 1 and self.chance(self.cfg.p_tiles):
            return (0,), "T(4)"
        return None, ""

    def shape(self, et: str | None = None, dims: Sequence[int] | None = None, rank: int | None = None,
              layout: bool = True) -> FShape:
        et = et or self.et()
        dims = tuple(dims) if dims is not None else self.dims(rank)
        if not layout:
            return FShape(et, dims)
        m2m, tiles = self.layout(len(dims), et)
        return FShape(et, dims, m2m, tiles)

    def relayout(self, s: FShape) -> FShape:
        """``s`` with a fresh random layout (often the default)."""
        m2m, tiles = self.layout(s.rank, s.et)
        return FShape(s.et, s.dims, m2m, tiles)

    # ---- the pool ----------------------------------------------------------------------------
    def add_to_pool(self, v: Value) -> Value:
        if v.is_array:
            self.pool.append(v)
            s = v.shape
            self.stats.ranks.add(s.rank)
            self.stats.ets.add(s.et)
            if not s.default_layout:
                self.stats.features.add("layout")
            if s.tiles:
                self.stats.features.add("tiles")
            if 0 in s.dims:
                self.stats.features.add("zero-dim")
        return v

    def pick(self, pred: Callable[[Value], bool] = lambda v: True, exact: bool = False) -> Value | None:
        """A pool value satisfying ``pred`` (exact ones only if ``exact``), recent ones likelier."""
        cands = [v for v in self.pool if pred(v) and (v.exact or not exact)]
        if not cands:
            return None
        n = len(cands)
        if self.chance(0.6):  # recent: chains grow deep
            return cands[n - 1 - min(n - 1, int(self.rng.expovariate(0.7)))]
        return self.choice(cands)

    def pick_or_refuse(self, pred: Callable[[Value], bool] = lambda v: True, exact: bool = False) -> Value:
        v = self.pick(pred, exact)
        if v is None:
            raise GenRefused("no operand")
        return v

    def like(self, dims: Sequence[int], et: str, exact: bool = False, fresh_p: float = 0.35) -> Value:
        """A value with these dims and element type: from the pool, or made fresh."""
        dims = tuple(dims)
        if not self.chance(fresh_p):
            v = self.pick(lambda v: v.shape.dims == dims and v.shape.et == et, exact)
            if v is not None:
                return v
        return self.fresh(self.shape(et, dims))

    # ---- fresh values ------------------------------------------------------------------------
    def fresh(self, shape: FShape) -> Value:
        """A new value of ``shape``: an ENTRY parameter, or a constant/iota where there are none."""
        if self.comp.kind == "entry" and not self.chance(0.15):
            if not self.cfg.xla_compatible and self.chance(0.05):
                return self._from_tuple_parameter(shape)
            return self.add_to_pool(self.comp.param(shape))
        if shape.size <= 24 and 0 not in shape.dims and self.chance(0.5):
            return self.constant(shape)
        if is_float(shape.et) or is_int(shape.et):
            if shape.rank and 0 not in shape.dims and self.chance(0.5):
                d = self.randint(0, shape.rank - 1)
                io = self.emit("iota", shape, [], [f"iota_dimension={d}"])
                return io
        c = self.scalar_constant(shape.et)
        return self.emit("broadcast", shape, [c], ["dimensions={}"])

    def _from_tuple_parameter(self, shape: FShape) -> Value:
        other = self.shape(self.et(), rank=self.randint(0, 2))
        elems = [shape, other] if self.chance(0.5) else [other, shape]
        tup = FTuple(tuple(elems) if self.chance(0.7) else (FTuple((elems[0],)), elems[1]))
        p = self.comp.param(tup)
        self.stats.features.add("tuple-parameter")
        if tup.elements[0].is_tuple:
            inner = self.comp.add("get-tuple-element", tup.elements[0], [p], ["index=0"])
            first = self.emit("get-tuple-element", elems[0], [inner], ["index=0"])
            second = self.emit("get-tuple-element", elems[1], [p], ["index=1"])
        else:
            first = self.emit("get-tuple-element", elems[0], [p], ["index=0"])
            second = self.emit("get-tuple-element", elems[1], [p], ["index=1"])
        return first if elems[0] is shape else second

    def scalar_constant(self, et: str, value=None, pool: bool = False) -> Value:
        if value is None:
            value = self.random_scalar(et)
        v = self.comp.add("constant", scalar(et), [], payload=literal_scalar(value, et))
        if pool:
            self.add_to_pool(v)
        self.stats.note("constant")
        return v

    def random_scalar(self, et: str):
        if et == "pred":
            return self.chance(0.5)
        if is_float(et):
            return self.choice([0.0, 1.0, -1.0, 0.5, 2.0, -0.25, 3.0, 1.5])
        lo = -4 if et.startswith("s") else 0
        return self.randint(lo, 9)

    def constant(self, shape: FShape) -> Value:
        vals = [self.random_scalar(shape.et) for _ in range(shape.size)]
        v = self.comp.add("constant", shape, [], payload=literal_array(vals, shape))
        self.stats.note("constant")
        return self.add_to_pool(v)

    # ---- emission ----------------------------------------------------------------------------
    def emit(self, opcode: str, shape, operands: Sequence[Value], attrs: Sequence[str] = (), exact: bool | None = None,
             pool: bool = True) -> Value:
        v = self.comp.add(opcode, shape, operands, attrs, exact=exact)
        self.stats.note(opcode)
        return self.add_to_pool(v) if pool else v

    def sub(self, comp: Comp) -> "Gen":
        """A generator for a nested computation (a body or branch), one level deeper."""
        return Gen(self.rng, self.cfg, self.mb, comp, self.stats, self.depth + 1)


# ---- literals --------------------------------------------------------------------------------

def literal_scalar(value, et: str) -> str:
    if et == "pred":
        return "true" if value else "false"
    if is_float(et):
        f = float(value)
        if f != f:
            return "nan"
        if f in (float("inf"), float("-inf")):
            return "inf" if f > 0 else "-inf"
        if f == 0 and str(f).startswith("-"):
            return "-0"
        return repr(f) if f != int(f) else str(int(f))
    return str(int(value))


def literal_array(values: list, shape: FShape) -> str:
    if shape.rank == 0:
        return literal_scalar(values[0], shape.et)
    it = iter(values)

    def nest(level: int) -> str:
        if level == shape.rank - 1:
            return "{" + ", ".join(literal_scalar(next(it), shape.et) for _ in range(shape.dims[level])) + "}"
        return "{ " + ", ".join(nest(level + 1) for _ in range(shape.dims[level])) + " }"
    return nest(0)


def identity_value(kind: str, et: str):
    """The identity of reducer ``kind`` in ``et`` (as a Python value for ``literal_scalar``)."""
    import numpy as np
    if kind == "add" or kind == "or" or kind == "xor":
        return False if et == "pred" else 0
    if kind == "multiply" or kind == "and":
        return True if et == "pred" else 1
    if et == "pred":
        return kind == "minimum"
    if is_float(et):
        return float("-inf") if kind == "maximum" else float("inf")
    info = np.iinfo({"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8,
                     "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}[et])
    return int(info.min) if kind == "maximum" else int(info.max)


__all__ = ["Gen", "GenRefused", "Stats", "literal_scalar", "literal_array", "identity_value", "FLOATS", "INTS"]
