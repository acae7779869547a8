"""A reduce that is not race-free inside a fusion XLA already formed (issue 15, item 6) is split
as XLA's tree-reduction rewrite would have split it before fusion
(``passes/tree_reduction_fusions.py``): one kernel per stage, never one GPU thread.

Checked: the plan (every kernel's reduce race-free, more than one block for the partial
reductions, the reason naming the split), and the host against the interpreter on real shapes
(the split changes the summation order: floats within tolerances, integers exactly)."""
from __future__ import annotations

import importlib.util
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.gpu.reductions import is_race_free, reduction_dimensions
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime.executable import compile_executable

OPTIONS = CompileOptions(arch="sm_90")

REDUCERS = """
add {
  a = %(et)s[] parameter(0)
  b = %(et)s[] parameter(1)
  ROOT c = %(et)s[] add(a, b)
}
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] maximum(a, b)
}
"""


def _module(body: str, entry: str, et: str = "f32") -> str:
    return "HloModule m\n" + REDUCERS % {"et": et} + body + entry


SUM_SQUARES = """
fused_reduce {
  p0 = %(et)s[%(n)s] parameter(0)
  m = %(et)s[%(n)s] multiply(p0, p0)
  c = %(et)s[] constant(0)
  ROOT r = %(et)s[] reduce(m, c), dimensions={0}, to_apply=add
}
"""
SUM_SQUARES_ENTRY = """
ENTRY e {
  x = %(et)s[%(n)s] parameter(0)
  ROOT f = %(et)s[] fusion(x), kind=kInput, calls=fused_reduce
}
"""


def _sum_squares(n: int, et: str = "f32") -> str:
    v = {"et": et, "n": n}
    return _module(SUM_SQUARES % v, SUM_SQUARES_ENTRY % v, et)


# a loss after a fused log-softmax: sum over rows and vocabulary of labels * (x - max - log(sum exp))
LOSS = """
fused_loss {
  x = f32[%(b)d,%(v)d] parameter(0)
  lse = f32[%(b)d] parameter(1)
  labels = f32[%(b)d,%(v)d] parameter(2)
  lse_b = f32[%(b)d,%(v)d] broadcast(lse), dimensions={0}
  logp = f32[%(b)d,%(v)d] subtract(x, lse_b)
  prod = f32[%(b)d,%(v)d] multiply(logp, labels)
  zero = f32[] constant(0)
  total = f32[] reduce(prod, zero), dimensions={0,1}, to_apply=add
  neg = f32[] negate(total)
  n = f32[] constant(%(b)d)
  ROOT loss = f32[] divide(neg, n)
}
"""
LOSS_ENTRY = """
ENTRY e {
  x = f32[%(b)d,%(v)d] parameter(0)
  lse = f32[%(b)d] parameter(1)
  labels = f32[%(b)d,%(v)d] parameter(2)
  ROOT f = f32[] fusion(x, lse, labels), kind=kInput, calls=fused_loss
}
"""


def _loss(b: int, v: int) -> str:
    return _module(LOSS % {"b": b, "v": v}, LOSS_ENTRY % {"b": b, "v": v})


ROW_LOSS = """
fused_row {
  x = f32[%(b)d,%(v)d] parameter(0)
  e = f32[%(b)d,%(v)d] exponential(x)
  zero = f32[] constant(0)
  s = f32[%(b)d] reduce(e, zero), dimensions={1}, to_apply=add
  ROOT l = f32[%(b)d] log(s)
}
"""
ROW_LOSS_ENTRY = """
ENTRY e {
  x = f32[%(b)d,%(v)d] parameter(0)
  ROOT f = f32[%(b)d] fusion(x), kind=kInput, calls=fused_row
}
"""

ARGMIN = """
argmin {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  lt = pred[] compare(v0, v1), direction=LT
  eq = pred[] compare(v0, v1), direction=EQ
  ilt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, ilt)
  take0 = pred[] or(lt, tie)
  v = f32[] select(take0, v0, v1)
  i = s32[] select(take0, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
fused_argmin {
  p = f32[%(r)d,%(n)d] parameter(0)
  a = f32[%(r)d,%(n)d] abs(p)
  iota = s32[%(r)d,%(n)d] iota(), iota_dimension=1
  pinf = f32[] constant(inf)
  zero = s32[] constant(0)
  red = (f32[%(r)d], s32[%(r)d]) reduce(a, iota, pinf, zero), dimensions={1}, to_apply=argmin
  v = f32[%(r)d] get-tuple-element(red), index=0
  i = s32[%(r)d] get-tuple-element(red), index=1
  ROOT t = (f32[%(r)d], s32[%(r)d]) tuple(v, i)
}
"""
ARGMIN_ENTRY = """
ENTRY e {
  p = f32[%(r)d,%(n)d] parameter(0)
  ROOT f = (f32[%(r)d], s32[%(r)d]) fusion(p), kind=kInput, calls=fused_argmin
}
"""

SIDE_OUTPUT = """
fused_side {
  p = f32[%(n)d] parameter(0)
  e = f32[%(n)d] exponential(p)
  zero = f32[] constant(0)
  s = f32[] reduce(e, zero), dimensions={0}, to_apply=add
  ROOT t = (f32[], f32[%(n)d]) tuple(s, e)
}
"""
SIDE_OUTPUT_ENTRY = """
ENTRY e {
  p = f32[%(n)d] parameter(0)
  ROOT f = (f32[], f32[%(n)d]) fusion(p), kind=kInput, calls=fused_side
}
"""

COLUMN = """
fused_column {
  p = f32[%(n)d,%(c)d] parameter(0)
  ninf = f32[] constant(-inf)
  ROOT m = f32[%(c)d] reduce(p, ninf), dimensions={0}, to_apply=mx
}
"""
COLUMN_ENTRY = """
ENTRY e {
  p = f32[%(n)d,%(c)d] parameter(0)
  ROOT f = f32[%(c)d] fusion(p), kind=kInput, calls=fused_column
}
"""


STATS = """
fused_stats {
  p = f32[%(r)d,%(n)d] parameter(0)
  z = f32[] constant(0)
  total = f32[%(r)d] reduce(p, z), dimensions={1}, to_apply=add
  sq = f32[%(r)d,%(n)d] multiply(p, p)
  squares = f32[%(r)d] reduce(sq, z), dimensions={1}, to_apply=add
  ROOT t = (f32[%(r)d], f32[%(r)d]) tuple(total, squares)
}
"""
STATS_ENTRY = """
ENTRY e {
  p = f32[%(r)d,%(n)d] parameter(0)
  ROOT f = (f32[%(r)d], f32[%(r)d]) fusion(p), kind=kInput, calls=fused_stats
}
"""


SOFTMAX = """
fused_softmax {
  x = f32[%(r)d,%(n)d] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[%(r)d] reduce(x, ninf), dimensions={1}, to_apply=mx
  mb = f32[%(r)d,%(n)d] broadcast(m), dimensions={0}
  d = f32[%(r)d,%(n)d] subtract(x, mb)
  e = f32[%(r)d,%(n)d] exponential(d)
  zero = f32[] constant(0)
  s = f32[%(r)d] reduce(e, zero), dimensions={1}, to_apply=add
  sb = f32[%(r)d,%(n)d] broadcast(s), dimensions={0}
  ROOT y = f32[%(r)d,%(n)d] divide(e, sb)
}
"""
SOFTMAX_ENTRY = """
ENTRY e {
  x = f32[%(r)d,%(n)d] parameter(0)
  ROOT f = f32[%(r)d,%(n)d] fusion(x), kind=kLoop, calls=fused_softmax
}
"""


def _plan(text: str):
    return plan_module(parse_module(text), OPTIONS)


def _reduces(kernel):
    return [i for i in kernel.fusion.fused_computation.instructions if i.opcode == "reduce"]


def _check_plan(text: str, kernels: int) -> list:
    """The plan's kernels: as many as expected, every reduce race-free and emitted by the
    reduction emitter, the first (partial reductions) on more than one block; the reasons
    name the split. (A last stage whose root is an epilogue XLA's hero search does not walk
    through, e.g. ``divide(reduce, constant)``, is a loop fusion, as XLA would make it: its
    reduce then has at most 1024 partial results to add.)"""
    plan = _plan(text)
    assert len(plan.kernels) == kernels, [k.fusion.name for k in plan.kernels]
    for k in plan.kernels:
        assert "tree-reduction split" in k.analysis.reason, k.analysis.reason
        for r in _reduces(k):
            assert is_race_free(reduction_dimensions(r), plan.device), (k.fusion.name, r.name)
            if k.analysis.emitter != "reduction":
                assert r.operands[0].shape.element_count() <= 1024, k.analysis.reason
    first = next(k for k in plan.kernels if _reduces(k))
    grid = first.spec.launch.grid
    assert grid[0] * grid[1] * grid[2] > 1, grid
    return plan.kernels


def _host_matches(text: str, tolerance, args=None, seed: int = 0) -> None:
    module = parse_module(text)
    args = literals.random_inputs(module, seed) if args is None else args
    got = literals.flatten(compile_executable(module, "host", OPTIONS).run(args))
    expected = literals.flatten(evaluate_module(module, args))
    cmp = compare.compare_results(expected, got, tolerances=[tolerance] * len(expected))
    assert cmp.ok, cmp.report()


# ---- plans at full size ------------------------------------------------------------------------

def test_sum_of_100000_is_two_kernels():
    kernels = _check_plan(_sum_squares(100000), 2)
    assert "partial reductions, kernel 1 of 2" in kernels[0].analysis.reason
    assert kernels[1].fusion.name == "f"   # the fusion's value keeps its name


def test_loss_after_log_softmax_full_size_plan():
    """A loss f32[8192,32000] -> f32[]: 262,144,000 elements, split into two race-free stages."""
    kernels = _check_plan(_loss(8192, 32000), 3)
    (inner,) = _reduces(kernels[0])
    assert inner.operands[0].shape.dimensions == (32000, 8192)  # XLA's factors: no padding, 8192 a power of 2
    (middle,) = _reduces(kernels[1])
    assert middle.operands[0].shape.dimensions == (128, 250)     # 32000 > 16384 is split again
    assert kernels[2].fusion.fused_computation.root.opcode == "divide"   # the epilogue follows the outer reduce


def test_row_reduction_longer_than_16384_per_row_plan():
    kernels = _check_plan(_module(ROW_LOSS % {"b": 8192, "v": 32000}, ROW_LOSS_ENTRY % {"b": 8192, "v": 32000}), 2)
    assert kernels[1].fusion.fused_computation.root.opcode == "log"


def test_fusion_shared_by_a_second_caller_and_the_module_prints():
    """Two fusions call the same computation; both are split; the module prints and re-parses."""
    text = _module(SUM_SQUARES % {"et": "f32", "n": 50000}, """
ENTRY e {
  x = f32[50000] parameter(0)
  y = f32[50000] parameter(1)
  f = f32[] fusion(x), kind=kInput, calls=fused_reduce
  g = f32[] fusion(y), kind=kInput, calls=fused_reduce
  ROOT t = (f32[], f32[]) tuple(f, g)
}
""")
    plan = _plan(text)
    assert len(plan.kernels) == 4
    printed = plan.module.to_text()
    assert "fused_reduce {" not in printed and "%fused_reduce " not in printed   # the old computation is gone
    reparsed = parse_module(printed)
    assert len([i for i in reparsed.entry.instructions if i.opcode == "fusion"]) == 4


# ---- host against the interpreter --------------------------------------------------------------

@pytest.mark.parametrize("n", [100000, 16385, 1 << 20])
def test_sum_of_squares_f32(n):
    _check_plan(_sum_squares(n), 2)
    _host_matches(_sum_squares(n), (1e-5, 1e-5))


def test_sum_s32_exact():
    text = _sum_squares(100003, "s32")
    _check_plan(text, 2)
    rng = np.random.default_rng(1)
    _host_matches(text, (0, 0), [rng.integers(-1000, 1000, 100003).astype(np.int32)])


def test_sum_f16():
    """f16 accumulates in f16 in both; the orders differ, so the sums may differ by a few
    f16 ulps of the total (about 1e-3 relative at these magnitudes)."""
    text = _sum_squares(100000, "f16")
    _check_plan(text, 2)
    rng = np.random.default_rng(2)
    x = rng.uniform(-0.05, 0.05, 100000).astype(np.float16)
    _host_matches(text, (2e-2, 2e-2), [x])


def test_loss_after_log_softmax():
    b, v = 64, 32000
    text = _loss(b, v)
    _check_plan(text, 2)
    _host_matches(text, (1e-5, 1e-4))


def _uniform_f32(rng: np.random.Generator, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    """Uniform f32 in [low, high), drawn in f32 (``rng.uniform(...).astype`` fills an f64 array
    first: 2 GB and about 5 s for each 262,144,000-element input)."""
    x = rng.random(shape, dtype=np.float32)
    x *= high - low
    x += low
    return x


@pytest.mark.slow
def test_loss_at_full_size_on_host():
    """The loss at its real size (8192 x 32000, 262,144,000 products; about 16 s on host, the
    three kernels 32000 x 8192 -> 128 x 250 -> 128): within 1e-5 of the float64 sum (measured
    1.3e-7, as numpy's pairwise f32 sum)."""
    b, v = 8192, 32000
    rng = np.random.default_rng(4)
    x = _uniform_f32(rng, (b, v), -0.1, 0.2)
    lse = _uniform_f32(rng, (b,), -0.1, 0.2)
    labels = _uniform_f32(rng, (b, v), -0.1, 0.2)
    (got,) = literals.flatten(compile_executable(parse_module(_loss(b, v)), "host", OPTIONS).run([x, lse, labels]))
    exact = -np.sum((x - lse.astype(np.float64)[:, None]) * labels, dtype=np.float64) / b
    assert abs(float(got) - exact) <= 1e-5 * abs(exact), (float(got), exact)


def test_row_sums_of_exponentials():
    b, v = 16, 40000
    text = _module(ROW_LOSS % {"b": b, "v": v}, ROW_LOSS_ENTRY % {"b": b, "v": v})
    _check_plan(text, 2)
    _host_matches(text, (1e-5, 1e-5))


@pytest.mark.parametrize("r,n", [(4, 100000), (1, 300000)])
def test_variadic_argmin_over_a_long_row(r, n):
    """Ties (the |x| of ±v, zeros) go to the smaller index in both orders: exact."""
    text = _module(ARGMIN % {"r": r, "n": n}, ARGMIN_ENTRY % {"r": r, "n": n})
    _check_plan(text, 2)
    rng = np.random.default_rng(3)
    p = rng.integers(-50, 50, (r, n)).astype(np.float32)
    _host_matches(text, (0, 0), [p])


def test_side_output_gets_its_own_kernel():
    n = 70000
    text = _module(SIDE_OUTPUT % {"n": n}, SIDE_OUTPUT_ENTRY % {"n": n})
    kernels = _check_plan(text, 3)
    assert any("need no reduce" in k.analysis.reason for k in kernels)
    _host_matches(text, (1e-5, 1e-5))


def test_column_reduction_longer_than_4096():
    n, c = 20000, 8
    text = _module(COLUMN % {"n": n, "c": c}, COLUMN_ENTRY % {"n": n, "c": c})
    _check_plan(text, 2)
    _host_matches(text, (0, 0))


def test_two_long_row_reductions_of_one_fusion_stay_together():
    """Mean and variance statistics (two reduces of one long row, a multi-output reduction
    fusion): each stage is one multi-output reduction kernel, not one per reduce."""
    v = {"r": 8, "n": 65536}
    text = _module(STATS % v, STATS_ENTRY % v)
    kernels = _check_plan(text, 2)
    assert all(len(_reduces(k)) == 2 for k in kernels)
    assert "%total (row [1, 8, 65536]), %squares (row [1, 8, 65536])" in kernels[0].analysis.reason
    _host_matches(text, (1e-5, 1e-5))


WHILE_BODY = """HloModule w
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused_sum {
  p = f32[50000] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}
body {
  t = (s32[], f32[], f32[50000]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  acc = f32[] get-tuple-element(t), index=1
  x = f32[50000] get-tuple-element(t), index=2
  s = f32[] fusion(x), kind=kInput, calls=fused_sum
  acc2 = f32[] add(acc, s)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT o = (s32[], f32[], f32[50000]) tuple(i2, acc2, x)
}
cond {
  t = (s32[], f32[], f32[50000]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[50000] parameter(0)
  z = s32[] constant(0)
  f = f32[] constant(0)
  t = (s32[], f32[], f32[50000]) tuple(z, f, x)
  w = (s32[], f32[], f32[50000]) while(t), condition=cond, body=body
  ROOT r = f32[] get-tuple-element(w), index=1
}
"""


def test_fusion_in_a_while_body_is_split_too():
    plan = _plan(WHILE_BODY)
    body = {k.fusion.name: k for k in plan.kernels}
    assert "s.tree" in body and "s" in body
    assert body["s.tree"].spec.launch.grid[0] > 1
    assert "tree-reduction split" in body["s"].analysis.reason
    _host_matches(WHILE_BODY, (1e-5, 1e-5))


@pytest.mark.parametrize("n", [65536, 20000])
def test_thread_maps_of_the_stages_read_each_element_once(n):
    """XLA's bijection check on the new kernels: each stage's thread -> reduce-input map reaches
    every element of its (padded, reshaped) input exactly once."""
    for k in _plan(_sum_squares(n)).kernels:
        (red,) = _reduces(k)
        dims = red.operands[0].shape.dimensions
        m = k.spec.thread_to_input_map(0, 0)
        hits = Counter(m.evaluate(d, s, r) for d, s, r in m.domain())
        assert len(hits) == math.prod(dims) and set(hits.values()) == {1}, (k.fusion.name, dims, str(m))
        assert all(0 <= i < size for idx in hits for i, size in zip(idx, dims))


def test_softmax_over_a_long_row_cuts_after_each_broadcast_reduce():
    """Softmax over 32000 columns in one loop fusion: each reduce whose result is broadcast
    back ends its kernel (else every output element would add the partial results again):
    max partials, max, exp-sum partials (+ exp written once), sum, divide: 6 kernels, every
    reduce in a reduction kernel."""
    v = {"r": 64, "n": 32000}
    text = _module(SOFTMAX % v, SOFTMAX_ENTRY % v)
    kernels = _check_plan(text, 6)
    assert [len(_reduces(k)) for k in kernels] == [1, 1, 1, 0, 1, 0]
    assert all(k.analysis.emitter == "reduction" for k in kernels if _reduces(k))
    _host_matches(text, (1e-6, 1e-5))


# ---- the interpreter against XLA:CPU -----------------------------------------------------------

XLA_REF = Path(__file__).resolve().parents[3] / "shared" / "tools" / "xla_ref.py"


def xla_cpu_matches_interpreter(text: str, args, rtol: float, atol: float) -> None:
    """XLA:CPU (``shared/tools/xla_ref.py``, fusions inlined) on ``text`` gives what the
    interpreter gives; skipped where jax or the tool is absent."""
    if importlib.util.find_spec("jax") is None or not XLA_REF.is_file():
        pytest.skip("XLA:CPU reference (jax, shared/tools/xla_ref.py) not available")
    spec = importlib.util.spec_from_file_location("xla_ref", XLA_REF)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    got = ref.run_hlo_text(text, [np.asarray(a) for a in args], inline=True, bitcast_to_reshape=True)
    want = literals.flatten(evaluate_module(parse_module(text), args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("case", ["sum", "loss", "argmin", "stats"])
def test_interpreter_matches_xla_cpu(case):
    texts = {"sum": _sum_squares(100000), "loss": _loss(16, 32000),
             "argmin": _module(ARGMIN % {"r": 4, "n": 100000}, ARGMIN_ENTRY % {"r": 4, "n": 100000}),
             "stats": _module(STATS % {"r": 8, "n": 65536}, STATS_ENTRY % {"r": 8, "n": 65536})}
    text = texts[case]
    args = literals.random_inputs(parse_module(text), 5)
    xla_cpu_matches_interpreter(text, args, 1e-4, 1e-4)
