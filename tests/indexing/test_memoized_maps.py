"""The indexing results kept between calls (issue 29, item 8: compile time) are the results
computed afresh: every field a result depends on is in its key, so maps that differ only in
one such field (constraint order, dim names, the fold flag, a layout, an unroll factor) never
share a result, and maps whose runtime variables name instructions are not kept at all."""
from __future__ import annotations

import gc
from dataclasses import replace

import pytest

from hlo_compile.codegen.compiler import gc_paused
from hlo_compile.codegen.launch import LoopConfig, _thread_to_output_map, thread_to_output_map
from hlo_compile.codegen.target import LaunchDims
from hlo_compile.hlo.shape import Layout, Shape, Tile
from hlo_compile.indexing import affine as A
from hlo_compile.indexing import indexing_map as IM
from hlo_compile.indexing import layout_maps as LM
from hlo_compile.indexing import reshape_maps as RM
from hlo_compile.indexing import simplifier as S
from hlo_compile.indexing.indexing_map import IndexingMap, RTSource, compose, dims_of
from hlo_compile.indexing.reshape_maps import linearize

d0, d1, s0 = A.dim(0), A.dim(1), A.sym(0)


def _same(a: IndexingMap, b: IndexingMap) -> None:
    """Equal in every field, the ones ``==`` ignores included (order, names, sources)."""
    assert a.to_text() == b.to_text()
    assert (a.exprs, a.dims, a.ranges, a.rts, a.constraints, a.rt_sources, a.undefined, a.dim_names) == \
        (b.exprs, b.dims, b.ranges, b.rts, b.constraints, b.rt_sources, b.undefined, b.dim_names)


def test_simplify_kept_result_is_the_fresh_one():
    m = IndexingMap.make([(d0 * 4 + d1).floordiv(4), (d0 * 4 + d1).mod(4)], [(0, 9), (0, 3)])
    fresh = S._simplify(m, True)
    assert fresh.exprs == (d0, d1)
    _same(S.simplify(m), fresh)
    _same(S.simplify(m), fresh)  # a second call: the kept one


def test_simplify_keys_on_the_fold_flag():
    m = IndexingMap.make([d0 + d1], [(0, 0), (0, 7)])
    folded, kept = S.simplify(m, True), S.simplify(m, False)
    assert folded.exprs == (d1,)
    assert kept.exprs == (d0 + d1,)
    assert S.simplify(m, True).exprs == (d1,)


def test_simplify_keys_on_dim_names_and_constraint_order():
    c1, c2 = (d0 + s0, (0, 9)), (d0 - s0, (-3, 3))
    a = IndexingMap.make([d0 + s0], [(0, 9)], [(0, 4)], (), [c1, c2])
    b = IndexingMap.make([d0 + s0], [(0, 9)], [(0, 4)], (), [c2, c1])
    assert a == b  # equal maps (constraints are a set) ...
    sa, sb = S.simplify(a), S.simplify(b)
    assert [e for e, _ in sa.constraints] == [e for e, _ in S._simplify(a, True).constraints]
    assert [e for e, _ in sb.constraints] == [e for e, _ in S._simplify(b, True).constraints]
    assert [e for e, _ in sa.constraints] != [e for e, _ in sb.constraints]  # ... each its own order
    named = replace(a, dim_names=("x",))
    assert S.simplify(named).dim_names == ("x",)
    assert S.simplify(a).dim_names is None
    assert "x in [0, 9]" in S.simplify(named).to_text()


def test_simplify_does_not_keep_maps_with_instruction_sources():
    from hlo_compile import parse_module
    inst = parse_module("HloModule m\nENTRY e {\n ROOT c = s32[] constant(3)\n}\n").entry.root
    m = IndexingMap.make([d0 + A.rt(0)], [(0, 9)], (), [(0, 5)], rt_sources=[RTSource(inst)])
    before = len(S._MEMO)
    out = S.simplify(m)
    assert out.exprs == (d0 + 3,)  # the constant source folded
    assert len(S._MEMO) == before


def _fresh_linear(shape: Shape) -> IndexingMap:
    bounds, exprs = LM.tiled_space(shape)
    return S._simplify(IndexingMap.make([linearize(exprs, bounds)], dims_of(shape.dimensions)), False)


@pytest.mark.parametrize("shape", [
    Shape.array("f32", [4, 8], [0, 1]), Shape.array("f32", [4, 8], [1, 0]),
    Shape.array("bf16", [4, 8], [0, 1]), Shape.array("f32", [1, 8, 3], [2, 0, 1]),
    Shape.array("f32", [5, 7], Layout((1, 0), (Tile((2, 4)),))),
    Shape.array("f32", [5, 7], Layout((0, 1), (Tile((2, 4)),))),
    Shape("f32", (4, 8), (False, False), None)])
def test_linear_index_map_by_layout(shape):
    _same(LM.linear_index_map(shape), _fresh_linear(shape))
    _same(LM.linear_index_map(shape), _fresh_linear(shape))


def test_linear_index_map_tells_layouts_and_tiles_apart():
    row, col = Shape.array("f32", [4, 8], [1, 0]), Shape.array("f32", [4, 8], [0, 1])
    tiled = Shape.array("f32", [4, 8], Layout((1, 0), (Tile((2, 4)),)))
    texts = {LM.linear_index_map(s).to_text() for s in (row, col, tiled)}
    assert len(texts) == 3
    # the element type is not part of the map: one result for both
    assert LM.linear_index_map(Shape.array("s8", [4, 8], [1, 0])).to_text() == LM.linear_index_map(row).to_text()
    with pytest.raises(ValueError):
        LM.linear_index_map(Shape.tuple_of([row]))


@pytest.mark.parametrize("src,dst", [((4, 6), (24,)), ((4, 6), (2, 12)), ((2, 3, 4), (6, 4)), ((1, 5), (5, 1)),
                                     ((0, 4), (2, 0))])
def test_reshape_map_kept_result_is_the_fresh_one(src, dst):
    fresh = RM._reshape_map(src, dst)
    _same(RM.reshape_map(list(src), list(dst)), fresh)
    _same(RM.reshape_map(src, dst), fresh)
    for point in fresh.domain() if 0 not in src else ():
        lin = sum(i * st for i, st in zip(point[0], _strides(src)))
        assert tuple(fresh.evaluate(*point)) == tuple(lin // st % n for st, n in zip(_strides(dst), dst))


def _strides(dims):
    out, st = [], 1
    for n in reversed(dims):
        out.append(st)
        st *= n
    return out[::-1]


def test_bitcast_map_by_both_shapes():
    a = Shape.array("f32", [4, 6], [1, 0])
    b, c = Shape.array("f32", [6, 4], [1, 0]), Shape.array("f32", [6, 4], [0, 1])
    _same(RM.bitcast_map(a, b), RM._bitcast_map(a, b))
    _same(RM.bitcast_map(a, c), RM._bitcast_map(a, c))
    assert RM.bitcast_map(a, b).to_text() != RM.bitcast_map(a, c).to_text()
    assert RM.bitcast_map(a, Shape.array("f64", [3, 4], [1, 0])) is None  # widths differ: still None when kept
    assert RM.bitcast_map(a, Shape.array("f64", [3, 4], [1, 0])) is None


def test_compose_kept_result_is_the_fresh_one():
    consumer = IndexingMap.make([d0 * 2 + d1, s0], [(0, 3), (0, 1)], [(0, 2)])
    producer = IndexingMap.make([d0 + d1 * 8], [(0, 7), (0, 2)], (), (), [(d0 + d1, (0, 8))])
    fresh = IM._compose(consumer, producer)
    _same(compose(consumer, producer), fresh)
    _same(compose(consumer, producer), fresh)
    # the consumer's dim names are not part of the result
    _same(compose(replace(consumer, dim_names=("a", "b")), producer), fresh)


def test_compose_with_sources_is_not_kept():
    from hlo_compile import parse_module
    inst = parse_module("HloModule m\nENTRY e {\n ROOT c = s32[] constant(3)\n}\n").entry.root
    producer = IndexingMap.make([d0 + A.rt(0)], [(0, 7)], (), [(0, 2)], rt_sources=[RTSource(inst)])
    consumer = IndexingMap.make([d0 + 1], [(0, 3)])
    before = len(IM._COMPOSED)
    out = compose(consumer, producer)
    assert len(IM._COMPOSED) == before
    assert out.rt_sources[0].instruction is inst


def test_identity_by_dims():
    m = IndexingMap.identity([3, 1, 4])
    _same(m, IndexingMap.make([d0, d1, A.dim(2)], [(0, 2), (0, 0), (0, 3)]))
    assert IndexingMap.identity((3, 1, 4)) is m
    assert IndexingMap.identity([3, 1, 5]).dims != m.dims


@pytest.mark.parametrize("unroll", [1, 2, 4])
def test_thread_map_kept_per_launch_and_unroll(unroll):
    shape = Shape.array("f32", [8, 100], [1, 0])
    launch = LaunchDims((-(-800 // (128 * unroll)), 1, 1), (128, 1, 1))
    config = LoopConfig(unroll, launch, shape)
    fresh = _thread_to_output_map(shape, launch.block, launch.grid, unroll)
    _same(thread_to_output_map(shape, config), fresh)
    _same(thread_to_output_map(shape, config), fresh)
    other = Shape.array("f32", [8, 100], [0, 1])  # same dims, other order: another map
    assert thread_to_output_map(other, LoopConfig(unroll, launch, other)).to_text() != fresh.to_text()


def test_gc_paused_restores_the_collector():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with gc_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


# ---- affine constructors: the fast paths build what the general canonicalisation builds ----

def _slow_make_sum(terms, c):
    """``make_sum`` without its shortcut for fewer than two atoms."""
    coeffs = {a: k for a, k in terms.items() if k != 0}
    while True:
        coeffs, c, changed = A._combine_div_mod(coeffs, c)
        if not changed:
            break
    items = sorted(coeffs.items(), key=lambda t: A.sort_key(t[0]))
    if not items:
        return A.Const(c)
    if len(items) == 1 and items[0][1] == 1 and c == 0:
        return items[0][0]
    return A.Sum(tuple(items), c)


def _exprs():
    import random
    rng = random.Random(29)
    atoms = [d0, d1, s0, A.rt(0), d0.floordiv(4), d0.mod(4), (d0 + d1 * 3).floordiv(8), (d0 + d1 * 3).mod(8),
             A.min_(d0, d1)]
    out = [A.Const(0), A.Const(5), d0, (d0 * 4).floordiv(2)]
    for _ in range(300):
        e = A.Const(rng.randint(-3, 3))
        for _ in range(rng.randint(1, 4)):
            e = A.add(e, A.mul(rng.choice(atoms), rng.choice([-8, -4, -1, 1, 2, 4, 8])))
        out.append(e)
    return out


def test_mul_and_add_build_the_canonical_form():
    exprs = _exprs()
    for e in exprs:
        for k in (-4, -1, 2, 3, 4):
            terms, c = A.linear_parts(e)
            slow = _slow_make_sum({x: v * k for x, v in terms.items()}, c * k)
            assert A.mul(e, k) == slow, (e, k)
            assert A.to_text(A.mul(e, k)) == A.to_text(slow)
    for a, b in zip(exprs, exprs[1:] + exprs[:1]):
        ta, ca = A.linear_parts(a)
        tb, cb = A.linear_parts(b)
        for atom, k in tb.items():
            ta[atom] = ta.get(atom, 0) + k
        assert A.add(a, b) == _slow_make_sum(ta, ca + cb), (a, b)
    # a pair that combines: (x floordiv 4) * 4 + x mod 4 is x, scaled or not
    x = d0 + d1 * 3
    assert A.add(A.mul(x.floordiv(4), 4), x.mod(4)) == x
    assert A.mul(A.add(A.mul(x.floordiv(4), 4), x.mod(4)), -2) == A.mul(x, -2)
