"""The block-level emitter (``codegen/emitters/block_level.py``) on XLA's ``__triton`` fusions of
a normalization diamond (softmax, layer norm, RMS norm): one kernel per fusion with XLA's
launch (grid = the number of output tiles, num_warps * 32 threads), host = interpreter on
softmax, layer norm with gamma/beta, several outputs, tiles padded past a non-power-of-two
row and a ragged last tile, bf16, a tile smaller than the reduced row, and the diamonds the
tiling refuses, which stay split into our reduction and loop kernels."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes.custom_fusions import BlockLevelTiling, block_level_tiling
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import filecheck, run_on_host

REDUCERS = """max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}"""


def _module(params: list[str], body: str, out: str, tiles: list[list[int]], warps: int) -> str:
    decl = "\n".join(f"  p{i} = {p} parameter({i})" for i, p in enumerate(params))
    args = ", ".join(f"p{i}" for i in range(len(params)))
    sizes = ",".join("{\"sizes\":[" + ",".join(f'"{t}"' for t in tile) + "]}" for tile in tiles)
    return f"""HloModule m
{REDUCERS}
block {{
{decl}
{body}
}}
ENTRY e {{
{decl}
  ROOT f = {out} fusion({args}), kind=kCustom, calls=block, backend_config={{"fusion_backend_config":{{"kind":"__triton","block_level_fusion_config":{{"num_warps":"{warps}","output_tiles":[{sizes}],"num_ctas":1,"num_stages":1}}}}}}
}}"""


def _softmax(t: str, rows: int, n: int) -> str:
    return f"""  ninf = f32[] constant(-inf)
  mx = f32[{rows}] reduce(p0, ninf), dimensions={{1}}, to_apply=max_f32
  bmx = {t} broadcast(mx), dimensions={{0}}
  sub = {t} subtract(p0, bmx)
  e = {t} exponential(sub)
  zero = f32[] constant(0)
  sum = f32[{rows}] reduce(e, zero), dimensions={{1}}, to_apply=add_f32
  bsum = {t} broadcast(sum), dimensions={{0}}"""


SOFTMAX = _module(["f32[256,1024]"], _softmax("f32[256,1024]", 256, 1024) + """
  ROOT div = f32[256,1024] divide(e, bsum)""", "f32[256,1024]", [[2, 1024]], 4)

# mean and variance (two levels of reduces), gamma/beta broadcast along the rows
LAYER_NORM = _module(["f32[64,256]", "f32[256]", "f32[256]"], """  zero = f32[] constant(0)
  s = f32[64] reduce(p0, zero), dimensions={1}, to_apply=add_f32
  inv_n = f32[] constant(0.00390625)
  bn = f32[64] broadcast(inv_n), dimensions={}
  mean = f32[64] multiply(s, bn)
  bmean = f32[64,256] broadcast(mean), dimensions={0}
  c = f32[64,256] subtract(p0, bmean)
  sq = f32[64,256] multiply(c, c)
  ss = f32[64] reduce(sq, zero), dimensions={1}, to_apply=add_f32
  var = f32[64] multiply(ss, bn)
  eps = f32[] constant(1e-05)
  beps = f32[64] broadcast(eps), dimensions={}
  ve = f32[64] add(var, beps)
  r = f32[64] rsqrt(ve)
  br = f32[64,256] broadcast(r), dimensions={0}
  norm = f32[64,256] multiply(c, br)
  g = f32[64,256] broadcast(p1), dimensions={1}
  bb = f32[64,256] broadcast(p2), dimensions={1}
  scaled = f32[64,256] multiply(norm, g)
  ROOT out = f32[64,256] add(scaled, bb)""", "f32[64,256]", [[4, 256]], 4)

# two outputs of one tile: the softmax and the shifted logits
MULTI_OUTPUT = _module(["f32[32,128]"], _softmax("f32[32,128]", 32, 128) + """
  div = f32[32,128] divide(e, bsum)
  ROOT t = (f32[32,128], f32[32,128]) tuple(div, sub)""", "(f32[32,128], f32[32,128])", [[1, 128], [1, 128]], 2)

# rows of 100 (tile padded to 128 and masked), 30 rows in tiles of 4 (the last one ragged)
PADDED = _module(["f32[30,100]"], _softmax("f32[30,100]", 30, 100) + """
  ROOT div = f32[30,100] divide(e, bsum)""", "f32[30,100]", [[4, 100]], 2)

# bf16 in and out, f32 statistics (RMS norm with a bf16 weight)
BF16_RMS = _module(["bf16[48,512]", "bf16[512]"], """  x = f32[48,512] convert(p0)
  sq = f32[48,512] multiply(x, x)
  zero = f32[] constant(0)
  ss = f32[48] reduce(sq, zero), dimensions={1}, to_apply=add_f32
  inv_n = f32[] constant(0.001953125)
  bn = f32[48] broadcast(inv_n), dimensions={}
  ms = f32[48] multiply(ss, bn)
  eps = f32[] constant(1e-06)
  beps = f32[48] broadcast(eps), dimensions={}
  r = f32[48] rsqrt(f32[48] add(ms, beps))
  br = f32[48,512] broadcast(r), dimensions={0}
  w = f32[512] convert(p1)
  bw = f32[48,512] broadcast(w), dimensions={1}
  y = f32[48,512] multiply(f32[48,512] multiply(x, br), bw)
  ROOT o = bf16[48,512] convert(y)""", "bf16[48,512]", [[2, 512]], 4)

# XLA's tile covers half a row: every block reduces its whole row, writes half of it
HALF_ROW = _module(["f32[16,1000]"], _softmax("f32[16,1000]", 16, 1000) + """
  ROOT div = f32[16,1000] divide(e, bsum)""", "f32[16,1000]", [[2, 512]], 4)

# the root transposes the softmax (attention's fusion.10): the reduce follows root dim 3
TRANSPOSED = _module(["f32[2,4,64,96]"], """  ninf = f32[] constant(-inf)
  mx = f32[2,4,64] reduce(p0, ninf), dimensions={3}, to_apply=max_f32
  bmx = f32[2,4,64,96] broadcast(mx), dimensions={0,1,2}
  e = f32[2,4,64,96] exponential(f32[2,4,64,96] subtract(p0, bmx))
  zero = f32[] constant(0)
  sum = f32[2,4,64] reduce(e, zero), dimensions={3}, to_apply=add_f32
  bsum = f32[2,4,64,96] broadcast(sum), dimensions={0,1,2}
  div = f32[2,4,64,96] divide(e, bsum)
  ROOT t = f32[2,4,96,64] transpose(div), dimensions={0,1,3,2}""", "f32[2,4,96,64]", [[1, 1, 96, 4]], 2)

# a reduce over the batch read along the softmax's reduced dim (loop_map_rows_softmax): each
# block reduces the whole rows it needs, a level before the softmax's reduces
BATCH_THEN_SOFTMAX = _module(["f32[8,64,48]"], """  zero = f32[] constant(0)
  a = f32[64,48] reduce(p0, zero), dimensions={0}, to_apply=add_f32
  ninf = f32[] constant(-inf)
  mx = f32[64] reduce(a, ninf), dimensions={1}, to_apply=max_f32
  bmx = f32[64,48] broadcast(mx), dimensions={0}
  e = f32[64,48] exponential(f32[64,48] subtract(a, bmx))
  sum = f32[64] reduce(e, zero), dimensions={1}, to_apply=add_f32
  bsum = f32[64,48] broadcast(sum), dimensions={0}
  ROOT div = f32[64,48] divide(e, bsum)""", "f32[64,48]", [[2, 48]], 2)

# the root splits the reduced rows (attn_dpa_xla_gqa's bitcast): the block's rows are every 4th
STRIDED_ROWS = _module(["f32[2,32,16]"], """  zero = f32[] constant(0)
  s = f32[2,32] reduce(p0, zero), dimensions={2}, to_apply=add_f32
  bs = f32[2,32,16] broadcast(s), dimensions={0,1}
  d = f32[2,32,16] divide(p0, bs)
  ROOT t = f32[2,8,4,16] bitcast(d)""", "f32[2,8,4,16]", [[1, 8, 1, 16]], 1)

CASES = {
    # name: (module, grid, threads)
    "softmax": (SOFTMAX, 128, 128),
    "layer_norm_gamma_beta": (LAYER_NORM, 16, 128),
    "multi_output": (MULTI_OUTPUT, 32, 64),
    "padded_tile": (PADDED, 8, 64),
    "bf16_rms_norm": (BF16_RMS, 24, 128),
    "half_row_tile": (HALF_ROW, 16, 128),
    "transposed_root": (TRANSPOSED, 128, 64),
    "batch_then_softmax": (BATCH_THEN_SOFTMAX, 32, 64),
    "strided_rows": (STRIDED_ROWS, 8, 32),
}


def _kernels(text: str):
    return plan_module(parse_module(text), CompileOptions(arch="sm_90")).kernels


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_kernel_with_xla_launch_matches_interpreter(name):
    text, grid, threads = CASES[name]
    kernels = _kernels(text)
    assert [str(k.analysis.emitter) for k in kernels] == ["triton"], [k.analysis.reason for k in kernels]
    launch = kernels[0].spec.launch
    assert (launch.grid, launch.block) == ((grid, 1, 1), (threads, 1, 1))
    ok, report = run_on_host(parse_module(text), seed=5)
    assert ok, report


def test_tiling_figures():
    fusion = parse_module(LAYER_NORM).entry.root
    tiling = block_level_tiling(fusion)
    assert isinstance(tiling, BlockLevelTiling)
    assert tiling.tile == (4, 256) and tiling.num_tiles == 16 and tiling.num_threads == 128
    # the mean first, the variance (which reads it) one level later; 4 rows per block each
    assert [(r.inst.name, r.level, r.rows) for r in tiling.reduces] == [("s", 0, (4,)), ("ss", 1, (4,))]
    spec = _kernels(LAYER_NORM)[0].spec
    layout = spec.reduce_layout(spec.tiling.reduces[0])
    # 4-wide vectors, 64 lanes (2 warps) per row, 2 rows at a time
    assert (layout.vector, layout.lanes, layout.groups, layout.warps_per_row) == (4, 64, 2, 2)
    # XLA's scratch: [rows][warps per row] partials per reduce
    assert spec.shared_bytes() == 2 * 4 * 2 * 4


def test_reduce_boxes():
    """Which reduce elements a block computes: the batch sum over the whole rows the softmax
    reduces (2 x 48 per block, a level before), the strided rows of a split dim."""
    tiling = block_level_tiling(parse_module(BATCH_THEN_SOFTMAX).entry.root)
    assert isinstance(tiling, BlockLevelTiling)
    assert [(r.inst.name, r.level, r.rows, r.full) for r in tiling.reduces] == [
        ("a", 0, (2, 48), (False, True)), ("mx", 1, (2,), (False,)), ("sum", 2, (2,), (False,))]
    tiling = block_level_tiling(parse_module(STRIDED_ROWS).entry.root)
    assert isinstance(tiling, BlockLevelTiling)
    (r,) = tiling.reduces
    assert (r.row_dims, r.rows, r.strides) == ((None, 1), (1, 8), (1, 4))


def test_diamond_the_tiling_refuses_stays_split():
    """A reduce read at the reversed row (row 63 - r for the tile's row r): not a box that
    follows the tile, so the fusion becomes a call and our reduction and loop kernels
    compute it, as before."""
    text = _module(["f32[64,32]"], """  zero = f32[] constant(0)
  s = f32[64] reduce(p0, zero), dimensions={1}, to_apply=add_f32
  r = f32[64] reverse(s), dimensions={0}
  bs = f32[64,32] broadcast(r), dimensions={0}
  ROOT d = f32[64,32] divide(p0, bs)""", "f32[64,32]", [[2, 32]], 1)
    why = block_level_tiling(parse_module(text).entry.root)
    assert isinstance(why, str) and "not a box" in why
    kernels = _kernels(text)
    assert "triton" not in [str(k.analysis.emitter) for k in kernels] and len(kernels) >= 2
    ok, report = run_on_host(parse_module(text), seed=6)
    assert ok, report


def test_llvm_ir_golden(tmp_path):
    """The softmax kernel: 128-bit loads of the input, each reduce a shuffle tree and one
    barrier through its [2 rows][4 warps] partials, 128-bit stores."""
    out = run_pipeline(parse_module(SOFTMAX), CompileOptions(arch="sm_90"), emit="llvm")
    filecheck(out.artifacts["llvm"], """
CHECK-DAG: @mx_partials = internal addrspace(3) global [32 x i8] undef, align 16
CHECK-DAG: @sum_partials = internal addrspace(3) global [32 x i8] undef, align 16
CHECK: define ptx_kernel void @f(
CHECK: %ctaid.x = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
CHECK: load <4 x float>, ptr %{{.*}}, align 16, !invariant.load
CHECK: call float @llvm.nvvm.shfl.sync.down.f32(i32 -1, float %{{.*}}, i32 16, i32 31)
CHECK: call float @llvm.nvvm.shfl.sync.down.f32(i32 -1, float %{{.*}}, i32 1, i32 31)
CHECK: getelementptr inbounds float, ptr addrspace(3) @mx_partials
CHECK: call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
CHECK: load float, ptr addrspace(3)
CHECK: call float @__nv_expf
CHECK: call float @llvm.nvvm.shfl.sync.down.f32(i32 -1, float %{{.*}}, i32 16, i32 31)
CHECK: getelementptr inbounds float, ptr addrspace(3) @sum_partials
CHECK: call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
CHECK: fdiv
CHECK: store <4 x float> %{{.*}}, ptr %{{.*}}, align 16
CHECK: ret void
""", tmp_path)


def test_ptx_vector_loads_and_scratch(tmp_path):
    out = run_pipeline(parse_module(SOFTMAX), CompileOptions(arch="sm_90"), emit="ptx")
    ptx = out.artifacts["ptx"]
    filecheck(ptx, """
CHECK: .shared .align 16 .b8 mx_partials[32];
CHECK: .shared .align 16 .b8 sum_partials[32];
CHECK: ld.global.nc.v4.{{[bf]}}32
CHECK: shfl.sync.down.b32
CHECK: bar.sync 0;
CHECK: bar.sync 0;
CHECK: st.global.v4.{{[bf]}}32
""", tmp_path)
    # exp once per element (16 per thread), kept from the sum's pass to the output's
    assert ptx.count("ex2.approx") == 16
