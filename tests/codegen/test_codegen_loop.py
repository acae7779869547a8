"""The loop emitter end to end: LLVM IR golden checks (FileCheck), PTX through ptxas, and
every module run on the host target against the numpy interpreter."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import emit_stage, filecheck, load_fusion_test, run_on_host

ROOT = Path(__file__).resolve().parents[2]
GELU = (ROOT / "examples" / "gelu.hlo").read_text()
LOOP_TESTS = "xla/repo/xla/codegen/emitters/tests/loop"

# XLA's loop-emitter test files we do not run, each with the reason.
NOT_RUN = {
    "broadcast_constant_block_dim_limit.hlo": "1.2e12 outputs: compiled (test_i64_index_type), never run",
    "large_loop_slow_compile_time.hlo": "16k-instruction fusion: LLVM O3 on the host takes > 10 min",
}


# ---- golden IR ------------------------------------------------------------------------------
def test_gelu_llvm_ir(tmp_path):
    ir = emit_stage(GELU, "llvm")
    filecheck(ir, """
CHECK: define ptx_kernel void @fusion(ptr noalias readonly align 16 {{.*}}%in0.param_0, ptr noalias align 16 {{.*}}%out0.gelu)
CHECK-DAG: call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
CHECK-DAG: call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
CHECK: udiv i32 %ctaid.x, 2
CHECK: mul nuw nsw i32 %tid.x, 4
CHECK: load float, ptr {{.*}} !invariant.load
CHECK: call float @fusion_gelu(
CHECK: store float
CHECK: ret void
CHECK: define internal float @fusion_gelu(ptr {{.*}}, i32 {{.*}}, i32 {{.*}}, float {{.*}})
CHECK: call float @__nv_tanhf(float
CHECK-NOT: @llvm.tanh
CHECK-NOT: @llvm.exp
""", tmp_path)


def test_gelu_ptx_vector_loads_and_no_llvm_math(tmp_path):
    ptx = emit_stage(GELU, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .target sm_90
CHECK: .visible .entry fusion(
CHECK: mov.u32 {{%r[0-9]+}}, %tid.x;
CHECK: ld.global.nc.v4.b32
CHECK: st.global.v4.b32
CHECK: ret;
CHECK-NOT: .func
""", tmp_path)
    llvm_opt = emit_stage(GELU, "llvm-opt")
    for bad in ("llvm.tanh", "llvm.exp.", "llvm.log.", "llvm.sin.", "llvm.cos.", "llvm.pow."):
        assert bad not in llvm_opt


def test_thread_to_element_arithmetic(tmp_path):
    # 128 threads x unroll 4: a block covers 512 elements; the map delinearizes in the
    # layout's order ({0,1}: dim 0 is minor, so the thread walks dim 0)
    text = """HloModule m
ENTRY e {
  p = f32[1024,512]{0,1} parameter(0)
  ROOT n = f32[1024,512]{0,1} negate(p)
}"""
    report = emit_stage(text, "fusions", arch="sm_90")
    assert "grid [1024, 1, 1] block [128, 1, 1]" in report and "unroll 4" in report
    assert "(th_x, th_y, th_z, bl_x, bl_y, bl_z)[s0] -> (th_x * 4 + s0 + (bl_x mod 2) * 512, bl_x floordiv 2)" \
        in report
    filecheck(emit_stage(text, "ptx", arch="sm_90"), """
CHECK: ld.global.nc.v4.b32
CHECK: neg.f32
CHECK: st.global.v4.b32
""", tmp_path)


def test_partition_log_transpose_add_is_three_functions(tmp_path):
    text = """HloModule m
fused {
  p0 = f32[10,10] parameter(0)
  log = f32[10,10] log(p0)
  transpose = f32[10,10] transpose(log), dimensions={1,0}
  ROOT add = f32[10,10] add(log, transpose)
}
ENTRY e {
  p = f32[10,10] parameter(0)
  ROOT f = f32[10,10] fusion(p), kind=kLoop, calls=fused
}"""
    ir = emit_stage(text, "llvm")
    assert ir.count("define ") == 3
    filecheck(ir, """
CHECK: define ptx_kernel void @f(
CHECK: call float @f_add(
CHECK: define internal float @f_add(
CHECK: call float @f_log(ptr {{.*}}, i32 [[I:%[^ ,]+]], i32 [[J:%[^ ,]+]], float
CHECK: call float @f_log(ptr {{.*}}, i32 [[J]], i32 [[I]], float
CHECK: define internal float @f_log(
CHECK: call float @__nv_logf(
""", tmp_path)
    module = parse_module(text)
    ok, report = run_on_host(module)
    assert ok, report


def test_same_index_users_share_a_function(corpus):
    path = corpus / LOOP_TESTS / "two_users.hlo"
    module = load_fusion_test(path)
    plan = plan_module(module, CompileOptions())
    subgraphs = plan.kernels[0].spec.partitioned.subgraphs
    assert [sg.name for sg in subgraphs] == ["atan2"]


def test_i64_index_type_when_indices_exceed_int32(corpus):
    module = load_fusion_test(corpus / LOOP_TESTS / "broadcast_constant_block_dim_limit.hlo")
    plan = plan_module(module, CompileOptions(arch="sm_90"))
    k = plan.kernels[0]
    assert str(k.spec.index_type) == "i64"
    assert k.launch.num_blocks * k.launch.num_threads * k.spec.unroll >= 2**31
    ptx = run_pipeline(module, CompileOptions(arch="sm_90"), emit="ptx").artifacts["ptx"]
    assert "mul.wide" in ptx or "mad.lo.s64" in ptx or ".u64" in ptx


# ---- the host target against the interpreter ----------------------------------------------
def test_gelu_on_host():
    ok, report = run_on_host(parse_module(GELU))
    assert ok, report


def test_tiled_layout_example_on_host():
    ok, report = run_on_host(parse_module((ROOT / "examples" / "tiled_layout.hlo").read_text()))
    assert ok, report


@pytest.mark.parametrize("text", [
    # pad with interior padding, reverse, slice with stride, iota, concatenate
    """HloModule m
ENTRY e {
  p = f32[5,7] parameter(0)
  z = f32[] constant(-1)
  pad = f32[14,9] pad(p, z), padding=2_3_1x1_1
  r = f32[14,9] reverse(pad), dimensions={0}
  ROOT s = f32[7,4] slice(r), slice={[1:14:2], [0:8:2]}
}""",
    """HloModule m
ENTRY e {
  a = s32[3,4] parameter(0)
  i = s32[2,4] iota(), iota_dimension=1
  ROOT c = s32[5,4] concatenate(a, i), dimensions={0}
}""",
    # dynamic-slice and dynamic-update-slice with out-of-range starts (clamped)
    """HloModule m
ENTRY e {
  p = f32[8,6] parameter(0)
  u = f32[3,2] parameter(1)
  i = s32[] constant(7)
  j = s32[] constant(-2)
  ds = f32[3,2] dynamic-slice(p, i, j), dynamic_slice_sizes={3,2}
  ROOT dus = f32[8,6] dynamic-update-slice(p, u, j, i)
}""",
    # a reduce inside a loop fusion (one thread per output element), variadic argmax
    """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[16,33] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[33] reduce(p, z), dimensions={0}, to_apply=add
}""",
    # gather (XLA's simple form), broadcast, bf16 arithmetic, compare/select, layouts
    """HloModule m
ENTRY e {
  op = bf16[10,6]{0,1} parameter(0)
  idx = s32[4,1] parameter(1)
  g = bf16[4,6] gather(op, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}
  two = bf16[] constant(2)
  b = bf16[4,6] broadcast(two), dimensions={}
  m = bf16[4,6] multiply(g, b)
  c = pred[4,6] compare(m, g), direction=GT
  ROOT s = bf16[4,6]{0,1} select(c, m, g)
}""",
    # a multi-output fusion whose outputs differ in shape (one is a bitcast)
    """HloModule m
fused {
  p0 = f64[8] parameter(0)
  p1 = f64[8] parameter(1)
  mn = f64[8] minimum(p0, p1)
  mx = f64[8] maximum(p0, p1)
  bc = f64[2,4] bitcast(mx)
  ROOT t = (f64[8], f64[2,4]) tuple(mn, bc)
}
ENTRY e {
  a = f64[8] parameter(0)
  b = f64[8] parameter(1)
  ROOT f = (f64[8], f64[2,4]) fusion(a, b), kind=kLoop, calls=fused
}""",
], ids=["pad-reverse-slice", "concat-iota", "dynamic-slices", "elemental-reduce", "gather-bf16", "multi-output"])
def test_index_ops_on_host(text):
    ok, report = run_on_host(parse_module(text))
    assert ok, report


def _loop_test_files(corpus):
    return sorted((corpus / LOOP_TESTS).glob("*.hlo"))


def test_xla_loop_emitter_tests_on_host(corpus):
    files = _loop_test_files(corpus)
    assert len(files) >= 30
    ran = 0
    for path in files:
        if path.name in NOT_RUN:
            continue
        ok, report = run_on_host(load_fusion_test(path))
        assert ok, f"{path.name}: {report}"
        ran += 1
    assert ran == len(files) - len(NOT_RUN)


def test_complex_loop_fusion_runs(corpus):
    """XLA's complex loop test (complex(), add, multiply by a c64 constant) on host = interpreter."""
    ok, report = run_on_host(load_fusion_test(corpus / LOOP_TESTS / "complex.hlo"))
    assert ok, report


# ---- PTX accepted by ptxas -------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_every_loop_kernel(corpus, arch):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    texts = [("gelu", parse_module(GELU))]
    texts += [(p.name, load_fusion_test(p)) for p in _loop_test_files(corpus)
              if p.name not in NOT_RUN or p.name == "broadcast_constant_block_dim_limit.hlo"]
    for name, module in texts:
        result = run_pipeline(module, CompileOptions(arch=arch), emit="ptx")
        out = run_ptxas(result.artifacts["ptx"], arch)
        assert out.cubin and out.kernels, name
        for res in out.kernels.values():
            assert res.spill_stores_bytes == 0, name


# ---- dump directory ----------------------------------------------------------------------------
def test_dump_directory(tmp_path):
    module = parse_module(GELU)
    out = tmp_path / "dump"
    run_pipeline(module, CompileOptions(), dump_to=out)
    names = sorted(p.name for p in out.iterdir())
    for suffix in ("before_optimizations.txt", "sm_8.0_gpu_after_optimizations.txt", "fusions.txt",
                   "ir-no-opt.ll", "ir-with-opt.ll", "ptx"):  # XLA's dump names
        assert f"module_0000.gelu.{suffix}" in names
    assert not any("indexing" in n for n in names)  # the maps only on request (dump_indexing)
    summary = json.loads((out / "summary.json").read_text())
    k = summary["kernels"][0]
    assert k["emitter"] == "loop" and k["block"] == [128, 1, 1] and k["grid"] == [2048, 1, 1]
    assert k["hero"] == "gelu" and k["reason"]
    assert "llvm" in k["stage_seconds"]


def test_dump_names_never_leave_the_directory(tmp_path):
    # names made of dots and dashes are valid HLO; none may become a path outside DIR
    text = """HloModule m...
fused.. {
  p = f32[4] parameter(0)
  ROOT x..-y = f32[4] negate(p)
}
ENTRY e {
  p = f32[4] parameter(0)
  ROOT f-.. = f32[4] fusion(p), kind=kLoop, calls=fused..
}"""
    module = parse_module(text)
    out = tmp_path / "dump"
    run_pipeline(module, CompileOptions(), dump_to=out)
    files = list(out.rglob("*"))
    assert files and all(p.parent == out and not p.name.startswith("..") for p in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump"]


def test_bf16_conversion_keeps_subnormals_on_host():
    import ml_dtypes
    from hlo_compile.runtime.executable import compile_executable
    module = parse_module("""HloModule m
ENTRY e {
  p = f32[8] parameter(0)
  ROOT c = bf16[8] convert(p)
}""")
    x = np.array([1e-39, -3e-40, 9.2e-41, 1.0, 3.0e38, 5e-39, 1.17e-38, 1.18e-38], np.float32)
    got = compile_executable(module, "host").run([x])
    assert np.array_equal(got.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))


@pytest.mark.parametrize("text", [
    "HloModule m\nENTRY e {\n  p = f32[0,4] parameter(0)\n  ROOT n = f32[0,4] negate(p)\n}\n",
    "HloModule m\nENTRY e {\n  c = f32[] constant(1)\n  ROOT b = f32[0,3] broadcast(c), dimensions={}\n}\n",
    """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[0,40] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[0] reduce(p, z), dimensions={1}, to_apply=add
}""",
    # an empty output next to a real one in one fusion
    """HloModule m
fused {
  p = f32[4,4] parameter(0)
  n = f32[4,4] negate(p)
  s = f32[0,4] slice(p), slice={[2:2], [0:4]}
  ROOT t = (f32[4,4], f32[0,4]) tuple(n, s)
}
ENTRY e {
  p = f32[4,4] parameter(0)
  ROOT f = (f32[4,4], f32[0,4]) fusion(p), kind=kLoop, calls=fused
}""",
    # sort along an empty dimension (the interpreter used to refuse it)
    """HloModule m
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
ENTRY e {
  p = f32[3,0] parameter(0)
  ROOT s = f32[3,0] sort(p), dimensions={1}, to_apply=lt
}""",
], ids=["negate", "broadcast", "reduce-to-empty", "empty-beside-real", "sort-empty-dim"])
def test_zero_element_outputs(text):
    ok, report = run_on_host(parse_module(text))
    assert ok, report
