"""dot, convolution and select-and-scatter through the elemental emitter (one output element
per thread), on the host target against the interpreter."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module

from codegen_helpers import emit_stage, run_on_host

CASES = {
    "dot-batch-contracting": """HloModule m
ENTRY e {
  a = f32[2,3,4] parameter(0)
  b = f32[4,2,5] parameter(1)
  ROOT d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={1}, rhs_contracting_dims={0}
}""",
    "dot-bf16-to-f32-with-epilogue": """HloModule m
fused {
  a = bf16[16,32]{0,1} parameter(0)
  b = bf16[32,8] parameter(1)
  d = f32[16,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[16,8] tanh(d)
}
ENTRY e {
  a = bf16[16,32]{0,1} parameter(0)
  b = bf16[32,8] parameter(1)
  ROOT f = f32[16,8] fusion(a, b), kind=kLoop, calls=fused
}""",
    "dot-s8-to-s32": """HloModule m
ENTRY e {
  a = s8[3,7] parameter(0)
  b = s8[7] parameter(1)
  ROOT d = s32[3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""",
    "conv-groups-dilations-padding": """HloModule m
ENTRY e {
  x = f32[2,4,5,6] parameter(0)
  w = f32[4,2,3,2] parameter(1)
  ROOT c = f32[2,4,3,10] convolution(x, w), window={size=3x2 stride=2x1 pad=1_2x0_1 lhs_dilate=1x2 rhs_dilate=1x2}, dim_labels=bf01_oi01->bf01, feature_group_count=2
}""",
    "conv-nhwc": """HloModule m
ENTRY e {
  x = f32[1,5,5,3] parameter(0)
  w = f32[3,3,3,2] parameter(1)
  ROOT c = f32[1,5,5,2] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}""",
    "conv-batch-groups": """HloModule m
ENTRY e {
  x = f32[4,1,5] parameter(0)
  w = f32[4,1,2] parameter(1)
  ROOT c = f32[2,4,4] convolution(x, w), window={size=2}, dim_labels=bf0_oi0->bf0, batch_group_count=2
}""",
    "conv-window-reversal": """HloModule m
ENTRY e {
  x = f32[1,2,7] parameter(0)
  w = f32[3,2,3] parameter(1)
  ROOT c = f32[1,3,5] convolution(x, w), window={size=3 rhs_reversal=1}, dim_labels=bf0_oi0->bf0
}""",
    "select-and-scatter-overlapping-padded": """HloModule m
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[7,6] parameter(0)
  s = f32[7,3] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[7,6] select-and-scatter(x, s, z), window={size=3x3 stride=1x2 pad=1_1x1_0}, select=ge, scatter=add
}""",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_contraction_on_host(name):
    ok, report = run_on_host(parse_module(CASES[name]))
    assert ok, f"{name}: {report}"


def test_dot_is_a_loop_over_the_contracting_dim():
    ir = emit_stage(CASES["dot-s8-to-s32"], "llvm")
    assert "c0.head" in ir and "mul i32" in ir and "sext i8" in ir
