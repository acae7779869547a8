"""The config-tiled dot kernel's epilogue stores and shared memory (issue 29, GEMM parity with
XLA's Triton kernels): each thread's accumulators for ``vn`` adjacent output columns stored as
one vector (``DotTiling.vn``, ``dot_config.contiguous_output``/``store_vector``; the
tensor-core path stores its accumulator pairs), scalar where the output row is not contiguous
or not a multiple of the vector; f32 tiles of one stage taking turns in one buffer
(``dot_staging.tile_reuse``). Host = interpreter on every case, PTX goldens."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.emitters.gemm.dot_config import DotTiling, store_vector
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.options import CompileOptions

from codegen_helpers import filecheck, run_on_host
from test_dot_config_tiling import BMM, CASES, MM, MMA_CASES, TENSOR_CORES, _dot, _emitted_path, _kernel, _nested
from test_emitter_thread_maps import _assert_bijection

BIAS_TANH = """  d = f32[{m},{n}] dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, backend_config={{"sizes":["16"]}}
  bb = f32[{m},{n}] broadcast(p2), dimensions={{1}}
  s = f32[{m},{n}] add(d, bb)
  ROOT t = f32[{m},{n}] tanh(s)"""


def _bias_tanh(m: int, n: int, k: int, tiles: list[int], warps: int) -> str:
    return _nested([f"f32[{m},{k}]", f"f32[{k},{n}]", f"f32[{n}]"], BIAS_TANH.format(m=m, n=n), f"f32[{m},{n}]",
                   tiles, warps)


BF16_GELU = """  d = f32[{m},{n}] dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, backend_config={{"sizes":["16"]}}
  c = bf16[{m},{n}] convert(d)
  h = bf16[] constant(0.5)
  hb = bf16[{m},{n}] broadcast(h), dimensions={{}}
  x = bf16[{m},{n}] multiply(c, hb)
  ROOT g = bf16[{m},{n}] tanh(x)"""

VEC = {
    # XLA's corpus tile: 16x8, 2 warps, f32 + bias + tanh epilogue, M ragged: 2-vectors (v2.b32)
    "f32_16x8_bias_tanh_ragged_m": (_bias_tanh(50, 48, 32, [16, 8], 2), 2),
    # M = 4, N = 10: the tile clamped to 4x8, the store layout still the config's 16x8 (pairs)
    "f32_tiny_clamped_tile": (_bias_tanh(4, 10, 32, [16, 8], 2), 2),
    # N = 45 is odd: no vector holds adjacent columns of one row only, scalar stores
    "f32_16x8_odd_n": (_bias_tanh(40, 45, 32, [16, 8], 2), 1),
    # 32x64 tile on 4 warps: 16 outputs per thread, 4-vectors (v4.b32); N ragged by whole vectors
    "f32_32x64_w4_v4": (_bias_tanh(64, 100, 48, [32, 64], 4), 4),
    # bf16 output through a convert + multiply + tanh epilogue (2 bf16 in one 32-bit store)
    "bf16_out_gelu": (_nested(["bf16[32,48]", "bf16[48,40]"], BF16_GELU.format(m=32, n=40), "bf16[32,40]",
                              [16, 8], 2), 2),
    # s8 x s8 -> s32, batched
    "s8_batched": (_nested(["s8[3,40,64]", "s8[3,64,24]"], _dot("", "", "s32[3,40,24]", BMM, 16), "s32[3,40,24]",
                           [1, 16, 8], 2), 2),
    # the root transposes the dot (batch and M swapped): N still the root's minor dim, vectors
    # through the epilogue's element moves
    "transposed_root": (CASES["transposed_root"][0], 2),
}
# the output's contiguous dim is the dot's M: vectors of adjacent rows (threads M-fastest)
VEC_M = {
    # a column-major dot bitcast to the row-major root, then scaled (attn_backward's)
    "bitcast_root_m_minor": (CASES["bitcast_root"][0], 2),
    # a column-major bf16 dot bitcast to the root (attn_mha_causal_bf16's gemm_fusion_dot.7),
    # M = 72 not a multiple of the 16-row tile: ragged by whole vectors
    "bf16_column_major_root": (_nested(["bf16[64,72]", "bf16[64,48]"], """  d = bf16[72,48]{0,1} dot(p0, p1), lhs_contracting_dims={0}, rhs_contracting_dims={0}, backend_config={"sizes":["16"]}
  ROOT r = bf16[48,72]{1,0} bitcast(d)""", "bf16[48,72]", [8, 16], 2), 2),
    # M = 34: 4-row vectors would straddle the ragged edge, 2-row ones do not (16 x 32 tile on 2
    # warps: 8 outputs per thread)
    "f32_column_major_out_m34": (_nested(["f32[34,24]", "f32[24,64]"], _dot("", "", "f32[34,64]{0,1}", MM, 8),
                                         "f32[34,64]{0,1}", [16, 32], 2), 2),
}


@pytest.mark.parametrize("name", sorted(VEC))
def test_store_vector_and_results(name):
    text, vn = VEC[name]
    module = parse_module(text)
    k = _kernel(module)
    assert k.analysis.emitter == "dot", k.analysis.reason
    assert (k.spec.tiling.vn, k.spec.tiling.vm) == (vn, 1) and k.spec.summary_fields()["store_vector"] == vn
    if vn > 1:
        assert f"stores of {vn} adjacent columns" in "\n".join(k.spec.report_lines())
    ok, report = run_on_host(module, seed=11)
    assert ok, report


@pytest.mark.parametrize("name", sorted(VEC_M))
def test_row_vectors_and_results(name):
    text, vm = VEC_M[name]
    module = parse_module(text)
    k = _kernel(module)
    assert k.analysis.emitter == "dot", k.analysis.reason
    t = k.spec.tiling
    assert (t.vn, t.vm) == (1, vm) and t.m_fastest and k.spec.summary_fields()["store_vector"] == vm
    assert f"stores of {vm} adjacent rows" in "\n".join(k.spec.report_lines())
    ok, report = run_on_host(module, seed=14)
    assert ok, report
    _assert_bijection(k.spec.thread_to_output_map(), k.spec.dot.shape.dimensions)


@pytest.mark.parametrize("name", ["f32_16x8_bias_tanh_ragged_m", "f32_32x64_w4_v4", "s8_batched", "transposed_root"])
def test_thread_to_output_map_with_vectors_is_a_bijection(name):
    k = _kernel(parse_module(VEC[name][0]))
    assert k.spec.tiling.vn > 1
    _assert_bijection(k.spec.thread_to_output_map(), k.spec.root.shape.dimensions
                      if not k.spec.epilogue_moves else k.spec.dot.shape.dimensions)


@pytest.mark.parametrize("bm,bn,warps,vn", [(16, 8, 2, 2), (32, 64, 4, 4), (16, 32, 2, 1), (64, 8, 2, 4),
                                            (16, 24, 2, 2), (128, 16, 8, 4), (16, 128, 2, 4)])
def test_register_columns_cover_the_tile_once(bm, bn, warps, vn):
    """``DotTiling.column`` (the int model of the emitter's columns): over the ``tx`` threads of
    a row and their ``rn`` register columns, every block-tile column once (guarded ones past the
    tile aside), each thread's columns in runs of ``vn`` starting at multiples of ``vn``; rows
    alike with ``vm`` (the tile transposed)."""
    for t, size, count, pos, guarded, threads, vec in (
            (DotTiling(bm, bn, 16, warps, vn=vn), bn, "rn", "column", "column_guarded", "tx", vn),
            (DotTiling(bn, bm, 16, warps, vm=vn), bn, "rm", "row", "row_guarded", "ty", vn)):
        seen = []
        for th in range(getattr(t, threads)):
            cols = [getattr(t, pos)(th, j) for j in range(getattr(t, count))]
            for j, c in enumerate(cols):
                if c >= size:
                    assert getattr(t, guarded)(j)
                    continue
                seen.append(c)
            for g in range(0, len(cols), vec):
                assert cols[g] % vec == 0 and cols[g:g + vec] == list(range(cols[g], cols[g] + vec))
        assert sorted(seen) == list(range(size))
        # every thread of the block once at its (tx_id, ty_id)
        assert sorted(t.thread_xy(tid) for tid in range(t.threads)) == [(x, y) for x in range(t.tx)
                                                                          for y in range(t.ty)]


def test_store_vector_rule():
    # (contiguous row, bn, outputs per thread, element bytes): 16 bytes at most, the thread's
    # share of the tile, dividing bn and the contiguous row
    assert store_vector(48, 8, 2, 4) == 2
    assert store_vector(100, 64, 16, 4) == 4
    assert store_vector(128, 64, 32, 2) == 8
    assert store_vector(128, 64, 32, 4) == 4
    assert store_vector(45, 8, 2, 4) == 1
    assert store_vector(6, 64, 32, 4) == 2
    assert store_vector(1, 64, 32, 4) == 1
    assert store_vector(64, 8, 1, 4) == 1
    # the share is the config's tile's: a 16x8 tile clamped to 4x8 (M = 4) still stores pairs
    t = DotTiling(4, 8, 16, 2, config_elements=16 * 8)
    assert t.store_share == 2 and DotTiling(4, 8, 16, 2).store_share == 1


# ---- one f32 tile buffer for both operands (dot_staging.tile_reuse) -----------------------------
@pytest.mark.parametrize("text,first,from_k,values,shared", [
    # XLA's 16x8x16 f32 tile: lhs 16x16 at byte 0, the rhs 16x8 over its rows k >= 8 (1 x 8
    # values per thread in registers); 1024 B, not 1536
    (_bias_tanh(50, 48, 48, [16, 8], 2), "lhs", 8, 8, 16 * 16 * 4),
    # 16 x 32 tile, N odd (scalar columns; 16 x 4 threads of 4 x 2 outputs): the 16x32 rhs (2048 B)
    # first, the 16x16 lhs (1024 B) over its rows k >= 8: rn x 8 = 16 values (lhs first: 4 x 16)
    (_bias_tanh(40, 45, 64, [16, 32], 2), "rhs", 8, 2 * 8, 16 * 32 * 4),
    # 64 x 8 on 2 warps, M-contiguous output (4-row vectors: 8 x 8 threads of 8 x 1): lhs 64x16
    # (4096 B) first, the rhs (512 B) over its last 2 rows: 8 x 2 values
    (_nested(["f32[64,32]", "f32[32,16]"], _dot("", "", "f32[64,16]{0,1}", MM, 16), "f32[64,16]{0,1}",
             [64, 8], 2), "lhs", 14, 8 * 2, 64 * 16 * 4),
])
def test_one_stage_f32_tiles_share_their_bytes(text, first, from_k, values, shared):
    module = parse_module(text)
    k = _kernel(module)
    r = k.spec.tile_reuse
    assert (r.first, r.from_k, r.register_values) == (first, from_k, values) and k.launch.shared_bytes == shared
    assert r.second_offset == shared - (k.spec.staging[1 if first == "lhs" else 0]).tile_bytes
    assert k.spec.summary_fields()["tile_reuse"]["from_k"] == from_k
    ok, report = run_on_host(module, seed=12)
    assert ok, report


@pytest.mark.parametrize("text,shared", [
    # K = 40 not a multiple of block_k 16 (as XLA's kernels with a ragged K): both tiles
    (_bias_tanh(50, 48, 40, [16, 8], 2), (16 * 16 + 16 * 8) * 4),
    # two stages (pipelined): both tiles of both stages
    (CASES["f32_vec4_stages3"][0], 3 * (32 * 16 + 16 * 32) * 4),
    # bf16 operands: both tiles live at once (as XLA's bf16 kernels: 768 B for 16x8x16)
    (_nested(["bf16[32,48]", "bf16[48,40]"], BF16_GELU.format(m=32, n=40), "bf16[32,40]", [16, 8], 2),
     (16 * 16 + 16 * 8) * 2),
])
def test_tiles_side_by_side(text, shared):
    module = parse_module(text)
    k = _kernel(module)
    assert k.spec.tile_reuse is None and k.launch.shared_bytes == shared
    ok, report = run_on_host(module, seed=12)
    assert ok, report


# ---- tensor cores: accumulator pairs ------------------------------------------------------------
@pytest.mark.parametrize("name,pairs", [("mma_bf16_64x64x32_w4_ragged", True), ("mma_bf16_16x8_w2_replicated", False),
                                        ("mma_bf16_convert_prologue_f32_out", True)])
def test_tensor_core_path_stores_accumulator_pairs(name, pairs):
    module = parse_module(MMA_CASES[name][0])
    path, k = _emitted_path(module)
    assert path == "mma" and k.spec.summary_fields()["store_vector"] == (2 if pairs else 1)
    ok, report = run_on_host(module, seed=13, options=TENSOR_CORES)
    assert ok, report


# ---- PTX goldens ---------------------------------------------------------------------------------
def test_ptx_vector_store_after_the_epilogue(tmp_path):
    """16x8x16 f32, bias + tanh: lhs staged, its rows k >= 8 read into registers, rhs staged over
    them (one 1024-byte buffer), FMA, then the bias and tanh per element and one
    ``st.global.v2.b32``."""
    ptx = run_pipeline(parse_module(_bias_tanh(64, 48, 32, [16, 8], 2)), CompileOptions(arch="sm_90"),
                       emit="ptx").artifacts["ptx"]
    filecheck(ptx, """
CHECK: .extern .shared .align 16 .b8 dot_tiles[];
CHECK: .visible .entry f(
CHECK: ld.global.nc.v4.b32
CHECK: st.shared
CHECK: bar.sync 0;
CHECK: ld.shared.b32
CHECK: bar.sync 0;
CHECK: ld.global.nc.v4.b32
CHECK: st.shared.v4.b32
CHECK: bar.sync 0;
CHECK: ld.shared.v2.b32
CHECK: fma.rn.f32
CHECK: bar.sync 0;
CHECK: ld.global.nc.b32
CHECK: ex2.approx
CHECK: ld.global.nc.b32
CHECK: ex2.approx
CHECK-NOT: st.global.b32
CHECK: st.global.v2.b32 [%rd{{[0-9]+}}], {%r{{[0-9]+}}, %r{{[0-9]+}}};
CHECK-NOT: st.global
CHECK: ret;
""", tmp_path)


def test_ptx_vector_stores_v4_bf16_and_tensor_cores(tmp_path):
    ptx = run_pipeline(parse_module(VEC["f32_32x64_w4_v4"][0]), CompileOptions(arch="sm_90"),
                       emit="ptx").artifacts["ptx"]
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK-NOT: st.global.b32
CHECK: st.global.v4.b32
CHECK: ret;
""", tmp_path)
    ptx = run_pipeline(parse_module(VEC["bf16_out_gelu"][0]), CompileOptions(arch="sm_90"),
                       emit="ptx").artifacts["ptx"]
    assert "st.global.b16" not in ptx and ("st.global.b32" in ptx or "st.global.v2.b16" in ptx), ptx[-3000:]
    # rows: a column-major bf16 dot bitcast to the root, 2 adjacent rows in one 32-bit store
    ptx = run_pipeline(parse_module(VEC_M["bf16_column_major_root"][0]), CompileOptions(arch="sm_90"),
                       emit="ptx").artifacts["ptx"]
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK: ld.shared.v2.b16
CHECK: fma.rn.f32
CHECK-NOT: st.global.b16
CHECK: st.global.b32
CHECK: ret;
""", tmp_path)
    ptx = run_pipeline(parse_module(MMA_CASES["mma_bf16_convert_prologue_f32_out"][0]),
                       CompileOptions(arch="sm_90", dot_tensor_cores=True), emit="ptx").artifacts["ptx"]
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
CHECK-NOT: st.global.f32
CHECK-NOT: st.global.b32
CHECK: st.global.v2.f32
CHECK: ret;
""".replace("v2.f32", "v2.{{f32|b32}}").replace("CHECK-NOT: st.global.f32\n", ""), tmp_path)
