"""Generators of collectives for SPMD modules (``FuzzConfig.spmd``: R x P participants, the
module header's ``replica_count``/``num_partitions``, ``ModuleBuilder.world``).

Every collective draws a group mode (``hlo.collective_groups``: no channel id is cross-replica;
a channel id is cross-partition for all-to-all, collective-permute and collective-broadcast,
cross-replica-and-partition for all-reduce, all-gather and reduce-scatter, or flattened ids
with ``use_global_device_ids=true``), then replica groups of one size covering that mode's id
space, in one of XLA's spellings (absent, explicit, iota ``[G,S]<=[dims]T(perm)``, mesh
``mesh['x'=2,'y'=2] {'y'}`` with sub-axes ``'x':(pre)size``, of two or more). The group size
in participants (the ids' group, times P in cross-replica-and-partition mode) fixes the shapes:
an all-gather multiplies its dimension by it, a reduce-scatter divides (the dimension is made
divisible), an all-to-all's split dimension is divisible by it and its tuple form takes that
many operands of one shape, as XLA's verifier demands. Async forms: the native starts
(all-reduce, all-gather, collective-permute) and the ``X-start``/``X-done`` sugar of
reduce-scatter and all-to-all. partition-id/replica-id feed arithmetic.

Collectives never run nested (a conditional's branch or a loop's trip count may differ per
participant: its peers would wait forever) and are never outlined into fusions."""
from __future__ import annotations

from ..hlo.collective_groups import parse_replica_groups
from . import scalar_comps as sc
from .builder import Value
from .gen_core import Gen, GenRefused
from .registry import op_generator
from .shapes import FShape, FTuple, is_float, scalar

CROSS_REPLICA, CROSS_PARTITION, CRAP, FLATTENED = "cross-replica", "cross-partition", "crap", "flattened"
_GLOBAL_ID_OPS = ("all-reduce", "all-gather", "reduce-scatter")
# element types collectives carry (the bf16/f16/s8/pred/u64 the brief of this generator names, weighted up)
COLLECTIVE_ETS = {"f32": 10, "bf16": 5, "f16": 4, "f64": 2, "s32": 6, "s8": 3, "u8": 2, "s64": 2, "u64": 3,
                  "u32": 2, "s16": 1, "pred": 4}
REDUCTIONS = {"float": ("add", "multiply", "minimum", "maximum"), "int": ("add", "multiply", "minimum", "maximum"),
              "pred": ("and", "or", "minimum", "maximum")}
COLLECTIVE_OPCODES = frozenset({
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "collective-broadcast",
    "all-reduce-start", "all-reduce-done", "all-gather-start", "all-gather-done", "collective-permute-start",
    "collective-permute-done", "reduce-scatter-start", "reduce-scatter-done", "all-to-all-start",
    "all-to-all-done", "partition-id", "replica-id"})


def world(g: Gen) -> tuple[int, int]:
    w = getattr(g.mb, "world", None)
    if w is None:
        raise GenRefused("not an SPMD module")
    return w


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(n,)]
    return [(d,) + rest for d in _divisors(n) for rest in _factorizations(n // d, parts - 1)]


class Groups:
    """One collective's group attributes: its mode, the attribute texts, the groups of ids
    as the spelling expands, and the group size in participants."""

    def __init__(self, mode: str, attrs: list[str], groups: list[list[int]], size: int, spelling: str):
        self.mode, self.attrs, self.groups, self.size, self.spelling = mode, attrs, groups, size, spelling


def draw_mode(g: Gen, base: str) -> str:
    R, P = world(g)
    space = {CROSS_REPLICA: R, CROSS_PARTITION: P, CRAP: R * P, FLATTENED: R * P}
    modes = [CROSS_REPLICA, CRAP, FLATTENED] if base in _GLOBAL_ID_OPS else [CROSS_REPLICA, CROSS_PARTITION]
    # a mode whose groups can only hold one participant is drawn rarely (nothing moves)
    return g.weighted({m: (5 if space[m] > 1 else 1) for m in modes})


def draw_groups(g: Gen, base: str, mode: str | None = None, min_size: int = 1, listed: bool = False) -> Groups:
    """Replica groups for ``base`` in ``mode`` (drawn when None) with at least ``min_size``
    participants a group (GenRefused when the mode's ids cannot give that); ``listed``: written
    out (XLA refuses an array all-to-all without groups)."""
    R, P = world(g)
    mode = mode or draw_mode(g, base)
    n_ids = {CROSS_REPLICA: R, CROSS_PARTITION: P, CRAP: R, FLATTENED: R * P}[mode]
    per_id = P if mode == CRAP else 1
    attrs = []
    if mode != CROSS_REPLICA:
        attrs.append(f"channel_id={g.mb.next_channel()}")
    if mode == FLATTENED:
        attrs.append("use_global_device_ids=true")
    elif mode == CRAP and g.chance(0.3):
        attrs.append("use_global_device_ids=false")
    sizes = [s for s in _divisors(n_ids) if s * per_id >= min_size]
    if not sizes:
        raise GenRefused("groups too small")
    s = g.weighted({d: (1 if d == 1 and n_ids > 1 else 3) for d in sizes})
    text, spelling = _spelling(g, n_ids, s, mode, listed)
    groups = parse_replica_groups(text.partition("=")[2]) if text else []
    if not groups:
        groups = [list(range(n_ids))]
    assert all(len(x) == s for x in groups) and sorted(i for x in groups for i in x) == list(range(n_ids)), text
    if text:
        attrs.append(text)
    return Groups(mode, attrs, groups, s * per_id, spelling)


def _spelling(g: Gen, n: int, s: int, mode: str, listed: bool = False) -> tuple[str, str]:
    """(``replica_groups=...`` text or "" for none, the spelling's name): ``n`` ids in groups of ``s``."""
    # XLA's parser takes mesh groups of two or more, without device_ids (which ours also reads)
    forms = {"explicit": 4, "iota": 3, "mesh": 2 if s > 1 else 0}
    if s == n and not listed:
        forms.update({"absent": 1 if mode != FLATTENED else 0, "empty": 1 if mode != FLATTENED else 0})
    form = g.weighted({k: w for k, w in forms.items() if w})
    if form == "absent":
        return "", form
    if form == "empty":
        return "replica_groups={}", form
    if form == "explicit":
        ids = g.permutation(n) if g.chance(0.6) else list(range(n))
        groups = [ids[k:k + s] for k in range(0, n, s)]
        return "replica_groups={" + ",".join("{" + ",".join(map(str, x)) + "}" for x in groups) + "}", form
    if form == "iota":
        dims = list(g.choice(_factorizations(n, g.randint(1, 3))))
        dims = [d for d in dims if d > 1] or [n]
        text = f"replica_groups=[{n // s},{s}]<=[{','.join(map(str, dims))}]"
        if len(dims) > 1 and g.chance(0.6):
            text += f"T({','.join(map(str, g.permutation(len(dims))))})"
        return text, form
    return _mesh(g, n, s), form


def _mesh(g: Gen, n: int, s: int) -> str:
    """A mesh spelling of ``n`` ids whose listed (sub-)axes multiply to ``s``."""
    for _ in range(20):
        sizes = [d for d in g.choice(_factorizations(n, g.randint(1, 3))) if d > 1] or [n]
        names = ["x", "y", "z"][:len(sizes)]
        listed, left = [], s
        for name, size in zip(names, sizes):
            if left == 1:
                break
            if left % size == 0 and g.chance(0.7):
                listed.append(f"'{name}'")
                left //= size
            elif size > 1 and size % left == 0 and left < size:  # a sub-axis: 'a':(pre)size
                pres = [p for p in _divisors(size // left)]
                listed.append(f"'{name}':({g.choice(pres)}){left}")
                left = 1
        if left != 1:
            continue
        g.rng.shuffle(listed)
        axes = ",".join(f"'{a}'={z}" for a, z in zip(names, sizes))
        text = f"replica_groups=mesh[{axes}] {{{','.join(listed)}}}"
        try:
            groups = parse_replica_groups(text.partition("=")[2])
        except Exception:  # noqa: BLE001 - a listing our reader refuses: draw again
            continue
        if groups and all(len(x) == s for x in groups):
            return text
    ids = list(range(n))
    return "replica_groups={" + ",".join("{" + ",".join(map(str, ids[k:k + s])) + "}" for k in range(0, n, s)) + "}"


# ---- operands ----------------------------------------------------------------------------------

def _et(g: Gen) -> str:
    return g.weighted(COLLECTIVE_ETS)


def _operand(g: Gen, pred=lambda v: True, et: str | None = None, dims=None) -> Value:
    """A pool value (``pred``), or a fresh one of ``et`` and ``dims``."""
    if dims is None and g.chance(0.65):
        v = g.pick(lambda v: pred(v) and (et is None or v.shape.et == et) and 0 < v.shape.size <= 2048)
        if v is not None:
            return v
    et = et or _et(g)
    dims = dims if dims is not None else g.dims(g.randint(0, 3), max_elements=256)
    return g.fresh(g.shape(et, dims))


def _divisible(g: Gen, n: int, et: str | None = None) -> tuple[Value, int]:
    """An operand of rank >= 1 with a dimension divisible by ``n``, and that dimension."""
    def ok(v: Value) -> bool:
        return v.shape.rank > 0 and any(d and d % n == 0 for d in v.shape.dims)
    if g.chance(0.6):
        v = g.pick(lambda v: ok(v) and (et is None or v.shape.et == et) and v.shape.size <= 2048)
        if v is not None:
            return v, g.choice([i for i, d in enumerate(v.shape.dims) if d and d % n == 0])
    rank = g.randint(1, 3)
    dims = list(g.dims(rank, max_elements=128))
    d = g.randint(0, rank - 1)
    dims[d] = n * g.choice([1, 1, 2, 3])
    return g.fresh(g.shape(et or _et(g), dims)), d


def _result(g: Gen, x: FShape, dims=None) -> FShape:
    """A result like ``x`` (new dims), in x's layout or a fresh one."""
    dims = tuple(dims) if dims is not None else x.dims
    if g.chance(0.3):
        return g.relayout(FShape(x.et, dims))
    return FShape(x.et, dims, x.m2m, x.tiles if dims == x.dims else "")


def _one_or_tuple(shapes):
    return shapes[0] if len(shapes) == 1 else FTuple(tuple(shapes))


def _gtes(g: Gen, t: Value, shapes) -> list[Value]:
    return [g.emit("get-tuple-element", s, [t], [f"index={i}"]) for i, s in enumerate(shapes)]


def _sync_or_async(g: Gen, grp: Groups, opcode: str, result, ops, attrs, start_shape):
    """``opcode`` as itself (3 in 4) or as ``opcode-start`` (of ``start_shape``) and ``-done``."""
    form = g.weighted({"sync": 3, "async": 1})
    _note(g, grp, f"{opcode}-{form}")
    if form == "async":
        start = g.emit(f"{opcode}-start", start_shape, ops, attrs)
        return g.emit(f"{opcode}-done", result, [start])
    return g.emit(opcode, result, ops, attrs)


def _sugar_start(x, result):
    """The shape of the ``X-start`` sugar of a one-operand collective: ((operand), result, s32[])."""
    return FTuple((FTuple((x,)), result, scalar("s32")))


def _note(g: Gen, grp: Groups, opcode: str) -> None:
    g.stats.features.add(f"groups-{grp.spelling}")
    g.stats.features.add(f"mode-{grp.mode}")
    g.stats.features.add(f"spmd-{opcode}")


# ---- the generators ----------------------------------------------------------------------------

@op_generator("all-reduce", weight=4, nested=False, spmd=True)
def gen_all_reduce(g: Gen) -> Value:
    grp = draw_groups(g, "all-reduce")
    first = _operand(g)
    et = first.shape.et
    ops = [first] + [_operand(g, et=et) for _ in range(g.weighted({0: 6, 1: 2, 2: 1}))]
    kind = g.choice(REDUCTIONS[sc.family(et)])
    comp = sc.reducer(g.mb, kind, et)
    shapes = [_result(g, o.shape) for o in ops]
    attrs = grp.attrs + [f"to_apply={comp.name}"]
    out = _sync_or_async(g, grp, "all-reduce", _one_or_tuple(shapes), ops, attrs, _one_or_tuple(shapes))
    return _gtes(g, out, shapes)[-1] if len(shapes) > 1 else out


@op_generator("all-gather", weight=3, nested=False, spmd=True)
def gen_all_gather(g: Gen) -> Value:
    grp = draw_groups(g, "all-gather")
    first = _operand(g, lambda v: v.shape.rank > 0)
    if first.shape.rank == 0:
        raise GenRefused("all-gather of a scalar")
    d = g.randint(0, first.shape.rank - 1)
    ops = [first]
    if g.chance(0.2):  # variadic: operands of one rank (the same gathered dimension)
        ops.append(_operand(g, lambda v: v.shape.rank == first.shape.rank,
                            dims=g.dims(first.shape.rank, max_elements=128)))
    shapes = [_result(g, o.shape, tuple(x * grp.size if i == d else x for i, x in enumerate(o.shape.dims)))
              for o in ops]
    attrs = grp.attrs + [f"dimensions={{{d}}}"]
    start_shape = FTuple((ops[0].shape, shapes[0])) if len(ops) == 1 else \
        FTuple((FTuple(tuple(o.shape for o in ops)), FTuple(tuple(shapes))))
    out = _sync_or_async(g, grp, "all-gather", _one_or_tuple(shapes), ops, attrs, start_shape)
    return _gtes(g, out, shapes)[-1] if len(shapes) > 1 else out


@op_generator("reduce-scatter", weight=3, nested=False, spmd=True)
def gen_reduce_scatter(g: Gen) -> Value:
    grp = draw_groups(g, "reduce-scatter")
    x, d = _divisible(g, grp.size)
    kind = g.choice(REDUCTIONS[sc.family(x.shape.et)])
    comp = sc.reducer(g.mb, kind, x.shape.et)
    shape = _result(g, x.shape, tuple(v // grp.size if i == d else v for i, v in enumerate(x.shape.dims)))
    attrs = grp.attrs + [f"dimensions={{{d}}}", f"to_apply={comp.name}"]
    return _sync_or_async(g, grp, "reduce-scatter", shape, [x], attrs, _sugar_start(x.shape, shape))


@op_generator("all-to-all", weight=3, nested=False, spmd=True)
def gen_all_to_all(g: Gen) -> Value:
    tuple_form = g.chance(0.3)  # of groups of two or more: XLA reads one operand without dimensions as an array
    grp = draw_groups(g, "all-to-all", listed=not tuple_form, min_size=2 if tuple_form else 1)
    n = grp.size
    if tuple_form:  # tuple form: one operand per group member, one shape
        first = _operand(g, lambda v: v.shape.size <= 512)
        ops = [first] + [_operand(g, lambda v, s=first.shape: v.shape.dims == s.dims and v.shape.et == s.et,
                                  et=first.shape.et, dims=first.shape.dims if g.chance(0.5) else None)
                         for _ in range(n - 1)]
        ops = [o if o.shape.dims == first.shape.dims else g.fresh(g.shape(first.shape.et, first.shape.dims))
               for o in ops]
        shapes = [_result(g, o.shape) for o in ops]
        _note(g, grp, "all-to-all-tuple")
        out = g.emit("all-to-all", _one_or_tuple(shapes), ops, grp.attrs)
        return _gtes(g, out, shapes)[g.randint(0, n - 1)] if n > 1 else out
    x, d = _divisible(g, n)
    shape = _result(g, x.shape)
    attrs = grp.attrs + [f"dimensions={{{d}}}"]
    if g.chance(0.25):  # the X-start/X-done sugar
        _note(g, grp, "all-to-all-async")
        start = g.emit("all-to-all-start", _sugar_start(x.shape, shape), [x], attrs)
        return g.emit("all-to-all-done", shape, [start])
    _note(g, grp, "all-to-all-array")
    return g.emit("all-to-all", shape, [x], attrs)


@op_generator("collective-permute", weight=3, nested=False, spmd=True)
def gen_collective_permute(g: Gen) -> Value:
    R, P = world(g)
    mode = draw_mode(g, "collective-permute")
    n = P if mode == CROSS_PARTITION else R
    sources, targets = g.permutation(n), g.permutation(n)
    k = n if g.chance(0.5) else g.randint(0, n)   # partial pairs: who is no target gets zeros
    pairs = sorted(zip(sources[:k], targets[:k]), key=lambda p: g.rng.random())
    attrs = [f"channel_id={g.mb.next_channel()}"] if mode == CROSS_PARTITION else []
    attrs.append("source_target_pairs={" + ",".join(f"{{{s},{t}}}" for s, t in pairs) + "}")
    g.stats.features.add(f"mode-{mode}")
    g.stats.features.add("permute-" + ("full" if k == n else "partial"))
    if g.chance(0.25):
        x = _operand(g)
        shape = _result(g, x.shape)
        g.stats.features.add("spmd-collective-permute-async")
        start = g.emit("collective-permute-start", FTuple((x.shape, shape, scalar("u32"), scalar("u32"))), [x], attrs)
        return g.emit("collective-permute-done", shape, [start])
    ops = [_operand(g) for _ in range(g.weighted({1: 5, 2: 1}))]
    shapes = [_result(g, o.shape) for o in ops]
    g.stats.features.add("spmd-collective-permute" + ("-combined" if len(ops) > 1 else ""))
    out = g.emit("collective-permute", _one_or_tuple(shapes), ops, attrs)
    return _gtes(g, out, shapes)[-1] if len(shapes) > 1 else out


@op_generator("collective-broadcast", weight=2, nested=False, spmd=True)
def gen_collective_broadcast(g: Gen) -> Value:
    grp = draw_groups(g, "collective-broadcast")
    x = _operand(g)
    _note(g, grp, "collective-broadcast")
    return g.emit("collective-broadcast", _result(g, x.shape), [x], grp.attrs)


@op_generator("logical-id", weight=2, nested=False, spmd=True)
def gen_logical_id(g: Gen) -> Value:
    """partition-id or replica-id (u32[]) converted and broadcast into an elementwise op."""
    opcode = g.choice(["partition-id", "replica-id"])
    i = g.emit(opcode, scalar("u32"), [], pool=False)
    g.stats.features.add(f"spmd-{opcode}")
    x = g.pick(lambda v: v.shape.et != "pred" and v.shape.size <= 4096)
    if x is None:
        return g.add_to_pool(i)
    et = x.shape.et
    c = i if et == "u32" else g.emit("convert", scalar(et), [i], pool=False)
    b = g.emit("broadcast", FShape(et, x.shape.dims), [c], ["dimensions={}"], pool=False)
    op = g.choice(["add", "multiply", "maximum", "subtract"] if is_float(et) or et.startswith("s") else
                  ["add", "multiply", "maximum"])
    return g.emit(op, _result(g, x.shape), [x, b])


__all__ = ["COLLECTIVE_OPCODES", "draw_groups", "draw_mode", "Groups"]
