"""The tiled dot emitter: dots and dot fusions (prologue, epilogue) on the host against the
interpreter, JAX corpus cases against XLA's outputs, the PTX (shared tiles, two barriers per K
step, fma) through FileCheck and ptxas, and the emitter named in summary.json."""
from __future__ import annotations

import json

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import filecheck, run_on_host


def _fusion(text: str):
    return wrap_entry_as_fusion(parse_module(text))


def _kernels(module):
    return plan_module(module, CompileOptions()).kernels


def _dot(lhs: str, rhs: str, out: str, dims: str) -> str:
    return f"""HloModule m
ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {out} dot(a, b), {dims}
}}"""


MM = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
CASES = {
    "f32_128x96x80": _dot("f32[128,96]", "f32[96,80]", "f32[128,80]", MM),
    "partial_tiles_67x33x45": _dot("f32[67,33]", "f32[33,45]", "f32[67,45]", MM),
    "batch_3x17x29x11": _dot("f32[3,17,29]", "f32[3,29,11]", "f32[3,17,11]",
                             "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                             "rhs_contracting_dims={1}"),
    "contract_first_dims": _dot("f32[40,70]", "f32[50,40]", "f32[70,50]",
                                "lhs_contracting_dims={0}, rhs_contracting_dims={1}"),
    "column_major_layouts": _dot("f32[70,40]{0,1}", "f32[40,50]{0,1}", "f32[70,50]{0,1}", MM),
    "multi_free_and_contract_dims": _dot("f32[2,33,5,8]", "f32[8,5,3,24]", "f32[2,33,3,24]",
                                         "lhs_contracting_dims={3,2}, rhs_contracting_dims={0,1}"),
    "batch_not_leading": _dot("f32[20,4,30]", "f32[30,18,4]", "f32[4,20,18]",
                              "lhs_batch_dims={1}, rhs_batch_dims={2}, lhs_contracting_dims={2}, "
                              "rhs_contracting_dims={0}"),
    "bf16_in_f32_out": _dot("bf16[70,90]", "bf16[90,66]", "f32[70,66]", MM),
    "f16_in_f32_out": _dot("f16[70,90]", "f16[90,66]", "f32[70,66]", MM),
    "f16_out": _dot("f16[64,40]", "f16[40,64]", "f16[64,64]", MM),
    "f64": _dot("f64[50,30]", "f64[30,40]", "f64[50,40]", MM),
    "s8_s8_to_s32": _dot("s8[70,90]", "s8[90,66]", "s32[70,66]", MM),
}

EPILOGUE = """HloModule m
fusion {
  x = f32[67,96] parameter(0)
  w = f32[96,80] parameter(1)
  bias = f32[80] parameter(2)
  d = f32[67,80] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[67,80] broadcast(bias), dimensions={1}
  s = f32[67,80] add(d, bb)
  ROOT t = f32[67,80] tanh(s)
}"""

PROLOGUE = """HloModule m
fusion {
  x = bf16[40,70] parameter(0)
  xc = f32[40,70] convert(x)
  xt = f32[70,40] transpose(xc), dimensions={1,0}
  w = f32[40,50] parameter(1)
  ROOT d = f32[70,50] dot(xt, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""


@pytest.mark.parametrize("name", sorted(CASES))
def test_dots_on_host(name):
    module = parse_module(CASES[name])
    (k,) = _kernels(module)
    assert k.analysis.emitter == "dot" and k.spec.summary_fields()["path"] == "tiled", k.analysis.reason
    assert k.launch.block == (16, 16, 1)
    ok, report = run_on_host(module, seed=1)
    assert ok, report


@pytest.mark.parametrize("text", [EPILOGUE, PROLOGUE], ids=["epilogue_bias_tanh", "prologue_convert_transpose"])
def test_dot_fusions_on_host(text):
    module = _fusion(text)
    (k,) = _kernels(module)
    assert k.analysis.emitter == "dot", k.analysis.reason
    assert "cuBLAS/Triton" in k.analysis.reason
    ok, report = run_on_host(module, seed=2)
    assert ok, report


def test_grid_and_launch():
    (k,) = _kernels(parse_module(CASES["batch_3x17x29x11"]))
    assert k.launch.grid == (1, 1, 3)
    (k,) = _kernels(parse_module(CASES["partial_tiles_67x33x45"]))
    assert k.launch.grid == (1, 2, 1) and k.launch.num_threads == 256


@pytest.mark.parametrize("text,why", [
    (_dot("f32[4,8]", "f32[8,4]", "f32[4,4]", MM), "tiny dot"),
    (_dot("f32[300,200]", "f32[200]", "f32[300]", MM), "vector product"),
], ids=["tiny", "matvec"])
def test_falls_back_to_loop(text, why):
    module = parse_module(text)
    (k,) = _kernels(module)
    assert k.analysis.emitter == "loop" and why in k.analysis.reason
    assert k.spec.summary_fields()["emitter"] == "loop"
    ok, report = run_on_host(module)
    assert ok, report


def test_complex_dot_runs():
    """c64 dots accumulate in the complex type (complex_ops.complex_multiply_add): host = interpreter."""
    ok, report = run_on_host(parse_module(_dot("c64[40,40]", "c64[40,40]", "c64[40,40]", MM)))
    assert ok, report


# ---- JAX corpus cases against XLA's outputs -------------------------------------------------------
@pytest.mark.parametrize("case", ["dot_matmul_f32", "dot_matvec_f32", "fused_dense_gelu_f32", "mdl_mlp_f32",
                                  "hand_dot_bias_koutput_f32"])
def test_jax_corpus_dots_on_host(corpus, case):
    from hlo_compile.runtime.executable import compile_executable
    from test_jax_corpus import run_case
    case_dir = corpus / "jax" / case
    if not case_dir.is_dir():
        pytest.skip(f"{case} not in the corpus")
    for hlo in sorted(case_dir.glob("*.hlo")):
        result = run_case(case_dir, hlo.name, run=lambda m, a: compile_executable(m, "host").run(a))
        assert result.ok, f"{hlo.name}: {result.report()}"


# ---- PTX ---------------------------------------------------------------------------------------------
def _ptx(module, arch: str) -> str:
    return run_pipeline(module, CompileOptions(arch=arch), emit="ptx").artifacts["ptx"]


def test_ptx_shared_tiles_barriers_fma(tmp_path):
    filecheck(_ptx(parse_module(CASES["f32_128x96x80"]), "sm_80"), """
CHECK: .visible .entry d(
CHECK-DAG: .shared .align 16 .b8 lhs_tile
CHECK-DAG: .shared .align 16 .b8 rhs_tile
CHECK: st.shared
CHECK: bar.sync 0;
CHECK: ld.shared
CHECK: fma.rn.f32
CHECK: bar.sync 0;
CHECK: st.global
CHECK: ret;
""", tmp_path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_dot_kernels(arch):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    modules = [(n, parse_module(CASES[n])) for n in ("f32_128x96x80", "batch_3x17x29x11", "bf16_in_f32_out",
                                                      "s8_s8_to_s32", "multi_free_and_contract_dims")]
    modules += [("epilogue", _fusion(EPILOGUE)), ("prologue", _fusion(PROLOGUE))]
    for name, module in modules:
        out = run_ptxas(_ptx(module, arch), arch)
        assert out.cubin and out.kernels, name
        for res in out.kernels.values():
            assert res.shared_bytes == 2 * 16 * 64 * 4 and res.barriers == 1 and res.spill_stores_bytes == 0, (name, res)


# ---- summary.json ------------------------------------------------------------------------------------
def test_summary_names_the_dot_emitter(tmp_path):
    run_pipeline(_fusion(EPILOGUE), CompileOptions(), dump_to=tmp_path)
    k = json.loads((tmp_path / "summary.json").read_text())["kernels"][0]
    assert k["emitter"] == "dot" and k["tile"] == [64, 64, 16] and k["block"] == [16, 16, 1]
    assert k["grid"] == [2, 2, 1] and k["static_shared_bytes"] == 8192 and k["accumulation_type"] == "f32"
    report = next(tmp_path.glob("module_0000.*.fusions.txt")).read_text()
    assert "tile 64x64x16" in report and "cuBLAS/Triton" in report
