"""Control flow and the rest: call, fusion, while, conditional (pred and index, out of
range), custom-call, tokens, single-device collectives, rng, errors."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile.hlo.errors import HloUnsupportedError
from interp_helpers import run


def test_while_loop_counts():
    r = run("""HloModule m
cond {
  p = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[2] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  x2 = f32[2] add(x, x)
  ROOT t = (s32[], f32[2]) tuple(i2, x2)
}
ENTRY e {
  x = f32[2] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[2]) tuple(z, x)
  ROOT w = (s32[], f32[2]) while(t), condition=cond, body=body
}""", np.array([1, -2], np.float32))
    assert r[0] == 5 and list(r[1]) == [32, -64]


BRANCHES = """b0 {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}
b1 {
  p = f32[] parameter(0)
  ROOT n = f32[] add(p, p)
}
b2 {
  p = f32[] parameter(0)
  ROOT n = f32[] multiply(p, p)
}
"""


@pytest.mark.parametrize("index,want", [(0, -3), (1, 6), (2, 9), (7, 9), (-1, 9)])
def test_conditional_index_out_of_range_runs_last(index, want):
    r = run("HloModule m\n" + BRANCHES + """ENTRY e {
  i = s32[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(i, x, x, x), branch_computations={b0, b1, b2}
}""", np.int32(index), np.float32(3))
    assert r == want


def test_conditional_pred():
    text = "HloModule m\n" + BRANCHES + """ENTRY e {
  p = pred[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(p, x, x), true_computation=b1, false_computation=b0
}"""
    assert run(text, np.bool_(True), np.float32(3)) == 6
    assert run(text, np.bool_(False), np.float32(3)) == -3


def test_call_and_fusion():
    r = run("""HloModule m
f {
  a = f32[2] parameter(0)
  b = f32[2] parameter(1)
  ROOT s = f32[2] subtract(a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  c = f32[2] call(x, y), to_apply=f
  ROOT u = f32[2] fusion(c, x), kind=kLoop, calls=f
}""", np.array([5, 6], np.float32), np.array([1, 2], np.float32))
    assert list(r) == [-1, -2]  # (x - y) - x


def test_tokens_collectives_ids():
    r = run("""HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[3] parameter(0)
  t = token[] after-all()
  ar = f32[3] all-reduce(x), replica_groups={}, to_apply=add
  ag = f32[3] all-gather(ar), dimensions={0}, replica_groups={}
  ob = f32[3] opt-barrier(ag)
  id = u32[] replica-id()
  pid = u32[] partition-id()
  ROOT out = (f32[3], u32[], u32[]) tuple(ob, id, pid)
}""", np.array([1, 2, 3], np.float32))
    assert list(r[0]) == [1, 2, 3] and r[1] == 0 and r[2] == 0


def test_custom_call_topk_and_unknown_target():
    x = np.array([[3, 1, 4, 1, 5]], np.float32)
    r = run("""HloModule m
ENTRY e {
  x = f32[1,5] parameter(0)
  ROOT t = (f32[1,2], s32[1,2]) custom-call(x), custom_call_target="TopK"
}""", x)
    assert list(r[0][0]) == [5, 4] and list(r[1][0]) == [4, 2]
    with pytest.raises(HloUnsupportedError, match="mystery"):
        run("""HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  ROOT t = f32[2] custom-call(x), custom_call_target="mystery"
}""", np.zeros(2, np.float32))


def test_rng_needs_seed():
    text = """HloModule m
ENTRY e {
  a = f32[] constant(0)
  b = f32[] constant(1)
  ROOT r = f32[100] rng(a, b), distribution=rng_uniform
}"""
    with pytest.raises(HloUnsupportedError, match="seed"):
        run(text)
    r1, r2 = run(text, seed=3), run(text, seed=3)
    assert np.array_equal(r1, r2) and r1.min() >= 0 and r1.max() < 1


def test_wrong_argument_count_and_shape():
    from hlo_compile.hlo.errors import HloError
    text = """HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  ROOT n = f32[2] negate(x)
}"""
    with pytest.raises(HloError):
        run(text)
    with pytest.raises(HloError):
        run(text, np.zeros(3, np.float32))
