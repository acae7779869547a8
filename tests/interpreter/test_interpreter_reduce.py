"""reduce (fast and generic paths, variadic), reduce-window, select-and-scatter, map."""
from __future__ import annotations

import itertools

import numpy as np

from interp_helpers import BF16, run

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""
MAX = """mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
"""


def test_reduce_sum_axes_and_empty():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    r = run("HloModule m\n" + ADD + """ENTRY e {
  x = f32[2,3,4] parameter(0)
  z = f32[] constant(1)
  ROOT r = f32[3] reduce(x, z), dimensions={0,2}, to_apply=add
}""", x)
    np.testing.assert_allclose(r, x.sum(axis=(0, 2)) + 1)
    r = run("HloModule m\n" + ADD + """ENTRY e {
  x = f32[3,0] parameter(0)
  z = f32[] constant(7)
  ROOT r = f32[3] reduce(x, z), dimensions={1}, to_apply=add
}""", np.zeros((3, 0), np.float32))
    assert list(r) == [7, 7, 7]


def test_reduce_max_propagates_nan():
    x = np.array([[1, np.nan, 3], [4, 5, 6]], np.float32)
    r = run("HloModule m\n" + MAX + """ENTRY e {
  x = f32[2,3] parameter(0)
  z = f32[] constant(-inf)
  ROOT r = f32[2] reduce(x, z), dimensions={1}, to_apply=mx
}""", x)
    assert np.isnan(r[0]) and r[1] == 6


def test_reduce_generic_computation():
    # sum of squares through a non-trivial reducer: acc + x*x
    x = np.arange(1, 8, dtype=np.float32)
    r = run("""HloModule m
sq {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(b, b)
  ROOT s = f32[] add(a, m)
}
ENTRY e {
  x = f32[7] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=sq
}""", x)
    # the tree pairs neighbours: the reducer is applied as written to partial results too
    assert r.shape == () and r.dtype == np.float32


def test_variadic_argmax_ties_to_lowest_index():
    x = np.array([[3, 7, 7, 1], [np.nan, 2, np.nan, 9]], np.float32)
    idx = np.broadcast_to(np.arange(4, dtype=np.int32), (2, 4)).copy()
    r = run("""HloModule m
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  nan = pred[] compare(a, a), direction=NE
  pick_a = pred[] or(gt, nan)
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  take_a = pred[] or(pick_a, tie)
  v = f32[] select(take_a, a, b)
  i = s32[] select(take_a, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[2,4] parameter(0)
  i = s32[2,4] parameter(1)
  z = f32[] constant(-inf)
  zi = s32[] constant(0)
  ROOT r = (f32[2], s32[2]) reduce(x, i, z, zi), dimensions={1}, to_apply=argmax
}""", x, idx)
    assert list(r[1]) == [1, 0] and r[0][0] == 7 and np.isnan(r[0][1])


def test_reduce_bf16_rounds_each_step():
    x = np.array([1] + [2**-9] * 8, BF16)
    r = run("""HloModule m
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT s = bf16[] add(a, b)
}
ENTRY e {
  x = bf16[9] parameter(0)
  z = bf16[] constant(0)
  ROOT r = bf16[] reduce(x, z), dimensions={0}, to_apply=add
}""", x)
    assert r.dtype == BF16
    # f32 accumulation would give 1.015625. Rounding every partial sum to bf16 along the
    # neighbour-pairing tree (an order XLA allows): 1+e -> 1, pairs of e -> 2^-8, then
    # 1+2^-8 ties to 1, 2^-8+2^-8 = 2^-7, ... = 1 + 2^-7.
    assert float(r) == 1.0078125


def _naive_reduce_window(x, init, size, stride, pad_lo, pad_hi, fn):
    xp = np.pad(x, list(zip(pad_lo, pad_hi)), constant_values=init)
    out_shape = [(xp.shape[d] - size[d]) // stride[d] + 1 for d in range(x.ndim)]
    out = np.empty(out_shape, x.dtype)
    for idx in itertools.product(*(range(n) for n in out_shape)):
        win = xp[tuple(slice(i * s, i * s + k) for i, s, k in zip(idx, stride, size))]
        out[idx] = fn(np.concatenate([[init], win.reshape(-1)]))
    return out


def test_reduce_window_max_with_padding_and_stride():
    x = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
    r = run("HloModule m\n" + MAX + """ENTRY e {
  x = f32[5,6] parameter(0)
  z = f32[] constant(-inf)
  ROOT r = f32[3,3] reduce-window(x, z), window={size=3x2 stride=2x2 pad=1_1x0_0}, to_apply=mx
}""", x)
    np.testing.assert_array_equal(r, _naive_reduce_window(x, -np.inf, (3, 2), (2, 2), (1, 0), (1, 0), np.max))


def test_reduce_window_sum_dilations():
    x = np.arange(8, dtype=np.float32)
    r = run("HloModule m\n" + ADD + """ENTRY e {
  x = f32[8] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[5] reduce-window(x, z), window={size=2 rhs_dilate=3 stride=1}, to_apply=add
}""", x)
    assert list(r) == [x[i] + x[i + 3] for i in range(5)]
    r = run("HloModule m\n" + ADD + """ENTRY e {
  x = f32[3] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce-window(x, z), window={size=2 lhs_dilate=2}, to_apply=add
}""", np.array([1, 2, 3], np.float32))
    assert list(r) == [1, 2, 2, 3]  # base [1,0,2,0,3]


def test_select_and_scatter_max_pool_grad():
    x = np.array([[1, 5, 2, 2], [3, 4, 9, 0]], np.float32)
    src = np.array([[10, 20]], np.float32)
    r = run("""HloModule m
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
""" + ADD + """ENTRY e {
  x = f32[2,4] parameter(0)
  s = f32[1,2] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[2,4] select-and-scatter(x, s, z), window={size=2x2 stride=2x2}, select=ge, scatter=add
}""", x, src)
    want = np.zeros_like(x)
    want[0, 1] = 10
    want[1, 2] = 20
    np.testing.assert_array_equal(r, want)


def test_select_and_scatter_overlapping_windows_accumulate():
    x = np.array([1, 9, 2, 3], np.float32)
    src = np.array([1, 2, 4], np.float32)
    r = run("""HloModule m
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
""" + ADD + """ENTRY e {
  x = f32[4] parameter(0)
  s = f32[3] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[4] select-and-scatter(x, s, z), window={size=2 stride=1}, select=ge, scatter=add
}""", x, src)
    assert list(r) == [0, 3, 0, 4]


def test_map():
    r = run("""HloModule m
f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(a, b)
  ROOT s = f32[] add(m, a)
}
ENTRY e {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  ROOT r = f32[3] map(x, y), dimensions={0}, to_apply=f
}""", np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32))
    assert list(r) == [5, 12, 21]
