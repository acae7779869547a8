"""The reduction emitter (row, multi-row, column, small-column):
XLA's emitter test files and hand-written reductions run on the host against the
interpreter, PTX FileCheck and ptxas, and the summary's emitter/variant."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.runtime import literals

from codegen_helpers import emit_stage, filecheck, load_fusion_test, run_on_host

TESTS = "xla/repo/xla/backends/gpu/codegen/emitters/tests"
DIRS = ("reduce_row", "reduce_column", "reduce_multirow", "reduce_column_small")

# XLA test files we do not run, each with the reason.
NOT_RUN = {
    "reduce_column/vectorize_x1_c64.hlo": "c64 has no code generation yet",
    "reduce_column/odd_sizes.hlo": "4.4M elements: too slow for the host coroutine simulation",
    "reduce_column_small/f32_32_v2.hlo": "23.6M elements: too slow on the host",
    "reduce_column_small/s8_f32_32_v4.hlo": "23.6M elements: too slow on the host",
}

# Files whose planned kernel is not the reduction emitter's own code (expected fallbacks).
EXPECTED_PATH = {"row": "row", "multi-row": "multi-row", "column": "column", "small-column": "small-column"}


def _identity_inits(module, args):
    """XLA applies the init value once per thread (it assumes an identity): scalar parameters
    (the inits of these tests) are set to 0."""
    return [np.zeros_like(a) if isinstance(a, np.ndarray) and a.ndim == 0 else a
            for a in args]


def _corpus_files(corpus):
    base = corpus / TESTS
    return sorted(p for d in DIRS for p in (base / d).glob("*.hlo"))


def test_xla_reduction_files_on_host(corpus):
    failures, ran = [], 0
    for path in _corpus_files(corpus):
        rel = f"{path.parent.name}/{path.name}"
        if rel in NOT_RUN:
            continue
        module = load_fusion_test(path)
        plan = plan_module(module, CompileOptions())
        kernel = plan.kernels[0]
        assert kernel.analysis.emitter == "reduction", (rel, kernel.analysis.reason)
        assert getattr(kernel.spec, "variant", None) == EXPECTED_PATH[kernel.analysis.variant], rel
        args = _identity_inits(module, literals.random_inputs(module, 0))
        ok, report = run_on_host(module, args=args)
        ran += 1
        if not ok:
            failures.append(f"{rel}: {report}")
    assert not failures, "\n".join(failures)
    assert ran >= 25


# ---- hand-written modules ------------------------------------------------------------------
def _reduce_module(et: str, acc: str, shape: list[int], dims: list[int], reducer: str = "add",
                   layout: str = "") -> str:
    out = [n for i, n in enumerate(shape) if i not in dims]
    s = ",".join(map(str, shape))
    o = ",".join(map(str, out))
    conv = f"  c = {acc}[{s}] convert(p)\n" if et != acc else ""
    src = "c" if et != acc else "p"
    return f"""HloModule m
red {{
  a = {acc}[] parameter(0)
  b = {acc}[] parameter(1)
  ROOT r = {acc}[] {reducer}(a, b)
}}
fused {{
  p = {et}[{s}]{layout} parameter(0)
{conv}  z = {acc}[] constant(0)
  r = {acc}[{o}] reduce({src}, z), dimensions={{{",".join(map(str, dims))}}}, to_apply=red
  ROOT o = {et}[{o}] convert(r)
}}
ENTRY e {{
  p = {et}[{s}]{layout} parameter(0)
  ROOT f = {et}[{o}] fusion(p), kind=kInput, calls=fused
}}
"""


def _check(text: str, emitter="reduction", variant=None, seed=0):
    module = parse_module(text)
    kernel = plan_module(module, CompileOptions()).kernels[0]
    assert kernel.analysis.emitter == emitter, kernel.analysis.reason
    if variant is not None:
        assert kernel.spec.variant == variant, kernel.spec.report_lines()
    ok, report = run_on_host(module, seed=seed)
    assert ok, report
    return kernel


@pytest.mark.parametrize("et,acc,shape,dims,variant", [
    ("f32", "f32", [16, 1000], [1], "row"),
    ("f32", "f32", [5, 33], [1], "row"),
    ("f32", "f32", [3, 4096], [1], "row"),          # 4 warps per row: shared memory + barrier
    ("f32", "f32", [12000], [0], "row"),            # reduce all, 32 warps (padded shmem row)
    ("f16", "f32", [8, 2048], [1], "row"),
    ("bf16", "f32", [8, 777], [1], "row"),
    ("f64", "f64", [6, 3000], [1], "row"),          # 64-bit shuffles as two halves
    ("s64", "s64", [4, 500], [1], "row"),
    ("f32", "f32", [96, 4], [1], "multi-row"),
    ("f32", "f32", [7, 3, 256], [0, 2], "row"),     # minor and major reduced dims
    ("f32", "f32", [300, 70], [0], "column"),
    ("f64", "f64", [129, 37], [0], "column"),
    ("f32", "f32", [5, 200, 7], [1], "column"),      # odd sizes, x = 7 kept-minor
    ("f16", "f32", [4, 64, 100], [1], "column"),
])
def test_hand_written_reductions(et, acc, shape, dims, variant):
    _check(_reduce_module(et, acc, shape, dims), variant=variant)


def test_x7_row_goes_to_loop_emitter_like_xla():
    # XLA: a row of 7 is faster elementally (x < 32 and 32 % x != 0)
    _check(_reduce_module("f32", "f32", [50, 7], [1]), emitter="loop")


def test_non_default_layout_row():
    _check(_reduce_module("f32", "f32", [40, 300], [0], layout="{0,1}"), variant="row")


def test_softmax_like_multi_output():
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
fused {
  p = f32[12,700] parameter(0)
  e = f32[12,700] exponential(p)
  z = f32[] constant(0)
  s = f32[12] reduce(e, z), dimensions={1}, to_apply=add
  l = f32[12] log(s)
  ROOT t = (f32[12], f32[12,700], f32[12]) tuple(s, e, l)
}
ENTRY e {
  p = f32[12,700] parameter(0)
  ROOT f = (f32[12], f32[12,700], f32[12]) fusion(p), kind=kInput, calls=fused
}
"""
    kernel = _check(text, variant="row")
    assert len(kernel.spec.side_roots) == 1


def test_argmax_variadic_reduce():
    text = """HloModule m
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
fused {
  p = f32[10,1500] parameter(0)
  io = s32[10,1500] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[10], s32[10]) reduce(p, io, ninf, zero), dimensions={1}, to_apply=argmax
}
ENTRY e {
  p = f32[10,1500] parameter(0)
  ROOT f = (f32[10], s32[10]) fusion(p), kind=kInput, calls=fused
}
"""
    _check(text, variant="row")


def test_not_race_free_root_is_split_by_the_tree_reduction_rewrite():
    """A not race-free reduce in a formed fusion is split into two reduction kernels
    (passes/tree_reduction_fusions.py); tests/passes/test_tree_reduction_in_fusion.py has the rest."""
    text = _reduce_module("f32", "f32", [2, 20000], [1])
    text = text.replace("  r = f32[2] reduce", "  ROOT r = f32[2] reduce").replace("  ROOT o = f32[2] convert(r)\n", "")
    kernels = plan_module(parse_module(text), CompileOptions()).kernels
    assert [k.analysis.emitter for k in kernels] == ["reduction", "reduction"]
    assert all("tree-reduction split" in k.analysis.reason for k in kernels)


def test_not_race_free_root_with_a_layout_the_rewrite_leaves_falls_back_to_loop():
    """The rewrite needs default layouts (as XLA's); otherwise the emitter declines, by name."""
    text = _reduce_module("f32", "f32", [2, 20000], [1], layout="{0,1}")
    text = text.replace("  r = f32[2] reduce", "  ROOT r = f32[2] reduce").replace("  ROOT o = f32[2] convert(r)\n", "")
    module = parse_module(text)
    kernel = plan_module(module, CompileOptions()).kernels[0]
    assert kernel.analysis.xla_emitter == "reduction" and kernel.analysis.emitter == "loop"
    assert "reduction emitter declined" in kernel.analysis.reason
    assert "declined" in kernel.spec.report_lines()[0]
    assert "race" in kernel.spec.summary_fields()["fallback"]
    ok, report = run_on_host(module)
    assert ok, report


# ---- PTX -----------------------------------------------------------------------------------
ROW = _reduce_module("f32", "f32", [64, 4096], [1])
ROW64 = _reduce_module("f64", "f64", [64, 4096], [1])
COLUMN = _reduce_module("f32", "f32", [512, 256], [0])


def test_row_ptx_shuffles_and_barrier(tmp_path):
    ptx = emit_stage(ROW, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK: .shared
CHECK-COUNT-5: shfl.sync.down.b32
CHECK: bar.sync 0
CHECK-COUNT-5: shfl.sync.down.b32
CHECK: ret;
""", tmp_path)


def test_f64_row_shuffles_two_halves(tmp_path):
    ptx = emit_stage(ROW64, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK-COUNT-10: shfl.sync.down.b32
CHECK: bar.sync 0
""", tmp_path)


def test_column_ptx(tmp_path):
    ptx = emit_stage(COLUMN, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: bar.sync 0
CHECK-COUNT-5: shfl.sync.down.b32
""", tmp_path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("text", [ROW, ROW64, COLUMN], ids=["row", "row_f64", "column"])
def test_ptxas_accepts(text, arch):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    run_ptxas(emit_stage(text, "ptx", arch=arch), arch)


# ---- summary -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,variant", [
    (ROW, "row"), (COLUMN, "column"), (_reduce_module("f32", "f32", [256, 8], [1]), "multi-row"),
    (_reduce_module("f32", "f32", [64, 128, 4], [1]), "small-column")])
def test_summary_json(tmp_path, text, variant):
    run_pipeline(parse_module(text), CompileOptions(), dump_to=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    k = summary["kernels"][0]
    assert k["emitter"] == "reduction" and k["variant"] == variant, k
