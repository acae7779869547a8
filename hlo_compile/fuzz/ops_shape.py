"""Generators of data-movement ops: broadcast, reshape, transpose, copy (layout changes),
slice, dynamic-slice, dynamic-update-slice, concatenate, pad, reverse, iota, bitcast,
constants, tuples."""
from __future__ import annotations

from math import prod

from .builder import Value
from .gen_core import DIM_CHOICES, Gen, GenRefused
from .registry import op_generator
from .shapes import BITS, FShape, FTuple, is_float, is_int, same_width_types, scalar

INDEX_TYPES = {"s32": 10, "s64": 2, "u32": 2, "s8": 1, "u8": 1, "s16": 1}


@op_generator("broadcast", weight=4)
def gen_broadcast(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank < g.cfg.max_rank)
    extra = g.randint(0 if x.shape.rank else 1, min(3, g.cfg.max_rank - x.shape.rank))
    rank = x.shape.rank + extra
    positions = sorted(g.rng.sample(range(rank), x.shape.rank))
    dims = [0] * rank
    for p, d in zip(positions, x.shape.dims):
        dims[p] = d
    budget = max(1, g.cfg.max_elements // max(1, x.shape.size))
    for i in range(rank):
        if i not in positions:
            dims[i] = min(g.choice(DIM_CHOICES), max(1, budget))
            budget = max(1, budget // max(1, dims[i]))
    return g.emit("broadcast", g.shape(x.shape.et, dims), [x], [f"dimensions={{{','.join(map(str, positions))}}}"])


def factor_dims(g: Gen, size: int, rank: int) -> tuple[int, ...]:
    """``rank`` dims whose product is ``size`` (> 0), prime factors dealt out at random."""
    dims = [1] * rank
    n, p = size, 2
    factors = []
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1 if p == 2 else 2
        if p * p > n and n > 1:
            factors.append(n)
            break
    for f in factors:
        dims[g.randint(0, rank - 1)] *= f
    return tuple(dims)


def reshaped_dims(g: Gen, s: FShape) -> tuple[int, ...]:
    rank = g.rank()
    if s.size == 0:
        dims = list(g.dims(max(rank, 1)))
        dims[g.randint(0, len(dims) - 1)] = 0
        return tuple(dims)
    if rank == 0:
        return () if s.size == 1 else factor_dims(g, s.size, 1)
    return factor_dims(g, s.size, rank)


@op_generator("reshape", weight=4)
def gen_reshape(g: Gen) -> Value:
    x = g.pick_or_refuse()
    dims = reshaped_dims(g, x.shape)
    return g.emit("reshape", g.shape(x.shape.et, dims), [x])


@op_generator("transpose", weight=4)
def gen_transpose(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1 and (v.shape.size or g.cfg.allows("zero-size-transpose")))
    perm = g.permutation(x.shape.rank)
    dims = [x.shape.dims[p] for p in perm]
    if g.chance(0.3) and x.shape.m2m is not None:  # a transpose that is a bitcast: permute the layout too
        inv = {p: i for i, p in enumerate(perm)}
        shape = FShape(x.shape.et, tuple(dims), tuple(inv[d] for d in x.shape.layout))
    else:
        shape = g.shape(x.shape.et, dims)
    return g.emit("transpose", shape, [x], [f"dimensions={{{','.join(map(str, perm))}}}"])


@op_generator("copy-layout", weight=3)
def gen_copy(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 2)
    for _ in range(4):
        m2m = tuple(g.permutation(x.shape.rank))
        if m2m != x.shape.layout:
            break
    tiles = ""
    if g.chance(g.cfg.p_tiles * 3) and BITS.get(x.shape.et, 8) >= 8:
        tiles = g.choice(["T(2,2)", "T(4,2)", "T(8,128)"])
    return g.emit("copy", FShape(x.shape.et, x.shape.dims, m2m, tiles), [x])


@op_generator("slice", weight=4)
def gen_slice(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1)
    parts, dims = [], []
    for d in x.shape.dims:
        start = g.randint(0, d)
        limit = g.randint(start, d)
        stride = g.choice([1, 1, 1, 2, 3]) if limit > start else 1
        parts.append(f"[{start}:{limit}" + (f":{stride}]" if stride != 1 or g.chance(0.2) else "]"))
        dims.append(-(-(limit - start) // stride))
        if stride > 1:
            g.stats.features.add("strided-slice")
    return g.emit("slice", g.shape(x.shape.et, dims), [x], ["slice={" + ", ".join(parts) + "}"])


def index_scalars(g: Gen, n: int) -> list[Value]:
    """``n`` integer scalars of one type: pool values, constants or parameters."""
    et = g.weighted(INDEX_TYPES)
    out = []
    for _ in range(n):
        v = g.pick(lambda v: v.shape.rank == 0 and v.shape.et == et, exact=True) if g.chance(0.4) else None
        if v is None:
            if g.chance(0.4) or g.comp.kind != "entry":
                v = g.scalar_constant(et, g.randint(-2, 9) if et[0] == "s" else g.randint(0, 9))
            else:
                v = g.fresh(scalar(et))
        out.append(v)
    return out


@op_generator("dynamic-slice", weight=3)
def gen_dynamic_slice(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1)
    sizes = [g.randint(0, d) if g.chance(0.2) else g.randint(min(1, d), d) for d in x.shape.dims]
    idx = index_scalars(g, x.shape.rank)
    return g.emit("dynamic-slice", g.shape(x.shape.et, sizes), [x, *idx],
                  [f"dynamic_slice_sizes={{{','.join(map(str, sizes))}}}"])


@op_generator("dynamic-update-slice", weight=3)
def gen_dynamic_update_slice(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1)
    fits = lambda v: (v.shape.et == x.shape.et and v.shape.rank == x.shape.rank and v is not x  # noqa: E731
                      and all(a <= b for a, b in zip(v.shape.dims, x.shape.dims)))
    upd = g.pick(fits) if g.chance(0.5) else None
    if upd is None:
        dims = [g.randint(min(1, d), d) for d in x.shape.dims]
        upd = g.fresh(g.shape(x.shape.et, dims))
    idx = index_scalars(g, x.shape.rank)
    return g.emit("dynamic-update-slice", g.shape(x.shape.et, x.shape.dims) if g.chance(0.4) else x.shape,
                  [x, upd, *idx])


@op_generator("concatenate", weight=3)
def gen_concatenate(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1)
    d = g.randint(0, x.shape.rank - 1)
    operands = [x]
    for _ in range(g.randint(1, 4)):
        match = lambda v: (v.shape.et == x.shape.et and v.shape.rank == x.shape.rank and  # noqa: E731
                           all(a == b for i, (a, b) in enumerate(zip(v.shape.dims, x.shape.dims)) if i != d))
        v = g.pick(match) if g.chance(0.5) else None
        if v is None:
            dims = list(x.shape.dims)
            dims[d] = g.choice([0, 1, 1, 2, 3, 5, 8, 16])
            v = g.fresh(g.shape(x.shape.et, dims))
        operands.append(v)
    if g.chance(0.5):
        g.rng.shuffle(operands)
    dims = list(x.shape.dims)
    dims[d] = sum(o.shape.dims[d] for o in operands)
    return g.emit("concatenate", g.shape(x.shape.et, dims), operands, [f"dimensions={{{d}}}"])


@op_generator("pad", weight=3)
def gen_pad(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1)
    value = g.pick(lambda v: v.shape.rank == 0 and v.shape.et == x.shape.et) if g.chance(0.3) else None
    value = value or g.scalar_constant(x.shape.et)
    parts, dims = [], []
    for d in x.shape.dims:
        interior = g.choice([0, 0, 0, 1, 2]) if d > 1 else 0
        span = d + max(d - 1, 0) * interior
        lo = g.randint(-min(span, 3), 3) if g.chance(0.3) else g.randint(0, 2)
        hi = g.randint(-min(span + lo, 3), 3) if g.chance(0.3) and span + lo > 0 else g.randint(0, 2)
        if span + lo + hi < 0:
            hi = -(span + lo)
        if lo < 0 or hi < 0:
            g.stats.features.add("negative-pad")
        parts.append(f"{lo}_{hi}" + (f"_{interior}" if interior else ""))
        dims.append(span + lo + hi)
    if prod(dims) > 4 * g.cfg.max_elements:
        raise GenRefused("pad too large")
    return g.emit("pad", g.shape(x.shape.et, dims), [x, value], ["padding=" + "x".join(parts)])


@op_generator("reverse", weight=2)
def gen_reverse(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1)
    dims = g.subset(range(x.shape.rank), g.randint(1, x.shape.rank))
    return g.emit("reverse", g.shape(x.shape.et, x.shape.dims) if g.chance(0.3) else x.shape, [x],
                  [f"dimensions={{{','.join(map(str, dims))}}}"])


@op_generator("iota", weight=1.5)
def gen_iota(g: Gen) -> Value:
    shape = g.shape(g.et("number"), rank=g.randint(1, 4))
    return g.emit("iota", shape, [], [f"iota_dimension={g.randint(0, shape.rank - 1)}"])


@op_generator("constant", weight=1)
def gen_constant(g: Gen) -> Value:
    dims = g.dims(g.randint(0, 3), max_elements=24)
    if 0 in dims:
        dims = tuple(max(1, d) for d in dims)
    return g.constant(g.shape(g.et(), dims))


@op_generator("bitcast", weight=2, xla=False)
def gen_bitcast(g: Gen) -> Value:
    """A reinterpretation of the physical buffer: another shape of the same byte size (any
    layouts), or the same dims as another type of the same width."""
    x = g.pick_or_refuse(lambda v: not v.shape.tiles)
    if g.chance(0.25) and x.exact and x.shape.et != "pred" and same_width_types(x.shape.et) and \
            g.cfg.allows("bitcast-type-change"):
        et = g.choice(same_width_types(x.shape.et))
        return g.emit("bitcast", FShape(et, x.shape.dims, x.shape.m2m), [x])
    dims = reshaped_dims(g, x.shape)
    m2m, _ = g.layout(len(dims), x.shape.et)
    return g.emit("bitcast", FShape(x.shape.et, dims, m2m), [x])


@op_generator("tuple", weight=1)
def gen_tuple(g: Gen) -> Value:
    """tuple then get-tuple-element (buffers aliased, never computed); sometimes nested."""
    xs = [g.pick_or_refuse() for _ in range(g.randint(1, 3))]
    t = g.emit("tuple", FTuple(tuple(x.shape for x in xs)), xs)
    k = g.randint(0, len(xs) - 1)
    if g.chance(0.3):
        t2 = g.emit("tuple", FTuple((t.shape, xs[k].shape)), [t, xs[k]])
        inner = g.emit("get-tuple-element", t.shape, [t2], ["index=0"])
        return g.emit("get-tuple-element", xs[k].shape, [inner], [f"index={k}"])
    return g.emit("get-tuple-element", xs[k].shape, [t], [f"index={k}"])


__all__ = ["factor_dims", "reshaped_dims", "index_scalars", "is_float", "is_int"]


@op_generator("transpose-tile", weight=1)
def gen_transpose_tile(g: Gen) -> Value:
    """A transpose the shared-memory emitter takes: the minor dimension moves and both sides are
    at least a tile wide (8- and 16-bit types get the packed variant)."""
    et = g.choice(["f32", "f16", "bf16", "s8", "u8", "pred", "s16", "f64", "s32"])
    rank = g.choice([2, 2, 3, 3, 4])
    big = (32, 33, 40, 64, 65, 100, 128)
    dims = [g.choice((1, 2, 3, 4)) for _ in range(rank)]
    dims[-1], dims[0] = g.choice(big), g.choice(big)
    if prod(dims) > 16384:
        dims[0] = max(1, 16384 // prod(dims[1:]))
    x = g.like(dims, et, fresh_p=0.7)
    perm = list(range(rank))
    perm[0], perm[-1] = perm[-1], perm[0]
    if rank > 2 and g.chance(0.5):
        mid = perm[1:-1]
        g.rng.shuffle(mid)
        perm[1:-1] = mid
    g.stats.features.add("transpose-tile")
    return g.emit("transpose", FShape(et, tuple(dims[p] for p in perm)), [x],
                  [f"dimensions={{{','.join(map(str, perm))}}}"])
