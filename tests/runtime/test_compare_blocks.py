"""``compare_arrays`` on a large float array first checks it block by block (``_passed_by_blocks``)
and makes the whole-array report only when an element fails: the result (counts, max errors,
message, worst elements, histogram) is the same as the whole-array code gives on its own.
``_BLOCK`` is made small here so that small arrays take the block path; a ``_BLOCK`` larger
than every array gives the whole-array code's result to compare with."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile.runtime import compare


def _cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = [("close", x, x + np.float32(1e-7) * rng.standard_normal(n).astype(np.float32)),
           ("equal", x, x.copy())]
    y = x.copy()
    y[5] = np.nan
    out.append(("nan in both", y, y.copy()))
    y = x.copy()
    y[700] = np.inf
    out.append(("inf in both", y, y.copy()))
    y, z = x.copy(), x.copy()
    y[300], z[300] = 0, 1e-9
    out.append(("zero expected", y, z))
    z = x.copy()
    z[-1] += 1
    out.append(("one wrong", x, z))
    z = x.copy()
    z[3] = np.nan
    out.append(("nan in actual only", x, z))
    y, z = x.copy(), x.copy()
    y[9], z[9] = np.inf, -np.inf
    out.append(("opposite infinities", y, z))
    out.append(("2-d", x.reshape(40, 25), (x * np.float32(1 + 1e-6)).reshape(40, 25)))
    out.append(("fortran order", np.asfortranarray(x.reshape(40, 25)), np.asfortranarray(x.reshape(40, 25))))
    c = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    out.append(("complex", c, c * np.complex64(1 + 1e-7)))
    out.append(("f16", x.astype(np.float16), x.astype(np.float16)))
    out.append(("f64", x.astype(np.float64), x.astype(np.float64) + 1e-12))
    big = np.full(n, 1e308)
    out.append(("difference overflows", big, -big))
    return out


@pytest.mark.parametrize("rtol,atol", [(None, None), (1e-3, 1e-3), (0.0, 0.0)])
@pytest.mark.parametrize("name,expected,actual", _cases(), ids=[c[0] for c in _cases()])
def test_blocks_give_the_whole_array_result(monkeypatch, name, expected, actual, rtol, atol):
    monkeypatch.setattr(compare, "_BLOCK", 1 << 30)
    whole = compare.compare_arrays(expected, actual, rtol=rtol, atol=atol)
    monkeypatch.setattr(compare, "_BLOCK", 64)
    calls = []
    real = compare._passed_by_blocks
    monkeypatch.setattr(compare, "_passed_by_blocks", lambda *a: calls.append(1) or real(*a))
    blocks = compare.compare_arrays(expected, actual, rtol=rtol, atol=atol)
    assert calls  # n = 1000 > _BLOCK: every case (all floats) took the block path
    assert repr(vars(blocks)) == repr(vars(whole))  # (repr: NaN errors compare equal)
    assert blocks.report() == whole.report()


def test_the_block_path_is_taken_and_can_pass_and_fail(monkeypatch):
    monkeypatch.setattr(compare, "_BLOCK", 100)
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    assert compare._passed_by_blocks(x, x, 1e-5, 1e-6) == (0.0, 0.0)
    y = x.copy()
    y[999] += 1  # in the last block
    assert compare._passed_by_blocks(x, y, 1e-5, 1e-6) is None
    res = compare.compare_arrays(x, y)
    assert not res.ok and res.mismatches == 1 and res.worst[0][0] == (999,)
