"""The shape of the tiled GEMM main loop the convolution emitter (and the untiled dot path)
emit (``tiles.tiled_mainloop``): accumulators as vector phi nodes, one vector load of the
thread's lhs values and one gather of its rhs values per k row off per-thread base
pointers, vector FMAs; and in PTX the same work per thread as before (256 FMAs per K step,
one ``ld.shared.v4`` + four scalar shared loads per k row). Plus host runs of the cases the
vector forms add (f64 and integer accumulation, ragged M/N/K)."""
from __future__ import annotations

import re

import pytest

from hlo_compile import parse_module
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.options import CompileOptions
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion

from codegen_helpers import filecheck, run_on_host
from test_conv_emitter import _conv

# ResNet-style 3x3 convolution, NHWC/HWIO as JAX emits it, with a bias + relu epilogue;
# M = 2*14*14 = 392 (not a multiple of 64: bounds checks), K = 9*32 = 288 (18 K steps)
CONV = """HloModule m
fusion {
  x = f32[2,14,14,32] parameter(0)
  w = f32[3,3,32,64] parameter(1)
  bias = f32[64] parameter(2)
  conv = f32[2,14,14,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  bb = f32[2,14,14,64] broadcast(bias), dimensions={3}
  sum = f32[2,14,14,64] add(conv, bb)
  zero = f32[] constant(0)
  zb = f32[2,14,14,64] broadcast(zero), dimensions={}
  ROOT relu = f32[2,14,14,64] maximum(sum, zb)
}"""


def _artifacts(text: str, arch: str = "sm_90") -> dict:
    module = wrap_entry_as_fusion(parse_module(text))
    return run_pipeline(module, CompileOptions(arch=arch), emit="ptx").artifacts


def _blocks(ir: str, prefix: str) -> str:
    """The text of the blocks whose label starts with ``prefix`` (the K loop's: its body and
    the staging's branches)."""
    out, keep = [], False
    for line in ir.splitlines():
        label = re.match(r"^([\w.]+):", line)
        if label:
            keep = label.group(1).startswith(prefix)
        if keep:
            out.append(line)
    return "\n".join(out)


def test_conv_mainloop_llvm_ir(tmp_path):
    ir = _artifacts(CONV)["llvm"]
    filecheck(ir, """
CHECK: define ptx_kernel void @{{.*}}(
CHECK-NOT: alloca
CHECK: %[[TY4:.*]] = mul i32 %tid.y, 4
CHECK: %[[ABASE:.*]] = getelementptr inbounds float, ptr addrspace(3) @lhs_tile, i32 %[[TY4]]
CHECK: %[[BBASE:.*]] = getelementptr inbounds float, ptr addrspace(3) @rhs_tile, i32 %tid.x
CHECK: kstep.body:
CHECK-NEXT: %kstep = phi i32 [ 0, %entry ]
CHECK-NEXT: %acc0 = phi <4 x float> [ zeroinitializer, %entry ]
CHECK-NEXT: %acc1 = phi <4 x float>
CHECK-NEXT: %acc2 = phi <4 x float>
CHECK-NEXT: %acc3 = phi <4 x float>
CHECK: kstep.done:
CHECK: extractelement <4 x float> %{{.*}}, i32 3
CHECK: kstep.body.endif.endif.endif.endif:
CHECK: call void @llvm.nvvm.barrier
CHECK: load <4 x float>, ptr addrspace(3) %[[ABASE]], align 16
CHECK: getelementptr inbounds float, ptr addrspace(3) %[[BBASE]], <4 x i32> <i32 0, i32 16, i32 32, i32 48>
CHECK: call <4 x float> @llvm.masked.gather.v4f32.v4p3(
CHECK: shufflevector <4 x float> %{{.*}}, <4 x i32> zeroinitializer
CHECK: call <4 x float> @llvm.fma.v4f32(
CHECK: getelementptr inbounds float, ptr addrspace(3) %[[ABASE]], i32 64
CHECK: getelementptr inbounds float, ptr addrspace(3) %[[ABASE]], i32 960
CHECK: getelementptr inbounds float, ptr addrspace(3) %[[BBASE]], <4 x i32> <i32 960, i32 976, i32 992, i32 1008>
CHECK: %kstep.next = add nuw nsw i32 %kstep, 1
CHECK: icmp ult i32 %kstep.next, 18
CHECK: br i1 %{{.*}}, label %kstep.body, label %kstep.done
""", tmp_path)
    body = _blocks(ir, "kstep.body")
    # one vector FMA per register row per k row; one lhs vector load and one rhs gather per k row
    assert len(re.findall(r"call <4 x float> @llvm\.fma\.v4f32\(", body)) == 4 * 16
    assert len(re.findall(r"load <4 x float>, ptr addrspace\(3\)", body)) == 16
    assert len(re.findall(r"call <4 x float> @llvm\.masked\.gather", body)) == 16
    # the staging's GEMM-row arithmetic is done before the loop: no division by the output
    # width (14) inside it, and the four lhs slots share one decomposition of k (3x3x32)
    assert not re.search(r"[us]div i32 [^,]+, 14\b", body)
    assert len(re.findall(r"udiv i32 [^,]+, 32\b", body)) == 1 + 4   # lhs slots' k, then each rhs slot's


def test_conv_mainloop_ptx_work_per_thread(tmp_path):
    ptx = _artifacts(CONV)["ptx"]
    filecheck(ptx, """
CHECK: .entry
CHECK: bar.sync 0;
CHECK: ld.shared.v4.b32 {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, [%r[[A:[0-9]+]]];
CHECK: ld.shared.b32
CHECK: fma.rn.f32
CHECK: ld.shared.v4.b32 {{.*}}, [%r[[A]]+256];
CHECK: ld.shared.v4.b32 {{.*}}, [%r[[A]]+3840];
CHECK: bar.sync 0;
""", tmp_path)
    # per K step and thread: 16 k rows x 4 x 4 FMAs, 16 vector + 64 scalar shared loads
    assert ptx.count("fma.rn.f32") == 256
    assert ptx.count("ld.shared.v4.b32") == 16
    assert ptx.count("ld.shared.b32") == 64


CASES = {
    # f64 accumulation: <4 x double> FMAs and gathers
    "f64_nhwc": _conv("f64[2,9,9,8]", "f64[3,3,8,24]", "f64[2,9,9,24]",
                      "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
    # integer accumulation: vector mul and add
    "s32_ragged": _conv("s32[3,7,7,5]", "s32[2,2,5,20]", "s32[3,6,6,20]",
                        "window={size=2x2}, dim_labels=b01f_01io->b01f"),
    # every bound ragged (M = 2*11*13, N = 70, K = 3*3*7 = 63), strides and padding
    "f32_ragged_strided": _conv("f32[2,21,25,7]", "f32[3,3,7,70]", "f32[2,11,13,70]",
                                "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_vector_mainloop_on_host(name):
    module = parse_module(CASES[name])
    ok, report = run_on_host(module, seed=3)
    assert ok, report


def test_vector_mainloop_cases_take_the_convolution_emitter():
    from hlo_compile.codegen.compiler import plan_module
    for name, text in CASES.items():
        (k,) = plan_module(parse_module(text), CompileOptions()).kernels
        assert k.analysis.emitter == "convolution", (name, k.analysis.reason)
