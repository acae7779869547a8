"""Fusion analysis: heroes and XLA's emitter choice, on small fusions for each rule and on XLA's
own emitter tests (whose directory names say what XLA chose)."""
from __future__ import annotations

from pathlib import Path

import pytest

import hlo_compile
from hlo_compile.gpu.archs import device_for_arch
from hlo_compile.codegen.analysis.fusion_analysis import (analyze_fusion, find_hero, fusion_roots, is_real_reduction_hero,
                                                 reduction_dimensions, transpose_description)
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion

H100 = device_for_arch("sm_90")
ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def fusion_of(text: str):
    """The fusion instruction of a header-less module whose last computation is the fusion
    body (XLA's emitter test format), or of a module whose ENTRY holds exactly one fusion."""
    module = wrap_entry_as_fusion(hlo_compile.parse_module(text))
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 1, f"{len(fusions)} fusions in ENTRY"
    return fusions[0]


def analyze(body: str, device=H100):
    return analyze_fusion(fusion_of(body), device)


def inst(fusion, name: str):
    return fusion.fused_computation.instruction(name)


# ---- shape predicates ---------------------------------------------------------------------

@pytest.mark.parametrize("a,b,bitcast", [
    ("f32[4,6]{1,0}", "f32[24]{0}", True),
    ("f32[4,6]{0,1}", "f32[24]{0}", False),
    ("f32[4,6]{0,1}", "f32[4,2,3]{0,2,1}", True),
    ("f32[4,1,6]{2,1,0}", "f32[4,6]{1,0}", True),
    ("f32[4,1,6]{1,2,0}", "f32[4,6]{1,0}", True),   # a size-1 dim may sit anywhere
    ("f32[2,3]{1,0}", "f32[3,2]{1,0}", True),
])
def test_reshape_is_bitcast(a, b, bitcast):
    from hlo_compile.codegen.analysis.fusion_analysis import reshape_is_bitcast
    assert reshape_is_bitcast(hlo_compile.parse_shape(a), hlo_compile.parse_shape(b)) == bitcast


def test_transpose_and_reshape_bitcasts_are_intermediate():
    from hlo_compile.codegen.analysis.fusion_analysis import is_intermediate
    f = fusion_of("""fusion {
  p = f32[4,6]{1,0} parameter(0)
  t = f32[6,4]{0,1} transpose(p), dimensions={1,0}
  u = f32[6,4]{1,0} transpose(p), dimensions={1,0}
  r = f32[24]{0} reshape(t)
  c = f32[6,4]{1,0} copy(t)
  ROOT out = (f32[24], f32[6,4], f32[6,4]) tuple(r, c, u)
}""")
    expected = {"t": True, "u": False, "r": False, "c": False}
    assert {n: is_intermediate(inst(f, n)) for n in expected} == expected


# ---- heroes -----------------------------------------------------------------------------------

def test_hero_walks_up_elementwise_and_bitcasts_to_a_transpose():
    f = fusion_of("""fusion {
  p = f32[64,1024] parameter(0)
  t = f32[1024,64] transpose(p), dimensions={1,0}
  n = f32[1024,64] negate(t)
  b = f32[64,1024] bitcast(n)
  ROOT a = f32[64,1024] abs(b)
}""")
    assert find_hero(f.fused_computation.root).name == "t"
    a = analyze_fusion(f, H100)
    assert [h.name for h in a.heroes] == ["t"]
    assert a.xla_emitter == "transpose" and a.variant == "tiled" and a.emitter == "loop"
    assert a.reason == ("transpose hero %t (021, f32[64,1024]), tiled; transpose emitter not available, "
                        "using the loop emitter")


def test_transpose_found_through_multi_operand_elementwise_ops():
    f = fusion_of("""fusion {
  p = f32[64,1024] parameter(0)
  q = f32[1024,64] parameter(1)
  t = f32[1024,64] transpose(p), dimensions={1,0}
  ROOT a = f32[1024,64] add(t, q)
}""")
    assert find_hero(f.fused_computation.root).name == "t"


def test_two_transposes_are_not_a_unique_hero():
    f = fusion_of("""fusion {
  p = f32[64,1024] parameter(0)
  q = f32[64,1024] parameter(1)
  t = f32[1024,64] transpose(p), dimensions={1,0}
  u = f32[1024,64] transpose(q), dimensions={1,0}
  ROOT a = f32[1024,64] add(t, u)
}""")
    assert find_hero(f.fused_computation.root).name == "a"
    assert analyze_fusion(f, H100).xla_emitter == "loop"


def test_transpose_hero_rejected_when_a_non_elementwise_op_uses_it():
    f = fusion_of("""fusion {
  p = f32[64,1024] parameter(0)
  t = f32[1024,64] transpose(p), dimensions={1,0}
  a = f32[1024,64] abs(t)
  r = f32[1024,64] reverse(t), dimensions={0}
  ROOT out = (f32[1024,64], f32[1024,64]) tuple(a, r)
}""")
    roots = fusion_roots(f.fused_computation)
    assert [find_hero(r).name for r in roots] == ["a", "r"]
    a = analyze_fusion(f, H100)
    assert a.xla_emitter == "loop" and a.reason.startswith("2 roots")


def test_nested_tuple_roots_are_expanded():
    f = fusion_of("""fusion {
  p = f32[4] parameter(0)
  a = f32[4] abs(p)
  n = f32[4] negate(p)
  t = (f32[4], f32[4]) tuple(a, n)
  ROOT out = ((f32[4], f32[4]), f32[4]) tuple(t, a)
}""")
    assert [r.name for r in fusion_roots(f.fused_computation)] == ["a", "n", "a"]


# ---- transposes --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,out,dims,kind,normalized", [
    ("f32[64,1024]", "f32[1024,64]", "1,0", "021", (1024, 64)),
    ("f32[1,64,1,1024]", "f32[1,1024,1,64]", "0,3,2,1", "021", (1024, 64)),
    ("f32[8,16,32]", "f32[32,8,16]", "2,0,1", "021", (32, 128)),
    ("f32[20,160,170]", "f32[170,160,20]", "2,1,0", "210", (170, 160, 20)),
    ("f32[64,32,2]", "f32[32,64,2]", "1,0,2", "102", (32, 64, 2)),
])
def test_transpose_normalisation(shape, out, dims, kind, normalized):
    f = fusion_of(f"""fusion {{
  p = {shape} parameter(0)
  ROOT t = {out} transpose(p), dimensions={{{dims}}}
}}""")
    d = transpose_description(f.fused_computation.root)
    assert d is not None and d.kind == kind and d.dimensions == normalized and not d.packed


@pytest.mark.parametrize("shape,out,dims,why", [
    ("f32[4,8]", "f32[8,4]", "1,0", "too small"),
    ("s4[64,64]", "s4[64,64]", "1,0", "4-bit with the minor dim moved"),
    ("f32[64,1024]{0,1}", "f32[1024,64]", "1,0", "non-default layout (a physical copy)"),
    ("f32[32,64,64]", "f32[64,32,64]", "1,0,2", "minor dim kept but 64 f32 = 2048 bits > 64"),
])
def test_transposes_that_stay_on_the_loop_emitter(shape, out, dims, why):
    a = analyze(f"""fusion {{
  p = {shape} parameter(0)
  ROOT t = {out} transpose(p), dimensions={{{dims}}}
}}""")
    assert transpose_description(a.roots[0]) is None, why
    assert a.xla_emitter == "loop"


def test_packed_transpose_for_narrow_types():
    a = analyze("""fusion {
  p = bf16[64,128] parameter(0)
  ROOT t = bf16[128,64] transpose(p), dimensions={1,0}
}""")
    assert a.xla_emitter == "transpose" and a.variant == "packed"
    assert a.transpose.packed_tile is not None and a.transpose.shmem_bytes == 32 * 4 * 32 * 2


def test_transpose_roots_must_agree_and_side_outputs_must_bitcast_to_the_input():
    body = """fusion {
  p = f32[64,1024] parameter(0)
  t = f32[1024,64] transpose(p), dimensions={1,0}
  e = %s
  ROOT out = (f32[1024,64], %s) tuple(t, e)
}"""
    ok = analyze(body % ("f32[64,1024] exponential(p)", "f32[64,1024]"))
    assert ok.xla_emitter == "transpose" and [h.name for h in ok.heroes] == ["t", "e"]
    side = analyze(body % ("f32[16,4096] bitcast(p)", "f32[16,4096]"))
    assert side.xla_emitter == "transpose"
    bad = analyze(body % ("f32[64,512] slice(p), slice={[0:64], [0:512]}", "f32[64,512]"))
    assert bad.xla_emitter == "loop"


# ---- reductions ----------------------------------------------------------------------------

def reduce_fusion(shape: str, dims: str, out: str, root: str = "r", extra: str = "") -> str:
    return ADD + f"""fusion {{
  p = {shape} parameter(0)
  c = f32[] constant(0)
  r = {out} reduce(p, c), dimensions={{{dims}}}, to_apply=add{extra}
}}""".replace("  r = ", "  ROOT r = " if root == "r" else "  r = ")


@pytest.mark.parametrize("shape,dims,out,is_row,rd,variant", [
    ("f32[64,1024]", "1", "f32[64]", True, (1, 64, 1024), "row"),
    ("f32[1024,8]", "1", "f32[1024]", True, (1, 1024, 8), "multi-row"),
    ("f32[8,64,1024]", "0,2", "f32[64]", True, (8, 64, 1024), "row"),
    ("f32[1024,64]", "0", "f32[64]", False, (1, 1024, 64), "column"),
    ("f32[1024,8]", "0", "f32[8]", False, (1, 1024, 8), "small-column"),
    ("f32[16,1024,48]", "1", "f32[16,48]", False, (16, 1024, 48), "column"),
    ("f32[32,1024]", "0,1", "f32[]", True, (1, 1, 32768), "row"),
])
def test_reduction_dimensions_and_variant(shape, dims, out, is_row, rd, variant):
    a = analyze(reduce_fusion(shape, dims, out))
    r = a.roots[0]
    assert reduction_dimensions(r) == (is_row, rd)
    assert a.xla_emitter == "reduction" and a.variant == variant and a.hero_reduce is r
    assert a.emitter == "loop" and "reduction emitter not available, using the loop emitter" in a.reason


def test_reduction_dimensions_follow_the_operand_layout():
    a = analyze(reduce_fusion("f32[1024,64]{0,1}", "0", "f32[64]"))
    assert a.reduction == (True, (1, 64, 1024)) and a.variant == "row"


@pytest.mark.parametrize("shape,dims,out,expected", [
    ("f32[16,64]", "0", "f32[64]", "loop"),          # column, b < 32
    ("f32[48,16]", "0", "f32[16]", "loop"),          # column, b < 64 and c < 32
    ("f32[100,4]", "0", "f32[4]", "loop"),           # column, b < 128 and c < 8
    ("f32[200,2]", "0", "f32[2]", "loop"),           # column, b < 256 and c < 3
    ("f32[256,2]", "0", "f32[2]", "reduction"),      # column, big enough
    ("f32[8,24]", "1", "f32[8]", "loop"),            # row, x < 32 and 32 % x != 0
    ("f32[8,16]", "1", "f32[8]", "reduction"),       # row, x divides the warp
])
def test_reductions_where_one_thread_per_output_is_faster(shape, dims, out, expected):
    assert analyze(reduce_fusion(shape, dims, out)).xla_emitter == expected


def test_non_root_reduce_must_be_race_free():
    body = ADD + """fusion {
  p = f32[4,%d] parameter(0)
  c = f32[] constant(0)
  r = f32[4] reduce(p, c), dimensions={1}, to_apply=add
  ROOT n = f32[4] negate(r)
}"""
    small, big = analyze(body % 16384), analyze(body % 32768)
    assert small.xla_emitter == "reduction" and small.heroes[0].name == "r"
    assert big.xla_emitter == "loop" and "not a real reduction hero" in big.reason
    root, hero = big.roots[0], big.raw_heroes[0]
    assert hero.name == "r" and not is_real_reduction_hero(root, hero, H100)
    assert is_real_reduction_hero(hero, hero, H100)  # as a root it needs no race-freedom


@pytest.mark.parametrize("side,expected", [
    ("f32[64,1024] exponential(p)", "reduction"),   # same element count as the reduce input
    ("f32[64] negate(r)", "reduction"),             # an epilogue: its hero is the reduce itself
    ("f32[64] iota(), iota_dimension=0", "loop"),   # 64 elements, the reduce input has 65536
    ("f32[1024] reduce(p, c), dimensions={0}, to_apply=add", "loop"),  # a column reduction: incompatible
    ("f32[64] reduce(p, c), dimensions={1}, to_apply=add", "reduction"),  # the same row reduction
])
def test_multi_output_reduction_consistency(side, expected):
    side_shape = side.split()[0]
    a = analyze(ADD + f"""fusion {{
  p = f32[64,1024] parameter(0)
  c = f32[] constant(0)
  r = f32[64] reduce(p, c), dimensions={{1}}, to_apply=add
  s = {side}
  ROOT out = (f32[64], {side_shape}) tuple(r, s)
}}""")
    assert a.xla_emitter == expected


# ---- the other kinds ----------------------------------------------------------------------

def test_concatenate_hero_and_operand_limit():
    ops = ", ".join(f"p{i}" for i in range(5))
    params = "\n".join(f"  p{i} = f32[8,16] parameter({i})" for i in range(5))
    small = analyze(f"""fusion {{
{params}
  c = f32[16,16] concatenate(p0, p1), dimensions={{0}}
  ROOT a = f32[16,16] abs(c)
}}""")
    assert small.xla_emitter == "concatenate" and small.heroes[0].name == "c"
    big = analyze(f"""fusion {{
{params}
  ROOT c = f32[40,16] concatenate({ops}), dimensions={{0}}
}}""")
    assert big.xla_emitter == "loop" and "more than 4" in big.reason


def test_scatter_and_sort_roots():
    scatter = analyze(ADD + """fusion {
  operand = f32[10,4] parameter(0)
  idx = s32[3,1] parameter(1)
  upd = f32[3,4] parameter(2)
  ROOT s = f32[10,4] scatter(operand, idx, upd), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}""")
    assert scatter.xla_emitter == "scatter" and scatter.emitter is None
    sort = analyze("""less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}
fusion {
  p = f32[128] parameter(0)
  ROOT s = f32[128] sort(p), dimensions={0}, to_apply=less
}""")
    assert sort.xla_emitter == "sort" and "no sort emitter is available" in sort.reason


def test_memcpy_and_in_place_dynamic_update_slice():
    memcpy = analyze("""fusion {
  p = f32[16,8] parameter(0)
  ROOT c = f32[16,8] copy(p)
}""")
    assert memcpy.xla_emitter == "memcpy" and memcpy.emitter == "loop"
    dus = """fusion {
  p = f32[20,30] parameter(0)
  u = f32[5,6] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  %s
}"""
    assert analyze(dus % "ROOT d = f32[20,30] dynamic-update-slice(p, u, i, j)").xla_emitter == "in-place-dus"
    epilogue = "d = f32[20,30] dynamic-update-slice(p, u, i, j)\n  ROOT n = f32[20,30] negate(d)"
    assert analyze(dus % epilogue).xla_emitter == "loop"
    other_reader = ("d = f32[20,30] dynamic-update-slice(p, u, i, j)\n"
                    "  r = f32[20,30] reverse(p), dimensions={0}\n"
                    "  ROOT t = (f32[20,30], f32[20,30]) tuple(d, r)")
    assert analyze(dus % other_reader).xla_emitter == "loop"


def test_backend_config_kinds_report_xla_and_use_our_emitter_for_the_computation():
    text = """HloModule m
fused {
  p = f32[16,16] parameter(0)
  ROOT t = f32[16,16] transpose(p), dimensions={1,0}
}
ENTRY e {
  p = f32[16,16] parameter(0)
  ROOT f = f32[16,16] fusion(p), kind=kCustom, calls=fused,
      backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"32"}}}
}"""
    a = analyze_fusion(hlo_compile.parse_module(text).entry.root, H100)
    plain_text = text.replace("kind=kCustom", "kind=kLoop").split(",\n      backend_config")[0] + "\n}"
    plain = analyze_fusion(hlo_compile.parse_module(plain_text).entry.root, H100)
    assert a.xla_emitter == "triton" and plain.xla_emitter != "triton"
    assert a.emitter == plain.emitter and a.emitter is not None and [h.name for h in a.heroes] == [h.name for h in plain.heroes]
    assert "__triton_gemm (block_m=32)" in a.reason and plain.reason in a.reason


def test_available_emitters_plug_in():
    f = fusion_of(reduce_fusion("f32[64,1024]", "1", "f32[64]"))
    a = analyze_fusion(f, H100, available=frozenset({"loop", "reduction"}))
    assert a.emitter == "reduction" and "not available" not in a.reason


# ---- XLA's emitter tests ----------------------------------------------------------------------

EXPECTED_BY_DIRECTORY = {
    "loop": ("loop", None), "convert": ("loop", None), "transpose": ("transpose", None),
    "concatenate": ("concatenate", None), "scatter": ("scatter", None),
    "dynamic_update_slice": ("in-place-dus", None),
    "reduce_row": ("reduction", "row"), "reduce_multirow": ("reduction", "multi-row"),
    "reduce_column": ("reduction", "column"), "reduce_column_small": ("reduction", "small-column"),
}
# Files where the directory name is not XLA's choice, and why (each checked against the file).
DIRECTORY_DISAGREEMENTS = {
    "transpose/transpose_10_s4.hlo": (("loop", None), "4-bit transposes that move the minor dim stay on "
                                      "the loop emitter (XLA TODO b/415741994; CHECK-NOT allocate_shared)"),
    "transpose/partial_tile_s4.hlo": (("loop", None), "same 4-bit rule (210 transpose of s4)"),
    "reduce_row/inefficient_codegen.hlo": (("reduction", "multi-row"), "x = 4 fits one warp: XLA's CHECK "
                                           "'shuffle_reduce ... to 2' is the multi-row emitter's shuffle"),
    "reduce_row/reduction_groups_two_in_same_group.hlo": (("reduction", "small-column"), "it is a column "
                                                          "reduction [128, 288, 32] and 32 % 32 == 0"),
    "reduce_column/small.hlo": (("reduction", "small-column"), "c = 4 divides the warp size; the file has no "
                                "CHECK lines, only a correctness run, so it does not pin the variant"),
}


def emitter_test_files(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.rglob("*.hlo") if "emitters/tests/" in p.as_posix())


def test_xla_emitter_tests_agree(corpus):
    files = emitter_test_files(corpus)
    if not files:
        pytest.skip("no XLA emitter tests in the corpus")
    agree, mismatches = 0, []
    for path in files:
        key = f"{path.parent.name}/{path.name}"
        expected = DIRECTORY_DISAGREEMENTS.get(key, (EXPECTED_BY_DIRECTORY[path.parent.name], ""))[0]
        a = analyze_fusion(fusion_of(path.read_text()), H100)
        got = (a.xla_emitter, a.variant if expected[1] else None)
        if got == expected:
            agree += 1
        else:
            mismatches.append(f"{key}: expected {expected}, got {got} ({a.reason})")
    assert not mismatches, "\n".join(mismatches)
    assert agree == len(files)


def test_every_fusion_of_the_jax_corpus_is_analysed(corpus):
    from hlo_compile.passes.wrap_fusions import wrap_lone_instructions
    paths = sorted((corpus / "jax").glob("*/*.hlo"))
    if not paths:
        pytest.skip("no JAX cases in the corpus")
    seen = set()
    for path in paths:
        module = wrap_lone_instructions(hlo_compile.parse_module(path.read_text(), str(path)))
        for f in (i for i in module.entry.instructions if i.opcode == "fusion"):
            a = analyze_fusion(f, H100)
            assert len(a.heroes) == len(a.roots) and a.reason
            assert a.emitter == ("loop" if a.xla_emitter not in ("scatter", "sort") else None), a.reason
            seen.add(a.xla_emitter)
    assert {"loop", "reduction", "concatenate"} <= seen
