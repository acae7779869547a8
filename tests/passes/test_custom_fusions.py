"""XLA:GPU's kCustom fusions (Triton, cuDNN, custom kernels) compiled by our emitters
(passes/custom_fusions.py, codegen/analysis/fusion_analysis.py's backend-kind rule)."""
from __future__ import annotations

import pytest

import hlo_compile
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes.custom_fusions import lower_custom_fusions

from codegen_helpers import run_on_host

SOFTMAX = """HloModule softmax
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
triton_softmax_computation {
  p = f32[96,384]{1,0} parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[96]{0} reduce(p, ninf), dimensions={1}, to_apply=max_f32
  bmx = f32[96,384]{1,0} broadcast(mx), dimensions={0}
  sub = f32[96,384]{1,0} subtract(p, bmx)
  e = f32[96,384]{1,0} exponential(sub)
  zero = f32[] constant(0)
  sum = f32[96]{0} reduce(e, zero), dimensions={1}, to_apply=add_f32
  bsum = f32[96,384]{1,0} broadcast(sum), dimensions={0}
  ROOT div = f32[96,384]{1,0} divide(e, bsum)
}
ENTRY main {
  x = f32[96,384]{1,0} parameter(0)
  ROOT triton_softmax = f32[96,384]{1,0} fusion(x), kind=kCustom, calls=triton_softmax_computation,
    backend_config={"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"output_tiles":[{"sizes":["1","384"]}],"num_warps":"4","num_ctas":"1","num_stages":"1"}}}
}
"""

# the older __triton_nested_gemm_fusion form: each dot operand's producers in a nested block_fusion
NESTED_GEMM = """HloModule nested_gemm
lhs_block {
  p = bf16[128,256]{1,0} parameter(0)
  ROOT c = f32[128,256]{1,0} convert(p)
}
rhs_block {
  p = f32[256,64]{1,0} parameter(0)
  ROOT n = f32[256,64]{1,0} negate(p)
}
gemm_computation {
  a = bf16[128,256]{1,0} parameter(0)
  b = f32[256,64]{1,0} parameter(1)
  la = f32[128,256]{1,0} fusion(a), kind=kCustom, calls=lhs_block,
    backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion","block_level_fusion_config":{"output_tiles":[{"sizes":["64","32"]}]}}}
  rb = f32[256,64]{1,0} fusion(b), kind=kCustom, calls=rhs_block,
    backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion","block_level_fusion_config":{"output_tiles":[{"sizes":["32","64"]}]}}}
  d = f32[128,64]{1,0} dot(la, rb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[128,64]{1,0} exponential(d)
}
ENTRY main {
  a = bf16[128,256]{1,0} parameter(0)
  b = f32[256,64]{1,0} parameter(1)
  ROOT gemm = f32[128,64]{1,0} fusion(a, b), kind=kCustom, calls=gemm_computation,
    backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"64","block_n":"64","block_k":"32","split_k":"1","num_stages":"3","num_warps":"4","num_ctas":"1"}}}
}
"""

# a cuDNN fusion whose root tuple ends in the workspace XLA allocates with an operand-less __nop
CUDNN_WORKSPACE = """HloModule cudnn_fusion
fused_dot {
  a = f32[32,48]{1,0} parameter(0)
  b = f32[48,16]{1,0} parameter(1)
  d = f32[32,16]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ws = u8[1024]{0} custom-call(), custom_call_target="__nop"
  ROOT t = (f32[32,16]{1,0}, u8[1024]{0}) tuple(d, ws)
}
ENTRY main {
  a = f32[32,48]{1,0} parameter(0)
  b = f32[48,16]{1,0} parameter(1)
  f = (f32[32,16]{1,0}, u8[1024]{0}) fusion(a, b), kind=kCustom, calls=fused_dot,
    backend_config={"fusion_backend_config":{"kind":"__cudnn$fusion","cudnn_fusion_config":{"plan_id":"3"}}}
  ROOT g = f32[32,16]{1,0} get-tuple-element(f), index=0
}
"""

# an address computation: a static slice of a parameter feeding the hero, written back with
# dynamic-update-slice (notes/xla-gpu-calls.md §5)
ADDRESS_COMPUTATION = """HloModule address_computation
address_computation {
  p0 = f32[4,32,32]{2,1,0} parameter(0)
  p1 = f32[32,32]{1,0} parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  s = f32[1,32,32]{2,1,0} slice(p0), slice={[1:2], [0:32], [0:32]}
  b = f32[32,32]{1,0} bitcast(s)
  d = f32[32,32]{1,0} dot(b, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  u = f32[1,32,32]{2,1,0} bitcast(d)
  ROOT dus = f32[4,32,32]{2,1,0} dynamic-update-slice(p0, u, i, z, z)
}
ENTRY main {
  p0 = f32[4,32,32]{2,1,0} parameter(0)
  p1 = f32[32,32]{1,0} parameter(1)
  i = s32[] parameter(2)
  ROOT f = f32[4,32,32]{2,1,0} fusion(p0, p1, i), kind=kCustom, calls=address_computation,
    backend_config={"fusion_backend_config":{"kind":"__custom_fusion","custom_fusion_config":{"name":"dynamic_address_computation"}}}
}
"""


def _check_host_matches_interpreter(text: str):
    ok, report = run_on_host(hlo_compile.parse_module(text))
    assert ok, report


def _kernels(text: str):
    plan = plan_module(hlo_compile.parse_module(text), CompileOptions())
    return [(k.fusion.name, k.analysis.xla_emitter, k.analysis.emitter, k.analysis.reason) for k in plan.kernels]


def test_softmax_diamond_is_one_block_level_kernel():
    kernels = _kernels(SOFTMAX)
    # one kernel as XLA runs it (tests/codegen/test_block_level_fusion.py), never a loop kernel
    # recomputing both reductions for every element
    assert [(str(x), str(e)) for _, x, e, _ in kernels] == [("triton", "triton")], kernels
    _check_host_matches_interpreter(SOFTMAX)


def test_triton_gemm_stays_one_dot_kernel_with_nested_block_fusions_inlined():
    kernels = _kernels(NESTED_GEMM)
    assert len(kernels) == 1, kernels
    name, xla, ours, reason = kernels[0]
    assert name == "gemm" and xla == "triton" and ours == "dot"
    assert "__triton_gemm (block_m=64, block_n=64, block_k=32" in reason
    _check_host_matches_interpreter(NESTED_GEMM)


def test_cudnn_fusion_workspace_root_is_allocated_not_refused():
    module = hlo_compile.parse_module(CUDNN_WORKSPACE)
    lower_custom_fusions(module)
    ws = next(i for c in module.computations for i in c.instructions if i.name == "ws")
    assert ws.opcode == "broadcast" and ws.operands[0].opcode == "constant"
    _check_host_matches_interpreter(CUDNN_WORKSPACE)


def test_custom_fusion_address_computation_is_flattened_and_refused_nowhere():
    module = hlo_compile.parse_module(ADDRESS_COMPUTATION)
    lower_custom_fusions(module)
    assert module.entry.root.opcode == "call"
    _check_host_matches_interpreter(ADDRESS_COMPUTATION)


@pytest.mark.parametrize("emit", ["fusions"])
def test_report_names_xla_kind_and_config(tmp_path, emit):
    from click.testing import CliRunner

    from hlo_compile.cli.compile import main
    path = tmp_path / "m.hlo"
    path.write_text(NESTED_GEMM)
    result = CliRunner().invoke(main, [str(path), f"--emit={emit}"])
    assert result.exit_code == 0, result.output
    assert "xla emitter: triton" in result.output and "emitter: dot" in result.output
    assert "backend config kind __triton_gemm (block_m=64" in result.output
