"""Elementwise ops against hand-computed values and XLA's edge cases."""
from __future__ import annotations

import math

import numpy as np
import pytest

from interp_helpers import BF16, binary, run, same_bits, unary

NAN, INF = np.nan, np.inf
I32_MIN, I32_MAX = -2**31, 2**31 - 1


def f32(*v):
    return np.array(v, dtype=np.float32)


def s32(*v):
    return np.array(v, dtype=np.int32)


def u32(*v):
    return np.array(v, dtype=np.uint32)


def test_add_sub_mul_div_f32():
    a, b = f32(1.5, -2, 3, 0), f32(0.5, 4, -1, 0)
    assert np.array_equal(binary("add", "f32", a, b), a + b)
    assert np.array_equal(binary("subtract", "f32", a, b), a - b)
    assert np.array_equal(binary("multiply", "f32", a, b), a * b)
    r = binary("divide", "f32", f32(1, -1, 0), f32(0, 0, 0))
    assert r[0] == INF and r[1] == -INF and np.isnan(r[2])


@pytest.mark.parametrize("op,fn", [("maximum", max), ("minimum", min)])
def test_max_min_propagate_nan(op, fn):
    a, b = f32(NAN, 1, 2, -INF), f32(1, NAN, 3, 5)
    r = binary(op, "f32", a, b)
    assert np.isnan(r[0]) and np.isnan(r[1])
    assert r[2] == fn(2, 3) and r[3] == fn(-INF, 5)
    rb = binary(op, "bf16", a.astype(BF16), b.astype(BF16))
    assert rb.dtype == BF16 and np.isnan(float(rb[0])) and np.isnan(float(rb[1]))


def test_integer_division_by_zero_and_overflow():
    a, b = s32(7, -7, I32_MIN, -7, 7, 0), s32(0, 0, -1, 2, -2, 0)
    assert list(binary("divide", "s32", a, b)) == [-1, -1, I32_MIN, -3, -3, -1]
    assert list(binary("remainder", "s32", a, b)) == [7, -7, 0, -1, 1, 0]
    assert list(binary("divide", "u32", u32(7, 9), u32(0, 2))) == [2**32 - 1, 4]
    assert list(binary("remainder", "u32", u32(7, 9), u32(0, 2))) == [7, 1]


def test_integer_overflow_wraps():
    assert list(binary("add", "s32", s32(I32_MAX, I32_MIN), s32(1, -1))) == [I32_MIN, I32_MAX]
    assert list(binary("multiply", "s8", np.array([100, -128], np.int8), np.array([3, -1], np.int8))) == [44, -128]
    assert list(unary("abs", "s32", s32(I32_MIN, -3))) == [I32_MIN, 3]
    assert list(unary("negate", "s32", s32(I32_MIN, 5))) == [I32_MIN, -5]


def test_shifts_out_of_range():
    a = s32(1, -8, -8, -8, 5)
    b = s32(32, 40, 1, -1, 2)
    assert list(binary("shift-left", "s32", a, b)) == [0, 0, -16, 0, 20]
    assert list(binary("shift-right-arithmetic", "s32", a, b)) == [0, -1, -4, -1, 1]
    assert list(binary("shift-right-logical", "s32", a, b)) == [0, 0, 0x7FFFFFFC, 0, 1]
    assert list(binary("shift-right-logical", "u32", u32(0xFFFFFFFF, 8), u32(31, 32))) == [1, 0]
    assert list(binary("shift-right-arithmetic", "u32", u32(0x80000000, 8), u32(4, 33))) == [0xF8000000, 0]


def test_bitwise_and_pred_ops():
    assert list(binary("and", "u32", u32(12, 10), u32(10, 6))) == [8, 2]
    assert list(binary("or", "u32", u32(12, 10), u32(10, 6))) == [14, 14]
    assert list(binary("xor", "u32", u32(12, 10), u32(10, 6))) == [6, 12]
    assert list(unary("not", "u32", u32(0))) == [0xFFFFFFFF]
    assert list(unary("not", "pred", np.array([True, False]))) == [False, True]
    assert list(binary("and", "pred", np.array([True, True]), np.array([True, False]))) == [True, False]


def test_clz_popcnt():
    assert list(unary("count-leading-zeros", "u32", u32(0, 1, 0x80000000, 255))) == [32, 31, 0, 24]
    assert list(unary("count-leading-zeros", "s32", s32(-1, 0))) == [0, 32]
    assert list(unary("popcnt", "u32", u32(0, 1, 0xFFFFFFFF, 0xF0F0))) == [0, 1, 32, 8]
    assert list(unary("popcnt", "s8", np.array([-1, 3], np.int8))) == [8, 2]


@pytest.mark.parametrize("x,afz,even", [(0.5, 1, 0), (-0.5, -1, -0.0), (2.5, 3, 2), (-2.5, -3, -2),
                                        (0.49999997, 0, 0), (1.5, 2, 2)])
def test_rounding(x, afz, even):
    assert unary("round-nearest-afz", "f32", f32(x))[0] == afz
    assert unary("round-nearest-even", "f32", f32(x))[0] == even


def test_sign_keeps_zero_and_nan():
    r = unary("sign", "f32", f32(-0.0, 0.0, NAN, -3, 7, -INF))
    assert same_bits(r, f32(-0.0, 0.0, NAN, -1, 1, -1))
    assert list(unary("sign", "s32", s32(-5, 0, 9))) == [-1, 0, 1]


def test_compare_float_and_totalorder():
    a = f32(NAN, -0.0, NAN, 1, -NAN)
    b = f32(NAN, 0.0, INF, 1, -INF)
    assert list(binary("compare", "f32", a, b, "pred", ", direction=EQ")) == [False, True, False, True, False]
    assert list(binary("compare", "f32", a, b, "pred", ", direction=NE")) == [True, False, True, False, True]
    assert list(binary("compare", "f32", a, b, "pred", ", direction=LT, type=TOTALORDER")) == \
        [False, True, False, False, True]
    assert list(binary("compare", "f32", a, b, "pred", ", direction=EQ, type=TOTALORDER")) == \
        [True, False, False, True, False]
    assert list(binary("compare", "s32", s32(-1), s32(1), "pred", ", direction=LT, type=UNSIGNED")) == [False]


@pytest.mark.parametrize("src,dst,x,want", [
    ("f32", "s32", [NAN, 1e10, -1e10, -1.7, 2.9, INF], [0, I32_MAX, I32_MIN, -1, 2, I32_MAX]),
    ("f32", "u8", [-3, 300, 7.9, NAN], [0, 255, 7, 0]),
    ("f32", "s64", [1e30, -1e30, 3.5], [2**63 - 1, -2**63, 3]),
    ("s32", "s8", [300, -129], [44, 127]),
    ("f32", "pred", [0.0, -0.0, 2, NAN], [False, False, True, True]),
    ("u32", "f32", [2**32 - 1], [4294967296.0]),
])
def test_convert_rules(src, dst, x, want):
    from hlo_compile.hlo.dtypes import numpy_dtype
    r = unary("convert", src, np.array(x).astype(numpy_dtype(src)), dst)
    assert r.dtype == numpy_dtype(dst)
    assert list(r) == want


def test_convert_to_bf16_rounds_to_nearest_even():
    x = f32(1 + 2**-8, 1 + 3 * 2**-8, np.finfo(np.float32).max)
    r = unary("convert", "f32", x, "bf16")
    assert [float(v) for v in r] == [1.0, 1 + 2**-6, INF]


def test_bf16_arithmetic_rounds_per_op():
    # 1 + 2^-9 rounds back to 1 in bf16 after every add: three adds leave 1.
    text = """HloModule m
ENTRY e {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  x1 = bf16[] add(a, b)
  x2 = bf16[] add(x1, b)
  ROOT x3 = bf16[] add(x2, b)
}"""
    r = run(text, np.array(1, BF16), np.array(2**-9, BF16))
    assert r.dtype == BF16 and float(r) == 1.0


def test_f16_transcendental_and_overflow():
    r = unary("exponential", "f16", np.array([0, 12], np.float16))
    assert r.dtype == np.float16 and r[0] == 1 and r[1] == np.inf


def test_unary_math_matches_python():
    x = f32(0.1, 0.5, 0.9)
    for op, fn in [("exponential", math.exp), ("log", math.log), ("sqrt", math.sqrt), ("tanh", math.tanh),
                   ("sine", math.sin), ("cosine", math.cos), ("tan", math.tan), ("erf", math.erf),
                   ("log-plus-one", math.log1p), ("exponential-minus-one", math.expm1), ("cbrt", lambda v: v ** (1 / 3)),
                   ("rsqrt", lambda v: 1 / math.sqrt(v)), ("logistic", lambda v: 1 / (1 + math.exp(-v)))]:
        r = unary(op, "f32", x)
        assert r.dtype == np.float32
        np.testing.assert_allclose(r, [fn(float(v)) for v in x], rtol=2e-6, err_msg=op)


def test_erf_without_scipy_is_within_two_ulps(monkeypatch):
    import hlo_compile.interpreter.special as special
    monkeypatch.setattr(special, "_scipy_erf", None)
    xs = np.linspace(-6, 6, 2401)
    got = special.erf(xs)
    want = np.array([math.erf(v) for v in xs])
    assert np.all(np.abs(got - want) <= 2 * np.spacing(np.abs(want)))
    assert special.erf(np.array([np.nan]))[0] != special.erf(np.array([np.nan]))[0]


def test_atan2_power_remainder_float():
    np.testing.assert_allclose(binary("atan2", "f32", f32(1, -1), f32(-1, -1)), [3 * math.pi / 4, -3 * math.pi / 4],
                               rtol=1e-6)
    assert list(binary("power", "f32", f32(2, 9), f32(3, 0.5))) == [8, 3]
    assert list(binary("remainder", "f32", f32(5.5, -5.5), f32(2, 2))) == [1.5, -1.5]


def test_integer_power():
    assert list(binary("power", "s32", s32(2, 3, 1, -1, 0, 2), s32(10, -1, -5, -3, 0, 31))) == \
        [1024, 0, 1, 0, 1, I32_MIN]


def test_clamp_select_is_finite():
    r = run("""HloModule m
ENTRY e {
  lo = f32[] parameter(0)
  x = f32[4] parameter(1)
  hi = f32[] parameter(2)
  ROOT c = f32[4] clamp(lo, x, hi)
}""", np.float32(0), f32(-1, 0.5, 2, NAN), np.float32(1))
    assert same_bits(r, f32(0, 0.5, 1, NAN))
    assert list(unary("is-finite", "f32", f32(1, INF, NAN, -INF), "pred")) == [True, False, False, False]
    r = run("""HloModule m
ENTRY e {
  p = pred[3] parameter(0)
  a = s32[3] parameter(1)
  b = s32[3] parameter(2)
  ROOT s = s32[3] select(p, a, b)
}""", np.array([True, False, True]), s32(1, 2, 3), s32(4, 5, 6))
    assert list(r) == [1, 5, 3]


def test_bitcast_convert():
    r = unary("bitcast-convert", "f32", f32(1.0, -0.0), "s32")
    assert list(r) == [0x3F800000, I32_MIN]
    r = run("""HloModule m
ENTRY e {
  p = f32[2] parameter(0)
  ROOT r = u16[2,2] bitcast-convert(p)
}""", f32(1.0, 2.0))
    assert r.shape == (2, 2) and list(r.reshape(-1)) == [0, 0x3F80, 0, 0x4000]


def test_reduce_precision():
    x = f32(1 + 2**-11, 1 + 3 * 2**-11, 70000, 1e-6, NAN)
    r = unary("reduce-precision", "f32", x, attrs=", exponent_bits=5, mantissa_bits=10")
    assert r[0] == 1.0 and r[1] == 1 + 2**-9 and r[2] == INF and r[3] == 0 and np.isnan(r[4])


def test_complex_parts():
    r = run("""HloModule m
ENTRY e {
  a = f32[2] parameter(0)
  b = f32[2] parameter(1)
  c = c64[2] complex(a, b)
  m = c64[2] multiply(c, c)
  re = f32[2] real(m)
  im = f32[2] imag(m)
  ab = f32[2] abs(c)
  ROOT t = (f32[2], f32[2], f32[2]) tuple(re, im, ab)
}""", f32(1, 3), f32(2, 4))
    assert list(r[0]) == [-3, -7] and list(r[1]) == [4, 24] and list(r[2]) == [np.sqrt(np.float32(5)), 5]


def test_empty_shapes():
    r = binary("add", "f32", np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))
    assert r.shape == (0, 3)
