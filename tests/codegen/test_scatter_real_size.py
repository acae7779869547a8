"""Scatter fusions that compute the operand they scatter into (issue 15, item 2), at real size,
in XLA:GPU's style (``passes/scatter_operands.py``): the embedding gradient (scatter-add of
f32[8192,4096] rows into a fused zero f32[32000,4096]), segment sums with updates computed in
the fusion, a variadic scatter with two computed operands, an operand computed from an ENTRY
parameter (which must not change). Two kernels each (the operand, then the scatter in place),
host = interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime.executable import compile_executable

from test_tree_reduction_in_fusion import xla_cpu_matches_interpreter

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def _embedding_grad(v: int, d: int, n: int) -> str:
    return "HloModule embedding_grad\n" + ADD + f"""
fused_scatter {{
  p0 = s32[{n},1] parameter(0)
  p1 = f32[{n},{d}] parameter(1)
  zero = f32[] constant(0)
  bcast = f32[{v},{d}] broadcast(zero), dimensions={{}}
  ROOT scatter = f32[{v},{d}] scatter(bcast, p0, p1), update_window_dims={{1}}, inserted_window_dims={{0}},
    scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
}}
ENTRY e {{
  idx = s32[{n},1] parameter(0)
  upd = f32[{n},{d}] parameter(1)
  ROOT f = f32[{v},{d}] fusion(idx, upd), kind=kInput, calls=fused_scatter
}}"""


def _segment_sum(segments: int, d: int, n: int) -> str:
    return "HloModule segment_sum\n" + ADD + f"""
fused_segment_sum {{
  ids = s32[{n}] parameter(0)
  x = f32[{n},{d}] parameter(1)
  w = f32[{n}] parameter(2)
  ids2 = s32[{n},1] bitcast(ids)
  wb = f32[{n},{d}] broadcast(w), dimensions={{0}}
  upd = f32[{n},{d}] multiply(x, wb)
  zero = f32[] constant(0)
  init = f32[{segments},{d}] broadcast(zero), dimensions={{}}
  ROOT s = f32[{segments},{d}] scatter(init, ids2, upd), update_window_dims={{1}}, inserted_window_dims={{0}},
    scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, indices_are_sorted=true, to_apply=add
}}
ENTRY e {{
  ids = s32[{n}] parameter(0)
  x = f32[{n},{d}] parameter(1)
  w = f32[{n}] parameter(2)
  ROOT f = f32[{segments},{d}] fusion(ids, x, w), kind=kInput, calls=fused_segment_sum
}}"""


VARIADIC = """HloModule variadic
pair_add {
  a0 = f32[] parameter(0)
  a1 = s32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = s32[] parameter(3)
  sum0 = f32[] add(a0, b0)
  sum1 = s32[] add(a1, b1)
  ROOT t = (f32[], s32[]) tuple(sum0, sum1)
}
fused {
  idx = s32[400,1] parameter(0)
  u = f32[400,64] parameter(1)
  one = s32[] constant(1)
  ones = s32[400,64] broadcast(one), dimensions={}
  half = f32[] constant(0.5)
  init0 = f32[500,64] broadcast(half), dimensions={}
  init1 = s32[500,64] iota(), iota_dimension=1
  ROOT sc = (f32[500,64], s32[500,64]) scatter(init0, init1, idx, u, ones), update_window_dims={1},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, unique_indices=true,
    to_apply=pair_add
}
ENTRY e {
  idx = s32[400,1] parameter(0)
  u = f32[400,64] parameter(1)
  ROOT f = (f32[500,64], s32[500,64]) fusion(idx, u), kind=kInput, calls=fused
}"""

FROM_PARAMETER = "HloModule from_parameter\n" + ADD + """
fused {
  base = f32[1000,32] parameter(0)
  idx = s32[4000,1] parameter(1)
  u = f32[4000,32] parameter(2)
  two = f32[] constant(2)
  twos = f32[1000,32] broadcast(two), dimensions={}
  init = f32[1000,32] multiply(base, twos)
  ROOT sc = f32[1000,32] scatter(init, idx, u), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
ENTRY e {
  base = f32[1000,32] parameter(0)
  idx = s32[4000,1] parameter(1)
  u = f32[4000,32] parameter(2)
  f = f32[1000,32] fusion(base, idx, u), kind=kInput, calls=fused
  ROOT t = (f32[1000,32], f32[1000,32]) tuple(f, base)
}"""


def _check_plan(text: str) -> None:
    """Two kernels: a loop fusion writing the operand, then the scatter fusion updating that
    buffer in place (donated: no copy), each on more than one block."""
    plan = plan_module(parse_module(text), CompileOptions(arch="sm_90"))
    assert [k.analysis.emitter for k in plan.kernels] == ["loop", "scatter"], [k.analysis.reason for k in plan.kernels]
    init, scatter = plan.kernels
    assert scatter.fusion.fused_computation.root.opcode == "scatter"
    operand = scatter.fusion.fused_computation.root.operands[0]
    assert operand.opcode == "parameter"
    assert scatter.fusion.operands[operand.parameter_number].opcode in ("fusion", "get-tuple-element")
    assert scatter.donated, "the scatter kernel should update the operand fusion's buffer in place"
    assert "scatter initialiser kernel" in init.analysis.reason and "is written by" in scatter.analysis.reason
    for k in plan.kernels:
        grid = k.spec.launch.grid
        assert grid[0] * grid[1] * grid[2] > 1, (k.fusion.name, grid)
    reparsed = parse_module(plan.module.to_text())
    assert len([i for i in reparsed.entry.instructions if i.opcode == "fusion"]) == 2


def _host_matches(text: str, args=None, tolerance=(1e-5, 1e-5)) -> None:
    module = parse_module(text)
    args = literals.random_inputs(module, 0) if args is None else args
    kept = [np.array(a, copy=True) for a in args]
    got = literals.flatten(compile_executable(module, "host", CompileOptions()).run(args))
    expected = literals.flatten(evaluate_module(module, kept))
    cmp = compare.compare_results(expected, got, tolerances=[tolerance] * len(expected))
    assert cmp.ok, cmp.report()
    for a, k in zip(args, kept):
        np.testing.assert_array_equal(a, k)   # the inputs are not written


@pytest.mark.slow
def test_embedding_gradient_full_size():
    """f32[32000,4096] operand, s32[8192,1] indices, f32[8192,4096] updates: about 11 s on
    host (9 s for the kernels), atomics in any order: within 1e-5."""
    text = _embedding_grad(32000, 4096, 8192)
    _check_plan(text)
    _host_matches(text)


@pytest.mark.parametrize("segments,d,n", [(1024, 256, 65536), (7, 33, 1000)])
def test_segment_sum_with_updates_computed_in_the_fusion(segments, d, n):
    text = _segment_sum(segments, d, n)
    _check_plan(text)
    rng = np.random.default_rng(1)
    ids = np.sort(rng.integers(0, segments, n)).astype(np.int32)
    x = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    w = rng.uniform(0, 1, n).astype(np.float32)
    _host_matches(text, [ids, x, w], (1e-4, 1e-4))


def test_variadic_scatter_with_two_computed_operands():
    """(Unique indices: our scatter emitter refuses a variadic scatter that needs a lock per element.)"""
    plan = plan_module(parse_module(VARIADIC), CompileOptions(arch="sm_90"))
    assert len(plan.kernels) == 2
    init, scatter = plan.kernels
    assert init.fusion.shape.is_tuple and len(init.fusion.shape.tuple_shapes) == 2
    assert scatter.analysis.emitter == "scatter"
    rng = np.random.default_rng(2)
    _host_matches(VARIADIC, [rng.permutation(500)[:400].reshape(400, 1).astype(np.int32),
                             rng.uniform(-1, 1, (400, 64)).astype(np.float32)])


def test_operand_computed_from_an_entry_parameter_leaves_it_unchanged():
    """The operand (2 * base) is computed into a new buffer; base, also an output, keeps its
    values."""
    _check_plan(FROM_PARAMETER)
    _host_matches(FROM_PARAMETER)


@pytest.mark.parametrize("case", ["embedding", "segment_sum", "from_parameter"])
def test_interpreter_matches_xla_cpu(case):
    text = {"embedding": _embedding_grad(3200, 64, 2048), "segment_sum": _segment_sum(100, 32, 5000),
            "from_parameter": FROM_PARAMETER}[case]
    args = literals.random_inputs(parse_module(text), 7)
    xla_cpu_matches_interpreter(text, args, 1e-5, 1e-5)
