"""Vector widths of the reduction kernels (issue 29): XLA's vectorised reductions read every
parameter the hero reads at its own lanes as one ``<v x T>`` load, also under a bitcast of a
computed value (``reduce(bitcast(multiply(p, p)))``, its indexing maps see through the
bitcast), and write each side output's ``v`` adjacent lanes as one ``<v x T>`` store
(``st.global.v2``), in the row, column and small-column kernels alike. Kernels run on the
host against the interpreter; PTX is checked with FileCheck."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions

from codegen_helpers import emit_stage, filecheck, run_on_host


def _module(shape: list[int], flat: list[int], dims: list[int], side: bool, et: str = "f32") -> str:
    """``reduce(bitcast(multiply(p, p)))`` over ``flat`` (``shape`` reshaped), optionally with the
    side output ``subtract(p, q)`` of ``shape``."""
    s, f = ",".join(map(str, shape)), ",".join(map(str, flat))
    kept = [n for i, n in enumerate(flat) if i not in dims]
    o = ",".join(map(str, kept))
    sides = f"  d = {et}[{s}] subtract(p, q)\n" if side else ""
    root = f"(f32[{o}], {et}[{s}])" if side else f"f32[{o}]"
    ret = f"  ROOT t = {root} tuple(r, d)\n" if side else "  ROOT t = f32[" + o + "] reduce(c, z), " \
        f"dimensions={{{','.join(map(str, dims))}}}, to_apply=red\n"
    red = (f"  r = f32[{o}] reduce(c, z), dimensions={{{','.join(map(str, dims))}}}, to_apply=red\n"
           if side else "")
    conv = f"  m = f32[{s}] convert(x)\n" if et != "f32" else ""
    mul_src = "m" if et != "f32" else "x"
    return f"""HloModule m
red {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}
fused {{
  p = {et}[{s}] parameter(0)
  q = {et}[{s}] parameter(1)
  x = {et}[{s}] multiply(p, q)
{conv}  c0 = f32[{s}] negate({mul_src})
  c = f32[{f}] bitcast(c0)
  z = f32[] constant(0)
{sides}{red}{ret}}}
ENTRY e {{
  p = {et}[{s}] parameter(0)
  q = {et}[{s}] parameter(1)
  ROOT f = {root} fusion(p, q), kind=kInput, calls=fused
}}
"""


CASES = {
    # name: (shape, flattened shape, reduced dims, side output, XLA's variant)
    "row_flat": ([8, 3, 3, 4], [288], [0], False, "row"),
    "row_rows": ([8, 64, 64], [8, 4096], [1], False, "row"),
    "row_side": ([16, 500], [8000], [0], True, "row"),
    "column_side": ([4, 32, 128], [128, 128], [0], True, "column"),
    "small_column_side": ([64, 16, 8], [1024, 8], [0], True, "small-column"),
}


def _spec(text: str):
    kernel = plan_module(parse_module(text), CompileOptions()).kernels[0]
    assert kernel.analysis.emitter == "reduction", kernel.analysis.reason
    return kernel.spec


@pytest.mark.parametrize("name", sorted(CASES))
def test_vectorised_through_bitcast_and_side_outputs_on_host(name):
    shape, flat, dims, side, variant = CASES[name]
    text = _module(shape, flat, dims, side)
    spec = _spec(text)
    assert spec.variant == variant and spec.geometry["vector_size"] == 2, spec.geometry
    ok, report = run_on_host(parse_module(text))
    assert ok, report


@pytest.mark.parametrize("name", sorted(CASES))
def test_ptx_vector_widths(tmp_path, name):
    """Only ``v2`` loads of the two parameters (no scalar ``ld.global``); with a side output,
    its writes are ``v2`` stores (the reduce root's own writes stay scalar)."""
    shape, flat, dims, side, _ = CASES[name]
    text = _module(shape, flat, dims, side)
    # emitted as vectors, not left to LLVM's load/store vectoriser (which merges some scalar
    # pairs where it can prove the alignment)
    llvm = emit_stage(text, "llvm", arch="sm_90")
    assert llvm.count("load <2 x float>") >= 2, name
    assert ("store <2 x float>" in llvm) == side, name
    ptx = emit_stage(text, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK-NOT: ld.global.nc.f32
CHECK-NOT: ld.global.nc.b32
CHECK: ld.global.nc.v2.{{[bf]}}32
CHECK-NOT: ld.global.nc.{{[bf]}}32
CHECK: ret;
""", tmp_path)
    if side:
        filecheck(ptx, """
CHECK: .visible .entry f(
CHECK: st.global.v2.{{[bf]}}32
CHECK: ret;
""", tmp_path)
        assert ptx.count("st.global.v2.") >= 1


def test_filecheck_golden_vector_load_and_store(tmp_path):
    """Golden of a row reduction over ``bitcast(negate(multiply(p, q)))`` with the side output
    ``subtract(p, q)``: both parameters read by one ``<2 x float>`` load each (aligned 8), the
    side output written by one ``<2 x float>`` store; in PTX ``ld.global.nc.v2``/``st.global.v2``."""
    text = _module([16, 500], [8000], [0], True)
    llvm = emit_stage(text, "llvm", arch="sm_90")
    filecheck(llvm, """
CHECK: define {{.*}}void @f(
CHECK: load <2 x float>, ptr {{.*}}, align 8
CHECK: load <2 x float>, ptr {{.*}}, align 8
CHECK-NOT: load float, ptr addrspace(1)
CHECK: fsub float
CHECK: store <2 x float> {{.*}}, align 8
CHECK: ret void
""", tmp_path)
    ptx = emit_stage(text, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK: ld.global.nc.v2.{{[bf]}}32
CHECK: ld.global.nc.v2.{{[bf]}}32
CHECK: st.global.v2.{{[bf]}}32
CHECK: ret;
""", tmp_path)


def test_vector_through_bitcast_of_an_odd_minor_dimension(tmp_path):
    """A bitcast whose operand's minor dimension is odd (``f32[32,5,3]`` read as ``f32[480]``,
    as XLA's ``f32[8,3,3,3]`` batch-norm weights): a vector's lanes straddle the operand's rows
    but are still adjacent in memory, so XLA's flattened buffers read them as one ``v2`` load;
    so do we (each lane's index delinearised on its own), with exact results."""
    text = _module([32, 5, 3], [480], [0], False)
    spec = _spec(text)
    assert spec.geometry["vector_size"] == 2
    ok, report = run_on_host(parse_module(text))
    assert ok, report
    ptx = emit_stage(text, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK-NOT: ld.global.nc.{{[bf]}}32
CHECK: ld.global.nc.v2.{{[bf]}}32
CHECK-NOT: ld.global.nc.{{[bf]}}32
CHECK: ret;
""", tmp_path)


# ---- reductions XLA runs with Triton (``__triton`` block-level config, no diamond) -------------
def _triton_module(et: str, shape: list[int], out: list[int], warps: int, tile: list[int],
                   dim: int | None = None) -> str:
    dim = len(shape) - 1 if dim is None else dim
    s, o = ",".join(map(str, shape)), ",".join(map(str, out))
    sizes = ",".join(f'"{t}"' for t in tile)
    cfg = ('{"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":'
           f'{{"num_warps":"{warps}","output_tiles":[{{"sizes":[{sizes}]}}],"num_ctas":1,"num_stages":1}}}}}}')
    return f"""HloModule m
red {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT r = {et}[] add(a, b)
}}
fused {{
  p = {et}[{s}] parameter(0)
  z = {et}[] constant(0)
  ROOT r = {et}[{o}] reduce(p, z), dimensions={{{dim}}}, to_apply=red
}}
ENTRY e {{
  p = {et}[{s}] parameter(0)
  ROOT f = {et}[{o}] fusion(p), kind=kCustom, calls=fused, backend_config={cfg}
}}
"""


@pytest.mark.parametrize("et,shape,out,warps,tile,geometry,launch", [
    # XLA's count_nonzero: s32[256] -> s32[], 1 warp: 8 elements a thread, Triton's v4
    ("s32", [256], [], 1, [], dict(reduce_threads=32, kept_threads=1, vector_size=4, tile=2), ((1, 1, 1), 32)),
    # 2 rows a block of 4 warps: 64 threads a row, v4 (128 bits of f32), 2 steps
    ("f32", [64, 512], [64], 4, [2], dict(reduce_threads=64, kept_threads=2, vector_size=4, tile=2),
     ((32, 1, 1), 128)),
    # rows of 100 (padded to 128) on 1 warp: perThread 4, but 100 is divisible by 4: v4
    ("f32", [8, 100], [8], 1, [1], dict(reduce_threads=32, kept_threads=1, vector_size=4, tile=1),
     ((8, 1, 1), 32)),
    # rows of 48 (padded to 64), 4 rows a block of 1 warp: 8 threads a row, v4, 2 steps (the
    # second one's lanes past 48 guarded)
    ("f32", [64, 48], [64], 1, [4], dict(reduce_threads=8, kept_threads=4, vector_size=4, tile=2),
     ((16, 1, 1), 32)),
    # rows of 1000 (XLA's log-softmax logits), 1 row a block of 4 warps: perThread 8 -> 4 (128 bits)
    ("f32", [32, 1000], [32], 4, [1], dict(reduce_threads=128, kept_threads=1, vector_size=4, tile=2),
     ((32, 1, 1), 128)),
    # rows of 130: 130 is not divisible by 4, Triton's divisibility halves the vector to 2
    ("f32", [16, 130], [16], 1, [1], dict(reduce_threads=32, kept_threads=1, vector_size=2, tile=3),
     ((16, 1, 1), 32)),
])
def test_triton_row_reduction_takes_the_triton_launch_and_vector(tmp_path, et, shape, out, warps, tile, geometry,
                                                                 launch):
    """A row reduction XLA runs with Triton: its launch (a block of ``32·num_warps`` threads
    per output tile) and Triton's per-thread vector (128 bits where the tile has the
    elements), exact on the host, ``v4``/``v2`` loads in PTX."""
    text = _triton_module(et, shape, out, warps, tile)
    spec = _spec(text)
    assert {k: spec.geometry[k] for k in geometry} == geometry, spec.geometry
    assert (tuple(spec.launch.grid), spec.launch.block[0]) == launch
    ok, report = run_on_host(parse_module(text))
    assert ok, report
    ptx = emit_stage(text, "ptx", arch="sm_90")
    filecheck(ptx, f"""
CHECK: .visible .entry f(
CHECK-NOT: ld.global.nc.{{{{[bfs]}}}}32
CHECK: ld.global.nc.v{geometry['vector_size']}.{{{{[bfs]}}}}32
CHECK-NOT: ld.global.nc.{{{{[bfs]}}}}32
CHECK: ret;
""", tmp_path)


def test_triton_config_without_the_triton_kind_keeps_xla_native_geometry():
    """The same module as a plain ``kInput`` fusion: XLA's native rule (vector 2 for 32-bit)."""
    text = _triton_module("s32", [256], [], 1, [])
    text = text.replace("kind=kCustom", "kind=kInput").replace('"kind":"__triton"', '"kind":"__other"')
    spec = _spec(text)
    assert spec.geometry["vector_size"] == 2 and spec.launch.block[0] == 32


@pytest.mark.parametrize("et,shape,dim,warps,tile,geometry,launch", [
    # XLA's reduce_max s32[256,512] over dim 0: 16 columns a block of 4 warps, v4: 4 column
    # lanes x 32 row lanes
    ("s32", [256, 512], 0, 4, [16], dict(vector_size=4, columns=16, column_lanes=4, row_lanes=32), ((32, 1, 1), 128)),
    # [3, 100, 48] over dim 1: tiles [1, 16] of 2 warps, 100 rows padded to 128: v4, 16 row lanes
    ("f32", [3, 100, 48], 1, 2, [1, 16], dict(vector_size=4, columns=16, column_lanes=4, row_lanes=16),
     ((9, 1, 1), 64)),
    # 40 columns in tiles of 8 on 1 warp: v4, 2 column lanes x 16 row lanes, 5 blocks
    ("f32", [64, 40], 0, 1, [8], dict(vector_size=4, columns=8, column_lanes=2, row_lanes=16), ((5, 1, 1), 32)),
])
def test_triton_column_reduction_takes_the_triton_launch_and_vector(tmp_path, et, shape, dim, warps, tile, geometry,
                                                                    launch):
    """A column reduction XLA runs with Triton: its launch and Triton's vector; exact on the
    host; the thread maps cover the input once and each output once (bijections); ``v4`` loads."""
    from test_emitter_thread_maps import _assert_bijection
    out = [n for i, n in enumerate(shape) if i != dim]
    text = _triton_module(et, shape, out, warps, tile, dim)
    spec = _spec(text)
    assert spec.variant == "column"
    assert {k: spec.geometry[k] for k in geometry} == geometry, spec.geometry
    assert (tuple(spec.launch.grid), spec.launch.block[0]) == launch
    _assert_bijection(spec.thread_to_input_map(), shape)
    _assert_bijection(spec.thread_to_output_map(), out)
    ok, report = run_on_host(parse_module(text))
    assert ok, report
    ptx = emit_stage(text, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK-NOT: ld.global.nc.{{[bfs]}}32
CHECK: ld.global.nc.v4.{{[bfs]}}32
CHECK-NOT: ld.global.nc.{{[bfs]}}32
CHECK: bar.sync
CHECK: ret;
""", tmp_path)


def test_triton_column_tile_not_dividing_the_columns_keeps_xla_native_geometry():
    """A tile of 16 over 40 columns is not a run of whole tiles: the native column launch."""
    spec = _spec(_triton_module("f32", [64, 40], [40], 1, [16], 0))
    assert "row_lanes" not in spec.geometry and spec.launch.block[0] == 1024
