"""Generators of ops that combine elements: reduce (variadic too), reduce-window, dot,
convolution, sort, topk, map, select-and-scatter, gather, scatter, rng-bit-generator."""
from __future__ import annotations

from math import prod

from . import scalar_comps as sc
from .builder import Value
from .gen_core import Gen, GenRefused, identity_value, literal_array, literal_scalar
from .registry import op_generator
from .shapes import FShape, FTuple, is_float, is_int, scalar

FLOP_BUDGET = 60_000


def _flops(g: Gen) -> int:
    """Multiply-adds one dot or convolution may cost (more in big modules)."""
    return FLOP_BUDGET * max(1, g.cfg.max_elements // 1024)


def _big(g: Gen) -> bool:
    return g.cfg.max_elements > 4096


def _init(g: Gen, kind: str, et: str) -> Value:
    return g.scalar_constant(et, identity_value(kind, et))


def _kind(g: Gen, et: str, exclude=(), count: int = 0) -> str:
    """A reducer kind for ``et``; a float product only over a few elements (``count``): a long
    one over- and underflows in an order-dependent way (inf * 0 or 0 * inf: NaN or 0)."""
    if is_float(et) and count > 4:
        exclude = tuple(exclude) + ("multiply",)
    return g.choice([k for k in sc.REDUCER_KINDS[sc.family(et)] if k not in exclude])


def _gtes(g: Gen, t: Value, shapes) -> list[Value]:
    return [g.emit("get-tuple-element", s, [t], [f"index={i}"]) for i, s in enumerate(shapes)]


@op_generator("reduce", weight=5)
def gen_reduce(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: 0 not in v.shape.dims or g.cfg.allows("zero-size-reduce"))
    dims = g.subset(range(x.shape.rank)) if x.shape.rank else []
    if x.shape.rank and not dims and g.chance(0.7):
        dims = [g.randint(0, x.shape.rank - 1)]
    kept = [d for i, d in enumerate(x.shape.dims) if i not in dims]
    count = prod(x.shape.dims[d] for d in dims)
    variant = g.weighted({"plain": 8, "argmax": 2, "pair": 1})
    attr = f"dimensions={{{','.join(map(str, dims))}}}"
    if variant == "argmax" and x.exact and x.shape.et != "pred" and x.shape.rank:
        index_et = g.choice(["s32", "s32", "u32", "s64"])
        io = g.emit("iota", FShape(index_et, x.shape.dims), [], [f"iota_dimension={dims[0] if dims else 0}"])
        largest = g.chance(0.5)
        comp = sc.argbest(g.mb, x.shape.et, index_et, largest)
        inits = [_init(g, "maximum" if largest else "minimum", x.shape.et), g.scalar_constant(index_et, 0)]
        shapes = (g.shape(x.shape.et, kept), g.shape(index_et, kept))
        t = g.emit("reduce", FTuple(shapes), [x, io, *inits], [attr, f"to_apply={comp.name}"])
        g.stats.features.add("variadic-reduce")
        return _gtes(g, t, shapes)[g.randint(0, 1)]
    if variant == "pair" and x.shape.rank:
        y = g.like(x.shape.dims, g.et())
        kinds = [_kind(g, x.shape.et, count=count), _kind(g, y.shape.et, count=count)]
        comp = sc.multi_reducer(g.mb, kinds, [x.shape.et, y.shape.et])
        inits = [_init(g, k, v.shape.et) for k, v in zip(kinds, (x, y))]
        shapes = (g.shape(x.shape.et, kept), g.shape(y.shape.et, kept))
        exact = all(not is_float(v.shape.et) and v.exact for v in (x, y))
        t = g.emit("reduce", FTuple(shapes), [x, y, *inits], [attr, f"to_apply={comp.name}"], exact=exact)
        g.stats.features.add("variadic-reduce")
        outs = _gtes(g, t, shapes)
        for o, v in zip(outs, (x, y)):
            o.exact = v.exact and not is_float(v.shape.et)
        return outs[-1]
    kind = _kind(g, x.shape.et, count=count)
    comp = sc.reducer(g.mb, kind, x.shape.et)
    exact = x.exact and not is_float(x.shape.et)
    return g.emit("reduce", g.shape(x.shape.et, kept), [x, _init(g, kind, x.shape.et)],
                  [attr, f"to_apply={comp.name}"], exact=exact)


def _window(g: Gen, dims, dilation: bool = True):
    """(window attribute text, output dims) for a random window over ``dims``."""
    sizes, strides, pads, lhs, rhs, out = [], [], [], [], [], []
    for d in dims:
        lo, hi = (g.randint(0, 2), g.randint(0, 2)) if g.chance(0.4) else (0, 0)
        bd = g.choice([1, 1, 1, 2]) if dilation and g.chance(0.2) else 1
        wd = g.choice([1, 1, 2]) if dilation and g.chance(0.2) else 1
        padded = (max(d - 1, 0) * bd + 1 if d else 0) + lo + hi
        size = g.randint(1, max(1, min(4, padded)))
        stride = g.choice([1, 1, 2, 3])
        eff = (size - 1) * wd + 1
        o = (padded - eff) // stride + 1 if padded >= eff else 0
        sizes.append(size), strides.append(stride), pads.append(f"{lo}_{hi}"), lhs.append(bd), rhs.append(wd)
        out.append(o)
    show_stride = any(s != 1 for s in strides) or g.chance(0.3)
    return window_text(sizes, strides, pads, lhs, rhs, show_stride), out, sizes


def window_text(sizes, strides, pads, lhs_dilate, rhs_dilate, show_stride: bool = False) -> str:
    """``window={size=.. stride=.. pad=.. lhs_dilate=.. rhs_dilate=..}``, each field past the
    size only where it is not the default (the stride also when ``show_stride``); ``pads`` are
    ``"lo_hi"`` strings."""
    parts = [f"size={'x'.join(map(str, sizes))}"]
    if show_stride or any(s != 1 for s in strides):
        parts.append(f"stride={'x'.join(map(str, strides))}")
    if any(p != "0_0" for p in pads):
        parts.append(f"pad={'x'.join(pads)}")
    if any(b != 1 for b in lhs_dilate):
        parts.append(f"lhs_dilate={'x'.join(map(str, lhs_dilate))}")
    if any(b != 1 for b in rhs_dilate):
        parts.append(f"rhs_dilate={'x'.join(map(str, rhs_dilate))}")
    return "window={" + " ".join(parts) + "}"


@op_generator("reduce-window", weight=3)
def gen_reduce_window(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1)
    window, out, sizes = _window(g, x.shape.dims)
    if prod(out) * prod(sizes) > 8 * g.cfg.max_elements:
        raise GenRefused("window too large")
    kind = _kind(g, x.shape.et, exclude=("multiply",))
    comp = sc.reducer(g.mb, kind, x.shape.et)
    exact = x.exact and not is_float(x.shape.et)
    # the init enters each window once (padding is skipped), so it need not be the identity
    init = _init(g, kind, x.shape.et) if g.chance(0.8) else g.scalar_constant(x.shape.et)
    return g.emit("reduce-window", g.shape(x.shape.et, out), [x, init],
                  [window, f"to_apply={comp.name}"], exact=exact)


@op_generator("select-and-scatter", weight=2)
def gen_select_and_scatter(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1 and v.shape.et != "pred", exact=True)
    window, out, _ = _window(g, x.shape.dims, dilation=False)
    source = g.like(out, x.shape.et)
    select = sc.select_comp(g.mb, x.shape.et, g.choice(["GE", "GE", "GT", "LE", "LT"]))
    kind = g.choice(["add", "add", "maximum", "minimum"])
    scatter = sc.reducer(g.mb, kind, x.shape.et)
    init = _init(g, kind, x.shape.et) if g.chance(0.7) else g.scalar_constant(x.shape.et)
    exact = source.exact and not is_float(x.shape.et)
    return g.emit("select-and-scatter", g.shape(x.shape.et, x.shape.dims), [x, source, init],
                  [window, f"select={select.name}", f"scatter={scatter.name}"], exact=exact)


@op_generator("dot", weight=4)
def gen_dot(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1 and v.shape.et != "pred" and v.shape.rank <= 4)
    r = x.shape.rank
    dims = list(range(r))
    g.rng.shuffle(dims)
    nb = g.randint(0, min(2, r - 1))
    nc = g.randint(0 if r - nb > 1 else 0, min(2, r - nb))
    batch, contract = dims[:nb], dims[nb:nb + nc]
    free_l = [d for d in range(r) if d not in batch and d not in contract]
    nfree_r = g.randint(0, 2)
    free_r_sizes = [g.choice([1, 2, 3, 4, 5, 8, 16] + ([33, 64, 100, 128] if _big(g) else []))
                    for _ in range(nfree_r)]
    rhs_parts = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + [("f", i) for i in range(nfree_r)]
    g.rng.shuffle(rhs_parts)
    rhs_dims, rb, rc = [], [None] * nb, [None] * nc
    for pos, (kind, i) in enumerate(rhs_parts):
        if kind == "b":
            rhs_dims.append(x.shape.dims[batch[i]])
            rb[i] = pos
        elif kind == "c":
            rhs_dims.append(x.shape.dims[contract[i]])
            rc[i] = pos
        else:
            rhs_dims.append(free_r_sizes[i])
    free_r = [rhs_dims[pos] for pos, (kind, _) in enumerate(rhs_parts) if kind == "f"]
    out = [x.shape.dims[d] for d in batch] + [x.shape.dims[d] for d in free_l] + free_r
    k = prod(x.shape.dims[d] for d in contract)
    if prod(out) * max(k, 1) > _flops(g) or prod(rhs_dims) > 4 * g.cfg.max_elements:
        raise GenRefused("dot too large")
    y = g.like(rhs_dims, x.shape.et)
    attrs = [f"lhs_batch_dims={{{','.join(map(str, batch))}}}",
             f"lhs_contracting_dims={{{','.join(map(str, contract))}}}",
             f"rhs_batch_dims={{{','.join(map(str, rb))}}}",
             f"rhs_contracting_dims={{{','.join(map(str, rc))}}}"]
    exact = x.exact and y.exact and not is_float(x.shape.et)
    return g.emit("dot", g.shape(x.shape.et, out), [x, y], attrs, exact=exact)


@op_generator("convolution", weight=3)
def gen_convolution(g: Gen) -> Value:
    et = g.et("number")
    ns = g.weighted({0: 1, 1: 4, 2: 4, 3: 1})
    groups = g.choice([1, 1, 1, 2, 3])
    bgroups = g.choice([1, 1, 1, 1, 2]) if groups == 1 else 1
    big = _big(g)
    n = g.choice([1, 1, 2, 3]) * bgroups
    cin = g.choice([1, 2, 3, 4] + ([8, 16, 32] if big else [])) * groups
    cout = g.choice([1, 2, 3, 4] + ([8, 16, 32, 64] if big else [])) * groups * bgroups
    spatial = [g.choice([1, 2, 3, 4, 5, 7, 8] + ([12, 16, 31] if big else [])) for _ in range(ns)]
    ksizes = [g.randint(1, 3) for _ in range(ns)]
    win, out_sp = [], []
    strides, pads, lhs_d, rhs_d = [], [], [], []
    for d, k in zip(spatial, ksizes):
        stride = g.choice([1, 1, 2])
        lo, hi = (g.randint(-1, 2), g.randint(-1, 2)) if g.chance(0.5) else (0, 0)
        ld = g.choice([1, 1, 1, 2])
        rd = g.choice([1, 1, 1, 2])
        padded = (d - 1) * ld + 1 + lo + hi
        eff = (k - 1) * rd + 1
        o = (padded - eff) // stride + 1 if padded >= eff else 0
        if o <= 0:
            lo, hi, o = 0, 0, max(0, ((d - 1) * ld + 1 - eff) // stride + 1) if (d - 1) * ld + 1 >= eff else 0
            if o == 0:
                k, eff, o = 1, 1, ((d - 1) * ld) // stride + 1
                rd = 1
        strides.append(stride), pads.append(f"{lo}_{hi}"), lhs_d.append(ld), rhs_d.append(rd)
        win.append(k)
        out_sp.append(o)
    ksizes = win
    flops = n * prod(out_sp) * cout * (cin // groups) * prod(ksizes)
    if flops > _flops(g):
        raise GenRefused("convolution too large")
    labels_sp = [str(i) for i in range(ns)]
    lhs_l = ["b", "f", *labels_sp]
    rhs_l = ["i", "o", *labels_sp]
    out_l = ["b", "f", *labels_sp]
    for lst in (lhs_l, rhs_l, out_l):
        if g.chance(0.5):
            g.rng.shuffle(lst)
    size_of = {"b": n, "f": cin}
    lhs_dims = [size_of[c] if c in size_of else spatial[int(c)] for c in lhs_l]
    rsize = {"i": cin // groups, "o": cout}
    rhs_dims = [rsize[c] if c in rsize else ksizes[int(c)] for c in rhs_l]
    osize = {"b": n // bgroups, "f": cout}
    out_dims = [osize[c] if c in osize else out_sp[int(c)] for c in out_l]
    lhs = g.like(lhs_dims, et)
    rhs = g.like(rhs_dims, et, exact=is_float(et))
    if is_float(et) and not g.cfg.allows("conv-nonfinite-weights"):
        rhs = _finite(g, rhs)
    attrs = []
    if ns:
        attrs.append(window_text(ksizes, strides, pads, lhs_d, rhs_d))
    attrs.append(f"dim_labels={''.join(lhs_l)}_{''.join(rhs_l)}->{''.join(out_l)}")
    if groups > 1:
        attrs.append(f"feature_group_count={groups}")
    if bgroups > 1:
        attrs.append(f"batch_group_count={bgroups}")
    exact = lhs.exact and rhs.exact and not is_float(et)
    return g.emit("convolution", g.shape(et, out_dims), [lhs, rhs], attrs, exact=exact)


def _finite(g: Gen, x: Value) -> Value:
    """``x`` with its non-finite elements replaced by 0 (see the conv-nonfinite-weights feature)."""
    ok = g.emit("is-finite", FShape("pred", x.shape.dims), [x], pool=False)
    zero = g.emit("broadcast", FShape(x.shape.et, x.shape.dims), [g.scalar_constant(x.shape.et, 0)],
                  ["dimensions={}"], pool=False)
    return g.emit("select", FShape(x.shape.et, x.shape.dims), [ok, x, zero], pool=False)


@op_generator("sort", weight=3)
def gen_sort(g: Gen) -> Value:
    key = g.pick_or_refuse(lambda v: v.shape.rank >= 1, exact=True)
    extra = [g.like(key.shape.dims, g.et()) for _ in range(g.weighted({0: 3, 1: 3, 2: 1}))]
    ops = [key, *extra]
    d = g.randint(0, key.shape.rank - 1)
    total = is_float(key.shape.et) or g.chance(0.2)
    comp = sc.comparator(g.mb, [o.shape.et for o in ops], g.choice(["LT", "GT"]), total)
    stable = bool(extra) or g.chance(0.5)
    attrs = [f"dimensions={{{d}}}"] + (["is_stable=true"] if stable else []) + [f"to_apply={comp.name}"]
    if len(ops) == 1:
        return g.emit("sort", g.shape(key.shape.et, key.shape.dims), ops, attrs)
    shapes = tuple(g.shape(o.shape.et, o.shape.dims) for o in ops)
    t = g.emit("sort", FTuple(shapes), ops, attrs)
    return _gtes(g, t, shapes)[-1]


@op_generator("topk", weight=1, xla=False)
def gen_topk(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank in (1, 2) and v.shape.dims[-1] >= 1 and is_float(v.shape.et),
                         exact=True)
    k = g.randint(1, min(x.shape.dims[-1], 8))
    dims = x.shape.dims[:-1] + (k,)
    shapes = (FShape(x.shape.et, dims), FShape("s32", dims))
    t = g.emit("topk", FTuple(shapes), [x], [f"k={k}", f"largest={'true' if g.chance(0.8) else 'false'}"])
    return _gtes(g, t, shapes)[g.randint(0, 1)]


@op_generator("map", weight=2)
def gen_map(g: Gen) -> Value:
    x = g.pick_or_refuse()
    arity = g.randint(1, 3)
    ops = [x] + [g.like(x.shape.dims, x.shape.et) for _ in range(arity - 1)]
    result_et = x.shape.et if g.chance(0.7) else g.et()
    exact = all(o.exact for o in ops)
    comp = _map_body(g, x.shape.et, arity, result_et, exact)
    dims = ",".join(map(str, range(x.shape.rank)))
    return g.emit("map", g.shape(result_et, x.shape.dims), ops, [f"dimensions={{{dims}}}", f"to_apply={comp.name}"],
                  exact=exact and comp.root.exact)


def _map_body(g: Gen, et: str, arity: int, result_et: str, exact: bool):
    from .ops_elementwise import scalar_expression
    c = g.mb.comp("map_body", "scalar")
    params = [c.param(scalar(et), exact=exact) for _ in range(arity)]
    sub = g.sub(c)
    root = scalar_expression(sub, params, result_et)
    g.mb.finish(c, root)
    return c


def _index_array(g: Gen, dims, bounds: list[int], unique: bool) -> Value:
    """Start indices of ``dims``; with ``unique``, a constant whose index vectors (on the last
    dim) are distinct and in range, so an assigning scatter is deterministic."""
    et = g.choice(["s32", "s32", "s32", "s64", "u32", "s8"])
    if unique:
        if max(bounds, default=0) > 127:
            et = g.choice(["s32", "s64", "u32"])
        n = prod(dims[:-1]) if dims else 1
        space = prod(max(1, b) for b in bounds)
        if n > space:
            raise GenRefused("not enough distinct indices")
        picks = g.rng.sample(range(space), n)
        vals = []
        for p in picks:
            vec = []
            for b in reversed(bounds):
                vec.append(p % max(1, b))
                p //= max(1, b)
            vals += list(reversed(vec))
        shape = FShape(et, tuple(dims))
        v = g.comp.add("constant", shape, [], payload=literal_array(vals, shape))
        return g.add_to_pool(v)
    v = g.pick(lambda v: v.shape.dims == tuple(dims) and is_int(v.shape.et), exact=True) if g.chance(0.3) else None
    return v or g.fresh(g.shape(et, dims))


@op_generator("gather", weight=3)
def gen_gather(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1 and 0 not in v.shape.dims)
    r = x.shape.rank
    k = g.randint(1, r)
    start_map = g.rng.sample(range(r), k)
    collapsed = sorted(d for d in start_map if g.chance(0.5))
    slice_sizes = [1 if d in collapsed else g.randint(0, x.shape.dims[d]) if g.chance(0.2) else
                   g.randint(1, x.shape.dims[d]) for d in range(r)]
    batch = list(g.dims(g.randint(0, 2), max_elements=16))
    ivd = g.randint(0, len(batch)) if g.chance(0.3) else len(batch)
    idx_dims = batch[:ivd] + [k] + batch[ivd:]
    if k == 1 and g.chance(0.2) and ivd == len(batch):  # implicit trailing index vector
        idx_dims = batch
        ivd = len(batch)
    offset_sizes = [slice_sizes[d] for d in range(r) if d not in collapsed]
    out_rank = len(batch) + len(offset_sizes)
    offset_dims = sorted(g.rng.sample(range(out_rank), len(offset_sizes)))
    out, bi, oi = [], iter(batch), iter(offset_sizes)
    for i in range(out_rank):
        out.append(next(oi) if i in offset_dims else next(bi))
    if prod(out) > 4 * g.cfg.max_elements:
        raise GenRefused("gather too large")
    idx = _index_array(g, idx_dims, [x.shape.dims[d] for d in start_map], False)
    j = lambda xs: ",".join(map(str, xs))  # noqa: E731
    attrs = [f"offset_dims={{{j(offset_dims)}}}", f"collapsed_slice_dims={{{j(collapsed)}}}",
             f"start_index_map={{{j(start_map)}}}", f"index_vector_dim={ivd}",
             f"slice_sizes={{{j(slice_sizes)}}}"]
    return g.emit("gather", g.shape(x.shape.et, out), [x, idx], attrs, exact=x.exact and idx.exact)


@op_generator("scatter", weight=3)
def gen_scatter(g: Gen) -> Value:
    x = g.pick_or_refuse(lambda v: v.shape.rank >= 1 and 0 not in v.shape.dims)
    r = x.shape.rank
    k = g.randint(1, r)
    to_operand = g.rng.sample(range(r), k)
    inserted = sorted(d for d in to_operand if g.chance(0.5))
    combiner = g.weighted({"add": 4, "maximum": 1, "minimum": 1, "multiply": 1, "overwrite": 2}) \
        if x.shape.et != "pred" else g.choice(["or", "and", "overwrite"])
    unique = combiner == "overwrite"
    # an assigning scatter is deterministic only when no two windows overlap: distinct index
    # vectors and windows of one element along the indexed dims
    window = [1 if unique and d in to_operand else g.randint(1, x.shape.dims[d]) for d in range(r)
              if d not in inserted]
    window_dims_of = [d for d in range(r) if d not in inserted]
    batch = list(g.dims(g.randint(0, 2), max_elements=12))
    if 0 in batch:
        batch = [max(1, b) for b in batch]
    idx_dims = batch + [k]
    upd_rank = len(batch) + len(window)
    uwd = sorted(g.rng.sample(range(upd_rank), len(window)))
    upd, bi, wi = [], iter(batch), iter(window)
    for i in range(upd_rank):
        upd.append(next(wi) if i in uwd else next(bi))
    bounds = [x.shape.dims[d] - (window[window_dims_of.index(d)] if d in window_dims_of else 1) + 1
              for d in to_operand]
    idx = _index_array(g, idx_dims, bounds, unique)
    updates = g.like(upd, x.shape.et)
    comp = sc.overwrite(g.mb, x.shape.et) if unique else sc.reducer(g.mb, combiner, x.shape.et)
    j = lambda xs: ",".join(map(str, xs))  # noqa: E731
    attrs = [f"update_window_dims={{{j(uwd)}}}", f"inserted_window_dims={{{j(inserted)}}}",
             f"scatter_dims_to_operand_dims={{{j(to_operand)}}}", f"index_vector_dim={len(batch)}"]
    if unique and g.chance(0.5):
        attrs.append("unique_indices=true")
    attrs.append(f"to_apply={comp.name}")
    exact = x.exact and updates.exact and (unique or not is_float(x.shape.et))
    # XLA's layout assignment gives a scatter its operand's layout (the two share a buffer)
    shape = x.shape if g.chance(0.85) else g.shape(x.shape.et, x.shape.dims)
    return g.emit("scatter", shape, [x, idx, updates], attrs, exact=exact)


@op_generator("rng-bit-generator", weight=1, xla=False, feature="rng-bit-generator")
def gen_rng_bit_generator(g: Gen) -> Value:
    alg = g.choice(["rng_default", "rng_three_fry", "rng_philox"])
    state = FShape("u64", (2,) if alg != "rng_philox" else (g.choice([2, 3]),))
    s = g.fresh(state)
    out = g.shape(g.choice(["u32", "u64", "u8", "s32"]), rank=g.randint(1, 3))
    shapes = (state, out)
    t = g.emit("rng-bit-generator", FTuple(shapes), [s], [f"algorithm={alg}"])
    return _gtes(g, t, shapes)[1]


__all__ = ["literal_scalar"]


# ---- shapes that the specialised emitters take (the tiled dot, implicit-GEMM convolution,
# shared-memory transpose) rather than the loop emitter's elemental fallback -----------------

_GEMM_SIZES = (8, 9, 16, 17, 24, 31, 32, 33, 48, 64, 65, 100)


@op_generator("gemm", weight=1)
def gen_gemm(g: Gen) -> Value:
    """A matrix product big enough for the tiled dot emitter (M, N >= 8, B*M*N*K >= 4096)."""
    et = g.choice(["f32", "f32", "f16", "bf16", "f64", "s32", "s8"])
    m, n, k = g.choice(_GEMM_SIZES), g.choice(_GEMM_SIZES), g.choice((1, 2, 3, 7, 8, 16, 32, 33, 64))
    b = g.choice((0, 0, 1, 2, 3))
    batch = [g.choice((1, 2, 3))] * 1 if b else []
    lhs_parts = [("b", d) for d in batch] + [("m", m), ("k", k)]
    rhs_parts = [("b", d) for d in batch] + [("k", k), ("n", n)]
    if g.chance(0.5):
        g.rng.shuffle(lhs_parts)
    if g.chance(0.5):
        g.rng.shuffle(rhs_parts)
    lhs = g.like([d for _, d in lhs_parts], et, fresh_p=0.8)
    rhs = g.like([d for _, d in rhs_parts], et, fresh_p=0.8)
    pos = lambda parts, kind: [i for i, (c, _) in enumerate(parts) if c == kind]  # noqa: E731
    j = lambda xs: ",".join(map(str, xs))  # noqa: E731
    attrs = [f"lhs_batch_dims={{{j(pos(lhs_parts, 'b'))}}}", f"lhs_contracting_dims={{{j(pos(lhs_parts, 'k'))}}}",
             f"rhs_batch_dims={{{j(pos(rhs_parts, 'b'))}}}", f"rhs_contracting_dims={{{j(pos(rhs_parts, 'k'))}}}"]
    exact = lhs.exact and rhs.exact and not is_float(et)
    g.stats.features.add("gemm")
    return g.emit("dot", g.shape(et, batch + [m, n]), [lhs, rhs], attrs, exact=exact)


@op_generator("conv2d", weight=1)
def gen_conv2d(g: Gen) -> Value:
    """A 2-D convolution big enough for the implicit-GEMM emitter (>= 8 output features per
    group), in a random data layout, with padding, strides and dilations now and then."""
    et = g.choice(["f32", "f32", "f16", "bf16", "s32"])
    groups = g.choice([1, 1, 1, 2])
    n, cin, cout = g.choice([1, 2, 3]), g.choice([3, 4, 8, 16]) * groups, g.choice([8, 16, 24, 32]) * groups
    h, w = g.choice([5, 7, 8, 12, 16]), g.choice([5, 6, 8, 9, 16])
    kh, kw = g.choice([1, 2, 3]), g.choice([1, 3])
    stride = [g.choice([1, 1, 2]), g.choice([1, 1, 2])]
    pads = [(g.randint(0, 1), g.randint(0, 1)) for _ in range(2)]
    rd = [g.choice([1, 1, 2]) for _ in range(2)]
    out_sp = []
    for d, kk, s, (lo, hi), r in zip((h, w), (kh, kw), stride, pads, rd):
        eff = (kk - 1) * r + 1
        if d + lo + hi < eff:
            raise GenRefused("window larger than the input")
        out_sp.append((d + lo + hi - eff) // s + 1)
    lhs_l, rhs_l, out_l = ["b", "0", "1", "f"], ["0", "1", "i", "o"], ["b", "0", "1", "f"]
    for lst in (lhs_l, rhs_l, out_l):
        if g.chance(0.4):
            g.rng.shuffle(lst)
    size = {"b": n, "f": cin, "0": h, "1": w}
    lhs = g.like([size[c] for c in lhs_l], et, fresh_p=0.9)
    rsize = {"i": cin // groups, "o": cout, "0": kh, "1": kw}
    rhs = g.like([rsize[c] for c in rhs_l], et, exact=is_float(et), fresh_p=0.9)
    if is_float(et) and not g.cfg.allows("conv-nonfinite-weights"):
        rhs = _finite(g, rhs)
    osize = {"b": n, "f": cout, "0": out_sp[0], "1": out_sp[1]}
    window = window_text([kh, kw], stride, [f"{lo}_{hi}" for lo, hi in pads], [1, 1], rd)
    attrs = [window, f"dim_labels={''.join(lhs_l)}_{''.join(rhs_l)}->{''.join(out_l)}"]
    if groups > 1:
        attrs.append(f"feature_group_count={groups}")
    exact = lhs.exact and rhs.exact and not is_float(et)
    g.stats.features.add("conv2d")
    return g.emit("convolution", g.shape(et, [osize[c] for c in out_l]), [lhs, rhs], attrs, exact=exact)
