"""Vector global loads and stores of the sort kernels (``codegen/emitters/sort/vectors.py``).

Like XLA's sort kernels (``ld.global.v4.b32`` / ``st.global.v4.b32``), a bitonic thread copies its
adjacent slots between global and shared memory as vectors, and a rank-sort thread walks its row
reading 4 adjacent elements at a time, wherever the layout and the row length make the vectors
aligned; elsewhere the accesses stay scalar. Checked here: the helpers' rules, FileCheck goldens
of the IR and PTX (vectors where allowed, none where not), and the host against the interpreter
(bit for bit) on each path: full groups, padded rows, groups of 2, a fused prologue on the
vector lanes, an output layout that takes no vectors, narrow types, and the rank sort."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.codegen.emitters.sort.vectors import chunk, group_size, params_at_operand_index, unit_stride
from hlo_compile.hlo.parser import parse_shape
from hlo_compile.options import CompileOptions

from codegen_helpers import emit_stage, filecheck
from test_sort_emitter import KEY_LT_S32, LT_F32_TOTAL, _floats_with_specials, _sort_module, \
    assert_host_matches_interpreter


def _spec(text: str):
    (kernel,) = plan_module(parse_module(text), CompileOptions()).kernels
    return kernel.spec


KV_TEXT = _sort_module("3,1000", 1, KEY_LT_S32, ["s32", "f32"])   # padded to 1024: guarded groups of 4

LT_BF16_PRED = """
lt {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  c = pred[] parameter(2)
  d = pred[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT, type=TOTALORDER
}
"""

LT3_S32 = """
lt {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  e = s32[] parameter(4)
  f = s32[] parameter(5)
  ROOT r = pred[] compare(a, b), direction=LT
}
"""


def _fused(in_layout: str, out_layout: str, prologue: str = "negate", shape: str = "8,64") -> str:
    """A sort fusion along dim 1 whose operand is ``prologue(parameter)``, with the given layouts."""
    return f"""HloModule m
{LT_F32_TOTAL}
fused {{
  p0 = f32[{shape}]{{{in_layout}}} parameter(0)
  n = f32[{shape}]{{{in_layout}}} {prologue}(p0)
  ROOT s = f32[{shape}]{{{out_layout}}} sort(n), dimensions={{1}}, is_stable=true, to_apply=lt
}}

ENTRY e {{
  x = f32[{shape}]{{{in_layout}}} parameter(0)
  ROOT f = f32[{shape}]{{{out_layout}}} fusion(x), kind=kLoop, calls=fused
}}
"""


# ---- the rules -------------------------------------------------------------------------------------

def test_group_size_divides_row_and_slots():
    assert [group_size(n, 4) for n in (1000, 1024, 6, 37, 2)] == [4, 4, 2, 1, 2]
    assert group_size(64, 2) == 2 and group_size(64, 1) == 1


def test_chunk_by_layout_and_bytes():
    assert unit_stride(parse_shape("f32[8,64]{1,0}"), 1) and not unit_stride(parse_shape("f32[8,64]{0,1}"), 1)
    assert unit_stride(parse_shape("f32[8,64,1]{2,1,0}"), 1)          # only a size-1 dim more minor
    assert chunk(parse_shape("f32[8,64]{1,0}"), 1, 4) == 4             # 16 bytes
    assert chunk(parse_shape("f64[8,64]{1,0}"), 1, 4) == 2             # at most 16 bytes a vector
    assert chunk(parse_shape("bf16[8,64]{1,0}"), 1, 4) == 4
    assert chunk(parse_shape("f32[8,64]{0,1}"), 1, 4) == 1             # not unit-stride: scalars
    assert chunk(parse_shape("f32[8,64]{1,0}"), 1, 1) == 1
    assert chunk(parse_shape("c64[8,64]{1,0}"), 1, 4) == 1             # complex: no vectors


def test_params_at_operand_index_follow_elementwise_ops_only():
    module = parse_module(_fused("1,0", "1,0"))
    fusion = module.entry.root
    hero = fusion.fused_computation.root
    assert [p.name for p in params_at_operand_index(hero, (8, 64))] == ["p0"]
    bcast = parse_module(PROLOGUE_BROADCAST).entry.root.fused_computation.root
    # the broadcast operand reads its parameter at another index: only the direct one
    assert [p.name for p in params_at_operand_index(bcast, (4, 32))] == ["x"]


PROLOGUE_BROADCAST = f"""HloModule m
{KEY_LT_S32.replace("s32", "f32").replace("c = f32[]", "c = s32[]").replace("d = f32[]", "d = s32[]")}
fused {{
  x = f32[4,32] parameter(0)
  i = s32[32] parameter(1)
  b = s32[4,32] broadcast(i), dimensions={{1}}
  ROOT s = (f32[4,32], s32[4,32]) sort(x, b), dimensions={{1}}, is_stable=true, to_apply=lt
}}

ENTRY e {{
  x = f32[4,32] parameter(0)
  i = s32[32] parameter(1)
  ROOT f = (f32[4,32], s32[4,32]) fusion(x, i), kind=kLoop, calls=fused
}}
"""


# ---- goldens -----------------------------------------------------------------------------------------

def test_llvm_ir_bitonic_vector_loads_and_stores(tmp_path):
    """Every operand loaded and every output stored 4 adjacent slots at a time (16-byte
    aligned), the loads invariant (``ld.global.nc``), inside the padding guard of the group."""
    filecheck(emit_stage(KV_TEXT, "llvm"), """
CHECK: define {{.*}}ptx_kernel
CHECK: icmp ult i32 %{{.*}}, 1000
CHECK-DAG: load <4 x i32>, ptr %{{.*}}, align 16, !invariant.load
CHECK-DAG: load <4 x float>, ptr %{{.*}}, align 16, !invariant.load
CHECK: call void @llvm.nvvm.barrier
CHECK: stage.head:
CHECK: icmp ult i32 %{{.*}}, 1000
CHECK-DAG: store <4 x i32> %{{.*}}, ptr %{{.*}}, align 16
CHECK-DAG: store <4 x float> %{{.*}}, ptr %{{.*}}, align 16
CHECK-NOT: store {{i32|float}} %{{.*}}, ptr %{{.*}}out
""", tmp_path)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_bitonic_v4(arch, tmp_path):
    filecheck(emit_stage(KV_TEXT, "ptx", arch=arch), """
CHECK: .visible .entry
CHECK-DAG: ld.global.nc.v4.b32
CHECK-DAG: ld.global.nc.v4.b32
CHECK: bar.sync 0;
CHECK-DAG: st.global.v4.b32
CHECK-DAG: st.global.v4.b32
CHECK-NOT: st.global.b32
CHECK: ret;
""", tmp_path)


def test_ptx_bf16_and_pred_vectors(tmp_path):
    """4 bf16 (8 bytes) and 4 pred bytes (4 bytes) per thread: one access each."""
    text = _sort_module("4,64", 1, LT_BF16_PRED, ["bf16", "pred"])
    filecheck(emit_stage(text, "llvm"), """
CHECK-DAG: load <4 x bfloat>, ptr %{{.*}}, align 8, !invariant.load
CHECK-DAG: load <4 x i8>, ptr %{{.*}}, align 4, !invariant.load
CHECK-DAG: store <4 x bfloat> %{{.*}}, align 8
CHECK-DAG: store <4 x i8> %{{.*}}, align 4
""", tmp_path)


def test_groups_of_two_and_none(tmp_path):
    """n = 6 (padded to 8, 2 threads of 4 slots): groups of 2 adjacent slots; n = 37: every
    slot alone (a row's start is not aligned), no vectors at all."""
    filecheck(emit_stage(_sort_module("3,6", 1, LT_F32_TOTAL, ["f32"]), "llvm"), """
CHECK: load <2 x float>, ptr %{{.*}}, align 8
CHECK: store <2 x float> %{{.*}}, align 8
""", tmp_path)
    ir = emit_stage(_sort_module("3,37", 1, LT_F32_TOTAL, ["f32"]), "llvm")
    assert "x float>" not in ir and "load float" in ir


def test_report_says_which_accesses_are_vectors():
    assert "groups of 4 adjacent slot(s); elements per vector: loads %param_0 4, %param_1 4; stores 4, 4" \
        in "\n".join(_spec(KV_TEXT).report_lines())
    assert "groups of 4 adjacent slot(s); elements per vector: loads %p0 4; stores 1" \
        in "\n".join(_spec(_fused("1,0", "0,1")).report_lines())
    assert "groups of 1 adjacent slot(s); elements per vector: loads %param_0 1; stores 1" \
        in "\n".join(_spec(_sort_module("3,37", 1, LT_F32_TOTAL, ["f32"])).report_lines())


def test_output_layout_without_vectors(tmp_path):
    """Input rows unit-stride, output rows strided: vector loads, scalar stores."""
    filecheck(emit_stage(_fused("1,0", "0,1"), "llvm"), """
CHECK: load <4 x float>, ptr %{{.*}}, align 16
CHECK: fneg float
CHECK-NOT: store <4 x float>
CHECK: store float
""", tmp_path)


def test_rank_sort_walks_the_row_in_vectors(tmp_path):
    """A sort too long for shared memory (the rank kernel): 4 adjacent elements of each
    operand per iteration of the walk, stores stay scalar (each element goes to its rank)."""
    text = _sort_module("2,2052", 1, LT3_S32, ["s32", "s32", "s32"])
    assert _spec(text).summary_fields()["algorithm"] == "rank"
    filecheck(emit_stage(text, "llvm"), """
CHECK: j.head:
CHECK: load <4 x i32>, ptr %{{.*}}, align 16, !invariant.load
CHECK: load <4 x i32>, ptr %{{.*}}, align 16, !invariant.load
CHECK: load <4 x i32>, ptr %{{.*}}, align 16, !invariant.load
CHECK: j.done:
CHECK-NOT: store <4 x i32>
""", tmp_path)


# ---- host against the interpreter --------------------------------------------------------------------

@pytest.mark.parametrize("n", [6, 64, 1000, 37])
def test_host_matches_interpreter_key_value(n):
    rng = np.random.default_rng(n)
    keys = rng.integers(-5, 5, size=(3, n)).astype(np.int32)       # ties: the order of values shows
    vals = _floats_with_specials(rng, (3, n))
    assert_host_matches_interpreter(_sort_module(f"3,{n}", 1, KEY_LT_S32, ["s32", "f32"]), [keys, vals])


@pytest.mark.parametrize("layouts", [("1,0", "1,0"), ("1,0", "0,1"), ("0,1", "1,0")])
def test_host_matches_interpreter_prologue_and_layouts(layouts):
    x = _floats_with_specials(np.random.default_rng(3), (8, 64))
    assert_host_matches_interpreter(_fused(*layouts), [x])


def test_host_matches_interpreter_bf16_pred():
    rng = np.random.default_rng(5)
    keys = np.round(rng.normal(size=(4, 64)), 1).astype(ml_dtypes.bfloat16)
    flags = rng.integers(0, 2, size=(4, 64)).astype(bool)
    assert_host_matches_interpreter(_sort_module("4,64", 1, LT_BF16_PRED, ["bf16", "pred"]), [keys, flags])


@pytest.mark.parametrize("n", [2052, 2050])
def test_host_matches_interpreter_rank_sort(n):
    rng = np.random.default_rng(n)
    args = [rng.integers(-50, 50, size=(1, n)).astype(np.int32) for _ in range(3)]
    text = _sort_module(f"1,{n}", 1, LT3_S32, ["s32", "s32", "s32"])
    assert _spec(text).summary_fields()["algorithm"] == "rank"
    assert_host_matches_interpreter(text, args)
