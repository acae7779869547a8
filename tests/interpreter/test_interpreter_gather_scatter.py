"""gather (index clamping at the bounds, batching dims) and scatter (out-of-bounds windows
skipped, repeated indices, any combiner), checked against loops written here."""
from __future__ import annotations

import numpy as np

from interp_helpers import run


def test_gather_rows_clamped_at_bounds():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([0, 3, 7, -2], np.int32)
    r = run("""HloModule m
ENTRY e {
  x = f32[4,3] parameter(0)
  i = s32[4] parameter(1)
  ROOT g = f32[4,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}
}""", x, idx)
    want = np.stack([x[min(max(i, 0), 3), 0:2] for i in idx])
    np.testing.assert_array_equal(r, want)


def test_gather_2d_windows_clamped():
    x = np.arange(30, dtype=np.int32).reshape(5, 6)
    idx = np.array([[0, 0], [4, 5], [2, -3], [1, 2]], np.int32)
    r = run("""HloModule m
ENTRY e {
  x = s32[5,6] parameter(0)
  i = s32[4,2] parameter(1)
  ROOT g = s32[4,2,3] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3}
}""", x, idx)
    for n, (a, b) in enumerate(idx):
        a, b = min(max(a, 0), 3), min(max(b, 0), 3)
        np.testing.assert_array_equal(r[n], x[a:a + 2, b:b + 3])


def test_gather_with_batching_dims():
    # take_along_axis in the batching form: out[b, k] = x[b, idx[b, k]]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[3, 0], [1, 1], [2, 9]], np.int32)
    r = run("""HloModule m
ENTRY e {
  x = f32[3,4] parameter(0)
  i = s32[3,2,1] parameter(1)
  ROOT g = f32[3,2] gather(x, i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
}""", x, idx[..., None])
    want = np.array([[x[b, min(k, 3)] for k in row] for b, row in enumerate(idx)])
    np.testing.assert_array_equal(r, want)


ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def test_scatter_add_repeated_and_out_of_bounds():
    x = np.zeros(5, np.float32)
    idx = np.array([[1], [1], [4], [5], [-1], [0]], np.int32)
    upd = np.array([1, 2, 3, 100, 200, 4], np.float32)
    r = run("HloModule m\n" + ADD + """ENTRY e {
  x = f32[5] parameter(0)
  i = s32[6,1] parameter(1)
  u = f32[6] parameter(2)
  ROOT s = f32[5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}""", x, idx, upd)
    assert list(r) == [4, 3, 0, 0, 3]


def test_scatter_window_partially_out_of_bounds_is_skipped():
    x = np.zeros((4, 4), np.int32)
    idx = np.array([[0, 0], [3, 3], [2, 1]], np.int32)
    upd = np.ones((3, 2, 2), np.int32)
    r = run("""HloModule m
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
ENTRY e {
  x = s32[4,4] parameter(0)
  i = s32[3,2] parameter(1)
  u = s32[3,2,2] parameter(2)
  ROOT s = s32[4,4] scatter(x, i, u), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=add
}""", x, idx, upd)
    want = np.zeros((4, 4), np.int32)
    want[0:2, 0:2] += 1
    want[2:4, 1:3] += 1  # [3,3] would spill over: skipped whole
    np.testing.assert_array_equal(r, want)


def test_scatter_generic_combiner_applies_in_order():
    # combiner "new = 2*old + upd" is not commutative: repeated indices apply in order
    x = np.array([1, 1], np.float32)
    idx = np.array([[0], [0], [1]], np.int32)
    upd = np.array([3, 5, 7], np.float32)
    r = run("""HloModule m
comb {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  two = f32[] constant(2)
  m = f32[] multiply(a, two)
  ROOT s = f32[] add(m, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  i = s32[3,1] parameter(1)
  u = f32[3] parameter(2)
  ROOT s = f32[2] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
}""", x, idx, upd)
    assert list(r) == [2 * (2 * 1 + 3) + 5, 2 * 1 + 7]


def test_scatter_replace_variadic():
    x, y = np.zeros(3, np.float32), np.zeros(3, np.int32)
    idx = np.array([2, 0], np.int32)
    r = run("""HloModule m
rep {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  ROOT t = (f32[], s32[]) tuple(b, bi)
}
ENTRY e {
  x = f32[3] parameter(0)
  y = s32[3] parameter(1)
  i = s32[2] parameter(2)
  u = f32[2] parameter(3)
  v = s32[2] parameter(4)
  ROOT s = (f32[3], s32[3]) scatter(x, y, i, u, v), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=rep
}""", x, y, idx, np.array([5, 6], np.float32), np.array([7, 8], np.int32))
    assert list(r[0]) == [6, 0, 5] and list(r[1]) == [8, 0, 7]
