"""Integer and pred mismatches report their real error extent (was "max abs error 0")."""
import numpy as np
import pytest

from hlo_compile.runtime.compare import compare_arrays


@pytest.mark.parametrize("dtype,expected,actual,max_abs,max_rel", [
    (np.int32, [1, 2, 3], [1, 7, 3], 5.0, 2.5),
    (np.int8, [-5, 0], [5, 0], 10.0, 2.0),
    (np.bool_, [True, False], [True, True], 1.0, 1.0),
    (np.uint64, [2**63], [2**63 + 1], 1.0, 1.0 / 2**63),   # beyond float64's 53 bits
])
def test_integer_mismatch_error_extent(dtype, expected, actual, max_abs, max_rel):
    res = compare_arrays(np.array(expected, dtype), np.array(actual, dtype))
    assert not res.ok and res.mismatches == 1
    assert res.max_abs == max_abs and res.max_rel == pytest.approx(max_rel)
    assert res.worst[0][3] == max_abs
    assert f"max abs error {max_abs:.3g}" in res.report()


def test_integer_match_reports_zero():
    res = compare_arrays(np.arange(4, dtype=np.int64), np.arange(4, dtype=np.int64))
    assert res.ok and res.max_abs == 0.0


def test_default_tolerances_by_family():
    """float64 once matched the "float6" prefix of ml_dtypes' 6-bit floats and was compared at
    f8's 25% tolerance."""
    import ml_dtypes

    from hlo_compile.runtime.compare import TOLERANCE_CLASSES, default_tolerance
    acc = TOLERANCE_CLASSES["accumulate"]
    assert default_tolerance(np.float64) == acc["f64"] == default_tolerance(np.complex128)
    assert default_tolerance(np.float32) == acc["f32"] == default_tolerance(np.complex64)
    for name in ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float4_e2m1fn"):
        if hasattr(ml_dtypes, name):
            assert default_tolerance(np.dtype(getattr(ml_dtypes, name))) == acc["f8"], name
    assert default_tolerance(np.dtype(ml_dtypes.bfloat16)) == acc["bf16"]
    res = compare_arrays(np.array([1.0]), np.array([1.01]))   # 1% off in f64 must fail
    assert not res.ok
