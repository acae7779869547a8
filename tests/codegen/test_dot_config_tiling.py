"""The dot emitter on XLA's Triton GEMM configs (``emitters/gemm/dot_config.py``): the
config's tile, warps and XLA's launch (1-D block of num_warps * 32 threads, XLA's grid), ragged
edges, batch dims, bf16, epilogues that transpose or bitcast the dot, GEMM fusions the fixed
tiling refused (tiny dots, pred operands): all on the dot emitter, host = interpreter."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import filecheck, run_on_host


def _nested(params: list[str], body: str, out: str, tiles: list[int], warps: int, stages: int = 1) -> str:
    sizes = ",".join(f'"{t}"' for t in tiles)
    decl = "\n".join(f"  p{i} = {p} parameter({i})" for i, p in enumerate(params))
    args = ", ".join(f"p{i}" for i in range(len(params)))
    return f"""HloModule m
gemm {{
{decl}
{body}
}}
ENTRY e {{
{decl}
  ROOT f = {out} fusion({args}), kind=kCustom, calls=gemm, backend_config={{"fusion_backend_config":{{"kind":"__triton_nested_gemm_fusion","block_level_fusion_config":{{"num_warps":"{warps}","output_tiles":[{{"sizes":[{sizes}]}}],"num_ctas":1,"num_stages":{stages}}}}}}}
}}"""


def _dot(lhs: str, rhs: str, out: str, dims: str, block_k: int) -> str:
    return f'  ROOT d = {out} dot(p0, p1), {dims}, backend_config={{"sizes":["{block_k}"]}}'


MM = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
BMM = "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}"

CASES = {
    # block_m=32 block_n=64 block_k=32, 4 warps; M, N, K all ragged (100 = 3*32+4, 90, 70)
    "f32_32x64x32_w4_ragged": (_nested(["f32[100,70]", "f32[70,90]"],
                                       _dot("", "", "f32[100,90]", MM, 32), "f32[100,90]", [32, 64], 4),
                               (8, 1, 1), (128, 1, 1)),
    "f32_batch_1x16x8_w2": (_nested(["f32[3,40,50]", "f32[3,50,24]"],
                                    _dot("", "", "f32[3,40,24]", BMM, 16), "f32[3,40,24]", [1, 16, 8], 2),
                            (27, 1, 1), (64, 1, 1)),
    "bf16_16x32x16_w2": (_nested(["bf16[64,48]", "bf16[48,40]"],
                                 _dot("", "", "bf16[64,40]", MM, 16), "bf16[64,40]", [16, 32], 2),
                         (8, 1, 1), (64, 1, 1)),
    "tiny_4x10x32": (_nested(["f32[4,32]", "f32[32,10]"],
                             _dot("", "", "f32[4,10]", MM, 16), "f32[4,10]", [16, 8], 2),
                     (2, 1, 1), (64, 1, 1)),
    # the root transposes the dot (fused_attention's gemm_fusion_dot.3): tiles of the root's dims
    "transposed_root": (_nested(["f32[2,64,64]", "f32[64,2,64]"], """  t = f32[2,64,64]{2,0,1} transpose(p1), dimensions={1,0,2}
  d = f32[2,64,64] dot(p0, t), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, backend_config={"sizes":["64"]}
  ROOT r = f32[64,2,64] transpose(d), dimensions={1,0,2}""", "f32[64,2,64]", [16, 1, 8], 2), (64, 1, 1), (64, 1, 1)),
    # a column-major dot bitcast to the row-major root, then scaled (attn_backward's gemm_fusion_dot.9)
    "bitcast_root": (_nested(["f32[8,32,64]", "f32[8,64,64]"], """  d = f32[8,64,32]{1,2,0} dot(p1, p0), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}, backend_config={"sizes":["16"]}
  c = f32[8,32,64]{2,1,0} bitcast(d)
  two = f32[] constant(2)
  bc = f32[8,32,64] broadcast(two), dimensions={}
  ROOT r = f32[8,32,64] multiply(c, bc)""", "f32[8,32,64]", [1, 8, 16], 2), (128, 1, 1), (64, 1, 1)),
    # wide loads and pipelining (dot_staging.py): 128-bit f32 loads, 3 stages of shared tiles
    "f32_vec4_stages3": (_nested(["f32[96,64]", "f32[64,128]"], _dot("", "", "f32[96,128]", MM, 16), "f32[96,128]",
                                 [32, 32], 4, 3), (12, 1, 1), (128, 1, 1)),
    # bf16 tiles in shared memory (half an f32 tile), 8-element loads, 2 stages
    "bf16_vec8_stages2": (_nested(["bf16[64,128]", "bf16[128,48]"], _dot("", "", "bf16[64,48]", MM, 32),
                                  "bf16[64,48]", [16, 16], 2, 2), (12, 1, 1), (64, 1, 1)),
    # column-major operands: lhs loads along M, rhs along K
    "column_major_operands": (_nested(["f32[64,40]{0,1}", "f32[40,32]{0,1}"], _dot("", "", "f32[64,32]", MM, 8),
                                      "f32[64,32]", [16, 16], 2, 2), (8, 1, 1), (64, 1, 1)),
    # a convert prologue: 8 bf16 lanes of one load, each converted to the f32 operand
    "convert_prologue": (_nested(["bf16[32,64]", "f32[64,32]"], """  c = f32[32,64] convert(p0)
  ROOT d = f32[32,32] dot(c, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"sizes":["16"]}""",
                                 "f32[32,32]", [16, 16], 2, 2), (4, 1, 1), (64, 1, 1)),
    # ragged M, N, K with 4-element loads: the tail vectors lie wholly outside and load zeros
    "ragged_vec_tail": (_nested(["f32[50,44]", "f32[44,36]"], _dot("", "", "f32[50,36]", MM, 32), "f32[50,36]",
                                [32, 32], 4, 2), (4, 1, 1), (128, 1, 1)),
    # a bias-add + relu prologue (mdl_mlp's gemm_fusion_dot_general.5): p0 as 4-lane loads, the
    # broadcast bias element by element
    "bias_relu_prologue": (_nested(["f32[64,256]", "f32[256]", "f32[256,12]"], """  bb = f32[64,256] broadcast(p1), dimensions={1}
  s = f32[64,256] add(p0, bb)
  z = f32[] constant(0)
  zb = f32[64,256] broadcast(z), dimensions={}
  r = f32[64,256] maximum(s, zb)
  ROOT d = f32[64,12] dot(r, p2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"sizes":["32"]}""",
                                   "f32[64,12]", [16, 8], 2), (8, 1, 1), (64, 1, 1)),
    "pred_operand": (_nested(["f32[8,16]", "pred[16,12]"], """  c = f32[16,12] convert(p1)
  ROOT d = f32[8,12] dot(p0, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"sizes":["16"]}""",
                             "f32[8,12]", [16, 8], 2), (2, 1, 1), (64, 1, 1)),
}

LEGACY = """HloModule m
gemm {
  a = f32[2,100,70] parameter(0)
  b = f32[2,70,90] parameter(1)
  ROOT d = f32[2,100,90] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
ENTRY e {
  a = f32[2,100,70] parameter(0)
  b = f32[2,70,90] parameter(1)
  ROOT f = f32[2,100,90] fusion(a, b), kind=kCustom, calls=gemm, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"32","block_n":"64","block_k":"32","split_k":"1","num_stages":"2","num_warps":"4","num_ctas":"1"}}}
}"""


def _kernel(module, **opts):
    (k,) = [k for k in plan_module(module, CompileOptions(**opts)).kernels]
    return k


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_tiling_launch_and_results(name):
    text, grid, block = CASES[name]
    module = parse_module(text)
    k = _kernel(module)
    assert k.analysis.emitter == "dot", k.analysis.reason
    assert "tiles it by the config" in k.analysis.reason
    assert k.launch.grid == grid and k.launch.block == block
    assert k.spec.tiling is not None and k.spec.summary_fields()["threads_per_block"] == block[0]
    ok, report = run_on_host(module, seed=3)
    assert ok, report


def test_config_tile_figures():
    k = _kernel(parse_module(CASES["f32_32x64x32_w4_ragged"][0]))
    t = k.spec.tiling
    assert (t.bm, t.bn, t.bk, t.threads) == (32, 64, 32, 128)
    assert t.tx * t.ty == 128 and t.rm * t.ty >= 32 and t.rn * t.tx >= 64
    # operand-typed tiles (f32 here), one stage, in dynamic shared memory as XLA launches them
    # (K = 70 is ragged: both tiles at once, dot_staging.tile_reuse)
    assert k.spec.static_shared_bytes == 0 and k.launch.shared_bytes == (32 * 32 + 32 * 64) * 4
    # thread -> output map: every output element once (checked through the indexing stage)
    assert "th_x" in k.spec.thread_to_output_map().to_text()


def test_legacy_triton_gemm_config():
    module = parse_module(LEGACY)
    k = _kernel(module)
    assert k.analysis.emitter == "dot", k.analysis.reason
    assert k.launch.grid == (8, 1, 2) and k.launch.block == (128, 1, 1)
    ok, report = run_on_host(module, seed=4)
    assert ok, report


# ---- tensor cores on the config tiling (dot_mma.emit_config_mma_dot_kernel) ----------------------
# with --tensor-cores the host runs these on the tensor-core path, its warp MMA emulated from the
# PTX ISA's fragment tables (dot_mma.EmulatedMma): host = interpreter checks the fragments the
# kernel loads; without, the FMA path as on the GPU
MMA_CASES = {
    # 2x2 warps of 2x4 mma tiles, M, N, K ragged (100, 90, 70), 2 K steps of 16 per block_k, 2 stages
    "mma_bf16_64x64x32_w4_ragged": (_nested(["bf16[100,70]", "bf16[70,90]"], _dot("", "", "bf16[100,90]", MM, 32),
                                            "bf16[100,90]", [64, 64], 4, 2), "2x2 warps of 32x32"),
    # batch, f16, N tile clamped to 32 (N = 24), K = 50 ragged, 2 warps
    "mma_f16_batch_32x32x16_w2": (_nested(["f16[3,40,50]", "f16[3,50,24]"], _dot("", "", "f16[3,40,24]", BMM, 16),
                                          "f16[3,40,24]", [1, 32, 32], 2), "1x2 warps of 32x16"),
    # a convert prologue (f32 -> bf16 lhs), f32 output, 2 warps over N
    "mma_bf16_convert_prologue_f32_out": (_nested(["f32[48,64]", "bf16[64,40]"], """  c = bf16[48,64] convert(p0)
  ROOT d = f32[48,40] dot(c, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"sizes":["32"]}""",
                                                  "f32[48,40]", [16, 16], 2), "1x2 warps of 16x8"),
    # 8 warps as 4x2 over a 128x32 tile, block_k 64 (4 mma K steps), 3 stages, K = 100 ragged
    "mma_bf16_128x32x64_w8": (_nested(["bf16[130,100]", "bf16[100,33]"], _dot("", "", "bf16[130,33]", MM, 64),
                                      "bf16[130,33]", [128, 32], 8, 3), "4x2 warps of 32x16"),
    # column-major f16 operands (lhs loads along M, rhs along K), 4 warps
    # more warps than 16 x 8 tiles (the corpus's 16x8 tiles on 2 warps): warp 1 repeats warp 0's
    # tile and stores nothing; M, N, K ragged
    "mma_bf16_16x8_w2_replicated": (_nested(["bf16[20,40]", "bf16[40,13]"], _dot("", "", "bf16[20,13]", MM, 16),
                                            "bf16[20,13]", [16, 8], 2), "each tile on 2 warps"),
    "mma_f16_column_major": (_nested(["f16[64,40]{0,1}", "f16[40,32]{0,1}"], _dot("", "", "f16[64,32]", MM, 16),
                                     "f16[64,32]", [32, 32], 4, 2), "2x2 warps of 16x16"),
}


def _emitted_path(module, tensor_cores: bool = True) -> tuple[str, object]:
    from hlo_compile.targets.host.target import HostTarget
    k = _kernel(module)
    k.emit(HostTarget("coro", tensor_cores=tensor_cores))
    return str(k.spec.path), k


TENSOR_CORES = CompileOptions(dot_tensor_cores=True)


@pytest.mark.parametrize("name", sorted(MMA_CASES))
def test_config_tensor_cores_on_host(name):
    text, layout = MMA_CASES[name]
    module = parse_module(text)
    path, k = _emitted_path(module)
    assert path == "mma", "\n".join(k.spec.report_lines())
    assert layout in "\n".join(k.spec.report_lines())
    ok, report = run_on_host(module, seed=5, options=TENSOR_CORES)
    assert ok, report


def test_without_tensor_cores_the_host_runs_the_gpus_default_kernel():
    """No --tensor-cores: the host emits the FMA path, as the GPU does by default."""
    module = parse_module(MMA_CASES["mma_bf16_64x64x32_w4_ragged"][0])
    assert _emitted_path(module, tensor_cores=False)[0] == "tiled"
    ok, report = run_on_host(module, seed=5)
    assert ok, report


def test_config_tensor_cores_keep_the_launch_and_shared_memory():
    """--tensor-cores on sm_80: mma.sync with XLA's launch and the same dynamic shared memory as
    the FMA path (sm_75: the FMA path)."""
    module = parse_module(MMA_CASES["mma_bf16_64x64x32_w4_ragged"][0])
    k = _kernel(module)
    launch = k.launch
    ptx = run_pipeline(module, CompileOptions(arch="sm_80", dot_tensor_cores=True), emit="ptx").artifacts["ptx"]
    assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") % 16 == 0 and "mma.sync" in ptx
    assert _kernel(module).launch == launch and launch.shared_bytes == 2 * (32 * 64 + 32 * 64) * 2
    from hlo_compile.targets.nvptx import NvptxTarget
    k.emit(NvptxTarget("sm_75", dot_tensor_cores=True))
    assert str(k.spec.path) == "tiled"
    off = run_pipeline(module, CompileOptions(arch="sm_90"), emit="ptx").artifacts["ptx"]
    assert "mma" not in off


@pytest.mark.parametrize("text,why", [
    (_nested(["bf16[8,64]", "bf16[64,32]"], _dot("", "", "bf16[8,32]", MM, 32), "bf16[8,32]", [8, 32], 2),
     "block_m 8 is not a multiple of 16"),
    (_nested(["bf16[32,64]", "bf16[64,32]"], _dot("", "", "bf16[32,32]", MM, 8), "bf16[32,32]", [32, 32], 2),
     "block_k 8 is not a multiple of 16"),
    (CASES["f32_vec4_stages3"][0], "operands f32 x f32"),
])
def test_config_tensor_cores_fall_back_with_the_reason(text, why):
    module = parse_module(text)
    path, k = _emitted_path(module)
    assert path == "tiled"
    assert f"tensor cores: not used, FMA path ({why}" in "\n".join(k.spec.report_lines())
    assert why in k.spec.summary_fields()["tensor_cores"]
    ok, report = run_on_host(module, seed=6)
    assert ok, report


def test_ptx_config_tensor_cores(tmp_path):
    module = parse_module(MMA_CASES["mma_bf16_64x64x32_w4_ragged"][0])
    ptx = run_pipeline(module, CompileOptions(arch="sm_90", dot_tensor_cores=True), emit="ptx").artifacts["ptx"]
    filecheck(ptx, """
CHECK: .extern .shared .align 16 .b8 dot_tiles[];
CHECK: .visible .entry f(
CHECK: ld.global.nc.v2.b16
CHECK: st.shared
CHECK: bar.sync 0;
CHECK: ld.shared.b16
CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
CHECK: bar.sync 0;
CHECK: st.global
CHECK: ret;
""", tmp_path)
    assert "ldmatrix" not in ptx and ".shared .align" not in ptx.replace(".extern .shared", "")


def test_ptx_config_tiles(tmp_path):
    module = parse_module(CASES["f32_32x64x32_w4_ragged"][0])
    ptx = run_pipeline(module, CompileOptions(arch="sm_90"), emit="ptx").artifacts["ptx"]
    filecheck(ptx, """
CHECK: .extern .shared .align 16 .b8 dot_tiles[];
CHECK: .visible .entry f(
CHECK: mov.u32 %r{{[0-9]+}}, %ctaid.x;
CHECK: st.shared
CHECK: bar.sync 0;
CHECK: ld.shared
CHECK: fma.rn.f32
CHECK: bar.sync 0;
CHECK: ld.global.nc.v2.b32
CHECK: st.global
CHECK: ret;
""", tmp_path)
    # K = 70 and N = 90 are even, not multiples of 4: 2-element (64-bit) loads
    assert [s.vec for s in _kernel(module).spec.staging] == [2, 2]


def test_tile_smaller_than_the_block_stages_nothing_past_it():
    """XLA:GPU's one-hot GEMM of a k-means step (lax_while_kmeans: pred[60,4] contracted on
    dim 0 with f32[60,2]; config tiles 16x8 clamped to 4x2, block_k 16, 2 warps): the 2x16 rhs
    tile has 32 elements for 64 threads. The other 32 threads must store nothing into shared
    memory (they wrote past the tile: heap corruption on the host, 'corrupted size vs.
    prev_size'); the result must match the interpreter on every run."""
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "data" / "gemm" / "small_tile_more_threads.hlo").read_text()
    module = parse_module(text)
    plan = plan_module(module, CompileOptions(arch="sm_90"))
    assert plan.kernels[0].launch.block == (64, 1, 1)
    for seed in range(3):
        ok, report = run_on_host(module, seed=seed)
        assert ok, report


# ---- wide loads, operand-typed tiles, pipelining (dot_staging.py) ------------------------------------
@pytest.mark.parametrize("name,vecs,shared", [
    ("f32_vec4_stages3", [4, 4], 3 * (32 * 16 + 16 * 32) * 4),
    ("bf16_vec8_stages2", [8, 8], 2 * (16 * 32 + 32 * 16) * 2),
    ("column_major_operands", [4, 4], 2 * (16 * 8 + 8 * 16) * 4),
    ("convert_prologue", [8, 4], 2 * (16 * 16 + 16 * 16) * 4),
    ("ragged_vec_tail", [4, 4], 2 * (32 * 32 + 32 * 32) * 4),
    # f32, one stage: the lhs and rhs tiles take turns in the larger one's bytes (as XLA's)
    ("bias_relu_prologue", [4, 4], max(16 * 32, 32 * 8) * 4),
])
def test_staging_plan(name, vecs, shared):
    k = _kernel(parse_module(CASES[name][0]))
    assert [s.vec for s in k.spec.staging] == vecs
    assert k.launch.shared_bytes == shared and k.spec.static_shared_bytes == 0
    fields = k.spec.summary_fields()
    assert fields["load_vector"] == vecs and fields["dynamic_shared_bytes"] == shared


def test_column_major_operands_load_along_their_minor_dim():
    a, b = _kernel(parse_module(CASES["column_major_operands"][0])).spec.staging
    assert (a.along_k, b.along_k) == (False, True)


@pytest.mark.parametrize("along_k,vec,tile,bk", [(True, 4, 32, 16), (False, 4, 16, 8), (True, 8, 16, 32),
                                                  (False, 2, 8, 16), (True, 1, 16, 16)])
def test_chunks_cover_the_tile_once(along_k, vec, tile, bk):
    """The emitter's chunk -> (free, k) arithmetic, on ints: every tile element once."""
    from hlo_compile.codegen.emitters.gemm.dot_staging import OperandStaging
    s = OperandStaging(True, tile, bk, along_k, vec)
    seen = []
    for c in range(s.count):
        f, k = s.chunk_origin(c)
        seen += [(f, k + lane) if along_k else (f + lane, k) for lane in range(vec)]
    assert sorted(seen) == [(f, k) for f in range(tile) for k in range(bk)]


def test_ptx_wide_loads_and_stages(tmp_path):
    """128-bit operand loads (v4 of f32; v8 of bf16 packed in v4.b32), one dynamic shared array
    of 3 stages, one barrier per K step in the pipelined loop (and one after the prologue)."""
    module = parse_module(CASES["f32_vec4_stages3"][0])
    ptx = run_pipeline(module, CompileOptions(arch="sm_90"), emit="ptx").artifacts["ptx"]
    filecheck(ptx, """
CHECK: .extern .shared .align 16 .b8 dot_tiles[];
CHECK: .visible .entry f(
CHECK: ld.global.nc.v4.b32
CHECK: st.shared
CHECK: bar.sync 0;
CHECK: ld.shared
CHECK: fma.rn.f32
CHECK: bar.sync 0;
CHECK: ld.global.nc.v4.b32
CHECK: st.shared
CHECK: st.global
CHECK: ret;
""", tmp_path)
    # the prologue's barrier and the loop's one (the prefetch of step s + 2 sits before compute)
    assert ptx.count("bar.sync") == 2
    ptx = run_pipeline(parse_module(CASES["bf16_vec8_stages2"][0]), CompileOptions(arch="sm_90"),
                       emit="ptx").artifacts["ptx"]
    filecheck(ptx, """
CHECK: .extern .shared .align 16 .b8 dot_tiles[];
CHECK: ld.global.nc.v4.b32
CHECK: st.shared{{.*}}.b16
CHECK: bar.sync 0;
CHECK: ld.shared{{.*}}.b16
CHECK: fma.rn.f32
""", tmp_path)
    assert "ld.global.nc.b16" not in ptx


def test_stages_shrink_to_the_device_shared_memory():
    """A config whose stages would not fit the device's shared memory keeps the stages that do."""
    from hlo_compile.gpu.archs import device_for_arch
    text = _nested(["f32[512,512]", "f32[512,512]"], _dot("", "", "f32[512,512]", MM, 64), "f32[512,512]",
                   [128, 128], 8, 4)
    k = _kernel(parse_module(text), arch="sm_90")
    limit = device_for_arch("sm_90").shared_memory_per_block_optin
    assert 4 * (128 * 64 + 64 * 128) * 4 > limit
    assert 1 <= k.spec.tiling.num_stages < 4
    assert k.launch.shared_bytes == k.spec.tiling.num_stages * (128 * 64 + 64 * 128) * 4 <= limit


SPLIT_K = """HloModule m
gemm {
  a = f32[4,40,24] parameter(0)
  b = f32[4,24,36] parameter(1)
  ROOT d = f32[4,40,36] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  a = f32[40,96] parameter(0)
  b = f32[96,36] parameter(1)
  ab = f32[40,4,24] bitcast(a)
  at = f32[4,40,24] transpose(ab), dimensions={1,0,2}
  bb = f32[4,24,36] bitcast(b)
  f = f32[4,40,36] fusion(at, bb), kind=kCustom, calls=gemm, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"16","block_n":"16","block_k":"16","split_k":"4","num_stages":"2","num_warps":"2","num_ctas":"1"}}}
  z = f32[] constant(0)
  ROOT r = f32[40,36] reduce(f, z), dimensions={0}, to_apply=add
}"""


def test_split_k_legacy_config():
    """split_k > 1 in a ``__triton_gemm`` config: XLA's split-K rewriter has already made K's
    split a batch dim of the dot (its partial sums reduced by a fusion after it), so the kernel
    computes the dot as written, on XLA's grid (tiles, split_k, batch / split_k); the module's
    result matches the interpreter."""
    module = parse_module(SPLIT_K)
    plan = plan_module(module, CompileOptions(arch="sm_90"))
    (k,) = [k for k in plan.kernels if k.analysis.emitter == "dot"]
    assert k.spec.tiling.split_k == 4
    assert k.launch.grid == (3 * 3, 4, 1) and k.launch.block == (64, 1, 1)
    ok, report = run_on_host(module, seed=5)
    assert ok, report
