"""The convolution emitter (implicit GEMM on the tiled dot machinery): convolutions and conv
fusions (prologue, bias/relu epilogue) on the host against the interpreter, JAX corpus cases
against XLA's outputs, fallbacks to the loop emitter, ptxas acceptance and summary.json."""
from __future__ import annotations

import json
import re

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import run_on_host


def _kernels(module):
    return plan_module(module, CompileOptions()).kernels


def _conv(x: str, w: str, out: str, attrs: str) -> str:
    return f"""HloModule m
ENTRY e {{
  x = {x} parameter(0)
  w = {w} parameter(1)
  ROOT c = {out} convolution(x, w), {attrs}
}}"""


# The variants of test_elemental_heavy_ops.py, at sizes where the GEMM tiles apply.
CASES = {
    "groups_dilations_padding_strides": _conv(
        "f32[2,16,9,10]", "f32[16,8,3,2]", "f32[2,16,5,18]",
        "window={size=3x2 stride=2x1 pad=1_2x0_1 lhs_dilate=1x2 rhs_dilate=1x2}, dim_labels=bf01_oi01->bf01, "
        "feature_group_count=2"),
    "nhwc_b01f_01io": _conv("f32[2,12,12,16]", "f32[3,3,16,24]", "f32[2,12,12,24]",
                            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
    "batch_groups": _conv("f32[8,16,20]", "f32[32,16,3]", "f32[4,32,18]",
                          "window={size=3}, dim_labels=bf0_oi0->bf0, batch_group_count=2"),
    "window_reversal": _conv("f32[4,8,30]", "f32[16,8,3]", "f32[4,16,28]",
                             "window={size=3 rhs_reversal=1}, dim_labels=bf0_oi0->bf0"),
    "conv1d_stride_pad_nwc": _conv("f32[3,50,12]", "f32[5,12,20]", "f32[3,25,20]",
                                   "window={size=5 stride=2 pad=2_2}, dim_labels=b0f_0io->b0f"),
    "odd_labels_and_layouts": _conv("f32[10,3,11,6]{0,1,2,3}", "f32[3,3,6,20]{3,2,1,0}", "f32[20,10,3,11]{0,1,2,3}",
                                    "window={size=3x3 pad=1_1x1_1}, dim_labels=01bf_01io->f01b"),
    "negative_padding_lhs_dilation": _conv("f32[2,8,12]", "f32[16,8,4]", "f32[2,16,17]",
                                           "window={size=4 pad=-1_-2 lhs_dilate=2}, dim_labels=bf0_oi0->bf0"),
    "f16_in_f16_out": _conv("f16[2,12,12,16]", "f16[3,3,16,24]", "f16[2,12,12,24]",
                            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
    "s8_to_s32": _conv("s8[2,10,10,16]", "s8[3,3,16,16]", "s32[2,8,8,16]",
                       "window={size=3x3}, dim_labels=b01f_01io->b01f"),
}


def _resnet(b: int, c: int, h: int, o: int) -> str:
    """A ResNet-style 3x3 convolution with a bias + relu epilogue, as one fusion."""
    s = f"f32[{b},{o},{h},{h}]"
    return f"""HloModule m
fusion {{
  x = f32[{b},{c},{h},{h}] parameter(0)
  w = f32[{o},{c},3,3] parameter(1)
  bias = f32[{o}] parameter(2)
  conv = {s} convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01
  bb = {s} broadcast(bias), dimensions={{1}}
  sum = {s} add(conv, bb)
  zero = f32[] constant(0)
  zb = {s} broadcast(zero), dimensions={{}}
  ROOT relu = {s} maximum(sum, zb)
}}"""


RESNET = _resnet(8, 32, 28, 64)

PROLOGUE = """HloModule m
fusion {
  x = bf16[2,16,10,10] parameter(0)
  xc = f32[2,16,10,10] convert(x)
  xt = f32[2,10,10,16] transpose(xc), dimensions={0,2,3,1}
  w = f32[3,3,16,32] parameter(1)
  ROOT c = f32[2,10,10,32] convolution(xt, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}"""


@pytest.mark.parametrize("name", sorted(CASES))
def test_convolutions_on_host(name):
    module = parse_module(CASES[name])
    (k,) = _kernels(module)
    assert k.analysis.emitter == "convolution", k.analysis.reason
    assert "cuDNN" in k.analysis.reason and k.launch.block == (16, 16, 1)
    ok, report = run_on_host(module, seed=1)
    assert ok, report


@pytest.mark.parametrize("text", [RESNET, PROLOGUE], ids=["resnet_3x3_bias_relu", "prologue_convert_transpose"])
def test_conv_fusions_on_host(text):
    module = wrap_entry_as_fusion(parse_module(text))
    (k,) = _kernels(module)
    assert k.analysis.emitter == "convolution", k.analysis.reason
    ok, report = run_on_host(module, seed=2)
    assert ok, report


def test_grid_covers_groups_and_gemm_tiles():
    (k,) = _kernels(parse_module(CASES["groups_dilations_padding_strides"]))
    g = k.spec.geometry
    assert (g.Z, g.M, g.N, g.K) == (2, 2 * 5 * 18, 8, 3 * 2 * 8)
    assert k.launch.grid == (1, 3, 2)
    (k,) = _kernels(parse_module(CASES["batch_groups"]))
    assert (k.spec.geometry.Z, k.spec.geometry.N) == (2, 16) and k.launch.grid == (1, 2, 2)
    (k,) = _kernels(wrap_entry_as_fusion(parse_module(RESNET)))
    assert k.launch.grid == (1, 98, 1) and k.spec.geometry.K == 288


@pytest.mark.parametrize("text,why", [
    (_conv("f32[1,2,5]", "f32[2,2,3]", "f32[1,2,3]", "window={size=3}, dim_labels=bf0_oi0->bf0"),
     "tiny convolution"),
    (_conv("f32[2,32,20,20]", "f32[32,1,3,3]", "f32[2,32,18,18]",
           "window={size=3x3}, dim_labels=bf01_oi01->bf01, feature_group_count=32"), "too narrow"),
], ids=["tiny", "depthwise"])
def test_falls_back_to_loop(text, why):
    module = parse_module(text)
    (k,) = _kernels(module)
    assert k.analysis.emitter == "loop" and why in k.analysis.reason, k.analysis.reason
    assert "convolution emitter declined" in k.analysis.reason
    ok, report = run_on_host(module)
    assert ok, report


def test_fusion_with_two_convolutions_is_not_routed():
    module = wrap_entry_as_fusion(parse_module("""HloModule m
fusion {
  x = f32[2,8,20] parameter(0)
  w = f32[8,8,3] parameter(1)
  c1 = f32[2,8,18] convolution(x, w), window={size=3}, dim_labels=bf0_oi0->bf0
  ROOT c2 = f32[2,8,16] convolution(c1, w), window={size=3}, dim_labels=bf0_oi0->bf0
}"""))
    (k,) = _kernels(module)
    assert k.analysis.emitter == "loop"


# ---- JAX corpus cases against XLA's outputs -------------------------------------------------------
@pytest.mark.parametrize("case", ["conv1d_nwc_f32", "conv2d_nchw_dilated_f32", "mdl_cnn_f32"])
def test_jax_corpus_convolutions_on_host(corpus, case):
    from hlo_compile.runtime.executable import compile_executable
    from test_jax_corpus import run_case
    case_dir = corpus / "jax" / case
    if not case_dir.is_dir():
        pytest.skip(f"{case} not in the corpus")
    for hlo in sorted(case_dir.glob("*.hlo")):
        result = run_case(case_dir, hlo.name, run=lambda m, a: compile_executable(m, "host").run(a))
        assert result.ok, f"{hlo.name}: {result.report()}"


def test_corpus_convolutions_take_the_convolution_emitter(corpus):
    case_dir = corpus / "jax" / "conv2d_nchw_dilated_f32"
    if not case_dir.is_dir():
        pytest.skip("conv2d_nchw_dilated_f32 not in the corpus")
    path = case_dir / "unoptimized.hlo"
    kernels = _kernels(parse_module(path.read_text(), str(path)))
    assert "convolution" in {k.analysis.emitter for k in kernels}


# ---- PTX ---------------------------------------------------------------------------------------------
def _ptx(module, arch: str) -> str:
    return run_pipeline(module, CompileOptions(arch=arch), emit="ptx").artifacts["ptx"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_conv_kernels(arch):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    modules = [(n, parse_module(CASES[n])) for n in ("groups_dilations_padding_strides", "nhwc_b01f_01io",
                                                      "batch_groups", "window_reversal", "s8_to_s32")]
    modules += [("resnet", wrap_entry_as_fusion(parse_module(RESNET))),
                ("prologue", wrap_entry_as_fusion(parse_module(PROLOGUE)))]
    for name, module in modules:
        ptx = _ptx(module, arch)
        assert re.search(r"bar\.sync\s+0;", ptx) and "ld.shared" in ptx, name
        out = run_ptxas(ptx, arch)
        assert out.cubin and out.kernels, name
        for res in out.kernels.values():
            assert res.shared_bytes == 2 * 16 * 64 * 4 and res.barriers == 1 and res.spill_stores_bytes == 0, (name, res)


# ---- summary.json ------------------------------------------------------------------------------------
def test_summary_names_the_convolution_emitter(tmp_path):
    run_pipeline(wrap_entry_as_fusion(parse_module(RESNET)), CompileOptions(), dump_to=tmp_path)
    k = json.loads((tmp_path / "summary.json").read_text())["kernels"][0]
    assert k["emitter"] == "convolution" and k["tile"] == [64, 64, 16] and k["block"] == [16, 16, 1]
    assert k["grid"] == [1, 98, 1] and k["static_shared_bytes"] == 8192 and k["accumulation_type"] == "f32"
    assert k["gemm"] == {"groups": 1, "M": 8 * 28 * 28, "N": 64, "K": 32 * 9} and "cuDNN" in k["reason"]
    report = next(tmp_path.glob("module_0000.*.fusions.txt")).read_text()
    assert "implicit GEMM" in report and "tile 64x64x16" in report
