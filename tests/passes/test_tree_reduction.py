"""XLA's tree-reduction rewrite (``passes/tree_reduction.py``): structure on big shapes (every
produced reduce race-free), numerics against the interpreter on moderate ones, and the result
prints and re-parses."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.gpu.archs import device_for_arch
from hlo_compile.gpu.reductions import is_race_free, reduction_dimensions
from hlo_compile.interpreter import evaluate_module
from hlo_compile.passes.tree_reduction import rewrite_tree_reductions, split_factors

DEVICE = device_for_arch("sm_90")


def _sum_module(src: str, dst: str, dims: str, et: str = "f32") -> str:
    return f"""HloModule r
add {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT s = {et}[] add(a, b)
}}
ENTRY e {{
  p = {src} parameter(0)
  z = {et}[] constant(0)
  ROOT r = {dst} reduce(p, z), dimensions={{{dims}}}, to_apply=add
}}"""


ARGMAX = """HloModule argmax
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  take0 = pred[] or(gt, tie)
  v = f32[] select(take0, v0, v1)
  i = s32[] select(take0, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  p = f32[3,%(n)d] parameter(0)
  iota = s32[3,%(n)d] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[3], s32[3]) reduce(p, iota, ninf, zero), dimensions={1}, to_apply=argmax
  ROOT idx = s32[3] get-tuple-element(r), index=1
}"""


def _rewrite(text: str):
    m = rewrite_tree_reductions(parse_module(text), DEVICE)
    printed = m.to_text()
    return m, parse_module(printed), printed


def _reduces(module):
    return [i for i in module.entry.instructions if i.opcode == "reduce"]


def _check_structure(module, expect_split: bool = True):
    reds = _reduces(module)
    assert len(reds) >= (2 if expect_split else 1)
    for r in reds:
        assert is_race_free(reduction_dimensions(r), DEVICE), r.name
    assert module.entry.root.name in ("r", "idx")


def _check_numerics(text: str, x, rtol=1e-4, atol=1e-3):
    _, reparsed, _ = _rewrite(text)
    ref = evaluate_module(parse_module(text), [x])
    got = evaluate_module(reparsed, [x])
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(ref, np.float64), rtol=rtol, atol=atol)


def test_split_factors_follow_xla():
    assert split_factors(100000, 16384, True) == (250, 400)
    assert split_factors(4096 * 4096, 16384, True) == (4096, 4096)
    k1, k2 = split_factors(70001, 16384, True)
    assert k1 * k2 >= 70001 and k1 * k2 - 70001 < k2
    k1, k2 = split_factors(5003, 4096, False)
    assert k1 * k2 >= 5003


def test_row_sum_100000():
    m, reparsed, text = _rewrite(_sum_module("f32[100000]", "f32[]", "0"))
    _check_structure(m)
    _check_structure(reparsed)
    assert "f32[250,400]" in text


def test_full_reduction_4096x4096_structure():
    m, reparsed, text = _rewrite(_sum_module("f32[4096,4096]", "f32[]", "0,1"))
    _check_structure(reparsed)
    assert "f32[16777216]" in text and "f32[4096,4096]" in text


@pytest.mark.parametrize("n", [20000, 70001])
def test_row_numerics(n):
    text = _sum_module(f"f32[2,{n}]", "f32[2]", "1")
    m, _, printed = _rewrite(text)
    _check_structure(m)
    assert ("pad(" in printed) == (n == 70001)
    _check_numerics(text, np.random.default_rng(n).standard_normal((2, n)).astype(np.float32))


def test_batched_row_z_over_8():
    text = _sum_module("f32[20,6,300]", "f32[6]", "0,2")
    m, _, _ = _rewrite(text)
    _check_structure(m)
    _check_numerics(text, np.random.default_rng(1).standard_normal((20, 6, 300)).astype(np.float32))


def test_column_b_over_4096():
    text = _sum_module("f32[5003,3]", "f32[3]", "0")
    m, _, printed = _rewrite(text)
    _check_structure(m)
    assert "pad(" in printed
    _check_numerics(text, np.random.default_rng(2).standard_normal((5003, 3)).astype(np.float32))


def test_column_with_major_kept_dim():
    text = _sum_module("f32[2,4500,5]", "f32[2,5]", "1")
    m, _, _ = _rewrite(text)
    _check_structure(m)
    _check_numerics(text, np.random.default_rng(3).standard_normal((2, 4500, 5)).astype(np.float32))


def test_race_free_reduce_untouched():
    text = _sum_module("f32[3,100]", "f32[3]", "1")
    m, _, printed = _rewrite(text)
    assert len(_reduces(m)) == 1 and "bitcast" not in printed


def test_variadic_argmax():
    n = 20011
    text = ARGMAX % {"n": n}
    m, _, printed = _rewrite(text)
    _check_structure(m)
    assert "pad(" in printed and "get-tuple-element" in printed
    x = np.random.default_rng(4).standard_normal((3, n)).astype(np.float32)
    x[1, 12345] = 100.0
    _, reparsed, _ = _rewrite(text)
    got = evaluate_module(reparsed, [x])
    np.testing.assert_array_equal(np.asarray(got), np.argmax(x, axis=1))
