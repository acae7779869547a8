"""The sort emitter (rank sort, ``codegen/emitters/sort.py``): hand-written sorts on the host
against the interpreter (bit for bit), the JAX corpus sorts against XLA's outputs, PTX through
ptxas, and the summary's emitter."""
from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable

from codegen_helpers import emit_stage, run_on_host


@pytest.fixture(autouse=True)
def rank_sort_only(monkeypatch):
    """This file tests the rank sort: keep the bitonic kernel (tests/codegen/test_sort_bitonic.py) from
    taking the rows that fit shared memory."""
    from hlo_compile.codegen.emitters import sort
    from hlo_compile.codegen.kernel import Declined

    def off(*args):
        raise Declined("off in the rank sort's tests")
    monkeypatch.setitem(sort.ALGORITHMS, sort.SortAlgorithm.BITONIC, sort.Algorithm(off, sort.emit_sort_kernel))


LT_F32_TOTAL = """
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
"""


def _sort_module(shape: str, dim: int, comparator: str, operands: list[str], stable: bool = True,
                 name: str = "lt") -> str:
    params = "\n".join(f"  p{i} = {t}[{shape}] parameter({i})" for i, t in enumerate(operands))
    args = ", ".join(f"p{i}" for i in range(len(operands)))
    out = f"{operands[0]}[{shape}]" if len(operands) == 1 else \
        "(" + ", ".join(f"{t}[{shape}]" for t in operands) + ")"
    return (f"HloModule m\n{comparator}\nENTRY e {{\n{params}\n"
            f"  ROOT s = {out} sort({args}), dimensions={{{dim}}}, is_stable={str(stable).lower()}, "
            f"to_apply={name}\n}}\n")


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a


def assert_host_matches_interpreter(text: str, args: list) -> None:
    """Host output bit-identical to the interpreter's (NaN payloads and -0 included)."""
    module = parse_module(text)
    got = literals.flatten(compile_executable(module, "host").run(args))
    expected = literals.flatten(evaluate_module(module, args))
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (k, g.shape, e.shape, g.dtype, e.dtype)
        assert np.array_equal(_bits(g), _bits(e)), f"output {k}:\ngot      {g}\nexpected {e}"


def _floats_with_specials(rng, shape, dtype=np.float32) -> np.ndarray:
    x = rng.normal(size=shape).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, 0.0, -0.0, np.nan], np.float32)
    pos = rng.choice(flat.size, size=min(flat.size, 3 * len(specials)), replace=False)
    flat[pos] = np.resize(specials, len(pos))
    return x.astype(dtype)


# ---- hand-written sorts on the host --------------------------------------------------------------

def test_f32_total_order_with_nans_and_signed_zeros():
    rng = np.random.default_rng(1)
    x = _floats_with_specials(rng, (6, 53))
    assert np.isnan(x).any() and (np.signbit(x) & (x == 0)).any()
    assert_host_matches_interpreter(_sort_module("6,53", 1, LT_F32_TOTAL, ["f32"]), [x])


def test_f32_default_lt_comparator_stable_on_signed_zeros():
    # plain LT: -0 == +0, so a stable sort keeps their original order (no NaNs: LT is not a
    # strict weak order with them and the result would depend on the algorithm)
    comparator = LT_F32_TOTAL.replace(", type=TOTALORDER", "")
    rng = np.random.default_rng(2)
    x = np.round(rng.normal(size=(4, 40)), 1).astype(np.float32)
    x[:, ::5] = 0.0
    x[:, 1::7] = -0.0
    assert_host_matches_interpreter(_sort_module("4,40", 1, comparator, ["f32"]), [x])


# the comparator JAX emits for sorting floats: NaNs last, -0 == +0
JAX_NAN_AWARE_LT = """
region {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  nan = f32[] constant(nan)
  zero = f32[] constant(0)
  na = pred[] compare(a, a), direction=NE
  nb = pred[] compare(b, b), direction=NE
  za = pred[] compare(a, zero), direction=EQ
  zb = pred[] compare(b, zero), direction=EQ
  a0 = f32[] select(za, zero, a)
  b0 = f32[] select(zb, zero, b)
  a1 = f32[] select(na, nan, a0)
  b1 = f32[] select(nb, nan, b0)
  ROOT lt = pred[] compare(a1, b1), direction=LT, type=TOTALORDER
}
"""


def test_jax_nan_aware_comparator_with_inline_call():
    text = f"""
HloModule m
{JAX_NAN_AWARE_LT}sorter {{
  x = f32[5,70] parameter(0)
  ROOT s = f32[5,70] sort(x), dimensions={{1}}, is_stable=true, to_apply=region
}}
ENTRY e {{
  p = f32[5,70] parameter(0)
  ROOT c = f32[5,70] call(p), to_apply=sorter
}}
"""
    x = _floats_with_specials(np.random.default_rng(3), (5, 70))
    assert_host_matches_interpreter(text, [x])


KEY_LT_S32 = """
lt {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = f32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT
}
"""


def test_key_value_two_operands():
    rng = np.random.default_rng(4)
    keys = rng.integers(0, 20, size=(3, 100)).astype(np.int32)
    values = rng.normal(size=(3, 100)).astype(np.float32)
    assert_host_matches_interpreter(_sort_module("3,100", 1, KEY_LT_S32, ["s32", "f32"]), [keys, values])


def test_three_operands_lexicographic_comparator():
    comparator = """
lex {
  a0 = f32[] parameter(0)
  b0 = f32[] parameter(1)
  a1 = s32[] parameter(2)
  b1 = s32[] parameter(3)
  a2 = u8[] parameter(4)
  b2 = u8[] parameter(5)
  lt0 = pred[] compare(a0, b0), direction=LT, type=TOTALORDER
  eq0 = pred[] compare(a0, b0), direction=EQ, type=TOTALORDER
  lt1 = pred[] compare(a1, b1), direction=LT
  both = pred[] and(eq0, lt1)
  ROOT r = pred[] or(lt0, both)
}
"""
    rng = np.random.default_rng(5)
    k0 = rng.integers(0, 4, size=(2, 64)).astype(np.float32)
    k1 = rng.integers(-5, 5, size=(2, 64)).astype(np.int32)
    v = np.arange(128, dtype=np.uint8).reshape(2, 64)
    assert_host_matches_interpreter(_sort_module("2,64", 1, comparator, ["f32", "s32", "u8"], name="lex"),
                                    [k0, k1, v])


def test_sort_along_dim_0():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(33, 5)).astype(np.float32)
    assert_host_matches_interpreter(_sort_module("33,5", 0, LT_F32_TOTAL, ["f32"]), [x])


def test_sort_middle_dim_non_default_layout():
    text = f"""
HloModule m
{LT_F32_TOTAL}
ENTRY e {{
  p = f32[3,17,4]{{0,2,1}} parameter(0)
  ROOT s = f32[3,17,4]{{0,2,1}} sort(p), dimensions={{1}}, is_stable=true, to_apply=lt
}}
"""
    x = np.random.default_rng(7).normal(size=(3, 17, 4)).astype(np.float32)
    assert_host_matches_interpreter(text, [x])


def test_descending_gt_comparator():
    comparator = LT_F32_TOTAL.replace("direction=LT", "direction=GT").replace("lt {", "gt {")
    x = _floats_with_specials(np.random.default_rng(8), (4, 45))
    assert_host_matches_interpreter(_sort_module("4,45", 1, comparator, ["f32"], name="gt"), [x])


@pytest.mark.parametrize("stable", [True, False])
def test_stable_with_many_equal_keys(stable):
    rng = np.random.default_rng(9)
    keys = rng.integers(0, 3, size=(2, 300)).astype(np.int32)
    values = rng.normal(size=(2, 300)).astype(np.float32)
    module = _sort_module("2,300", 1, KEY_LT_S32, ["s32", "f32"], stable=stable)
    # the rank sort is stable either way, as the interpreter's merge sort is
    assert_host_matches_interpreter(module, [keys, values])
    got = literals.flatten(compile_executable(parse_module(module), "host").run([keys, values]))
    order = np.argsort(keys, axis=1, kind="stable")
    assert np.array_equal(got[1], np.take_along_axis(values, order, axis=1))


def test_s32_keys():
    comparator = "lt {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n" \
                 "  ROOT c = pred[] compare(a, b), direction=LT\n}\n"
    x = np.random.default_rng(10).integers(-2**31, 2**31 - 1, size=(7, 31), dtype=np.int64).astype(np.int32)
    x[0, :3] = [-2**31, 2**31 - 1, 0]
    assert_host_matches_interpreter(_sort_module("7,31", 1, comparator, ["s32"]), [x])


def test_bf16_keys_with_values():
    comparator = """
lt {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
"""
    rng = np.random.default_rng(11)
    keys = _floats_with_specials(rng, (3, 50), ml_dtypes.bfloat16)
    values = np.arange(150, dtype=np.int32).reshape(3, 50)
    assert_host_matches_interpreter(_sort_module("3,50", 1, comparator, ["bf16", "s32"]), [keys, values])


def test_prologue_fused_before_the_sort():
    from test_sort_bitonic import PROLOGUE as text
    from hlo_compile.codegen.compiler import plan_module
    (kernel,) = plan_module(parse_module(text), CompileOptions()).kernels
    assert kernel.analysis.emitter == "sort"
    rng = np.random.default_rng(12)
    assert_host_matches_interpreter(text, [rng.normal(size=(4, 30)).astype(np.float32),
                                           np.arange(30, dtype=np.int32)])


def test_rows_of_one_and_tiny_arrays():
    x = np.random.default_rng(13).normal(size=(5, 1)).astype(np.float32)
    assert_host_matches_interpreter(_sort_module("5,1", 1, LT_F32_TOTAL, ["f32"]), [x])
    y = np.array([3.0, -1.0], np.float32)
    assert_host_matches_interpreter(_sort_module("2", 0, LT_F32_TOTAL, ["f32"]), [y])


def test_random_inputs_against_interpreter_helper():
    ok, report = run_on_host(parse_module(_sort_module("8,64", 1, KEY_LT_S32, ["s32", "f32"])))
    assert ok, report


# ---- topk (routed to the sort planner by hand: the analysis sends a topk root to the loop emitter) --

TOPK = """
HloModule topk
ENTRY e {{
  x = {t}[{shape}]{layout} parameter(0)
  ROOT topk = ({t}[{out}]{layout}, s32[{out}]{layout}) topk(x), k={k}, largest={largest}
}}
"""


@pytest.mark.parametrize("t,shape,out,k,largest,layout", [
    ("f32", "6,40", "6,5", 5, "true", ""),
    ("f32", "10,10", "10,2", 2, "true", "{0,1}"),
    ("f32", "3,33", "3,33", 33, "false", ""),
    ("s32", "4,50", "4,7", 7, "true", ""),
    ("bf16", "2,64", "2,9", 9, "true", ""),
])
def test_topk_via_sort_emitter(t, shape, out, k, largest, layout):
    text = TOPK.format(t=t, shape=shape, out=out, k=k, largest=largest, layout=layout)
    dims = tuple(map(int, shape.split(",")))
    rng = np.random.default_rng(14)
    if t == "s32":
        x = rng.integers(-10, 10, size=dims).astype(np.int32)  # ties: lower index first
    else:
        x = _floats_with_specials(rng, dims, ml_dtypes.bfloat16 if t == "bf16" else np.float32)
    assert_host_matches_interpreter(text, [x])


def test_topk_is_routed_to_the_sort_emitter():
    from hlo_compile.codegen.compiler import available_emitters
    from hlo_compile.gpu.archs import device_for_arch
    from hlo_compile.codegen.analysis.fusion_analysis import analyze_fusion
    from hlo_compile.passes import run_passes
    module = run_passes(parse_module(TOPK.format(t="f32", shape="4,8", out="4,2", k=2, largest="true", layout="")))
    fusion = next(i for i in module.entry.instructions if i.opcode == "fusion")
    analysis = analyze_fusion(fusion, device_for_arch("sm_80"), available=available_emitters())
    assert analysis.emitter == "sort" and "topk" in analysis.reason


# ---- the JAX corpus -----------------------------------------------------------------------------

@pytest.mark.parametrize("case,hlo", [("sort_f32", "unoptimized.hlo"),
                                      ("sort_f32", "optimized_cpu.hlo"),  # s32[] bitcast(f32[]) in the comparator
                                      ("sort_key_value_s32", "unoptimized.hlo"),
                                      ("sort_key_value_s32", "optimized_cpu.hlo")])
def test_jax_corpus_sorts_on_host(corpus, case, hlo):
    from test_jax_corpus import run_case
    case_dir = corpus / "jax" / case
    if not (case_dir / hlo).is_file():
        pytest.skip(f"corpus case {case}/{hlo} not present")
    result = run_case(case_dir, hlo, run=lambda m, a: compile_executable(m, "host").run(a))
    assert result.ok, result.report()


# ---- PTX, report and summary -----------------------------------------------------------------------

KV_TEXT = _sort_module("3,100", 1, KEY_LT_S32, ["s32", "f32"])
BF16_TEXT = _sort_module("2,77", 0, LT_F32_TOTAL.replace("f32", "bf16"), ["bf16"])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("text", [KV_TEXT, BF16_TEXT], ids=["key-value", "bf16-dim0"])
def test_ptxas_accepts(text, arch):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    ptx = emit_stage(text, "ptx", arch=arch)
    assert ".entry" in ptx
    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    run_ptxas(ptx, arch)


def test_summary_json_and_report(tmp_path):
    run_pipeline(parse_module(KV_TEXT), CompileOptions(), dump_to=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    (k,) = summary["kernels"]
    assert k["emitter"] == "sort" and "sort" in k["reason"]
    assert k["block"] == [128, 1, 1] and k["grid"] == [3, 1, 1]  # 300 elements, one thread each

    from hlo_compile.codegen.compiler import plan_module
    plan = plan_module(parse_module(KV_TEXT), CompileOptions())
    lines = "\n".join(plan.kernels[0].spec.report_lines())
    assert "rank sort" in lines and "O(n^2)" in lines and "bitonic" in lines
    assert plan.kernels[0].spec.summary_fields()["comparisons_per_thread"] == 200
