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
from hlo_compile.driver.pipeline import run_pipeline, summary
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


# ---- plan once per structure (codegen/analysis/plan_sharing.py) ------------------------------------------

def _layer(i: int) -> str:
    """One 'layer' of lone instructions (the fusion pass makes its fusions): a row softmax
    statistic (reduction with a side output), a transpose and an elementwise tail; every
    layer has the same structure and its own names."""
    return f"""
  %e{i} = f32[64,128] exponential(%h{i})
  %sum{i} = f32[64] reduce(%e{i}, %zero), dimensions={{1}}, to_apply=%add
  %b{i} = f32[64,128] broadcast(%sum{i}), dimensions={{0}}
  %d{i} = f32[64,128] divide(%e{i}, %b{i})
  %t{i} = f32[128,64] transpose(%d{i}), dimensions={{1,0}}
  %mu{i} = f32[128,64] multiply(%t{i}, %w)
  %r{i} = f32[64,128] transpose(%mu{i}), dimensions={{1,0}}
  %h{i + 1} = f32[64,128] tanh(%r{i})"""


def _layers(n: int) -> str:
    body = "".join(_layer(i) for i in range(n))
    return ("HloModule layers\n\n%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
            "  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n"
            "ENTRY %main (x: f32[64,128], w: f32[128,64]) -> f32[64,128] {\n"
            "  %h0 = f32[64,128] parameter(0)\n  %w = f32[128,64] parameter(1)\n  %zero = f32[] constant(0)"
            + body + f"\n  ROOT %out = f32[64,128] copy(%h{n})\n}}\n")


def _plans(text: str):
    from hlo_compile.codegen.compiler import plan_prepared_module, prepare_module
    options = CompileOptions()
    prepared = prepare_module(parse_module(text), options)
    return (plan_prepared_module(prepared, options),
            plan_prepared_module(prepared, options, share_plans=False))


def _instructions_in(value, seen=None):
    """Every HloInstruction reachable from a plan's spec (containers and dataclasses)."""
    import dataclasses as dc

    from hlo_compile.hlo import HloInstruction
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, (str, int, float, type(None))):
        return
    seen.add(id(value))
    if isinstance(value, HloInstruction):
        yield value
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _instructions_in(k, seen)
            yield from _instructions_in(v, seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _instructions_in(v, seen)
    elif dc.is_dataclass(value) and not isinstance(value, type):
        for f in dc.fields(value):
            yield from _instructions_in(getattr(value, f.name), seen)


def test_fusions_of_one_structure_are_planned_once_with_their_own_names():
    shared, alone = _plans(_layers(4))
    copies = [k for k in shared.kernels if k.planned_from is not None]
    # every fusion like an earlier one (here: the reduction and the transposes of layers 1..3) is a copy
    assert len(copies) >= 5
    assert {k.fusion.name for k in copies} == {k.fusion.name for k in shared.kernels if k.reuses}
    assert all(k.planned_from is None for k in alone.kernels)
    # the copies are what planning each on its own gives: the report (heroes, maps, launch), word for word
    assert fusion_report_text(shared) == fusion_report_text(alone)
    alone_spec = {k.fusion.name: k.spec for k in alone.kernels}
    for k in copies:  # the copy names its own fusion's instructions, never the first one's
        own = {id(i) for i in k.fusion.fused_computation.instructions} | {id(k.fusion)}
        found = list(_instructions_in(k.spec))
        assert found and all(id(i) in own for i in found), k.fusion.name
        assert k.spec.fusion is k.fusion and k.spec.name == alone_spec[k.fusion.name].name != k.planned_from
        assert k.spec.launch == alone_spec[k.fusion.name].launch


def test_shared_plans_emit_the_same_kernels_and_run():
    pytest.importorskip("llvmlite")
    from hlo_compile.codegen.target import Target  # noqa: F401  (the host target below)
    from hlo_compile.targets.nvptx import NvptxTarget
    shared, alone = _plans(_layers(3))
    assert [k.kernel_name for k in shared.unique_kernels] == [k.kernel_name for k in alone.unique_kernels]
    target = NvptxTarget("sm_80")
    for a, b in zip(shared.unique_kernels, alone.unique_kernels):
        assert a.planned_from is None  # an emitted kernel is planned on its own
        assert str(a.emit(target)) == str(b.emit(target))
    module = parse_module(_layers(3))
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((64, 128)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)]
    exe = compile_executable(module, "host", CompileOptions())
    got = literals.flatten(exe.run(args))[0]
    want = literals.flatten(evaluate_module(module, args))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_copied_plan_that_cannot_share_its_kernel_is_planned_afresh():
    from hlo_compile.codegen.compiler import _plan_afresh, share_identical_kernels
    shared, _ = _plans(_layers(2))
    copy = next(k for k in shared.kernels if k.planned_from is not None)
    copy.reuses, copy.kernel_name = None, copy.fusion.name.replace(".", "_") + "_own"
    _plan_afresh(copy, shared.device)
    assert copy.planned_from is None and copy.spec.name == copy.kernel_name
    share_identical_kernels(shared.kernels)  # the key is the plan's, whoever made it


def test_a_reused_kernels_cost_is_its_owners_under_its_own_names():
    from hlo_compile.codegen.model.perf_model import estimate_kernel, estimate_module
    shared, _ = _plans(_layers(3))
    cost = estimate_module(shared)
    assert len(cost.kernels) == len(shared.kernels)
    for k, est in zip(shared.kernels, cost.kernels):
        alone = estimate_kernel(k, shared.device)  # computed for this fusion, not copied
        assert est == alone and est.coalescing == alone.coalescing, k.fusion.name


def test_fusions_differing_in_metadata_share_a_plan():
    """Metadata does not count for reuse, so the shared plan is re-pointed across instructions
    with and without it (was KeyError 'metadata': two JAX corpus modules on host)."""
    with_meta = _fused("f0").replace("add(%m, %q)", 'add(%m, %q), metadata={op_name="jit(f)/add"}')
    text = _module([with_meta, _fused("f1"), _fused("f2")])   # the first (the plan's owner) has it
    plan = _plan(text)
    assert [k.reuses for k in plan.kernels] == [None, "v1", "v1"]
    module = parse_module(text)
    x, y = np.arange(128, dtype=np.float32).reshape(8, 16), np.ones((8, 16), np.float32)
    exe = compile_executable(module, "host", CompileOptions(fusion=False))
    got = literals.flatten(exe.run([x, y]))
    np.testing.assert_array_equal(got[0], evaluate_module(module, [x, y]))


def test_summary_names_each_fusions_own_operands():
    pytest.importorskip("llvmlite")
    from hlo_compile.driver.pipeline import run_pipeline as run
    result = run(parse_module(_layers(3)), CompileOptions(), emit="fusions")
    rows = [r for r in summary(result)["kernels"] if r["kernel"] is not None]
    reused = [r for r in rows if r["reuses"]]
    assert reused
    for r in reused:
        k = next(k for k in result.plan.kernels if k.fusion.name == r["fusion"])
        names = [o["name"] for o in r["operands"]]
        assert names == [o.name for o in k.fusion.operands], r["fusion"]


def test_a_copy_that_cannot_be_paired_is_planned_on_its_own(monkeypatch):
    from hlo_compile.codegen import compiler

    class Unpairable:
        def __init__(self, *args):
            raise KeyError("an attribute one side lacks")
    monkeypatch.setattr(compiler, "Correspondence", Unpairable)
    shared, alone = _plans(_layers(3))
    assert all(k.planned_from is None for k in shared.kernels)
    assert fusion_report_text(shared) == fusion_report_text(alone)
