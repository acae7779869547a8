"""The tensor-core (``mma.sync.m16n8k16``) path of the dot emitter, without a GPU.

- A numpy model of ``ldmatrix.x4`` and ``mma.m16n8k16`` written from the PTX ISA's fragment
  tables (independently of the emitter), driven by the emitter's own index maps
  (``mma_layout.warp_origin``/``smem_offset``/``*_ldmatrix_source``/``acc_position``): one 16×8×16
  mma and the whole 64×64 block tile over two K steps against ``A @ B``.
- The path choice (flag, arch, element types, host target), FileCheck on the PTX, ptxas for
  sm_80 and sm_90, the default PTX without ``mma``, and the CLI flags reaching the options.
The numerics on a real GPU are in ``tests/gpu/test_gpu.py`` (``test_bf16_dot_tensor_cores_on_cuda``).
"""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.codegen.emitters.gemm import dot_mma
from hlo_compile.codegen.emitters.gemm.mma_layout import (MMA_SHARED_BYTES, SMEM_STRIDE, TILES_M, TILES_N, WARP_SIZE,
                                                          a_ldmatrix_source, acc_position, b_ldmatrix_source,
                                                          smem_offset, warp_origin)
from hlo_compile.codegen.emitters.gemm.tiles import BK, BM, BN, NUM_THREADS
from hlo_compile.options import CompileOptions
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import filecheck

# ---- the PTX ISA's layouts, written from the tables (not from dot_mma) ----------------------------
# groupID = lane >> 2, threadID_in_group = lane % 4; element i of a fragment is half i % 2 of
# register i // 2 (the lower index in the lower 16 bits).


def ptx_a_elements(lane: int) -> list[tuple[int, int]]:
    """m16n8k16 .f16/.bf16 A (row): (row, col) of a0..a7 of ``lane``."""
    g, t = lane >> 2, lane % 4
    return [(g if i in (0, 1, 4, 5) else g + 8, t * 2 + (i & 1) + (8 if i >= 4 else 0)) for i in range(8)]


def ptx_b_elements(lane: int) -> list[tuple[int, int]]:
    """m16n8k16 .f16/.bf16 B (col): (row = k, col = n) of b0..b3 of ``lane``."""
    g, t = lane >> 2, lane % 4
    return [(t * 2 + (i & 1) + (8 if i >= 2 else 0), g) for i in range(4)]


def ptx_c_elements(lane: int) -> list[tuple[int, int]]:
    """m16n8k16 f32 C/D: (row, col) of c0..c3 of ``lane``."""
    g, t = lane >> 2, lane % 4
    return [(g if i < 2 else g + 8, t * 2 + (i & 1)) for i in range(4)]


def ldmatrix_x4(smem: np.ndarray, addresses: list[int]) -> list[list[tuple]]:
    """``ldmatrix.sync.aligned.m8n8.x4.b16`` (no .trans) on a flat b16 array: lanes 8j..8j+7
    give the element addresses of rows 0..7 of matrix j; lane l receives, in register j, row
    l // 4 elements 2 (l % 4), 2 (l % 4) + 1 of matrix j (as a (low, high) pair)."""
    assert len(addresses) == WARP_SIZE
    for a in addresses:
        assert (a * 2) % 16 == 0, f"ldmatrix row address {a * 2} B is not 16-byte aligned"
    rows = [smem[a:a + 8] for a in addresses]
    return [[(rows[8 * j + l // 4][2 * (l % 4)], rows[8 * j + l // 4][2 * (l % 4) + 1]) for j in range(4)]
            for l in range(WARP_SIZE)]


def mma_m16n8k16(a_regs, b_regs, c_regs):
    """One warp's ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32``: per-lane fragments
    (4 A pairs, 2 B pairs, 4 C floats) in, per-lane D (4 floats) out."""
    A, B, C = np.full((16, 16), np.nan), np.full((16, 8), np.nan), np.full((16, 8), np.nan)
    for lane in range(WARP_SIZE):
        a = [x for pair in a_regs[lane] for x in pair]
        b = [x for pair in b_regs[lane] for x in pair]
        for (r, c), v in zip(ptx_a_elements(lane), a):
            A[r, c] = v
        for (r, c), v in zip(ptx_b_elements(lane), b):
            B[r, c] = v
        for (r, c), v in zip(ptx_c_elements(lane), c_regs[lane]):
            C[r, c] = v
    assert not (np.isnan(A).any() or np.isnan(B).any() or np.isnan(C).any()), "fragments do not cover the tiles"
    D = A @ B + C
    return [[D[r, c] for r, c in ptx_c_elements(lane)] for lane in range(WARP_SIZE)]


def test_ptx_fragment_tables_cover_each_element_once():
    for elements, shape in ((ptx_a_elements, (16, 16)), (ptx_b_elements, (16, 8)), (ptx_c_elements, (16, 8))):
        seen = [rc for lane in range(WARP_SIZE) for rc in elements(lane)]
        assert sorted(seen) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]


# ---- the emitter's maps in the model -------------------------------------------------------------
def _shared_tiles(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The block's shared tiles as the emitter stages them: lhs (m, k) at smem_offset(m, k),
    rhs (k, n) at smem_offset(n, k); padding is NaN so reading it poisons the result."""
    a_s = np.full(BM * SMEM_STRIDE, np.nan)
    b_s = np.full(BN * SMEM_STRIDE, np.nan)
    for m in range(A.shape[0]):
        for k in range(BK):
            a_s[smem_offset(m, k)] = A[m, k]
    for k in range(BK):
        for n in range(B.shape[1]):
            b_s[smem_offset(n, k)] = B[k, n]
    return a_s, b_s


def _warp_step(warp: int, a_s, b_s, acc):
    """One K step of ``warp`` as the kernel runs it; ``acc[tm][tn][lane]`` = 4 floats."""
    wm0, wn0 = warp_origin(warp)
    a_frags = [ldmatrix_x4(a_s, [smem_offset(*a_ldmatrix_source(l, wm0, tm)) for l in range(WARP_SIZE)])
               for tm in range(TILES_M)]
    b_all = ldmatrix_x4(b_s, [smem_offset(*b_ldmatrix_source(l, wn0)) for l in range(WARP_SIZE)])
    b_frags = [[regs[0:2] for regs in b_all], [regs[2:4] for regs in b_all]]
    for tm in range(TILES_M):
        for tn in range(TILES_N):
            acc[tm][tn] = mma_m16n8k16(a_frags[tm], b_frags[tn], acc[tm][tn])


def _ints(rng, shape):  # small integers: every product and sum is exact in float
    return rng.integers(-8, 9, size=shape).astype(np.float64)


def test_model_one_mma_16x8x16():
    """Warp 0's first 16×8 tile of one K step: D = A[0:16, :] @ B[:, 0:8]."""
    rng = np.random.default_rng(0)
    A, B = _ints(rng, (BM, BK)), _ints(rng, (BK, BN))
    a_s, b_s = _shared_tiles(A, B)
    wm0, wn0 = warp_origin(0)
    a_frag = ldmatrix_x4(a_s, [smem_offset(*a_ldmatrix_source(l, wm0, 0)) for l in range(WARP_SIZE)])
    b_frag = [regs[0:2] for regs in ldmatrix_x4(b_s, [smem_offset(*b_ldmatrix_source(l, wn0))
                                                      for l in range(WARP_SIZE)])]
    d = mma_m16n8k16(a_frag, b_frag, [[0.0] * 4 for _ in range(WARP_SIZE)])
    D = np.full((16, 8), np.nan)
    for lane in range(WARP_SIZE):
        for r in range(4):
            D[acc_position(lane, r)] = d[lane][r]
    np.testing.assert_array_equal(D, A[0:16, :] @ B[:, 0:8])


def test_model_block_tile_two_k_steps():
    """All 8 warps, 2 K steps: every output of the 64×64 block tile written once, = A @ B."""
    rng = np.random.default_rng(1)
    K = 2 * BK
    A, B = _ints(rng, (BM, K)), _ints(rng, (K, BN))
    acc = {w: [[[[0.0] * 4 for _ in range(WARP_SIZE)] for _ in range(TILES_N)] for _ in range(TILES_M)]
           for w in range(NUM_THREADS // WARP_SIZE)}
    for step in range(K // BK):
        a_s, b_s = _shared_tiles(A[:, step * BK:(step + 1) * BK], B[step * BK:(step + 1) * BK, :])
        for warp in acc:
            _warp_step(warp, a_s, b_s, acc[warp])
    out = np.full((BM, BN), np.nan)
    writes = np.zeros((BM, BN), int)
    for tid in range(NUM_THREADS):  # the epilogue's points, with the kernel's lane/warp split
        lane, warp = tid % WARP_SIZE, tid // WARP_SIZE
        wm0, wn0 = warp_origin(warp)
        for tm in range(TILES_M):
            for tn in range(TILES_N):
                for r in range(4):
                    dm, dn = acc_position(lane, r)
                    m, n = wm0 + tm * 16 + dm, wn0 + tn * 8 + dn
                    out[m, n] = acc[warp][tm][tn][lane][r]
                    writes[m, n] += 1
    assert (writes == 1).all()
    np.testing.assert_array_equal(out, A @ B)


def test_ldmatrix_rows_stay_in_the_tile_and_avoid_bank_conflicts():
    """Every 8-element row an ldmatrix reads lies inside the BK columns (never the padding),
    and the 8 rows of each phase fall in 8 different 16-byte bank groups."""
    for warp in range(NUM_THREADS // WARP_SIZE):
        wm0, wn0 = warp_origin(warp)
        sources = [[a_ldmatrix_source(l, wm0, tm) for l in range(WARP_SIZE)] for tm in range(TILES_M)]
        sources.append([b_ldmatrix_source(l, wn0) for l in range(WARP_SIZE)])
        for srcs in sources:
            for row, k in srcs:
                assert 0 <= row < 64 and k in (0, 8)
            for phase in range(4):
                groups = {(smem_offset(*rc) * 2 // 16) % 8 for rc in srcs[8 * phase:8 * phase + 8]}
                assert len(groups) == 8, (warp, phase)


class _IntBuilder:
    """A stand-in for the IR builder computing on ints: checks ``_Ix``'s operator mapping."""

    def __init__(self):
        self.b = self

    def index(self, v):
        return v

    add = staticmethod(lambda x, y: x + y)
    mul = staticmethod(lambda x, y: x * y)
    udiv = staticmethod(lambda x, y: x // y)
    urem = staticmethod(lambda x, y: x % y)


def test_ir_index_wrapper_computes_what_the_model_does():
    kb = _IntBuilder()
    for tid in range(NUM_THREADS):
        t = dot_mma._Ix(kb, tid)
        lane, warp = t % WARP_SIZE, t // WARP_SIZE
        wm0, wn0 = warp_origin(warp)
        lane_i, (wm0_i, wn0_i) = tid % WARP_SIZE, warp_origin(tid // WARP_SIZE)
        assert (wm0.v, wn0.v) == (wm0_i, wn0_i)
        for tm in range(TILES_M):
            m, k = a_ldmatrix_source(lane, wm0, tm)
            assert smem_offset(m, k).v == smem_offset(*a_ldmatrix_source(lane_i, wm0_i, tm))
        n, k = b_ldmatrix_source(lane, wn0)
        assert smem_offset(n, k).v == smem_offset(*b_ldmatrix_source(lane_i, wn0_i))
        for r in range(4):
            dm, dn = acc_position(lane, r)
            assert (dm.v, dn.v) == acc_position(lane_i, r)


# ---- path choice and PTX -------------------------------------------------------------------------
MM = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"


def _dot(lhs: str, rhs: str, out: str, dims: str = MM) -> str:
    return f"""HloModule m
ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {out} dot(a, b), {dims}
}}"""


CASES = {
    "bf16_256": _dot("bf16[256,256]", "bf16[256,256]", "bf16[256,256]"),
    "bf16_in_f32_out_partial": _dot("bf16[70,90]", "bf16[90,66]", "f32[70,66]"),
    "f16_batch": _dot("f16[3,17,29]", "f16[3,29,11]", "f16[3,17,11]",
                      "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}"),
    "bf16_contract_first_dims": _dot("bf16[40,70]", "bf16[50,40]", "f32[70,50]",
                                     "lhs_contracting_dims={0}, rhs_contracting_dims={1}"),
}
EPILOGUE = """HloModule m
fusion {
  x = bf16[67,96] parameter(0)
  w = bf16[96,80] parameter(1)
  bias = f32[80] parameter(2)
  d = f32[67,80] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[67,80] broadcast(bias), dimensions={1}
  s = f32[67,80] add(d, bb)
  ROOT t = f32[67,80] tanh(s)
}"""


def _kernel(module):
    (k,) = plan_module(module, CompileOptions()).kernels
    assert k.analysis.emitter == "dot", k.analysis.reason
    return k


def _target(arch: str, tensor_cores: bool = True):
    from hlo_compile.targets.nvptx import NvptxTarget
    t = NvptxTarget(arch)
    t.dot_tensor_cores = tensor_cores  # what pipeline.py / cuda_platform.py do from CompileOptions
    return t


def _ptx(k, target) -> str:
    from hlo_compile.targets.nvptx import compile_to_ptx
    return compile_to_ptx(k.emit(target), target.arch, [k.kernel_name]).ptx


def test_intrinsics_lower_for_f16_and_bf16():
    for name, mma in (("bf16_256", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
                      ("f16_batch", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")):
        ptx = _ptx(_kernel(parse_module(CASES[name])), _target("sm_80"))
        n_mma, n_ld = ptx.count(mma), ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16")
        assert n_mma > 0 and n_mma % 4 == 0 and n_ld * 4 == n_mma * 3, name  # per K step: 3 ldmatrix, 4 mma


def test_ptx_filecheck_bf16(tmp_path):
    k = _kernel(parse_module(CASES["bf16_256"]))
    filecheck(_ptx(k, _target("sm_80")), """
CHECK: .visible .entry d(
CHECK-DAG: .shared .align 16 .b8 lhs_tile[3072]
CHECK-DAG: .shared .align 16 .b8 rhs_tile[3072]
CHECK: st.shared.b16
CHECK: bar.sync 0;
CHECK-COUNT-3: ldmatrix.sync.aligned.m8n8.x4.shared.b16
CHECK-COUNT-4: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
CHECK: bar.sync 0;
CHECK: st.global
CHECK: ret;
""", tmp_path)
    assert k.spec.summary_fields()["path"] == "mma" and k.spec.summary_fields()["static_shared_bytes"] == 6144
    assert "mma path" in "\n".join(k.spec.report_lines())


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_mma_kernels(arch):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    modules = [(n, parse_module(t)) for n, t in CASES.items()]
    modules.append(("epilogue", wrap_entry_as_fusion(parse_module(EPILOGUE))))
    for name, module in modules:
        k = _kernel(module)
        ptx = _ptx(k, _target(arch))
        assert "mma.sync.aligned.m16n8k16" in ptx, name
        out = run_ptxas(ptx, arch)
        assert out.cubin and out.kernels, name
        for res in out.kernels.values():
            assert res.shared_bytes == MMA_SHARED_BYTES and res.barriers == 1, (name, res)
            assert res.spill_stores_bytes == 0 and res.stack_frame_bytes == 0, (name, res)


@pytest.mark.parametrize("why,text,arch,flag", [
    ("flag off", CASES["bf16_256"], "sm_90", False),
    ("sm_75", CASES["bf16_256"], "sm_75", True),
    ("f32 operands", _dot("f32[128,96]", "f32[96,80]", "f32[128,80]"), "sm_80", True),
    ("mixed operands", _dot("bf16[128,96]", "f16[96,80]", "f32[128,80]"), "sm_80", True),
    ("s8 operands", _dot("s8[70,90]", "s8[90,66]", "s32[70,66]"), "sm_80", True),
])
def test_tiled_path_kept(why, text, arch, flag):
    k = _kernel(parse_module(text))
    ptx = _ptx(k, _target(arch, flag))
    assert "mma" not in ptx and "ldmatrix" not in ptx, why
    assert k.spec.summary_fields()["path"] == "tiled"


def test_host_target_ignores_the_flag():
    from hlo_compile.targets.host.target import HostTarget
    k = _kernel(parse_module(CASES["bf16_in_f32_out_partial"]))
    t = HostTarget()
    t.dot_tensor_cores = True
    assert not dot_mma.use_tensor_cores(t, k.spec)
    assert dot_mma.use_tensor_cores(_target("sm_80"), k.spec)


def test_default_pipeline_ptx_has_no_mma():
    for name in ("bf16_256", "f16_batch"):
        ptx = run_pipeline(parse_module(CASES[name]), CompileOptions(arch="sm_90"), emit="ptx").artifacts["ptx"]
        assert "mma" not in ptx and "ldmatrix" not in ptx, name


def test_pipeline_forwards_the_option():
    """Needs ``target.dot_tensor_cores = c.options.dot_tensor_cores`` in pipeline.py."""
    ptx = run_pipeline(parse_module(CASES["bf16_256"]), CompileOptions(arch="sm_80", dot_tensor_cores=True),
                       emit="ptx").artifacts["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx


# ---- CLI flags -----------------------------------------------------------------------------------
def _write(tmp_path, text):
    p = tmp_path / "m.hlo"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("args,env,expected", [
    ([], {}, False), (["--tensor-cores"], {}, True), (["--no-tensor-cores"], {"HLO_COMPILE_TENSOR_CORES": "1"}, False),
    ([], {"HLO_COMPILE_TENSOR_CORES": "1"}, True), ([], {"HLO_COMPILE_TENSOR_CORES": "0"}, False),
])
def test_cli_flags_reach_the_options(tmp_path, monkeypatch, args, env, expected):
    import hlo_compile.cli.compile as cc
    import hlo_compile.driver.pipeline as pl   # hlo-compile imports run_pipeline when it runs (start-up time)
    import hlo_compile.runtime.executable as ex
    from hlo_compile.cli.run import main as run_main
    seen = []
    real_pipeline, real_compile = pl.run_pipeline, ex.compile_executable
    monkeypatch.setattr(pl, "run_pipeline", lambda m, o, **kw: (seen.append(o), real_pipeline(m, o, **kw))[1])
    monkeypatch.setattr(ex, "compile_executable", lambda m, p, o=None, **kw: (seen.append(o), real_compile(m, p, o, **kw))[1])
    path = _write(tmp_path, CASES["bf16_in_f32_out_partial"])
    r = CliRunner().invoke(cc.main, [path, *args], env=env)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(run_main, [path, "--platform=host", *args], env=env)
    assert r.exit_code == 0, r.output
    assert [o.dot_tensor_cores for o in seen] == [expected, expected]


# ---- the config tiling's warp layout and fragment loads, in the model ------------------------------
from hlo_compile.codegen.emitters.gemm.mma_layout import (WarpLayout, a_fragment_offset, a_fragment_owner,  # noqa: E402
                                                          b_fragment_offset, b_fragment_owner, config_warp_layout)


def test_fragment_owners_invert_the_ptx_tables():
    for lane in range(WARP_SIZE):
        for i, (r, c) in enumerate(ptx_a_elements(lane)):
            assert a_fragment_owner(r, c) == (lane, i // 2, i % 2)
        for i, (k, n) in enumerate(ptx_b_elements(lane)):
            assert b_fragment_owner(k, n) == (lane, i // 2, i % 2)


@pytest.mark.parametrize("bm,bn,bk,warps,expected", [
    (64, 64, 32, 4, (2, 2, 2, 4, 2)), (128, 32, 64, 8, (4, 2, 2, 2, 4)), (16, 16, 32, 2, (1, 2, 1, 1, 2)),
    (16, 64, 16, 4, (1, 4, 1, 2, 1)), (128, 128, 32, 4, (2, 2, 4, 8, 2)), (256, 16, 16, 8, (8, 1, 2, 2, 1)),
])
def test_config_warp_layouts(bm, bn, bk, warps, expected):
    lay = config_warp_layout(bm, bn, bk, warps)
    assert isinstance(lay, WarpLayout)
    assert (lay.warps_m, lay.warps_n, lay.tiles_m, lay.tiles_n, lay.k_steps) == expected
    assert lay.warps_m * lay.warps_n == warps and lay.wm * lay.warps_m == bm and lay.wn * lay.warps_n == bn


def test_config_warp_layout_replicates_past_the_tiles():
    lay = config_warp_layout(16, 8, 16, 2)
    assert isinstance(lay, WarpLayout) and (lay.warps_m, lay.warps_n, lay.replicas) == (1, 1, 2)
    assert lay.warp_origin(1) == lay.warp_origin(0) == (0, 0)


@pytest.mark.parametrize("bm,bn,bk,warps", [(8, 32, 32, 2), (32, 32, 8, 2), (32, 36, 16, 2)])
def test_config_warp_layout_refusals(bm, bn, bk, warps):
    assert isinstance(config_warp_layout(bm, bn, bk, warps), str)


@pytest.mark.parametrize("bm,bn,bk,warps", [(64, 64, 32, 4), (128, 32, 64, 8), (16, 16, 32, 2), (32, 64, 16, 2)])
def test_model_config_block_tile(bm, bn, bk, warps):
    """Every warp of a config tile, fragments read from the ``bk x bm``/``bk x bn`` staged tiles
    at the emitter's offsets (``a/b_fragment_offset``), the model's mma: = A @ B, every output
    written once."""
    lay = config_warp_layout(bm, bn, bk, warps)
    rng = np.random.default_rng(bm + bn + bk)
    A, B = _ints(rng, (bm, bk)), _ints(rng, (bk, bn))
    a_s, b_s = A.T.reshape(-1), B.reshape(-1)      # element (m, k) at k * bm + m; (k, n) at k * bn + n
    out, writes = np.full((bm, bn), np.nan), np.zeros((bm, bn), int)
    for warp in range(warps):
        wm0, wn0 = lay.warp_origin(warp)
        acc = [[[[0.0] * 4 for _ in range(WARP_SIZE)] for _ in range(lay.tiles_n)] for _ in range(lay.tiles_m)]
        for ks in range(lay.k_steps):
            a_fr = [[[tuple(a_s[sum(a_fragment_offset(lane, wm0, bm, tm, ks, r, h))] for h in (0, 1))
                      for r in range(4)] for lane in range(WARP_SIZE)] for tm in range(lay.tiles_m)]
            b_fr = [[[tuple(b_s[sum(b_fragment_offset(lane, wn0, bn, tn, ks, r, h))] for h in (0, 1))
                      for r in range(2)] for lane in range(WARP_SIZE)] for tn in range(lay.tiles_n)]
            for tm in range(lay.tiles_m):
                for tn in range(lay.tiles_n):
                    acc[tm][tn] = mma_m16n8k16(a_fr[tm], b_fr[tn], acc[tm][tn])
        for lane in range(WARP_SIZE):
            for tm in range(lay.tiles_m):
                for tn in range(lay.tiles_n):
                    for r in range(4):
                        dm, dn = acc_position(lane, r)
                        m, n = wm0 + tm * 16 + dm, wn0 + tn * 8 + dn
                        out[m, n] = acc[tm][tn][lane][r]
                        writes[m, n] += 1
    assert (writes == 1).all()
    np.testing.assert_array_equal(out, A @ B)


def test_ptxas_accepts_config_mma_kernels():
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    from test_dot_config_tiling import MMA_CASES
    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    for name, (text, _) in MMA_CASES.items():
        ptx = run_pipeline(parse_module(text), CompileOptions(arch="sm_90", dot_tensor_cores=True),
                           emit="ptx").artifacts["ptx"]
        assert "mma.sync.aligned.m16n8k16" in ptx, name
        out = run_ptxas(ptx, "sm_90")
        for res in out.kernels.values():
            assert res.shared_bytes == 0 and res.spill_stores_bytes == 0, (name, res)
