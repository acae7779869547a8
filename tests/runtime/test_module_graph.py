"""A whole module recorded once and replayed as one graph (``runtime/graph.py``): on the host
platform with real kernels against the interpreter, buffer lifetimes with a tracking platform,
and the refusal of host-side control flow. The CUDA stream capture itself is checked against
a fake driver in ``test_cuda_runtime.py``."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_compile.cli import run as run_mod
from hlo_compile.cli.run import main
from hlo_compile.hlo import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import Executable, compile_executable
from hlo_compile.runtime.graph import ModuleGraph, unsupported_reason
from hlo_compile.codegen.compiler import plan_module

from codegen_helpers import TrackingHostPlatform

# three kernels (a multiply by a broadcast constant, a scatter into a parameter's value, not
# donated, so the graph holds the copy that starts it, and a reduction); a tuple parameter and
# result
CHAIN = """HloModule chain
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  t = (f32[8,3], s32[5,1]) parameter(0)
  u = f32[5,3] parameter(1)
  a = f32[8,3] get-tuple-element(t), index=0
  idx = s32[5,1] get-tuple-element(t), index=1
  k = f32[] constant(0.5)
  kb = f32[8,3] broadcast(k), dimensions={}
  x = f32[8,3] multiply(a, kb)
  s = f32[8,3] scatter(a, idx, u), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  z = f32[] constant(0)
  r = f32[3] reduce(s, z), dimensions={0}, to_apply=add
  ROOT out = (f32[8,3], f32[3]) tuple(x, r)
}"""

WHILE = """HloModule loop
cond {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  x = f32[4] get-tuple-element(p), index=1
  y = f32[4] add(x, x)
  ROOT t = (s32[], f32[4]) tuple(j, y)
}
ENTRY e {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(w), index=1
}"""


def _inputs(module, seed: int):
    args = literals.random_inputs(module, seed)
    return args


def _check(module, got, args) -> None:
    expected = literals.flatten(evaluate_module(module, args))
    got = literals.flatten(got)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def test_replays_match_the_interpreter_for_new_inputs():
    module = parse_module(CHAIN)
    exe = compile_executable(module, "host")
    with ModuleGraph(exe) as graph:
        for seed in range(4):  # the first run captures; the others only rewrite parameters
            args = _inputs(module, seed)
            _check(module, graph.run(args), args)
        assert (graph.kernel_launches, graph.copies) == (3, 1)
        assert "3 kernel launch(es) and 1 copy(ies)" in graph.describe()
        # the scatter starts from a copy of its operand in every replay: the operand (a
        # parameter) is never donated, so replays cannot accumulate into it
        assert [op.kind for op in graph.ops] == ["launch", "copy", "launch", "launch"]


def test_buffers_are_allocated_once_and_released_with_the_graph():
    module = parse_module(CHAIN)
    platform = TrackingHostPlatform()
    from hlo_compile.options import CompileOptions
    plan = plan_module(module, CompileOptions())
    exe = Executable(plan, platform)
    exe.build_programs()
    exe.kernels.update(platform.compile_all(plan.kernels))
    graph = ModuleGraph(exe)
    graph.run(_inputs(module, 0))
    allocated, copies = platform.allocations, platform.copies
    live_after_capture = len(platform.live)
    for seed in (1, 2):
        args = _inputs(module, seed)
        _check(module, graph.run(args), args)
    assert platform.allocations == allocated        # replays allocate nothing
    assert platform.copies == copies + 2            # the scatter's starting copy, once per replay
    assert len(platform.live) == live_after_capture  # and free nothing
    graph.close()
    constants = len(exe._constants)
    assert len(platform.live) == constants  # only the executable's constants are left
    graph.close()  # idempotent


def test_plain_runs_after_a_graph_are_unaffected():
    module = parse_module(CHAIN)
    exe = compile_executable(module, "host")
    args = _inputs(module, 7)
    with ModuleGraph(exe) as graph:
        graph.run(_inputs(module, 3))
    _check(module, exe.run(args), args)
    assert exe.platform.name == "host"


def test_host_control_flow_is_refused_with_its_line():
    module = parse_module(WHILE)
    exe = compile_executable(module, "host")
    why = unsupported_reason(exe)
    assert why is not None and "while '%w'" in why and "line 21" in why
    with pytest.raises(ValueError, match="cannot run as one graph: while"):
        ModuleGraph(exe)


def test_hlo_run_use_cuda_graph_needs_the_cuda_platform(tmp_path):
    f = tmp_path / "chain.hlo"
    f.write_text(CHAIN)
    r = CliRunner().invoke(main, [str(f), "--platform=host", "--use-cuda-graph"])
    assert r.exit_code == 2 and "--use-cuda-graph needs --platform=cuda" in r.output


def _host_graph_runner(platform, module, seed, tensor_cores=False, graph=False):
    """hlo-run's runner, with the host platform standing in for cuda."""
    exe = compile_executable(module, "host")
    if graph and unsupported_reason(exe) is None:
        return ModuleGraph(exe), exe.run
    return exe.run


@pytest.mark.parametrize("text,graphed", [(CHAIN, True), (WHILE, False)], ids=["chain", "while"])
def test_hlo_run_reports_the_graph_and_its_gain(monkeypatch, tmp_path, text, graphed):
    monkeypatch.setattr(run_mod, "_runner", _host_graph_runner)
    f = tmp_path / "m.hlo"
    f.write_text(text)
    # the platform check happens before _runner: pretend the cuda platform was asked for
    r = CliRunner().invoke(main, [str(f), "--platform=cuda", "--use-cuda-graph", "--iterations=3"])
    assert r.exit_code == 0, r.output
    assert "results match the interpreter reference" in r.output
    if graphed:
        assert "CUDA graph: one graph of 3 kernel launch(es) and 1 copy(ies)" in r.output
        assert "2 replays, median" in r.output and "with plain launches" in r.output
    else:
        assert "CUDA graph" not in r.output and "iterations, median" in r.output
