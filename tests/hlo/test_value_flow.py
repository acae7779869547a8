"""``hlo/value_flow.py``: where a value's bits go through tuples, movers, loops, calls and
conditionals, and who reads them."""
from __future__ import annotations

from hlo_compile import parse_module
from hlo_compile.hlo.value_flow import follow


def _flow(text: str, source: str, path=()):
    module = parse_module(text)
    inst = next(i for c in module.computations for i in c.instructions if i.name == source)
    flow = follow(module, [(inst, path)])
    return flow, sorted((u.name, k) for u, k in flow.readers)


def test_tuple_leaves_are_followed_one_by_one():
    text = """HloModule m
ENTRY e {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  t = (f32[4], f32[4]) tuple(a, b)
  ob = (f32[4], f32[4]) opt-barrier(t)
  g0 = f32[4] get-tuple-element(ob), index=0
  g1 = f32[4] get-tuple-element(ob), index=1
  x = f32[4] add(g0, b)
  y = f32[4] multiply(g1, g1)
  ROOT r = f32[4] negate(y)
}
"""
    flow, readers = _flow(text, "a")
    assert readers == [("x", 0)] and not flow.reaches_result
    flow, readers = _flow(text, "t", (1,))
    assert readers == [("y", 0), ("y", 1)] and not flow.reaches_result


def test_movers_carry_data_operands_and_index_operands_are_reads():
    text = """HloModule m
ENTRY e {
  a = s32[4] parameter(0)
  i = s32[] parameter(1)
  r = s32[2,2] reshape(a)
  s = s32[1,2] dynamic-slice(r, i, i), dynamic_slice_sizes={1,2}
  c = s32[8] concatenate(a, a), dimensions={0}
  ROOT out = (s32[1,2], s32[8]) tuple(s, c)
}
"""
    flow, readers = _flow(text, "a")
    assert readers == [] and flow.reaches_result
    flow, readers = _flow(text, "i")
    assert readers == [("s", 1), ("s", 2)] and not flow.reaches_result


LOOP = """HloModule m
body {
  p = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  y = f32[4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[4], f32[4]) tuple(i2, y, x)
}
cond {
  p = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  a = f32[4] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[4], f32[4]) tuple(z, a, a)
  w = (s32[], f32[4], f32[4]) while(init), condition=cond, body=body
  g2 = f32[4] get-tuple-element(w), index=2
  ROOT n = f32[4] negate(g2)
}
"""


def test_a_loop_carry_that_swaps_leaves_reaches_both():
    """The body swaps leaves 1 and 2 each trip: the bits of leaf 1 reach leaf 2 of the result
    only through the fixpoint over the body."""
    module = parse_module(LOOP.replace("tuple(z, a, a)", "tuple(z, a, a2)").replace(
        "  z = s32[] constant(0)", "  z = s32[] constant(0)\n  a2 = f32[4] parameter(1)"))
    init = module.entry.instruction("init")
    flow = follow(module, [(init, (1,))])
    assert [(u.name, k) for u, k in flow.readers] == [("n", 0)]
    assert (2,) in flow.tainted[id(module.entry.instruction("w"))]


def test_a_loop_counter_read_by_the_condition():
    module = parse_module(LOOP)
    flow = follow(module, [(module.entry.instruction("z"), ())])
    assert sorted((u.name, k) for u, k in flow.readers) == [("i2", 0), ("lt", 0)]


def test_calls_and_conditionals():
    text = """HloModule m
f {
  p = f32[4] parameter(0)
  ROOT c = f32[4] copy(p)
}
g {
  p = f32[4] parameter(0)
  ROOT e = f32[4] exponential(p)
}
ENTRY e {
  a = f32[4] parameter(0)
  k = s32[] parameter(1)
  c = f32[4] call(a), to_apply=f
  d = f32[4] conditional(k, c, a), branch_computations={f, g}
  ROOT r = (f32[4], f32[4]) tuple(c, d)
}
"""
    flow, readers = _flow(text, "a")
    assert readers == [("e", 0)] and flow.reaches_result
    flow, readers = _flow(text, "k")
    assert readers == [("d", 0)] and not flow.reaches_result
