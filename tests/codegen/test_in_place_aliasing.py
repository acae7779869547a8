"""XLA's in-place aliasing for dynamic-update-slice and scatter: ``plan_module`` donates the
operand's buffer to the output of an in-place kernel when a fusion of the same computation
produced it and nothing reads it afterwards (nor returns it); the kernel's two parameters then
lose ``noalias``, the runtime launches into the operand's buffer (no allocation, no copy), and
every buffer is still freed exactly once and never read after being freed."""
from __future__ import annotations

import re

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.codegen.report import fusion_report_text
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline, summary
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import Executable, compile_executable
from hlo_compile.targets.nvptx import NvptxTarget

from codegen_helpers import TrackingHostPlatform

DUS_DEAD = """HloModule m
ENTRY e {
  a = f32[8,16] parameter(0)
  u = f32[2,16] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  x = f32[8,16] exponential(a)
  d = f32[8,16] dynamic-update-slice(x, u, i, z)
  ROOT r = f32[8,16] negate(d)
}"""

# x is also in the root tuple: the DUS must work on a copy
DUS_X_IN_ROOT = """HloModule m
ENTRY e {
  a = f32[8,16] parameter(0)
  u = f32[2,16] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  x = f32[8,16] exponential(a)
  d = f32[8,16] dynamic-update-slice(x, u, i, z)
  ROOT t = (f32[8,16], f32[8,16]) tuple(d, x)
}"""

# x read after the DUS through a bitcast
DUS_X_READ_LATER = """HloModule m
ENTRY e {
  a = f32[8,16] parameter(0)
  u = f32[2,16] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  x = f32[8,16] exponential(a)
  d = f32[8,16] dynamic-update-slice(x, u, i, z)
  xb = f32[128] bitcast(x)
  db = f32[128] bitcast(d)
  ROOT r = f32[128] add(db, xb)
}"""

DUS_OF_PARAMETER = """HloModule m
ENTRY e {
  x = f32[8,16] parameter(0)
  u = f32[2,16] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  d = f32[8,16] dynamic-update-slice(x, u, i, z)
  ROOT r = f32[8,16] negate(d)
}"""

# the fused DUS also reads its operand (the update is a slice of it): in place, threads would
# read rows other threads already overwrote
DUS_READS_OPERAND = """HloModule m
fused {
  p0 = f32[8,16] parameter(0)
  p1 = s32[] parameter(1)
  z = s32[] constant(0)
  s = f32[2,16] slice(p0), slice={[0:2], [0:16]}
  n = f32[2,16] negate(s)
  ROOT d = f32[8,16] dynamic-update-slice(p0, n, p1, z)
}
ENTRY e {
  a = f32[8,16] parameter(0)
  i = s32[] parameter(1)
  x = f32[8,16] exponential(a)
  d = f32[8,16] fusion(x, i), kind=kLoop, calls=fused
  ROOT r = f32[8,16] negate(d)
}"""

# the fused scatter's updates read its operand: in place, threads would read elements other
# threads already combined into
SCATTER_READS_OPERAND = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
fused {
  p0 = f32[8,3] parameter(0)
  p1 = s32[8,1] parameter(1)
  n = f32[8,3] negate(p0)
  ROOT s = f32[8,3] scatter(p0, p1, n), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
ENTRY e {
  a = f32[8,3] parameter(0)
  indices = s32[8,1] parameter(1)
  x = f32[8,3] multiply(a, a)
  s = f32[8,3] fusion(x, indices), kind=kInput, calls=fused
  ROOT r = f32[8,3] negate(s)
}"""

SCATTER_ADD = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  a = f32[8,3] parameter(0)
  indices = s32[40,1] parameter(1)
  updates = f32[40,3] parameter(2)
  x = f32[8,3] multiply(a, a)
  s = f32[8,3] scatter(x, indices, updates), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  ROOT r = f32[8,3] negate(s)
}"""

# a JAX-style loop: the state's buffer is updated by a DUS each iteration (a body parameter:
# copied), and a second DUS updates a buffer the body itself produced (donated)
WHILE_DUS = """HloModule m
cond {
  p = (s32[], f32[8,4], f32[8,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[8,4], f32[8,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  buf = f32[8,4] get-tuple-element(p), index=1
  acc = f32[8,4] get-tuple-element(p), index=2
  z = s32[] constant(0)
  one = s32[] constant(1)
  row = f32[1,4] dynamic-slice(acc, i, z), dynamic_slice_sizes={1,4}
  upd = f32[1,4] sine(row)
  buf2 = f32[8,4] dynamic-update-slice(buf, upd, i, z)
  scaled = f32[8,4] add(acc, acc)
  acc2 = f32[8,4] dynamic-update-slice(scaled, upd, i, z)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], f32[8,4], f32[8,4]) tuple(i2, buf2, acc2)
}
ENTRY e {
  b = f32[8,4] parameter(0)
  a = f32[8,4] parameter(1)
  s = s32[] constant(0)
  init = (s32[], f32[8,4], f32[8,4]) tuple(s, b, a)
  w = (s32[], f32[8,4], f32[8,4]) while(init), condition=cond, body=body
  ROOT o = f32[8,4] get-tuple-element(w), index=1
}"""


# ---- a platform that tracks every buffer ------------------------------------------------------

def _args(module, seed=0):
    args = literals.random_inputs(module, seed)
    rng = np.random.default_rng(seed)
    for p in module.entry.parameters:
        if p.shape.is_array and p.shape.element_type == "s32":  # in-range starts and indices
            args[p.parameter_number] = rng.integers(0, 8, p.shape.dimensions).astype(np.int32)
        elif p.shape.is_array and p.shape.element_type == "f32":  # exact sums in any order
            args[p.parameter_number] = rng.integers(-4, 5, p.shape.dimensions).astype(np.float32)
    return args


def _run_tracked(text: str, seed: int = 0):
    """(executable, tracking platform) after a checked run against the interpreter, twice."""
    module = parse_module(text)
    host = compile_executable(module, "host")
    platform = TrackingHostPlatform()
    exe = Executable(host.plan, platform, host.kernels)
    for run in range(2):
        args = _args(module, seed + run)
        got = literals.flatten(exe.run(args))
        want = literals.flatten(evaluate_module(module, args))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-5, atol=1e-6)
        # only the constants (uploaded once, kept for later runs) are still allocated
        assert len(platform.live) == len(exe._constants)
    return exe, platform


def _kernel(plan, name):
    return next(k for k in plan.kernels if k.fusion.name == name)


def _define_params(ir_text: str, kernel: str) -> dict[str, str]:
    """param name → its attribute text in ``define ... @kernel(...)``."""
    line = next(ln for ln in ir_text.splitlines()
                if ln.startswith("define") and (f"@{kernel}(" in ln or f'@"{kernel}"(' in ln))
    args = line[line.index("(") + 1:line.rindex(")")]
    out = {}
    for a in args.split(", "):
        m = re.search(r'%"?([\w.]+)"?$', a.strip())
        out[m.group(1)] = a
    return out


# ---- tests ------------------------------------------------------------------------------------

def test_dus_of_a_dead_fusion_output_is_donated():
    plan = plan_module(parse_module(DUS_DEAD), CompileOptions())
    k = _kernel(plan, "d")
    assert k.donated == {0: 0}
    assert k.spec.donated == {0: 0}
    params = _define_params(str(k.emit(NvptxTarget("sm_80"))), k.kernel_name)
    aliased = [n for n in params if n.startswith("in0.") or n.startswith("out0.")]
    assert len(aliased) == 2
    for n in aliased:
        assert "noalias" not in params[n], params[n]
    assert "readonly" not in params[aliased[0]]
    others = [n for n in params if n not in aliased]
    assert others and all("noalias" in params[n] and "readonly" in params[n] for n in others)
    # the producer keeps its noalias output
    producer = _kernel(plan, "x")
    assert all("noalias" in a for a in _define_params(str(producer.emit(NvptxTarget("sm_80"))),
                                                      producer.kernel_name).values())
    exe, platform = _run_tracked(DUS_DEAD)
    assert platform.copies == 0
    # x and r allocate, the DUS writes into x's buffer
    assert platform.allocations == 2 * 2


@pytest.mark.parametrize("text", [DUS_X_IN_ROOT, DUS_X_READ_LATER], ids=["in-root", "read-later"])
def test_dus_of_a_live_value_is_copied(text):
    plan = plan_module(parse_module(text), CompileOptions())
    k = _kernel(plan, "d")
    assert k.donated == {} and k.in_place_operands == {0: 0}
    params = _define_params(str(k.emit(NvptxTarget("sm_80"))), k.kernel_name)
    assert all("noalias" in a for a in params.values())
    exe, platform = _run_tracked(text)
    assert platform.copies == 2  # one per run


def test_dus_of_an_entry_parameter_is_copied():
    plan = plan_module(parse_module(DUS_OF_PARAMETER), CompileOptions())
    k = _kernel(plan, "d")
    assert k.donated == {} and "not a buffer a fusion" in k.aliasing
    _, platform = _run_tracked(DUS_OF_PARAMETER)
    assert platform.copies == 2


@pytest.mark.parametrize("text, name", [(DUS_READS_OPERAND, "d"), (SCATTER_READS_OPERAND, "s")],
                         ids=["dus", "scatter"])
def test_in_place_op_whose_fusion_reads_its_operand_is_copied(text, name):
    plan = plan_module(parse_module(text), CompileOptions())
    k = _kernel(plan, name)
    assert k.donated == {}
    if k.in_place_operands:  # (the DUS analysis already falls back to the loop emitter)
        assert "inside the fusion" in k.aliasing
    for seed in range(3):
        _run_tracked(text, seed)


def test_scatter_add_after_a_producer_is_donated():
    plan = plan_module(parse_module(SCATTER_ADD), CompileOptions())
    k = _kernel(plan, "s")
    assert k.analysis.emitter == "scatter"
    assert k.donated == {0: 0}
    params = _define_params(str(k.emit(NvptxTarget("sm_80"))), k.kernel_name)
    assert sum("noalias" not in a for a in params.values()) == 2
    _, platform = _run_tracked(SCATTER_ADD)
    assert platform.copies == 0


def test_dus_in_a_while_body():
    plan = plan_module(parse_module(WHILE_DUS), CompileOptions())
    assert _kernel(plan, "buf2").donated == {}        # a body parameter's buffer: copied
    assert _kernel(plan, "acc2").donated == {0: 0}    # produced by the body: in place
    _, platform = _run_tracked(WHILE_DUS)
    assert platform.copies == 2 * 8


def test_report_and_summary_show_the_decision():
    module = parse_module(DUS_X_IN_ROOT.replace("ROOT t = (f32[8,16], f32[8,16]) tuple(d, x)",
                                                "y = f32[8,16] exponential(d)\n"
                                                "  e2 = f32[8,16] dynamic-update-slice(y, u, i, z)\n"
                                                "  ROOT t = (f32[8,16], f32[8,16]) tuple(e2, x)"))
    result = run_pipeline(module, CompileOptions(), emit="fusions")
    text = result.artifacts["fusions"]
    assert "in-place aliasing: yes: output 0 takes operand 0's buffer" in text
    assert "in-place aliasing: no (operand copied): operand 0 (%x) is read after this fusion" in text
    kernels = {k["fusion"]: k for k in summary(result)["kernels"]}
    assert kernels["d"]["in_place"] is False
    assert kernels["e2"]["in_place"] is True
    assert kernels["y"]["in_place"] is False
    from hlo_compile.codegen.model.perf_model import cost_device, estimate_module
    cost = estimate_module(result.plan, cost_device(None, result.plan.device))
    assert fusion_report_text(result.plan, cost) == text   # the stage prints the report with the cost model
