"""Data-movement ops: slices (static and dynamic, with XLA's clamping), pad, concatenate,
broadcast, transpose, reverse, iota, reshape and layout-aware bitcast."""
from __future__ import annotations

import numpy as np
import pytest

from interp_helpers import run


def test_dynamic_slice_clamps_starts():
    text = """HloModule m
ENTRY e {
  x = f32[5,4] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  ROOT d = f32[2,3] dynamic-slice(x, i, j), dynamic_slice_sizes={2,3}
}"""
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    for i, j, ci, cj in [(1, 1, 1, 1), (4, 3, 3, 1), (-2, -7, 0, 0), (100, 0, 3, 0)]:
        r = run(text, x, np.int32(i), np.int32(j))
        np.testing.assert_array_equal(r, x[ci:ci + 2, cj:cj + 3])


def test_dynamic_slice_unsigned_huge_index_clamps_high():
    text = """HloModule m
ENTRY e {
  x = s32[6] parameter(0)
  i = u32[] parameter(1)
  ROOT d = s32[2] dynamic-slice(x, i), dynamic_slice_sizes={2}
}"""
    r = run(text, np.arange(6, dtype=np.int32), np.uint32(2**32 - 1))
    assert list(r) == [4, 5]


def test_dynamic_update_slice_clamps():
    text = """HloModule m
ENTRY e {
  x = s32[4,4] parameter(0)
  u = s32[2,2] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT d = s32[4,4] dynamic-update-slice(x, u, i, j)
}"""
    x = np.zeros((4, 4), np.int32)
    u = np.array([[1, 2], [3, 4]], np.int32)
    r = run(text, x, u, np.int32(3), np.int32(-1))
    want = x.copy()
    want[2:4, 0:2] = u
    np.testing.assert_array_equal(r, want)
    assert not x.any()  # the argument is not modified


@pytest.mark.parametrize("padding,want", [
    ("1_2_0", [9, 0, 1, 2, 9, 9]),
    ("0_0_1", [0, 9, 1, 9, 2]),
    ("-1_1_1", [9, 1, 9, 2, 9]),
    ("-2_-1_0", []),
    ("2_-3_2", [9, 9, 0, 9, 9, 1]),
])
def test_pad_negative_and_interior(padding, want):
    x = np.array([0, 1, 2], np.int32)
    n = len(want)
    r = run(f"""HloModule m
ENTRY e {{
  x = s32[3] parameter(0)
  v = s32[] constant(9)
  ROOT p = s32[{n}] pad(x, v), padding={padding}
}}""", x)
    assert list(r) == want


def test_pad_2d_matches_numpy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = run("""HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  v = f32[] constant(-1)
  ROOT p = f32[4,8] pad(x, v), padding=1_1x1_0_2
}""", x)
    want = np.full((4, 8), -1, np.float32)
    want[1:3, 1::3] = x
    np.testing.assert_array_equal(r, want)


def test_slice_concat_reverse_transpose_broadcast_iota():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    r = run("""HloModule m
ENTRY e {
  x = s32[2,3,4] parameter(0)
  s = s32[1,2,2] slice(x), slice={[1:2], [0:3:2], [1:4:2]}
  c = s32[2,3,8] concatenate(x, x), dimensions={2}
  v = s32[2,3,4] reverse(x), dimensions={0,2}
  t = s32[4,2,3] transpose(x), dimensions={2,0,1}
  b = s32[3,5,2] broadcast(s32[2,3] slice(x), slice={[0:2], [0:3], [0:1]}), dimensions={2,0}
  i = s32[2,3] iota(), iota_dimension=1
  ROOT out = (s32[1,2,2], s32[2,3,8], s32[2,3,4], s32[4,2,3], s32[2,3]) tuple(s, c, v, t, i)
}""".replace("b = s32[3,5,2] broadcast(s32[2,3] slice(x), slice={[0:2], [0:3], [0:1]}), dimensions={2,0}\n", ""),
            x)
    np.testing.assert_array_equal(r[0], x[1:2, 0:3:2, 1:4:2])
    np.testing.assert_array_equal(r[1], np.concatenate([x, x], axis=2))
    np.testing.assert_array_equal(r[2], x[::-1, :, ::-1])
    np.testing.assert_array_equal(r[3], np.transpose(x, (2, 0, 1)))
    np.testing.assert_array_equal(r[4], np.broadcast_to(np.arange(3), (2, 3)))


def test_broadcast_dimensions_order():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = run("""HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  ROOT b = f32[3,5,2] broadcast(x), dimensions={2,0}
}""", x)
    for i in range(3):
        for k in range(2):
            assert np.all(r[i, :, k] == x[k, i])


def test_bitcast_is_layout_aware():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # same physical bytes: row-major [2,3] == column-major [3,2], i.e. a transpose
    r = run("""HloModule m
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  ROOT b = f32[3,2]{0,1} bitcast(x)
}""", x)
    np.testing.assert_array_equal(r, x.T)
    r = run("""HloModule m
ENTRY e {
  x = f32[2,3]{1,0} parameter(0)
  ROOT b = f32[6]{0} bitcast(x)
}""", x)
    np.testing.assert_array_equal(r, x.reshape(-1))
    r = run("""HloModule m
ENTRY e {
  x = f32[2,3]{0,1} parameter(0)
  ROOT b = f32[6]{0} bitcast(x)
}""", x)
    np.testing.assert_array_equal(r, x.T.reshape(-1))


def test_reshape_and_copy_and_empty():
    x = np.arange(12, dtype=np.int32)
    r = run("""HloModule m
ENTRY e {
  x = s32[12] parameter(0)
  r = s32[3,4] reshape(x)
  ROOT c = s32[3,4]{0,1} copy(r)
}""", x)
    np.testing.assert_array_equal(r, x.reshape(3, 4))
    r = run("""HloModule m
ENTRY e {
  x = f32[0,4] parameter(0)
  ROOT c = f32[4,0] transpose(x), dimensions={1,0}
}""", np.zeros((0, 4), np.float32))
    assert r.shape == (4, 0)


def test_constant_and_tuple_parameter():
    r = run("""HloModule m
ENTRY e {
  p = (f32[2], s32[]) parameter(0)
  a = f32[2] get-tuple-element(p), index=0
  c = f32[2] constant({1.5, -2})
  ROOT s = f32[2] add(a, c)
}""", (np.array([1, 1], np.float32), np.int32(3)))
    assert list(r) == [2.5, -1]
