"""Property tests: maps against a small numpy evaluator, simplification preserves meaning,
printing and parsing round-trip, random fusion chains."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_compile.indexing import affine as A
from hlo_compile.indexing.fusion import fusion_output_to_input
from hlo_compile.indexing.indexing_map import IndexingMap
from hlo_compile.indexing.op_maps import input_to_output, output_to_input
from hlo_compile.indexing.parser import parse_indexing_map
from hlo_compile.indexing.simplifier import simplify

from indexing_helpers import root

BASE = 100000  # operand k holds k * BASE + its own flat index


def encoded(k: int, shape) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    return (k * BASE + np.arange(n, dtype=np.int64)).reshape(shape)


def decode(v: int, shapes) -> tuple[int, tuple[int, ...]]:
    k, flat = divmod(int(v), BASE)
    return k, tuple(int(x) for x in np.unravel_index(flat, shapes[k])) if shapes[k] else ()


def stxt(shape) -> str:
    return "s32[" + ",".join(map(str, shape)) + "]"


# ---- a tiny evaluator of data-movement ops (our own, for the tests only) ---------------------
def ev_pad(x, v, padding):
    out_shape = [lo + hi + n + (n - 1) * it if n else lo + hi for n, (lo, hi, it) in zip(x.shape, padding)]
    out = np.full(out_shape, v, dtype=np.int64)
    for idx in itertools.product(*[range(n) for n in x.shape]):
        pos = tuple(lo + i * (it + 1) for i, (lo, _, it) in zip(idx, padding))
        if all(0 <= p < n for p, n in zip(pos, out_shape)):
            out[pos] = x[idx]
    return out


def clamp_offsets(offs, full, size):
    return [min(max(o, 0), n - s) for o, n, s in zip(offs, full, size)]


def check_one_to_one(inst, arrays, out, rt_values=None):
    """Each output element equals an operand element; that operand's map, at this output
    index, is in its domain and gives exactly that element's index."""
    shapes = [a.shape for a in arrays]
    maps = output_to_input(inst, 0)
    for d in itertools.product(*[range(n) for n in out.shape]):
        k, src = decode(out[d], shapes)
        assert maps[k] is not None
        hits = [m for m in maps[k] if m.satisfies(d, (), rt_values or ())]
        assert hits, (inst.opcode, d, [m.to_text() for m in maps[k]])
        assert any(m.evaluate(d, (), rt_values or ()) == src for m in hits), (d, src)


def random_shape(rng, rank=None, lo=1, hi=4):
    rank = rng.randint(1, 3) if rank is None else rank
    return tuple(rng.randint(lo, hi) for _ in range(rank))


SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_transpose_reverse_broadcast(seed):
    rng = random.Random(seed)
    shape = random_shape(rng)
    perm = list(range(len(shape)))
    rng.shuffle(perm)
    x = encoded(0, shape)
    out_shape = tuple(shape[p] for p in perm)
    r = root(f"p0 = {stxt(shape)} parameter(0)\nROOT t = {stxt(out_shape)} transpose(p0), dimensions={{{','.join(map(str, perm))}}}")
    check_one_to_one(r, [x], np.transpose(x, perm))
    rev = sorted(rng.sample(range(len(shape)), rng.randint(1, len(shape))))
    r = root(f"p0 = {stxt(shape)} parameter(0)\nROOT t = {stxt(shape)} reverse(p0), dimensions={{{','.join(map(str, rev))}}}")
    check_one_to_one(r, [x], np.flip(x, rev))
    extra = rng.randint(1, 3)
    out_rank = len(shape) + 1
    kept = sorted(rng.sample(range(out_rank), len(shape)))
    bshape = [extra] * out_rank
    for i, k in enumerate(kept):
        bshape[k] = shape[i]
    expanded = x.reshape([shape[kept.index(j)] if j in kept else 1 for j in range(out_rank)])
    r = root(f"p0 = {stxt(shape)} parameter(0)\nROOT b = {stxt(bshape)} broadcast(p0), dimensions={{{','.join(map(str, kept))}}}")
    check_one_to_one(r, [x], np.broadcast_to(expanded, bshape))
    # input -> output of broadcast: the symbols cover exactly the copies of an element
    (m,), = input_to_output(r, 0)
    for i in itertools.product(*[range(n) for n in shape]):
        outs = {m.evaluate(i, s) for s in itertools.product(*[range(lo, hi + 1) for lo, hi in m.ranges])}
        want = {o for o in itertools.product(*[range(n) for n in bshape])
                if tuple(o[k] for k in kept) == i}
        assert outs == want


@pytest.mark.parametrize("seed", SEEDS)
def test_slice_and_inverse(seed):
    rng = random.Random(seed)
    shape = random_shape(rng, lo=2, hi=7)
    spec = []
    for n in shape:
        s = rng.randint(0, n - 1)
        lim = rng.randint(s + 1, n)
        spec.append((s, lim, rng.randint(1, 3)))
    x = encoded(0, shape)
    out = x[tuple(slice(s, l, t) for s, l, t in spec)]
    text = ",".join(f"[{s}:{l}:{t}]" for s, l, t in spec)
    r = root(f"p0 = {stxt(shape)} parameter(0)\nROOT s = {stxt(out.shape)} slice(p0), slice={{{text}}}")
    check_one_to_one(r, [x], out)
    (m,), = input_to_output(r, 0)
    o2i = output_to_input(r, 0)[0][0]
    for i in itertools.product(*[range(n) for n in shape]):
        in_out = any(o2i.evaluate(d) == i for d in itertools.product(*[range(n) for n in out.shape]))
        assert m.satisfies(i) == in_out
        if in_out:
            assert o2i.evaluate(m.evaluate(i)) == i


@pytest.mark.parametrize("seed", SEEDS)
def test_reshape_and_bitcast(seed):
    rng = random.Random(seed)
    shape = random_shape(rng, hi=6)
    n = int(np.prod(shape))
    # a random factorisation of n
    dims, rest = [], n
    for p in (2, 3, 5):
        while rest % p == 0 and rng.random() < 0.7:
            dims.append(p)
            rest //= p
    dims.append(rest)
    rng.shuffle(dims)
    if rng.random() < 0.3:
        dims.insert(rng.randint(0, len(dims)), 1)
    x = encoded(0, shape)
    r = root(f"p0 = {stxt(shape)} parameter(0)\nROOT r = {stxt(dims)} reshape(p0)")
    check_one_to_one(r, [x], x.reshape(dims))
    (m,), = input_to_output(r, 0)
    for i in itertools.product(*[range(k) for k in shape]):
        assert x.reshape(dims)[m.evaluate(i)] == x[i]
    # layout-changing bitcast: same physical order
    perm = list(range(len(dims)))
    rng.shuffle(perm)
    lay = ",".join(map(str, reversed(perm)))
    r = root(f"p0 = {stxt(shape)} parameter(0)\nROOT r = {stxt(dims)}{{{lay}}} bitcast(p0)")
    phys = x.reshape([dims[p] for p in perm])
    logical = np.transpose(phys, np.argsort(perm))
    check_one_to_one(r, [x], logical)


@pytest.mark.parametrize("seed", SEEDS)
def test_concatenate_and_pad(seed):
    rng = random.Random(seed)
    shape = list(random_shape(rng))
    axis = rng.randrange(len(shape))
    parts = []
    for k in range(rng.randint(2, 3)):
        s = list(shape)
        s[axis] = rng.randint(1, 3)
        parts.append(encoded(k, s))
    out = np.concatenate(parts, axis)
    params = "\n".join(f"p{k} = {stxt(p.shape)} parameter({k})" for k, p in enumerate(parts))
    r = root(f"{params}\nROOT c = {stxt(out.shape)} concatenate({', '.join(f'p{k}' for k in range(len(parts)))}), dimensions={{{axis}}}")
    check_one_to_one(r, parts, out)
    maps = output_to_input(r, 0)
    for d in itertools.product(*[range(n) for n in out.shape]):  # exactly one operand reads d
        assert sum(m[0].satisfies(d) for m in maps) == 1
    x = encoded(0, shape)
    padding = [(rng.randint(-1, 2), rng.randint(-1, 2), rng.randint(0, 2)) for _ in shape]
    if any(n + (n - 1) * it + lo + hi <= 0 for n, (lo, hi, it) in zip(shape, padding)):
        return
    v = np.int64(BASE)  # operand 1, index ()
    out = ev_pad(x, v, padding)
    cfg = "x".join(f"{lo}_{hi}_{it}" for lo, hi, it in padding)
    r = root(f"p0 = {stxt(shape)} parameter(0)\np1 = s32[] parameter(1)\nROOT p = {stxt(out.shape)} pad(p0, p1), padding={cfg}")
    arrays = [x, np.array(v)]
    check_one_to_one(r, arrays, out)
    m = output_to_input(r, 0)[0][0]
    for d in itertools.product(*[range(n) for n in out.shape]):  # operand 0 read exactly where not padding
        assert m.satisfies(d) == (out[d] < BASE)


@pytest.mark.parametrize("seed", SEEDS)
def test_dynamic_slice_update_slice_gather(seed):
    rng = random.Random(seed)
    shape = random_shape(rng, lo=2, hi=5)
    size = [rng.randint(1, n) for n in shape]
    offs = [rng.randint(-1, n) for n in shape]
    x = encoded(0, shape)
    cl = clamp_offsets(offs, shape, size)
    out = x[tuple(slice(o, o + s) for o, s in zip(cl, size))]
    ps = "\n".join(f"o{i} = s32[] parameter({i + 1})" for i in range(len(shape)))
    r = root(f"p0 = {stxt(shape)} parameter(0)\n{ps}\nROOT ds = {stxt(size)} dynamic-slice(p0, "
             f"{', '.join(f'o{i}' for i in range(len(shape)))}), dynamic_slice_sizes={{{','.join(map(str, size))}}}")
    m = output_to_input(r, 0)[0][0]
    assert all(lo <= c <= hi for c, (lo, hi) in zip(cl, m.rts))
    check_one_to_one(r, [x] + [np.array(0)] * len(shape), out, rt_values=cl)
    upd = encoded(1, size)
    res = x.copy()
    res[tuple(slice(o, o + s) for o, s in zip(cl, size))] = upd
    r = root(f"p0 = {stxt(shape)} parameter(0)\nu = {stxt(size)} parameter(1)\n"
             + "\n".join(f"o{i} = s32[] parameter({i + 2})" for i in range(len(shape)))
             + f"\nROOT dus = {stxt(shape)} dynamic-update-slice(p0, u, {', '.join(f'o{i}' for i in range(len(shape)))})")
    maps = output_to_input(r, 0)
    for d in itertools.product(*[range(n) for n in shape]):
        k, src = decode(res[d], [x.shape, upd.shape])
        mm = maps[k][0]
        assert mm.evaluate(d, (), cl) == src
    # gather in XLA's simplified form
    nidx = rng.randint(1, 3)
    starts = [[rng.randint(-1, n) for n in shape] for _ in range(nidx)]
    g = [x[tuple(slice(o, o + s) for o, s in zip(clamp_offsets(st_, shape, size), size))] for st_ in starts]
    out = np.stack(g)
    rank = len(shape)
    r = root(f"p0 = {stxt(shape)} parameter(0)\ni = s32[{nidx},{rank}] parameter(1)\n"
             f"ROOT g = {stxt(out.shape)} gather(p0, i), offset_dims={{{','.join(str(j + 1) for j in range(rank))}}}, "
             f"collapsed_slice_dims={{}}, start_index_map={{{','.join(map(str, range(rank)))}}}, index_vector_dim=1, "
             f"slice_sizes={{{','.join(map(str, size))}}}")
    m = output_to_input(r, 0)[0][0]
    for d in itertools.product(*[range(n) for n in out.shape]):
        rts = clamp_offsets(starts[d[0]], shape, size)
        assert m.satisfies(d, (), rts)
        assert m.evaluate(d, (), rts) == decode(out[d], [x.shape])[1]


def covered(m: IndexingMap, d) -> set:
    return {m.evaluate(d, s) for s in itertools.product(*[range(lo, hi + 1) for lo, hi in m.ranges])
            if m.satisfies(d, s)}


@pytest.mark.parametrize("seed", SEEDS)
def test_reduce_dot_reduce_window_cover_exactly(seed):
    rng = random.Random(seed)
    shape = random_shape(rng, lo=1, hi=4)
    red = sorted(rng.sample(range(len(shape)), rng.randint(1, len(shape))))
    out_shape = [n for i, n in enumerate(shape) if i not in red]
    ftxt = lambda dims: "f32[" + ",".join(map(str, dims)) + "]"  # noqa: E731
    r = root(f"p0 = {ftxt(shape)} parameter(0)\nc = f32[] constant(0)\nROOT r = {ftxt(out_shape)} reduce(p0, c), "
             f"dimensions={{{','.join(map(str, red))}}}, to_apply=max")
    m = output_to_input(r, 0)[0][0]
    for d in itertools.product(*[range(n) for n in out_shape]):
        want = {i for i in itertools.product(*[range(n) for n in shape])
                if tuple(v for j, v in enumerate(i) if j not in red) == d}
        assert covered(m, d) == want
    # dot [b, m, k] x [b, k, n]
    b, mm, k, nn = (rng.randint(1, 3) for _ in range(4))
    r = root(f"a = f32[{b},{mm},{k}] parameter(0)\nc = f32[{b},{k},{nn}] parameter(1)\nROOT d = f32[{b},{mm},{nn}] "
             "dot(a, c), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}")
    lm, rm = (e[0] for e in output_to_input(r, 0))
    for d in itertools.product(range(b), range(mm), range(nn)):
        assert covered(lm, d) == {(d[0], d[1], kk) for kk in range(k)}
        assert covered(rm, d) == {(d[0], kk, d[2]) for kk in range(k)}
    # reduce-window with stride, padding, dilations
    n = rng.randint(3, 7)
    size, stride, lo, hi = rng.randint(1, 3), rng.randint(1, 2), rng.randint(0, 2), rng.randint(0, 2)
    wd, bd = rng.randint(1, 2), rng.randint(1, 2)
    padded = (n - 1) * bd + 1 + lo + hi
    span = (size - 1) * wd + 1
    if padded < span:
        return
    out_n = (padded - span) // stride + 1
    r = root(f"p0 = f32[{n}] parameter(0)\nc = f32[] constant(0)\nROOT w = f32[{out_n}] reduce-window(p0, c), "
             f"window={{size={size} stride={stride} pad={lo}_{hi} lhs_dilate={bd} rhs_dilate={wd}}}, to_apply=max")
    m = output_to_input(r, 0)[0][0]
    for d in range(out_n):
        want = set()
        for s in range(size):
            p = d * stride + s * wd - lo
            if p % bd == 0 and 0 <= p // bd < n:
                want.add((p // bd,))
        assert covered(m, (d,)) == want


# ---- simplification keeps meaning ------------------------------------------------------------
def exprs_strategy(nd: int, ns: int):
    leaves = st.one_of(st.integers(-5, 5).map(A.Const), st.integers(0, nd - 1).map(A.dim),
                       st.integers(0, ns - 1).map(A.sym))

    def extend(children):
        return st.one_of(
            st.tuples(children, children).map(lambda t: A.add(*t)),
            st.tuples(children, st.integers(-4, 4)).map(lambda t: A.mul(*t)),
            st.tuples(children, st.integers(1, 9)).map(lambda t: A.floordiv(*t)),
            st.tuples(children, st.integers(1, 9)).map(lambda t: A.mod(*t)),
            st.tuples(children, st.integers(1, 5)).map(lambda t: A.ceildiv(*t)),
            st.tuples(children, children).map(lambda t: A.min_(*t)),
            st.tuples(children, children).map(lambda t: A.max_(*t)),
        )
    return st.recursive(leaves, extend, max_leaves=8)


@st.composite
def maps_strategy(draw):
    nd, ns = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dims = [(lo, lo + draw(st.integers(0, 6))) for lo in (draw(st.integers(0, 3)) for _ in range(nd))]
    ranges = [(lo, lo + draw(st.integers(0, 4))) for lo in (draw(st.integers(0, 2)) for _ in range(ns))]
    exprs = draw(st.lists(exprs_strategy(nd, ns), min_size=1, max_size=3))
    cons = {}
    for e in draw(st.lists(exprs_strategy(nd, ns), max_size=2)):
        lo = draw(st.integers(-3, 10))
        cons[e] = (lo, lo + draw(st.integers(0, 12)))
    return IndexingMap.make(exprs, dims, ranges, constraints=cons)


@settings(max_examples=150, deadline=None)
@given(maps_strategy())
def test_simplify_preserves_meaning(m):
    s = simplify(m)
    box = [range(lo, hi + 1) for lo, hi in itertools.chain(m.dims, m.ranges)]
    nd = len(m.dims)
    for p in itertools.product(*box):
        d, sy = p[:nd], p[nd:]
        inside = m.satisfies(d, sy)
        if s.is_known_empty():
            assert not inside
            continue
        assert s.satisfies(d, sy) == inside, (m.to_text(), s.to_text(), p)
        if inside:
            assert s.evaluate(d, sy) == m.evaluate(d, sy), (m.to_text(), s.to_text(), p)


@settings(max_examples=150, deadline=None)
@given(maps_strategy())
def test_print_parse_round_trip(m):
    text = m.to_text()
    back = parse_indexing_map(text)
    assert back.to_text() == text
    if not m.is_known_empty():
        assert back == m
    assert parse_indexing_map(text.replace("floordiv", "/")).to_text() == text


# ---- random fusion chains ----------------------------------------------------------------------
def chain_step(rng, shape, x, name, src):
    op = rng.choice(["transpose", "reverse", "slice", "reshape", "pad", "broadcast", "exponential"])
    rank = len(shape)
    if op == "transpose":
        perm = list(range(rank))
        rng.shuffle(perm)
        out = np.transpose(x, perm)
        return f"{name} = {stxt(out.shape)} transpose({src}), dimensions={{{','.join(map(str, perm))}}}", out
    if op == "reverse":
        dims = sorted(rng.sample(range(rank), 1))
        return f"{name} = {stxt(shape)} reverse({src}), dimensions={{{dims[0]}}}", np.flip(x, dims)
    if op == "slice":
        spec = [(rng.randint(0, n - 1), n, rng.randint(1, 2)) for n in shape]
        out = x[tuple(slice(*s) for s in spec)]
        return f"{name} = {stxt(out.shape)} slice({src}), slice={{{','.join(f'[{a}:{b}:{c}]' for a, b, c in spec)}}}", out
    if op == "reshape":
        n = int(np.prod(shape))
        dims = [n] if rank > 1 or n == 1 else ([2, n // 2] if n % 2 == 0 else [n, 1])
        return f"{name} = {stxt(dims)} reshape({src})", x.reshape(dims)
    if op == "pad":
        padding = [(rng.randint(0, 1), rng.randint(0, 1), rng.randint(0, 1)) for _ in shape]
        out = ev_pad(x, np.int64(BASE), padding)
        cfg = "x".join(f"{a}_{b}_{c}" for a, b, c in padding)
        return f"{name} = {stxt(out.shape)} pad({src}, pv), padding={cfg}", out
    if op == "broadcast" and rank < 3:
        out = np.broadcast_to(x[None], (2,) + shape)
        return f"{name} = {stxt(out.shape)} broadcast({src}), dimensions={{{','.join(str(i + 1) for i in range(rank))}}}", out
    return f"{name} = {stxt(shape)} negate({src})", x


@pytest.mark.parametrize("seed", range(25))
def test_random_fusion_chains(seed):
    rng = random.Random(seed)
    shape = random_shape(rng, lo=1, hi=4)
    x = encoded(0, shape)
    lines = [f"f0 = {stxt(shape)} parameter(0)", "pv = s32[] parameter(1)"]
    cur, src = x, "f0"
    for step in range(rng.randint(1, 4)):
        line, cur = chain_step(rng, cur.shape, cur, f"t{step}", src)
        lines.append(line)
        src = f"t{step}"
    lines[-1] = "ROOT " + lines[-1]
    r = root(f"p0 = {stxt(shape)} parameter(0)\npv = s32[] parameter(1)\n"
             f"ROOT fusion = {stxt(cur.shape)} fusion(p0, pv), kind=kLoop, calls=f",
             extra="f {\n" + "\n".join(lines) + "\n}\n")
    maps = fusion_output_to_input(r)[0]
    assert maps is not None
    for d in itertools.product(*[range(n) for n in cur.shape]):
        v = cur[d]
        hits = [m for m in maps if m.satisfies(d)]
        if v >= BASE:  # the pad value: no map of operand 0 reads here
            assert not hits, [m.to_text() for m in maps]
        else:
            src_idx = decode(v, [shape])[1]
            assert hits and all(m.evaluate(d) == src_idx for m in hits), ([m.to_text() for m in maps], d)
