"""The bitonic sort in shared memory (``codegen/emitters/sort/bitonic.py``): hand-written sorts
on the host against the interpreter (bit for bit: a sort is a permutation), the choice between
it and the rank sort, the report and summary, and the IR/PTX (shared arrays, barriers, ptxas).

Rows stay at most a few thousand elements and few: the host runs every GPU thread of a block
as a coroutine, one barrier per network step."""
from __future__ import annotations

import dataclasses
import json

import ml_dtypes
import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable

from codegen_helpers import emit_stage, filecheck, run_on_host
from test_sort_emitter import (JAX_NAN_AWARE_LT, KEY_LT_S32, LT_F32_TOTAL, _floats_with_specials, _sort_module,
                               assert_host_matches_interpreter)


def _spec(text: str):
    (kernel,) = plan_module(parse_module(text), CompileOptions()).kernels
    return kernel.spec


def _algorithm(text: str) -> str:
    return _spec(text).summary_fields()["algorithm"]


def _check(text: str, args: list, algorithm: str = "bitonic") -> None:
    assert _algorithm(text) == algorithm
    assert_host_matches_interpreter(text, args)


def _lt(t: str, name: str = "lt", direction: str = "LT", operands: int = 1, key: int = 0,
        total: bool = False, types: list[str] | None = None) -> str:
    """A comparator over ``operands`` operands comparing operand ``key``."""
    types = types or [t] * operands
    params = "\n".join(f"  a{i} = {ty}[] parameter({2 * i})\n  b{i} = {ty}[] parameter({2 * i + 1})"
                       for i, ty in enumerate(types))
    kind = ", type=TOTALORDER" if total else ""
    return f"{name} {{\n{params}\n  ROOT r = pred[] compare(a{key}, b{key}), direction={direction}{kind}\n}}\n"


# ---- lengths, dims, layouts ----------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 37, 64, 100, 1000])
def test_row_lengths_f32_total_order(n):
    x = _floats_with_specials(np.random.default_rng(n), (3, n))
    _check(_sort_module(f"3,{n}", 1, LT_F32_TOTAL, ["f32"]), [x])


def test_row_of_one_is_the_rank_kernels_copy():
    x = np.random.default_rng(1).normal(size=(5, 1)).astype(np.float32)
    text = _sort_module("5,1", 1, LT_F32_TOTAL, ["f32"])
    _check(text, [x], algorithm="rank")
    assert "nothing to sort" in "\n".join(_spec(text).report_lines())


def test_more_than_one_pair_per_thread():
    # P = 4096: 1024 threads, 2 pairs and 4 slots each per step
    x = _floats_with_specials(np.random.default_rng(2), (1, 3000))
    text = _sort_module("1,3000", 1, LT_F32_TOTAL, ["f32"])
    spec = _spec(text)
    assert (spec.padded, spec.threads, spec.pairs_per_thread, spec.slots_per_thread) == (4096, 1024, 2, 4)
    _check(text, [x])


@pytest.mark.parametrize("dim", [0, 1])
def test_sort_dim_minor_and_major(dim):
    x = np.round(np.random.default_rng(3).normal(size=(8, 100)), 1).astype(np.float32)
    _check(_sort_module("8,100", dim, LT_F32_TOTAL, ["f32"]), [x])


def test_middle_dim_non_default_layout():
    text = f"""
HloModule m
{LT_F32_TOTAL}
ENTRY e {{
  p = f32[3,17,4]{{0,2,1}} parameter(0)
  ROOT s = f32[3,17,4]{{0,2,1}} sort(p), dimensions={{1}}, is_stable=true, to_apply=lt
}}
"""
    x = np.random.default_rng(4).normal(size=(3, 17, 4)).astype(np.float32)
    _check(text, [x])


def test_rows_split_over_grid_x_and_y(monkeypatch):
    """A grid x limit of 5 splits 13 rows over 5 x 3 blocks; the last 2 blocks do nothing."""
    from hlo_compile.codegen import compiler
    real = compiler.device_for_arch
    monkeypatch.setattr(compiler, "device_for_arch",
                        lambda arch: dataclasses.replace(real(arch), block_dim_limit=(5, 65535, 65535)))
    text = _sort_module("13,20", 1, LT_F32_TOTAL, ["f32"])
    assert _spec(text).launch.grid == (5, 3, 1)
    _check(text, [np.random.default_rng(5).normal(size=(13, 20)).astype(np.float32)])


# ---- operands, comparators, stability -------------------------------------------------------------

@pytest.mark.parametrize("stable", [True, False])
def test_ties_keep_their_order(stable):
    rng = np.random.default_rng(6)
    keys = rng.integers(0, 3, size=(2, 300)).astype(np.int32)
    values = rng.normal(size=(2, 300)).astype(np.float32)
    text = _sort_module("2,300", 1, KEY_LT_S32, ["s32", "f32"], stable=stable)
    _check(text, [keys, values])
    got = literals.flatten(compile_executable(parse_module(text), "host").run([keys, values]))
    order = np.argsort(keys, axis=1, kind="stable")
    assert np.array_equal(got[0], np.take_along_axis(keys, order, axis=1))
    assert np.array_equal(got[1], np.take_along_axis(values, order, axis=1))


def test_keys_with_s32_values():
    rng = np.random.default_rng(7)
    keys = rng.normal(size=(4, 77)).astype(np.float32)
    values = np.arange(4 * 77, dtype=np.int32).reshape(4, 77)
    _check(_sort_module("4,77", 1, _lt("f32", operands=2, types=["f32", "s32"], total=True), ["f32", "s32"]),
           [keys, values])


def test_plain_lt_keeps_signed_zeros_in_order():
    # LT without TOTALORDER: -0 == +0, a tie that the position breaks (no NaNs: with them plain
    # LT is no strict weak order and the answer depends on the algorithm)
    x = np.round(np.random.default_rng(15).normal(size=(4, 40)), 1).astype(np.float32)
    x[:, ::5] = 0.0
    x[:, 1::7] = -0.0
    _check(_sort_module("4,40", 1, _lt("f32"), ["f32"]), [x])


def test_descending_gt():
    x = _floats_with_specials(np.random.default_rng(8), (4, 45))
    _check(_sort_module("4,45", 1, _lt("f32", name="gt", direction="GT", total=True), ["f32"], name="gt"), [x])


def test_comparator_on_the_second_operand():
    rng = np.random.default_rng(9)
    first = np.arange(3 * 50, dtype=np.int32).reshape(3, 50)
    second = rng.integers(-4, 4, size=(3, 50)).astype(np.float32)   # ties: stable by position
    comparator = _lt("f32", operands=2, key=1, types=["s32", "f32"])
    _check(_sort_module("3,50", 1, comparator, ["s32", "f32"]), [first, second])


def test_three_operands_lexicographic_with_narrow_types():
    comparator = """
lex {
  a0 = s8[] parameter(0)
  b0 = s8[] parameter(1)
  a1 = pred[] parameter(2)
  b1 = pred[] parameter(3)
  a2 = f16[] parameter(4)
  b2 = f16[] parameter(5)
  lt0 = pred[] compare(a0, b0), direction=LT
  eq0 = pred[] compare(a0, b0), direction=EQ
  lt1 = pred[] compare(a1, b1), direction=LT
  both = pred[] and(eq0, lt1)
  ROOT r = pred[] or(lt0, both)
}
"""
    rng = np.random.default_rng(10)
    k0 = rng.integers(-3, 3, size=(2, 90)).astype(np.int8)
    k1 = rng.integers(0, 2, size=(2, 90)).astype(bool)
    v = rng.normal(size=(2, 90)).astype(np.float16)
    text = _sort_module("2,90", 1, comparator, ["s8", "pred", "f16"], name="lex")
    assert _spec(text).static_shared_bytes == 128 + 128 + 256 + 512   # P = 128: s8, pred, f16, i32
    _check(text, [k0, k1, v])


def test_s8_keys_full_range():
    x = np.random.default_rng(11).integers(-128, 128, size=(5, 200)).astype(np.int8)
    _check(_sort_module("5,200", 1, _lt("s8"), ["s8"]), [x])


def test_bf16_keys_with_values_along_dim_0():
    rng = np.random.default_rng(12)
    keys = _floats_with_specials(rng, (70, 3), ml_dtypes.bfloat16)
    values = np.arange(210, dtype=np.int32).reshape(70, 3)
    comparator = _lt("bf16", operands=2, types=["bf16", "s32"], total=True)
    _check(_sort_module("70,3", 0, comparator, ["bf16", "s32"]), [keys, values])


def test_jax_nan_aware_comparator():
    text = f"""
HloModule m
{JAX_NAN_AWARE_LT}ENTRY e {{
  p = f32[5,70] parameter(0)
  ROOT s = f32[5,70] sort(p), dimensions={{1}}, is_stable=true, to_apply=region
}}
"""
    _check(text, [_floats_with_specials(np.random.default_rng(13), (5, 70))])


# ---- fusions -------------------------------------------------------------------------------------

PROLOGUE = """
HloModule m
lt2 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
fused {
  p0 = f32[4,30] parameter(0)
  p1 = s32[30] parameter(1)
  n = f32[4,30] negate(p0)
  b = s32[4,30] broadcast(p1), dimensions={1}
  ROOT s = (f32[4,30], s32[4,30]) sort(n, b), dimensions={1}, is_stable=true, to_apply=lt2
}
ENTRY e {
  x = f32[4,30] parameter(0)
  i = s32[30] parameter(1)
  ROOT f = (f32[4,30], s32[4,30]) fusion(x, i), kind=kLoop, calls=fused
}
"""


def test_fused_prologue_is_recomputed():
    (kernel,) = plan_module(parse_module(PROLOGUE), CompileOptions()).kernels
    assert kernel.analysis.emitter == "sort"
    rng = np.random.default_rng(14)
    x = np.round(rng.normal(size=(4, 30)), 1).astype(np.float32)   # ties: the broadcast values keep order
    _check(PROLOGUE, [x, np.arange(30, dtype=np.int32)])


def test_tuple_of_get_tuple_elements_root_plans_and_emits():
    """The planner also takes a root that picks the sort's outputs in another order (the
    fusion analysis sends such roots to the loop emitter today, so no end-to-end run)."""
    import llvmlite.binding as llvm
    from hlo_compile.gpu.archs import device_for_arch
    from hlo_compile.codegen.emitters.sort import emit_sort_kernel, plan_sort_kernel
    from hlo_compile.targets.nvptx import NvptxTarget
    text = PROLOGUE.replace(
        "  ROOT s = (f32[4,30], s32[4,30]) sort(n, b), dimensions={1}, is_stable=true, to_apply=lt2\n",
        "  s = (f32[4,30], s32[4,30]) sort(n, b), dimensions={1}, is_stable=true, to_apply=lt2\n"
        "  g1 = s32[4,30] get-tuple-element(s), index=1\n"
        "  g0 = f32[4,30] get-tuple-element(s), index=0\n"
        "  ROOT t = (s32[4,30], f32[4,30]) tuple(g1, g0)\n").replace(
        "ROOT f = (f32[4,30], s32[4,30]) fusion", "ROOT f = (s32[4,30], f32[4,30]) fusion")
    fusion = next(i for i in parse_module(text).entry.instructions if i.opcode == "fusion")
    spec = plan_sort_kernel(fusion, None, device_for_arch("sm_80"), "reordered")
    assert spec.summary_fields()["algorithm"] == "bitonic" and spec.leaf_outputs == (1, 0)
    llvm.parse_assembly(str(emit_sort_kernel(NvptxTarget("sm_80"), spec))).verify()


def test_random_inputs_helper():
    ok, report = run_on_host(parse_module(_sort_module("6,64", 1, KEY_LT_S32, ["s32", "f32"])))
    assert ok, report


# ---- the choice ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,types,algorithm", [
    ("2,4096", ["f32"], "bitonic"),          # 4096 x (4 + 4) B = 32 KiB
    ("2,4097", ["f32"], "rank"),             # padded to 8192: 64 KiB
    ("4096", ["s32", "f32"], "bitonic"),     # 4096 x 12 B = 48 KiB exactly
    ("4096", ["s32", "f32", "f32"], "rank"),
    ("3000", ["f64"], "bitonic"),            # padded to 4096: 4096 x (8 + 4) B = 48 KiB
    ("2048", ["f32", "s32", "f32", "s32"], "bitonic"),   # 2048 x 20 B = 40 KiB
])
def test_choice_by_shared_memory(shape, types, algorithm):
    comparator = _lt(types[0], operands=len(types), types=types)
    spec = _spec(_sort_module(shape, len(shape.split(",")) - 1, comparator, types))
    assert spec.summary_fields()["algorithm"] == algorithm
    if algorithm == "rank":
        assert "shared memory" in spec.not_bitonic and "not the bitonic sort" in "\n".join(spec.report_lines())
    else:
        assert spec.static_shared_bytes <= 48 * 1024


def test_topk_keeps_the_rank_kernel():
    from hlo_compile.gpu.archs import device_for_arch
    from hlo_compile.codegen.emitters.sort import SortKernelSpec, plan_sort_kernel
    from hlo_compile.passes import run_passes
    text = """
HloModule topk
ENTRY e {
  x = f32[4,8] parameter(0)
  ROOT topk = (f32[4,2], s32[4,2]) topk(x), k=2, largest=true
}
"""
    module = run_passes(parse_module(text))
    fusion = next(i for i in module.entry.instructions if i.opcode == "fusion")
    spec = plan_sort_kernel(fusion, None, device_for_arch("sm_80"), "k")
    assert isinstance(spec, SortKernelSpec) and spec.summary_fields()["algorithm"] == "rank"


# ---- report, summary, IR and PTX -----------------------------------------------------------------

KV_TEXT = _sort_module("3,1000", 1, KEY_LT_S32, ["s32", "f32"])


def test_report_and_summary(tmp_path):
    spec = _spec(KV_TEXT)
    lines = "\n".join(spec.report_lines())
    assert "bitonic sort in shared memory" in lines and "tile 1024" in lines and "256 threads" in lines   # XLA: tile / 4
    assert "55 step(s), 56 barriers" in lines and "12288 B static" in lines
    run_pipeline(parse_module(KV_TEXT), CompileOptions(), dump_to=tmp_path)
    (k,) = json.loads((tmp_path / "summary.json").read_text())["kernels"]
    assert k["emitter"] == "sort" and k["algorithm"] == "bitonic"
    assert k["grid"] == [3, 1, 1] and k["block"] == [256, 1, 1] and k["shared_bytes"] == 0
    assert (k["tile"], k["steps"], k["barriers"], k["static_shared_bytes"]) == (1024, 55, 56, 12288)
    assert k["comparisons_per_thread"] == 2 * 55 * 2   # two pairs per thread and step


def test_llvm_ir_shared_arrays_and_barriers(tmp_path):
    filecheck(emit_stage(KV_TEXT, "llvm"), """
CHECK-DAG: @sort_operand0 = internal addrspace(3) global [1024 x i32] undef, align 16
CHECK-DAG: @sort_operand1 = internal addrspace(3) global [1024 x float] undef, align 16
CHECK-DAG: @sort_position = internal addrspace(3) global [1024 x i32] undef, align 16
CHECK: define {{.*}}ptx_kernel
CHECK: call void @llvm.nvvm.barrier
CHECK: stage.head:
CHECK: step.head:
CHECK: call void @llvm.nvvm.barrier
CHECK: store
""", tmp_path)


BF16_PRED_TEXT = _sort_module("4,33", 0, _lt("bf16", operands=2, types=["bf16", "pred"], total=True),
                              ["bf16", "pred"])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("text", [KV_TEXT, BF16_PRED_TEXT, PROLOGUE], ids=["key-value", "bf16-pred-dim0", "prologue"])
def test_ptx_and_ptxas(text, arch, tmp_path):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    ptx = emit_stage(text, "ptx", arch=arch)
    if text is KV_TEXT:
        filecheck(ptx, """
CHECK: .visible .entry
CHECK-DAG: .shared .align 16 .b8 sort_operand0[4096];
CHECK-DAG: .shared .align 16 .b8 sort_operand1[4096];
CHECK-DAG: .shared .align 16 .b8 sort_position[4096];
CHECK: ld.global.nc.v4.b32
CHECK: st.shared.v4.b32
CHECK: bar.sync 0;
CHECK: ld.shared.b32
CHECK: st.global.v4.b32
""", tmp_path)
    assert "bar.sync" in ptx and ".shared" in ptx
    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    run_ptxas(ptx, arch)
