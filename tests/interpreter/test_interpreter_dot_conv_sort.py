"""dot_general, convolution (against a direct loop), sort (comparators, NaN, stability),
topk."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from interp_helpers import BF16, run


def test_dot_general_batch_and_contracting():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(2, 3, 4)).astype(np.float32)
    b = rng.normal(size=(4, 2, 5)).astype(np.float32)
    r = run("""HloModule m
ENTRY e {
  a = f32[2,3,4] parameter(0)
  b = f32[4,2,5] parameter(1)
  ROOT d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={1}, rhs_contracting_dims={0}
}""", a, b)
    np.testing.assert_allclose(r, np.einsum("bmk,kbn->bmn", a, b), rtol=1e-5)


def test_dot_bf16_to_f32_and_int():
    a = np.array([[1, 2]], BF16)
    b = np.array([[3], [4]], BF16)
    r = run("""HloModule m
ENTRY e {
  a = bf16[1,2] parameter(0)
  b = bf16[2,1] parameter(1)
  ROOT d = f32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""", a, b)
    assert r.dtype == np.float32 and r[0, 0] == 11
    r = run("""HloModule m
ENTRY e {
  a = s8[2] parameter(0)
  b = s8[2] parameter(1)
  ROOT d = s32[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
}""", np.array([100, 100], np.int8), np.array([100, 2], np.int8))
    assert r == 10200


def _conv_ref(x, w, stride, pad, lhs_dil, rhs_dil, groups=1):
    """NCHW x OIHW, direct loops."""
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    xd = np.zeros((n, c, (h - 1) * lhs_dil[0] + 1, (wd - 1) * lhs_dil[1] + 1), x.dtype)
    xd[:, :, ::lhs_dil[0], ::lhs_dil[1]] = x
    xp = np.pad(xd, ((0, 0), (0, 0), pad[0], pad[1]))
    ekh, ekw = (kh - 1) * rhs_dil[0] + 1, (kw - 1) * rhs_dil[1] + 1
    oh = (xp.shape[2] - ekh) // stride[0] + 1
    ow = (xp.shape[3] - ekw) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    og = o // groups
    for b, f, y, z in itertools.product(range(n), range(o), range(oh), range(ow)):
        g = f // og
        patch = xp[b, g * i:(g + 1) * i, y * stride[0]:y * stride[0] + ekh:rhs_dil[0],
                   z * stride[1]:z * stride[1] + ekw:rhs_dil[1]]
        out[b, f, y, z] = np.sum(patch * w[f])
    return out


@pytest.mark.parametrize("groups", [1, 2])
def test_convolution_matches_direct_loops(groups):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 4, 5, 6)).astype(np.float32)
    w = rng.normal(size=(4, 4 // groups, 3, 2)).astype(np.float32)
    want = _conv_ref(x, w, (2, 1), ((1, 2), (0, 1)), (1, 2), (1, 2), groups)
    oh, ow = want.shape[2:]
    r = run(f"""HloModule m
ENTRY e {{
  x = f32[2,4,5,6] parameter(0)
  w = f32[4,{4 // groups},3,2] parameter(1)
  ROOT c = f32[2,4,{oh},{ow}] convolution(x, w), window={{size=3x2 stride=2x1 pad=1_2x0_1 lhs_dilate=1x2 rhs_dilate=1x2}}, dim_labels=bf01_oi01->bf01, feature_group_count={groups}
}}""", x, w)
    np.testing.assert_allclose(r, want, rtol=1e-4, atol=1e-5)


def test_convolution_nhwc_layout_labels():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 5, 5, 3)).astype(np.float32)
    w = rng.normal(size=(3, 3, 3, 2)).astype(np.float32)  # HWIO
    want = _conv_ref(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1))
    r = run("""HloModule m
ENTRY e {
  x = f32[1,5,5,3] parameter(0)
  w = f32[3,3,3,2] parameter(1)
  ROOT c = f32[1,5,5,2] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}""", x, w)
    np.testing.assert_allclose(r, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-5)


def test_convolution_batch_group_count():
    # weight-gradient style: batch groups split the batch, output features by group
    rng = np.random.default_rng(4)
    x = rng.normal(size=(4, 1, 5)).astype(np.float32)  # N=4 (2 groups of 2), C=1, W=5
    w = rng.normal(size=(4, 1, 2)).astype(np.float32)  # O=4 = 2 groups x 2
    r = run("""HloModule m
ENTRY e {
  x = f32[4,1,5] parameter(0)
  w = f32[4,1,2] parameter(1)
  ROOT c = f32[2,4,4] convolution(x, w), window={size=2}, dim_labels=bf0_oi0->bf0, batch_group_count=2
}""", x, w)
    want = np.zeros((2, 4, 4))
    for b in range(2):
        for o in range(4):
            g = o // 2
            for p in range(4):
                want[b, o, p] = np.sum(x[g * 2 + b, 0, p:p + 2] * w[o, 0])
    np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-6)


TOTAL_LT = """cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
"""


def test_sort_total_order_with_nan_and_signed_zero():
    x = np.array([[3, np.nan, -0.0, 0.0, -np.inf, 1, -np.nan]], np.float32)
    r = run("HloModule m\n" + TOTAL_LT + """ENTRY e {
  x = f32[1,7] parameter(0)
  ROOT s = f32[1,7] sort(x), dimensions={1}, is_stable=true, to_apply=cmp
}""", x)
    assert np.isnan(r[0, 0]) and np.signbit(r[0, 0])
    assert list(r[0, 1:4]) == [-np.inf, 0, 0] and np.signbit(r[0, 2]) and not np.signbit(r[0, 3])
    assert list(r[0, 4:6]) == [1, 3] and np.isnan(r[0, 6])


def test_sort_key_value_stable_descending():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 5, size=(3, 37)).astype(np.int32)
    vals = np.broadcast_to(np.arange(37, dtype=np.int32), (3, 37)).copy()
    r = run("""HloModule m
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT gt = pred[] compare(a, b), direction=GT
}
ENTRY e {
  k = s32[3,37] parameter(0)
  v = s32[3,37] parameter(1)
  ROOT s = (s32[3,37], s32[3,37]) sort(k, v), dimensions={1}, is_stable=true, to_apply=cmp
}""", keys, vals)
    order = np.argsort(-keys, axis=1, kind="stable")
    np.testing.assert_array_equal(r[0], np.take_along_axis(keys, order, axis=1))
    np.testing.assert_array_equal(r[1], order)


def test_sort_along_dim0_random_sizes():
    for n in (1, 2, 3, 8, 33, 100):
        x = np.random.default_rng(n).normal(size=(n, 3)).astype(np.float32)
        r = run("HloModule m\n" + TOTAL_LT + f"""ENTRY e {{
  x = f32[{n},3] parameter(0)
  ROOT s = f32[{n},3] sort(x), dimensions={{0}}, to_apply=cmp
}}""", x)
        np.testing.assert_array_equal(r, np.sort(x, axis=0))


def test_topk_ties_and_nan():
    x = np.array([[1, 5, 5, np.nan, 2]], np.float32)
    r = run("""HloModule m
ENTRY e {
  x = f32[1,5] parameter(0)
  ROOT t = (f32[1,3], s32[1,3]) topk(x), k=3, largest=true
}""", x)
    assert np.isnan(r[0][0, 0]) and list(r[0][0, 1:]) == [5, 5] and list(r[1][0]) == [3, 1, 2]
