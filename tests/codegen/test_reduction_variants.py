"""XLA's reduction variants beyond row/column (notes/xla.md §b.5): the small-column emitter,
disjoint reduction groups on ``blockIdx.z`` and vector loads of vectorised reductions.
Kernels run on the host against the interpreter; maps are checked for bijection; PTX with
FileCheck."""
from __future__ import annotations

import dataclasses
import json

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.codegen.kernel import output_leaves
from hlo_compile.options import CompileOptions
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion
from hlo_compile.driver.pipeline import run_pipeline
from hlo_compile.runtime import literals

from codegen_helpers import emit_stage, filecheck, load_fusion_test, run_on_host
from test_emitter_thread_maps import _assert_bijection
from test_reduction_emitter import TESTS, _identity_inits, _reduce_module


def _kernel(text: str):
    module = parse_module(text)
    return plan_module(module, CompileOptions()).kernels[0]


def _run(module, identity_inits=False):
    args = literals.random_inputs(module, 0)
    if identity_inits:
        args = _identity_inits(module, args)
    ok, report = run_on_host(module, args=args)
    assert ok, report


# ---- small column ----------------------------------------------------------------------------
# XLA's FileCheck expectations for the corpus files: threads, vector size, shared tile
# [shared_rows][c + padding], shuffle distance shared_rows / 2.
SMALL_COLUMN_FILES = {
    "f32_2.hlo": dict(threads=64, vector_size=1, tile=(32, 3), shuffle=16),
    "f32_8_v2.hlo": dict(threads=128, vector_size=2, tile=(32, 9), shuffle=16),
    "f32_32_v2.hlo": dict(threads=128, vector_size=2, tile=(8, 33), shuffle=4),
    "s8_f32_32_v4.hlo": dict(threads=128, vector_size=4, tile=(16, 33), shuffle=8),
    "input_layout.hlo": dict(threads=128, vector_size=2, tile=(16, 17), shuffle=8),
}
RUN_ON_HOST = {"f32_2.hlo", "f32_8_v2.hlo", "input_layout.hlo"}   # the others have 23.6M elements


@pytest.mark.parametrize("name", sorted(SMALL_COLUMN_FILES))
def test_small_column_corpus_files(corpus, name):
    module = load_fusion_test(corpus / TESTS / "reduce_column_small" / name)
    kernel = plan_module(module, CompileOptions()).kernels[0]
    spec, want = kernel.spec, SMALL_COLUMN_FILES[name]
    assert kernel.analysis.variant == "small-column" and spec.variant == "small-column"
    g = spec.geometry
    c = spec.rd.dimensions[2]
    assert (g["threads"], g["vector_size"]) == (want["threads"], want["vector_size"]), g
    assert (g["shared_rows"], c + g["shared_padding"]) == want["tile"], g
    assert g["shared_rows"] // 2 == want["shuffle"]
    assert spec.launch.block == (want["threads"], 1, 1) and spec.launch.grid == (spec.rd.dimensions[0], 1, 1)
    if name in RUN_ON_HOST:
        _run(module, identity_inits=True)
        _assert_bijection(spec.thread_to_input_map(), spec.heroes[0].operands[0].shape.dimensions)
        _assert_bijection(spec.thread_to_output_map(), spec.reduce_roots[0].shape.dimensions)


SMALL_COLUMNS = [
    ("f32", "f32", [100, 256, 2]),     # v 1, 64 threads, 32 shared rows
    ("f32", "f32", [11, 130, 4]),       # v 2 -> 64 shared rows -> v 1, 32 rows
    ("f32", "f32", [7, 129, 8]),       # odd b: vector 2 over b*c
    ("f32", "f32", [3, 70, 16]),
    ("f32", "f32", [5, 61, 32]),
    ("bf16", "f32", [6, 200, 8]),      # narrow parameter: vector from the bf16 width
    ("f16", "f16", [4, 260, 2]),
    ("f64", "f64", [9, 140, 4]),        # 64-bit: no vector, shuffled as two halves
    ("s32", "s32", [3, 77, 32]),
]


@pytest.mark.parametrize("et,acc,shape", SMALL_COLUMNS, ids=lambda x: str(x))
def test_small_column_hand_written(et, acc, shape):
    text = _reduce_module(et, acc, shape, [1])
    kernel = _kernel(text)
    assert kernel.spec.variant == "small-column", kernel.spec.report_lines()
    g = kernel.spec.geometry
    assert g["shared_rows"] <= 32 and g["shared_rows"] * shape[2] == g["vector_size"] * g["threads"]
    _run(parse_module(text))


@pytest.mark.parametrize("c", [2, 4, 8, 16, 32])
def test_small_column_maps_are_bijections(c):
    text = f"""HloModule r
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  p = f32[3,300,{c}] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3,{c}] reduce(p, z), dimensions={{1}}, to_apply=add
}}"""
    spec = plan_module(wrap_entry_as_fusion(parse_module(text)), CompileOptions()).kernels[0].spec
    assert spec.variant == "small-column"
    _assert_bijection(spec.thread_to_input_map(), spec.heroes[0].operands[0].shape.dimensions)
    _assert_bijection(spec.thread_to_output_map(), spec.reduce_roots[0].shape.dimensions)


def _force_small_column_c1(monkeypatch):
    """XLA's normalisation never yields a column with c = 1 (a reduce with nothing kept
    minor is a row reduction), but the emitter handles it (32 threads, no padding): view
    the row reduction [1, y, x] as the column [y, x, 1] (same normalised positions)."""
    from hlo_compile.codegen.analysis.emitter_kind import EmitterKind, ReductionVariant
    from hlo_compile.codegen.emitters import EMITTERS, Emitter, reduction as R
    from hlo_compile.codegen.emitters.reduction.small_column import small_column_geometry
    from hlo_compile.gpu.reductions import ReductionDimensions
    from hlo_compile.codegen.target import LaunchDims
    original = EMITTERS[EmitterKind.REDUCTION]

    def plan(fusion, analysis, device, name):
        spec = original.plan(fusion, analysis, device, name)
        z, y, x = spec.rd.dimensions
        assert spec.rd.is_row and z == 1
        rd = ReductionDimensions(False, (y, x, 1))
        geo = small_column_geometry(rd, R.vector_size_fn(spec.heroes, analysis.smallest_input_bits))
        return dataclasses.replace(spec, path=R.VARIANTS[ReductionVariant.SMALL_COLUMN], rd=rd, geometry=geo,
                                   launch=LaunchDims((y, 1, spec.num_groups), (geo["threads"], 1, 1)))
    monkeypatch.setitem(EMITTERS, EmitterKind.REDUCTION, Emitter(plan, original.emit))


@pytest.mark.parametrize("shape", [[5, 300], [3, 64], [2, 1000]])
def test_small_column_c1(monkeypatch, shape):
    _force_small_column_c1(monkeypatch)
    text = _reduce_module("f32", "f32", shape, [1])
    spec = _kernel(text).spec
    assert spec.variant == "small-column"
    g = spec.geometry
    assert (g["threads"], g["vector_size"], g["shared_rows"], g["shared_padding"]) == (32, 1, 32, 0), g
    _run(parse_module(text))
    _assert_bijection(spec.thread_to_input_map(), spec.heroes[0].operands[0].shape.dimensions)
    _assert_bijection(spec.thread_to_output_map(), spec.reduce_roots[0].shape.dimensions)


def test_small_column_side_output_and_epilogue():
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
fused {
  p = f32[6,90,8] parameter(0)
  e = f32[6,90,8] exponential(p)
  z = f32[] constant(0)
  s = f32[6,8] reduce(e, z), dimensions={1}, to_apply=add
  l = f32[6,8] log(s)
  ROOT t = (f32[6,8], f32[6,90,8]) tuple(l, e)
}
ENTRY e {
  p = f32[6,90,8] parameter(0)
  ROOT f = (f32[6,8], f32[6,90,8]) fusion(p), kind=kInput, calls=fused
}
"""
    kernel = _kernel(text)
    assert kernel.spec.variant == "small-column" and len(kernel.spec.side_roots) == 1
    _run(parse_module(text))


# ---- disjoint reduction groups -------------------------------------------------------------
TWO_GROUPS = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] maximum(a, b)
}
fused {
  p0 = f32[24,700] parameter(0)
  p1 = f32[24,700] parameter(1)
  e = f32[24,700] exponential(p0)
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  sa = f32[24] reduce(e, z), dimensions={1}, to_apply=add
  n1 = f32[24,700] negate(p1)
  sb = f32[24] reduce(n1, ninf), dimensions={1}, to_apply=mx
  l1 = f32[24] log(sa)
  ROOT t = (f32[24], f32[24], f32[24,700], f32[24]) tuple(l1, sb, e, sa)
}
ENTRY e {
  p0 = f32[24,700] parameter(0)
  p1 = f32[24,700] parameter(1)
  ROOT f = (f32[24], f32[24], f32[24,700], f32[24]) fusion(p0, p1), kind=kInput, calls=fused
}
"""


def test_two_groups_on_block_z(tmp_path):
    kernel = _kernel(TWO_GROUPS)
    spec = kernel.spec
    assert spec.num_groups == 2 and spec.launch.grid[2] == 2, spec.report_lines()
    names = [[r.name for r in (*roots, *sides)] for _, roots, sides in spec.groups]
    assert names == [["l1", "sa", "e"], ["sb"]]   # the side output e shares p0 with sa
    text = "\n".join(spec.report_lines())
    assert "grid (6, 1, 2)" in text and "2 reduction groups" in text
    _run(parse_module(TWO_GROUPS))
    # each hero's input map only covers its group's blocks; output maps select bl_z
    for h, hero in enumerate(spec.heroes):
        m = spec.thread_to_input_map(hero=h)
        assert all(d[5] == spec.group_of(hero) for d, _, _ in m.domain())
        _assert_bijection(m, hero.operands[0].shape.dimensions)
    for leaf, (_, shape) in enumerate(output_leaves(kernel.fusion)):   # reduce roots and the side output
        _assert_bijection(spec.thread_to_output_map(leaf), shape.dimensions)
    run_pipeline(parse_module(TWO_GROUPS), CompileOptions(), dump_to=tmp_path)
    k = json.loads((tmp_path / "summary.json").read_text())["kernels"][0]
    assert k["grid"][2] == 2 and k["reduction_groups"] == 2, k


@pytest.mark.parametrize("dims,shape,variant", [
    ("0", "[300,70]", "column"), ("1", "[6,130,4]", "small-column"), ("1", "[96,4]", "multi-row")])
def test_two_groups_other_variants(dims, shape, variant):
    rank = shape.count(",") + 1
    full = [int(x) for x in shape.strip("[]").split(",")]
    out = ",".join(str(n) for i, n in enumerate(full) if str(i) not in dims.split(","))
    text = f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}
fused {{
  p0 = f32{shape} parameter(0)
  p1 = f32{shape} parameter(1)
  z = f32[] constant(0)
  sa = f32[{out}] reduce(p0, z), dimensions={{{dims}}}, to_apply=add
  m1 = f32{shape} multiply(p1, p1)
  sb = f32[{out}] reduce(m1, z), dimensions={{{dims}}}, to_apply=add
  ROOT t = (f32[{out}], f32[{out}]) tuple(sa, sb)
}}
ENTRY e {{
  p0 = f32{shape} parameter(0)
  p1 = f32{shape} parameter(1)
  ROOT f = (f32[{out}], f32[{out}]) fusion(p0, p1), kind=kInput, calls=fused
}}
"""
    assert rank >= 2
    spec = _kernel(text).spec
    assert spec.variant == variant and spec.num_groups == 2 and spec.launch.grid[2] == 2
    _run(parse_module(text))


def test_corpus_reduction_groups(corpus):
    base = corpus / TESTS / "reduce_row"
    module = load_fusion_test(base / "reduction_groups.hlo")
    spec = plan_module(module, CompileOptions()).kernels[0].spec
    assert spec.num_groups == 2 and spec.launch.grid[2] == 2   # XLA: scf.index_switch on block_id z
    _run(module, identity_inits=True)
    module = load_fusion_test(base / "reduction_groups_two_in_same_group.hlo")
    spec = plan_module(module, CompileOptions()).kernels[0].spec
    assert spec.num_groups == 1 and spec.launch.grid[2] == 1 and len(spec.heroes) == 2
    _run(module, identity_inits=True)


def test_shared_scalar_constant_does_not_join_groups():
    # both reduces use the same init constant: XLA does not group through scalars
    text = _reduce_module("f32", "f32", [8, 512], [1])
    text = text.replace("fused {\n  p = f32[8,512] parameter(0)\n",
                        "fused {\n  p = f32[8,512] parameter(0)\n  q = f32[8,512] parameter(1)\n")
    text = text.replace("  ROOT o = f32[8] convert(r)\n",
                        "  r2 = f32[8] reduce(q, z), dimensions={1}, to_apply=red\n"
                        "  ROOT o = (f32[8], f32[8]) tuple(r, r2)\n")
    text = text.replace("ENTRY e {\n  p = f32[8,512] parameter(0)\n  ROOT f = f32[8] fusion(p)",
                        "ENTRY e {\n  p = f32[8,512] parameter(0)\n  q = f32[8,512] parameter(1)\n"
                        "  ROOT f = (f32[8], f32[8]) fusion(p, q)")
    spec = _kernel(text).spec
    assert spec.num_groups == 2
    _run(parse_module(text))


# ---- vector loads --------------------------------------------------------------------------
@pytest.mark.parametrize("et,acc,shape,dims,load,count", [
    ("f32", "f32", [64, 4096], [1], "v2.b32", 8),      # row, v 2
    ("f32", "f32", [64, 4000], [1], "v2.b32", 8),      # row of 4000: offsets through urem 4000
    ("bf16", "f32", [64, 4096], [1], "v4.b16", 4),     # bf16 parameter: v 4 (XLA's narrowest input)
    ("f16", "f16", [8, 2048], [1], "v4.b16", 4),
    ("f32", "f32", [40, 300], [0], "v2.b32", 2),       # column, v 2
    ("f32", "f32", [100, 256, 8], [1], "v2.b32", 8),   # small column, v 2
])
def test_vectorised_reductions_emit_vector_loads(tmp_path, et, acc, shape, dims, load, count):
    text = _reduce_module(et, acc, shape, dims)
    assert _kernel(text).spec.geometry["vector_size"] > 1
    ptx = emit_stage(text, "ptx", arch="sm_90")
    filecheck(ptx, f"""
CHECK: .visible .entry f(
CHECK-NOT: ld.global.nc.{{{{[bfu]}}}}{load.split('.')[1][1:]}
CHECK-COUNT-{count}: ld.global.nc.{load}
CHECK-NOT: ld.global
CHECK: ret;
""", tmp_path)


@pytest.mark.parametrize("text", [
    _reduce_module("f32", "f32", [100, 256, 8], [1]), _reduce_module("f32", "f32", [100, 256, 2], [1]),
    TWO_GROUPS], ids=["small_column_v2", "small_column_v1", "two_groups"])
def test_ptxas_accepts_variants(text):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found")
    run_ptxas(emit_stage(text, "ptx", arch="sm_90"), "sm_90")


def test_small_column_ptx_shuffles_from_shared_rows_half(tmp_path):
    # c = 32, v 2: 8 shared rows -> shuffle distances 4, 2, 1
    ptx = emit_stage(_reduce_module("f32", "f32", [64, 72, 32], [1]), "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: bar.sync 0
CHECK: shfl.sync.down.b32 {{.*}}, 4,
CHECK: shfl.sync.down.b32 {{.*}}, 2,
CHECK: shfl.sync.down.b32 {{.*}}, 1,
CHECK-NOT: shfl.sync.down.b32 {{.*}}, 8,
""", tmp_path)


NESTED_OUTPUT_FUSION = """HloModule nested
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  v = f32[] select(gt, a, b)
  i = s32[] select(gt, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
argmin {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  lt = pred[] compare(a, b), direction=LT
  v = f32[] select(lt, a, b)
  i = s32[] select(lt, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
fused {
  x = f32[64,100] parameter(0)
  iota = s32[64,100] iota(), iota_dimension=1
  lo = f32[] constant(-inf)
  hi = f32[] constant(inf)
  zero = s32[] constant(0)
  mx = (f32[64], s32[64]) reduce(x, iota, lo, zero), dimensions={1}, to_apply=argmax
  mn = (f32[64], s32[64]) reduce(x, iota, hi, zero), dimensions={1}, to_apply=argmin
  ROOT r = ((f32[64], s32[64]), (f32[64], s32[64])) tuple(mx, mn)
}
ENTRY e {
  x = f32[64,100] parameter(0)
  f = ((f32[64], s32[64]), (f32[64], s32[64])) fusion(x), kind=kInput, calls=fused
  inner = (f32[64], s32[64]) get-tuple-element(f), index=1
  idx = s32[64] get-tuple-element(inner), index=1
  first = (f32[64], s32[64]) get-tuple-element(f), index=0
  val = f32[64] get-tuple-element(first), index=0
  ROOT out = (s32[64], f32[64]) tuple(idx, val)
}
"""


def test_fusion_with_nested_tuple_output_runs_on_host():
    """A multi-output fusion whose roots are variadic reduces has a nested tuple shape
    (XLA:GPU's argmax + argmin of one operand); its value keeps that nesting, so a
    get-tuple-element of a get-tuple-element reads the right buffer."""
    ok, report = run_on_host(parse_module(NESTED_OUTPUT_FUSION))
    assert ok, report
