"""Loop emitter launch configuration (unroll factor, grid) and its thread -> output map."""
from __future__ import annotations

from dataclasses import replace
from itertools import product

import pytest

import hlo_compile
from hlo_compile.gpu.archs import device_for_arch
from hlo_compile.codegen.analysis.fusion_analysis import analyze_fusion
from hlo_compile.codegen.launch import LoopConfig, loop_fusion_config, loop_launch_dims, thread_to_output_map
from hlo_compile.codegen.target import LaunchDims
from hlo_compile.indexing import affine as A
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion

H100, A100, B200 = device_for_arch("sm_90"), device_for_arch("sm_80"), device_for_arch("sm_100")


def fusion(body: str):
    return wrap_entry_as_fusion(hlo_compile.parse_module(body)).entry.root


def unary(shape: str, op: str = "negate", out: str | None = None):
    return fusion(f"""fusion {{
  p = {shape} parameter(0)
  ROOT r = {out or shape} {op}(p)
}}""")


@pytest.mark.parametrize("shape,device,unroll,grid,block", [
    ("f32[1024,1024]", H100, 4, (2048, 1, 1), (128, 1, 1)),
    ("f32[1024,1024]", A100, 4, (2048, 1, 1), (128, 1, 1)),
    ("f32[250000]", H100, 1, (1954, 1, 1), (128, 1, 1)),     # below 132 * 2048 threads: no unroll
    ("f32[250000]", A100, 4, (489, 1, 1), (128, 1, 1)),      # above 108 * 2048
    ("f32[270338]", H100, 2, (1057, 1, 1), (128, 1, 1)),     # gcd(270338, 4) = 2
    ("f32[270339]", H100, 1, (2113, 1, 1), (128, 1, 1)),     # odd: no unroll
    ("f32[5]", H100, 1, (1, 1, 1), (5, 1, 1)),
    ("f32[1]", H100, 1, (1, 1, 1), (1, 1, 1)),
    ("f32[]", A100, 1, (1, 1, 1), (1, 1, 1)),
])
def test_unroll_and_launch(shape, device, unroll, grid, block):
    c = loop_fusion_config(unary(shape), device)
    assert (c.unroll_factor, c.launch.grid, c.launch.block) == (unroll, grid, block)


def test_sub_byte_outputs_unroll_so_no_two_threads_share_a_byte():
    c = loop_fusion_config(unary("s8[1000]", "convert", "s4[1000]"), H100)
    assert (c.unroll_factor, c.launch.grid, c.launch.block) == (2, (4, 1, 1), (128, 1, 1))
    c = loop_fusion_config(unary("s8[1000]", "convert", "pred[1000]"), H100)
    assert c.unroll_factor == 1  # pred is a byte


def test_unroll_hostile_ops():
    big = "f32[1048576]"
    sort = fusion(f"""less {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}}
fusion {{
  p = {big} parameter(0)
  ROOT s = {big} sort(p), dimensions={{0}}, to_apply=less
}}""")
    assert loop_fusion_config(sort, H100).unroll_factor == 1
    ops = ", ".join(["p"] * 11)
    concat = fusion(f"""fusion {{
  p = f32[1024,128] parameter(0)
  ROOT c = f32[11264,128] concatenate({ops}), dimensions={{0}}
}}""")
    assert loop_fusion_config(concat, H100).unroll_factor == 1
    window = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fusion {
  p = f32[1026,1026] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[%d,%d] reduce-window(p, c), window={size=%s}, to_apply=add
}"""
    assert loop_fusion_config(fusion(window % (1024, 1024, "3x3")), H100).unroll_factor == 1  # 9 > 8
    assert loop_fusion_config(fusion(window % (1025, 1025, "2x2")), H100).unroll_factor == 1  # odd count
    assert loop_fusion_config(fusion(window % (1024, 1026, "3x1")), H100).unroll_factor == 4


def test_grid_splits_into_y_beyond_the_x_limit():
    # XLA's broadcast_constant_block_dim_limit.hlo: workgroup x in [0, 1207959551], y in [0, 1].
    c = loop_fusion_config(fusion("""bcast {
  one = bf16[] constant(1)
  ROOT broadcast = bf16[24,2048,2048,3,4096]{4,3,2,1,0} broadcast(one), dimensions={}
}"""), H100)
    assert (c.unroll_factor, c.launch.grid, c.launch.block) == (4, (1207959552, 2, 1), (128, 1, 1))
    tiny = replace(H100, block_dim_limit=(3, 65535, 65535))
    assert loop_launch_dims(1000, 1, tiny) == LaunchDims((3, 3, 1), (128, 1, 1))


def test_blackwell_vectorises_narrow_types():
    concat = fusion("""fusion {
  p0 = bf16[1024000] parameter(0)
  p1 = bf16[1024000] parameter(1)
  ROOT result = bf16[2048000] concatenate(p0, p1), dimensions={0}
}""")
    a = analyze_fusion(concat, B200)
    assert a.xla_emitter == "concatenate"
    # XLA's concatenate test: CUDA 12.9 (256-bit vectors), max unroll flag 32 -> 16 bf16.
    assert loop_fusion_config(a, B200, vector_bits=256, max_unroll_factor=32).unroll_factor == 16
    assert loop_fusion_config(a, B200).unroll_factor == 8
    assert loop_fusion_config(concat, H100).unroll_factor == 4


def test_thread_map_reads_like_xla_docs():
    c = loop_fusion_config(unary("f32[1024,1024]", "tanh"), H100)
    m = thread_to_output_map(c.shape, c)
    assert m.to_text() == (
        "(th_x, th_y, th_z, bl_x, bl_y, bl_z)[s0] -> (bl_x floordiv 2, th_x * 4 + s0 + (bl_x mod 2) * 512), "
        "domain: th_x in [0, 127], th_y in [0, 0], th_z in [0, 0], bl_x in [0, 2047], bl_y in [0, 0], "
        "bl_z in [0, 0], s0 in [0, 3]")


def test_thread_map_without_unroll_has_no_symbols():
    c = loop_fusion_config(unary("f32[10,20]"), H100)
    m = thread_to_output_map(c.shape, c)
    assert not m.ranges and m.to_text().startswith("(th_x, th_y, th_z, bl_x, bl_y, bl_z) -> (")


def _produced(shape, config):
    """Every output index the map produces, once per (thread, block, symbol) domain point."""
    m = thread_to_output_map(shape, config)
    out = []
    for dims, syms, _ in m.domain():
        index = tuple(A.evaluate(e, dims, syms) for e in m.exprs)
        assert m.satisfies(dims, syms)
        out.append(index)
    return out


def _shape(text: str):
    return hlo_compile.parse_shape(text)


@pytest.mark.parametrize("shape_text", ["f32[7]", "f32[3,5]", "f32[4,1,6]", "f32[2,3,4]{0,2,1}",
                                        "f32[300]", "f32[6,50]{0,1}", "f32[]"])
@pytest.mark.parametrize("unroll", [1, 2, 4])
def test_thread_map_is_a_bijection(shape_text, unroll):
    shape = _shape(shape_text)
    config = LoopConfig(unroll, loop_launch_dims(shape.element_count(), unroll, H100), shape)
    produced = _produced(shape, config)
    expected = list(product(*(range(n) for n in shape.dimensions)))
    assert sorted(produced) == sorted(expected)  # every element exactly once


@pytest.mark.parametrize("grid,block,unroll", [((2, 1, 1), (4, 1, 1), 1), ((2, 1, 1), (4, 1, 1), 2),
                                               ((3, 2, 1), (2, 2, 1), 2), ((1, 1, 2), (3, 1, 2), 1)])
def test_thread_map_with_chunks_and_multi_dim_grids_is_a_bijection(grid, block, unroll):
    shape = _shape("f32[5,10]{0,1}")
    config = LoopConfig(unroll, LaunchDims(grid, block), shape)
    produced = _produced(shape, config)
    assert sorted(produced) == sorted(product(range(5), range(10)))


def test_consecutive_threads_write_consecutive_memory():
    shape = _shape("f32[6,50]{0,1}")
    config = LoopConfig(2, loop_launch_dims(300, 2, H100), shape)
    m = thread_to_output_map(shape, config)
    for th in range(3):
        for s in range(2):
            index = [A.evaluate(e, (th, 0, 0, 0, 0, 0), (s,)) for e in m.exprs]
            assert shape.linear_index(index) == th * 2 + s


def test_a_grid_beyond_the_limit_is_refused_naming_the_fusion(tmp_path):
    """2^61 - 1 elements need more blocks than any grid holds: exit 2 with the instruction and
    its line, not an internal error."""
    import subprocess
    import sys
    path = tmp_path / "big.hlo"
    path.write_text("HloModule big\nENTRY e {\n  a = f32[2305843009213693951] parameter(0)\n"
                    "  ROOT n = f32[2305843009213693951] negate(a)\n}\n")
    res = subprocess.run([sys.executable, "-m", "hlo_compile.cli.compile", str(path), "--emit=fusions"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "fusion '%n' (line 4)" in res.stderr and "grid limit" in res.stderr, res.stderr
