"""Kernel reuse (XLA's KernelReuseCache): fusions with the same fused computation (opcodes,
shapes and layouts, attributes, constants), the same emitter, launch and aliasing launch one
kernel, emitted once; a difference in a constant, a layout or an attribute keeps them apart."""
from __future__ import annotations

import re

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.codegen.report import fusion_report_text
from hlo_compile.hlo.fingerprint import computation_fingerprint
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.pipeline import run_pipeline, summary
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable


def _fused(name: str, const: str = "2", layout: str = "{1,0}", op: str = "multiply") -> str:
    return (f"%{name} (p: f32[8,16], q: f32[8,16]) -> f32[8,16] {{\n"
            f"  %p = f32[8,16]{layout} parameter(0)\n  %q = f32[8,16]{layout} parameter(1)\n"
            f"  %c = f32[] constant({const})\n  %b = f32[8,16]{layout} broadcast(%c), dimensions={{}}\n"
            f"  %m = f32[8,16]{layout} {op}(%p, %b)\n  ROOT %r = f32[8,16]{layout} add(%m, %q)\n}}\n")


def _module(fused: list[str], layout: str = "{1,0}") -> str:
    """ENTRY chains one fusion per computation of ``fused`` (each named ``f<i>``)."""
    body = [f"  %v0 = f32[8,16]{layout} parameter(0)", f"  %y = f32[8,16]{layout} parameter(1)"]
    for i in range(len(fused)):
        root = "ROOT " if i == len(fused) - 1 else ""
        body.append(f"  {root}%v{i + 1} = f32[8,16]{layout} fusion(%v{i}, %y), kind=kLoop, calls=%f{i}")
    return ("HloModule reuse\n\n" + "\n".join(fused) + "\n"
            "ENTRY %main (x: f32[8,16], y: f32[8,16]) -> f32[8,16] {\n" + "\n".join(body) + "\n}\n")


SAME = _module([_fused(f"f{i}") for i in range(4)])


def _plan(text: str):
    return plan_module(parse_module(text), CompileOptions(fusion=False))


def test_identical_fusions_share_one_kernel():
    plan = _plan(SAME)
    assert len(plan.kernels) == 4
    assert [k.reuses for k in plan.kernels] == [None, "v1", "v1", "v1"]
    assert {k.kernel_name for k in plan.kernels} == {"v1"}
    assert [k.fusion.name for k in plan.unique_kernels] == ["v1"]


@pytest.mark.parametrize("second", [
    _fused("f1", const="3"),                   # a constant
    _fused("f1", layout="{0,1}"),              # a layout
    _fused("f1", op="subtract"),               # an opcode
])
def test_fusions_that_differ_do_not_share(second):
    plan = _plan(_module([_fused("f0"), second]))
    by_fusion = {k.fusion.name: k for k in plan.kernels}  # (a layout adds relayout kernels)
    assert by_fusion["v1"].reuses is None and by_fusion["v2"].reuses is None
    assert by_fusion["v1"].kernel_name != by_fusion["v2"].kernel_name


def test_fingerprint_ignores_names_and_metadata_but_not_called_computations():
    a = parse_module(_module([_fused("f0")]))
    renamed = _fused("f0").replace("%m", "%mm").replace("%r =", "%rr =").replace("%r\n", "%rr\n")
    b = parse_module(_module([renamed.replace("add(%mm, %q)", "add(%mm, %q), metadata={op_name=\"x\"}")]))
    fa, fb = (m.computation("f0") for m in (a, b))
    assert computation_fingerprint(fa) == computation_fingerprint(fb)
    red = """HloModule r
%{n} (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] {op}(%a, %b)
}}
%f (p: f32[8]) -> f32[] {{
  %p = f32[8] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%p, %z), dimensions={{0}}, to_apply=%{n}
}}
ENTRY %e (x: f32[8]) -> f32[] {{
  %x = f32[8] parameter(0)
  ROOT %y = f32[] fusion(%x), kind=kInput, calls=%f
}}
"""
    prints = {(n, op): computation_fingerprint(parse_module(red.format(n=n, op=op)).computation("f"))
              for n, op in [("add", "add"), ("sum", "add"), ("add", "maximum")]}
    assert prints["add", "add"] == prints["sum", "add"]       # the reducer's name does not count
    assert prints["add", "add"] != prints["add", "maximum"]   # what it computes does


def test_llvm_and_ptx_hold_each_kernel_once_and_report_says_so():
    pytest.importorskip("llvmlite")
    result = run_pipeline(parse_module(SAME), CompileOptions(fusion=False), emit="llvm")
    ir = result.artifacts["llvm"]
    assert len(re.findall(r"define\b[^\n]*@\"?v1\"?\(", ir)) == 1
    assert not re.search(r"@\"?v[234]\"?\(", ir)
    text = fusion_report_text(result.plan)
    assert text.count("-> kernel v1") == 4 and text.count("(reuses the kernel of %v1)") == 3
    rows = summary(result)["kernels"]
    assert [r["reuses"] for r in rows] == [None, "v1", "v1", "v1"]


def test_reused_kernels_run_on_host_and_match_the_interpreter():
    module = parse_module(SAME)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2)]
    exe = compile_executable(module, "host", CompileOptions(fusion=False))
    assert len(exe.plan.unique_kernels) == 1
    got = literals.flatten(exe.run(args))
    want = literals.flatten(evaluate_module(module, args))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    # and the chain really ran four times: ((x*2+y)*2+y)... differs from one application
    once = args[0] * 2 + args[1]
    assert not np.allclose(got[0], once)
