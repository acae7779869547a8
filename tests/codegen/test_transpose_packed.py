"""XLA's packed transpose (notes/xla.md §b.4) and the vectorised tiled transpose for narrow
types: the corpus files XLA sends to ``PackedTranspose`` and hand-written fusions on the host
against the interpreter, the shared tile and vector accesses in PTX (FileCheck), ptxas, and
the variant named in summary.json."""
from __future__ import annotations

import json
import re

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion
from hlo_compile.driver.pipeline import run_pipeline

from codegen_helpers import filecheck, load_fusion_test, run_on_host

TRANSPOSE_TESTS = "xla/repo/xla/backends/gpu/codegen/emitters/tests/transpose"
NOT_RUN = {"multiple_roots_one_shmem_transpose.hlo"}   # 92M elements (run by nothing on the host)
SUB_BYTE = {"packed_transpose_s4.hlo"}                 # refused: 4-bit storage -> loop emitter


def _fusion(text: str):
    return wrap_entry_as_fusion(parse_module(text))


def _kernel(module, arch: str = "sm_80"):
    plan = plan_module(module, CompileOptions(arch=arch))
    assert len(plan.kernels) == 1
    return plan.kernels[0]


def _ptx(text: str, arch: str) -> str:
    return run_pipeline(_fusion(text), CompileOptions(arch=arch), emit="ptx").artifacts["ptx"]


# ---- the corpus ----------------------------------------------------------------------------------
def test_corpus_packed_files_use_the_packed_emitter(corpus):
    d = corpus / TRANSPOSE_TESTS
    if not d.is_dir():
        pytest.skip(f"{TRANSPOSE_TESTS} not in the corpus")
    packed = []
    for path in sorted(d.glob("*.hlo")):
        k = _kernel(load_fusion_test(path))
        if k.analysis.variant != "packed" or path.name in SUB_BYTE:
            assert type(k.spec).__name__ != "PackedTransposeKernelSpec", path.name
            continue
        packed.append(path.name)
        spec = k.spec
        assert type(spec).__name__ == "PackedTransposeKernelSpec", path.name
        assert k.launch.block == (128, 1, 1)
        # XLA's FileCheck lines name the shared tiles: tensor<64x64xbf16>, tensor<128x128xi8>
        text = path.read_text()
        shapes = re.findall(r"allocate_shared : tensor<(\d+)x(\d+)x", text)
        for a, b in shapes:
            assert int(a) == int(b) == spec.tiling.shmem_dim, path.name
        if shapes:
            assert len(shapes) == len(spec.heroes), path.name
        if "vector<2x2x" in text:
            assert spec.tiling.vector == 2, path.name
    assert {"packed_transpose_bf16.hlo", "packed_transpose_s8.hlo", "packed_transpose_f16.hlo",
            "packed_transpose_s16.hlo", "packed_transpose_two_heroes.hlo", "packed_transpose_side_output.hlo",
            "packed_transpose_multiple_heroes.hlo", "packed_transpose_multiple_roots.hlo",
            "multiple_roots.hlo"} <= set(packed)
    # (they run on the host against the interpreter in test_transpose_emitter.py)


# ---- hand-written fusions ---------------------------------------------------------------------------
BF16_2D = """HloModule m
fusion {
  p0 = bf16[256,512] parameter(0)
  e = bf16[256,512] exponential(p0)
  t = bf16[512,256] transpose(e), dimensions={1,0}
  ROOT a = bf16[512,256] add(t, t)
}"""

CASES = {
    # name: (module, vector size, output tile, blocks)
    "bf16_2d_256x512": (BF16_2D, 2, (64, 1, 64, 1), 8 * 4),
    "s8_2d_128x96": ("""HloModule m
fusion {
  p0 = s8[128,96] parameter(0)
  t = s8[96,128] transpose(p0), dimensions={1,0}
  ROOT n = s8[96,128] negate(t)
}""", 4, (96, 1, 128, 1), 1),
    "s8_021_partial_tiles": ("""HloModule m
fusion {
  p0 = s8[3,40,136] parameter(0)
  p1 = s8[3,136,40] parameter(1)
  t = s8[3,136,40] transpose(p0), dimensions={0,2,1}
  ROOT a = s8[3,136,40] add(t, p1)
}""", 4, (1, 128, 1, 40, 1), 3 * 2),
    "f16_210_side_output": ("""HloModule m
fusion {
  p0 = f16[30,16,30] parameter(0)
  l = f16[30,16,30] log(p0)
  t = f16[30,16,30] transpose(l), dimensions={2,1,0}
  s = f16[30,16,30] sqrt(t)
  ROOT r = (f16[30,16,30], f16[30,16,30]) tuple(s, l)
}""", 2, (30, 2, 30, 1), 8),
    "bf16_bitcast_epilogue": ("""HloModule m
fusion {
  p0 = bf16[96,160] parameter(0)
  t = bf16[160,96] transpose(p0), dimensions={1,0}
  ROOT b = bf16[160,8,12] bitcast(t)
}""", 2, (64, 1, 64, 1), 3 * 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hand_written_packed_transposes_on_host(name):
    text, v, tile, blocks = CASES[name]
    module = _fusion(text)
    k = _kernel(module)
    assert (k.analysis.emitter, k.analysis.variant) == ("transpose", "packed"), k.analysis.reason
    assert type(k.spec).__name__ == "PackedTransposeKernelSpec"
    assert k.spec.tiling.vector == v and tuple(k.spec.tiling.out_tile) == tile, k.spec.report_lines()[:2]
    assert k.launch.grid == (blocks, 1, 1) and k.launch.block == (128, 1, 1)
    ok, report = run_on_host(module, seed=5)
    assert ok, report


def test_packed_falls_back_to_tiled_when_its_conditions_fail():
    # bf16 021 with a 16-element minor dim: 16 < 10·v populated columns, not packed
    module = _fusion("""HloModule m
fusion {
  p0 = bf16[6,100,16] parameter(0)
  t = bf16[6,16,100] transpose(p0), dimensions={0,2,1}
  ROOT n = bf16[6,16,100] negate(t)
}""")
    k = _kernel(module)
    assert k.analysis.variant == "tiled" and type(k.spec).__name__ == "TransposeKernelSpec"
    ok, report = run_on_host(module)
    assert ok, report


# ---- the vectorised tiled transpose -----------------------------------------------------------------
# 432·16 = 6912 blocks of 32 × 16: blocks·128 = 4·108·2048 on the A100 (sm_80): v = 2
TILED_V2 = """HloModule m
fusion {
  p0 = bf16[432,512,16] parameter(0)
  e = bf16[432,512,16] exponential(p0)
  t = bf16[432,16,512] transpose(e), dimensions={0,2,1}
  ROOT a = bf16[432,16,512] add(t, t)
}"""


def test_tiled_vector_size_follows_xla():
    k = _kernel(_fusion(TILED_V2), "sm_80")
    t = k.spec.tiling
    assert k.analysis.variant == "tiled" and t.vector == 2
    assert t.tile == (1, 64, 16) and t.shmem_shape == (1, 64, 17) and t.iterations == 4
    assert k.launch.grid == (432 * 8, 1, 1)
    assert k.spec.summary_fields()["vector_size"] == 2
    # on the H100 (132 SMs) the same fusion has too few blocks: v = 1
    assert _kernel(_fusion(TILED_V2), "sm_90").spec.tiling.vector == 1
    # f32 never vectorises (4 bytes / 4 bytes = 1)
    f32 = _kernel(_fusion(TILED_V2.replace("bf16", "f32")), "sm_80").spec.tiling
    assert f32.vector == 1
    # a swapped dim not divisible by v: no vectorisation
    odd = TILED_V2.replace("432,512,16", "432,511,16").replace("432,16,512", "432,16,511")
    assert _kernel(_fusion(odd), "sm_80").spec.tiling.vector == 1


def test_tiled_vectorised_on_host_and_ptx(tmp_path):
    module = _fusion(TILED_V2)
    ok, report = run_on_host(module, seed=1)
    assert ok, report
    filecheck(_ptx(TILED_V2, "sm_80"), """
CHECK: .shared .align 16 .b8 tile_0[2176];
CHECK: ld.global.nc.v2.b16
CHECK: bar.sync 0;
CHECK-NOT: bar.sync
CHECK: ld.shared.b16
CHECK: st.global.v2.b16
CHECK: ret;
""", tmp_path)


# ---- PTX ---------------------------------------------------------------------------------------------
def test_packed_ptx_shared_tile_and_vector_accesses(tmp_path):
    # 64 × 64 bf16 = 8192 B; each lane loads 2 bf16 (one vector), stores them as one shared
    # word; phase 2 reads 2 words (the 2 × 2 register tile) and stores 2 bf16 per column
    filecheck(_ptx(BF16_2D, "sm_90"), """
CHECK: .visible .entry fusion(
CHECK: .shared .align 16 .b8 tile_0[8192];
CHECK: ld.global.nc.v2.b16
CHECK: st.shared.b32
CHECK: bar.sync 0;
CHECK-NOT: bar.sync
CHECK: ld.shared.v2.b16
CHECK: ld.shared.v2.b16
CHECK: st.global.v2.b16
CHECK: st.global.v2.b16
CHECK: ret;
""", tmp_path)


def test_packed_s8_ptx_shared_tile(tmp_path):
    # 128 × 128 s8 = 16384 B; 4 s8 per access (LLVM merges them into one 32-bit access),
    # 4 shared words per 4 × 4 register tile
    filecheck(_ptx(CASES["s8_2d_128x96"][0], "sm_90"), """
CHECK: .shared .align 16 .b8 tile_0[16384];
CHECK: ld.global.nc.{{v4.b8|b32}}
CHECK: st.shared.b32
CHECK: bar.sync 0;
CHECK-COUNT-4: ld.shared.{{v4.b8|b32}}
CHECK: st.global.{{v4.b8|b32}}
""", tmp_path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts_packed_and_vectorised_kernels(corpus, arch):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    modules = [(n, _fusion(c[0])) for n, c in CASES.items()] + [("tiled_v2", _fusion(TILED_V2))]
    for name, module in modules:
        out = run_ptxas(run_pipeline(module, CompileOptions(arch=arch), emit="ptx").artifacts["ptx"], arch)
        assert out.cubin and out.kernels, name
        for res in out.kernels.values():
            assert res.spill_stores_bytes == 0 and res.shared_bytes > 0 and res.barriers == 1, name


# ---- summary.json ------------------------------------------------------------------------------------
def test_summary_names_the_packed_variant(tmp_path):
    run_pipeline(_fusion(BF16_2D), CompileOptions(), dump_to=tmp_path)
    k = json.loads((tmp_path / "summary.json").read_text())["kernels"][0]
    assert k["emitter"] == "transpose" and k["variant"] == "packed"
    assert k["shared_tile"] == [64, 64] and k["static_shared_bytes"] == 8192 and k["vector_size"] == 2
    assert k["grid"] == [32, 1, 1] and k["block"] == [128, 1, 1]
    report = next(tmp_path.glob("module_0000.*.fusions.txt")).read_text()
    assert "transpose packed" in report and "shared tile 64x64 (swizzled)" in report
