"""Global access widths of loop-family, concatenate, packed-transpose and block-level kernels
against XLA:GPU's (issue 29): the packed transpose's lanes read their two 16-bit elements as one
32-bit load also where the operand has unit dims or another rank than the canonical transpose;
parameter elements at constant indices are read once in the entry block (a ``u64[2]`` key: one
``v2.b64`` load, not one load per concatenate arm); an element's data-movement reads come before
its arithmetic (even/odd slices around a ``sin``: one 32-bit load); the concatenate emitter
stores a thread's operands adjacently also under a bitcast epilogue (``st.global.v4.b32``); a
block-level reduce over a major dim reads its kept rows as vectors. Every kernel also runs on
the host against the interpreter; PTX and LLVM IR are checked with FileCheck."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions

from codegen_helpers import emit_stage, filecheck, run_on_host

PACKED_UNIT_DIMS = """HloModule m
fused {
  p = bf16[1,1,32,64]{3,2,1,0} parameter(0)
  ROOT t = bf16[64,1,1,32]{3,2,1,0} transpose(p), dimensions={3,0,1,2}
}
ENTRY e {
  p = bf16[1,1,32,64]{3,2,1,0} parameter(0)
  ROOT f = bf16[64,1,1,32]{3,2,1,0} fusion(p), kind=kInput, calls=fused
}
"""

# the canonical transpose [2, 1024, 1, 32, 1] splits the operand's [32, 32] (silu prologue)
PACKED_SPLIT = """HloModule m
fused {
  p = f16[2,32,32,32]{3,2,1,0} parameter(0)
  one = f16[] constant(1)
  ones = f16[2,32,32,32]{3,2,1,0} broadcast(one), dimensions={}
  n = f16[2,32,32,32]{3,2,1,0} negate(p)
  x = f16[2,32,32,32]{3,2,1,0} exponential(n)
  a = f16[2,32,32,32]{3,2,1,0} add(x, ones)
  d = f16[2,32,32,32]{3,2,1,0} divide(ones, a)
  m = f16[2,32,32,32]{3,2,1,0} multiply(p, d)
  ROOT t = f16[2,32,32,32]{3,2,1,0} transpose(m), dimensions={0,3,1,2}
}
ENTRY e {
  p = f16[2,32,32,32]{3,2,1,0} parameter(0)
  ROOT f = f16[2,32,32,32]{3,2,1,0} fusion(p), kind=kInput, calls=fused
}
"""

# a u64[2] key read at constant indices in both arms of an elemental concatenate (inside the
# concatenate emitter's operand, emitted inline: the arms are blocks of the kernel itself)
CONSTANT_INDEX = """HloModule m
fused {
  p = u64[2]{0} parameter(0)
  q = u64[8,1]{1,0} parameter(1)
  sa = u64[1]{0} slice(p), slice={[0:1]}
  sb = u64[1]{0} slice(p), slice={[1:2]}
  i = u64[8,1]{1,0} iota(), iota_dimension=0
  k0 = u64[] bitcast(sa)
  k1 = u64[] bitcast(sb)
  b0 = u64[8,1]{1,0} broadcast(k0), dimensions={}
  b1 = u64[8,1]{1,0} broadcast(k1), dimensions={}
  x0 = u64[8,1]{1,0} add(i, b0)
  x1 = u64[8,1]{1,0} xor(x0, b1)
  y0 = u64[8,1]{1,0} multiply(i, b1)
  y1 = u64[8,1]{1,0} add(y0, b0)
  c = u64[8,2]{1,0} concatenate(x1, y1), dimensions={1}
  ROOT r = u64[8,3]{1,0} concatenate(c, q), dimensions={1}
}
ENTRY e {
  p = u64[2]{0} parameter(0)
  q = u64[8,1]{1,0} parameter(1)
  ROOT f = u64[8,3]{1,0} fusion(p, q), kind=kInput, calls=fused
}
"""

# a rotary embedding's even and odd elements, each multiplied by a sine or cosine
EVEN_ODD = """HloModule m
fused {
  p = bf16[16,64]{1,0} parameter(0)
  q = f32[16,32]{1,0} parameter(1)
  ev = bf16[16,32]{1,0} slice(p), slice={[0:16], [0:64:2]}
  od = bf16[16,32]{1,0} slice(p), slice={[0:16], [1:64:2]}
  e = f32[16,32]{1,0} convert(ev)
  o = f32[16,32]{1,0} convert(od)
  c = f32[16,32]{1,0} cosine(q)
  s = f32[16,32]{1,0} sine(q)
  ec = f32[16,32]{1,0} multiply(e, c)
  os = f32[16,32]{1,0} multiply(o, s)
  r = f32[16,32]{1,0} subtract(ec, os)
  ROOT b = bf16[16,32]{1,0} convert(r)
}
ENTRY e {
  p = bf16[16,64]{1,0} parameter(0)
  q = f32[16,32]{1,0} parameter(1)
  ROOT f = bf16[16,32]{1,0} fusion(p, q), kind=kLoop, calls=fused
}
"""

# four [n, 1] words concatenated and read back as f32[128, 64] (a bitcast epilogue)
CONCAT_BITCAST = """HloModule m
fused {
  a = u32[2048,1]{1,0} parameter(0)
  b = u32[2048,1]{1,0} parameter(1)
  c = u32[2048,1]{1,0} parameter(2)
  d = u32[2048,1]{1,0} parameter(3)
  q = f32[128,64]{1,0} parameter(4)
  k = u32[2048,4]{1,0} concatenate(a, b, c, d), dimensions={1}
  w = u32[128,64]{1,0} bitcast(k)
  x = f32[128,64]{1,0} bitcast-convert(w)
  ROOT r = f32[128,64]{1,0} add(x, q)
}
ENTRY e {
  a = u32[2048,1]{1,0} parameter(0)
  b = u32[2048,1]{1,0} parameter(1)
  c = u32[2048,1]{1,0} parameter(2)
  d = u32[2048,1]{1,0} parameter(3)
  q = f32[128,64]{1,0} parameter(4)
  ROOT f = f32[128,64]{1,0} fusion(a, b, c, d, q), kind=kInput, calls=fused
}
"""

_TRITON = ('{"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"2",'
           '"output_tiles":[{"sizes":["ROWS","COLS"]}],"num_ctas":1,"num_stages":1}}}')


def _softmax_of_batch_sum(batch: int, rows: int, cols: int, tile_rows: int) -> str:
    """softmax over the rows of ``sum(p, dim 0)``: its first reduce is over the major dim."""
    cfg = _TRITON.replace("ROWS", str(tile_rows)).replace("COLS", str(cols))
    return f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}
max {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] maximum(a, b)
}}
fused {{
  p = f32[{batch},{rows},{cols}]{{2,1,0}} parameter(0)
  z = f32[] constant(0)
  s = f32[{rows},{cols}]{{1,0}} reduce(p, z), dimensions={{0}}, to_apply=add
  ninf = f32[] constant(-inf)
  m = f32[{rows}]{{0}} reduce(s, ninf), dimensions={{1}}, to_apply=max
  mb = f32[{rows},{cols}]{{1,0}} broadcast(m), dimensions={{0}}
  d = f32[{rows},{cols}]{{1,0}} subtract(s, mb)
  x = f32[{rows},{cols}]{{1,0}} exponential(d)
  t = f32[{rows}]{{0}} reduce(x, z), dimensions={{1}}, to_apply=add
  tb = f32[{rows},{cols}]{{1,0}} broadcast(t), dimensions={{0}}
  ROOT o = f32[{rows},{cols}]{{1,0}} divide(x, tb)
}}
ENTRY e {{
  p = f32[{batch},{rows},{cols}]{{2,1,0}} parameter(0)
  ROOT f = f32[{rows},{cols}]{{1,0}} fusion(p), kind=kCustom, calls=fused, backend_config={cfg}
}}
"""


def _emitter(text: str) -> tuple[str, object]:
    kernel = plan_module(parse_module(text), CompileOptions(arch="sm_90")).kernels[0]
    return kernel.analysis.emitter, kernel.spec


def _on_host(text: str) -> None:
    ok, report = run_on_host(parse_module(text))
    assert ok, report


def test_packed_transpose_with_unit_dims_reads_32_bit_words(tmp_path):
    """``bf16[1,1,32,64]`` transposed: the unit dims' zero indices are equal constants, so each
    lane's two elements are one vector (XLA: ``ld.global.nc.b32``), the stores ``v2.b16``."""
    emitter, spec = _emitter(PACKED_UNIT_DIMS)
    assert emitter == "transpose" and spec.variant == "packed"
    ptx = emit_stage(PACKED_UNIT_DIMS, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK-NOT: ld.global.nc.b16
CHECK: ld.global.nc.b32
CHECK-NOT: ld.global.nc.b16
CHECK: bar.sync
CHECK: st.global.v2.b16
CHECK: ret;
""", tmp_path)
    _on_host(PACKED_UNIT_DIMS)


def test_packed_transpose_of_a_split_operand_reads_vectors(tmp_path):
    """The canonical operand ``[2, 1024, 1, 32, 1]`` of ``f16[2,32,32,32]``: the lane's two
    elements are element 0's operand index plus one along the operand's minor dim (32 is even),
    so both reach the parameter, through the silu prologue, as one 32-bit access."""
    emitter, spec = _emitter(PACKED_SPLIT)
    assert emitter == "transpose" and spec.variant == "packed"
    # element 0 at a 4-byte aligned address, element 1 two bytes on from the same pointer:
    # the backend's load/store vectoriser makes them one 32-bit load
    llvm = emit_stage(PACKED_SPLIT, "llvm-opt", arch="sm_90")
    filecheck(llvm, """
CHECK: define {{.*}}void @f(
CHECK: [[BASE:%[^ ]+]] = getelementptr inbounds {{.*}}half, ptr %in0.p,
CHECK-NEXT: load half, ptr [[BASE]], align 4
CHECK: [[NEXT:%[^ ]+]] = getelementptr inbounds nuw i8, ptr [[BASE]], i64 2
CHECK-NEXT: load half, ptr [[NEXT]], align 2
""", tmp_path)
    ptx = emit_stage(PACKED_SPLIT, "ptx", arch="sm_90")
    assert "ld.global.nc.b16" not in ptx
    assert "ld.global.nc.v2.b16" in ptx or "ld.global.nc.b32" in ptx
    _on_host(PACKED_SPLIT)


def test_constant_index_parameter_reads_are_one_entry_block_vector(tmp_path):
    """``p[0]`` and ``p[1]`` are read at constant indices (``p[0 + 1]`` folded): each once, in
    the entry block ahead of the arms that read them (read where first used, each arm had its
    own loads), where they merge, as XLA's, into ``ld.global.nc.v2.b64``."""
    emitter, _ = _emitter(CONSTANT_INDEX)
    assert emitter == "concatenate"
    llvm = emit_stage(CONSTANT_INDEX, "llvm", arch="sm_90")
    kernel = llvm.split("define ptx_kernel void @f(", 1)[1].split("\n}", 1)[0]
    before_branch = kernel.split("\n  br ", 1)[0]
    assert before_branch.count("load i64") == 2, kernel
    assert kernel.count("load i64") == 3, kernel     # and q's, in its own arm
    ptx = emit_stage(CONSTANT_INDEX, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK: ld.global.nc.v2.b64
CHECK-NOT: ld.global.nc.v2.b64
CHECK: ret;
""", tmp_path)
    _on_host(CONSTANT_INDEX)


def test_even_and_odd_slices_are_read_before_the_sine(tmp_path):
    """The even and odd elements are read before ``cos``/``sin`` branch: one 32-bit access of
    the two bf16 (XLA: ``ld.global.nc.b32``), no 16-bit load."""
    emitter, _ = _emitter(EVEN_ODD)
    assert emitter == "loop"
    ptx = emit_stage(EVEN_ODD, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK-NOT: ld.global.nc.b16
CHECK: ld.global.nc.{{v2.b16|b32}}
CHECK-NOT: ld.global.nc.b16
CHECK: ret;
""", tmp_path)
    _on_host(EVEN_ODD)


def test_concatenate_under_a_bitcast_epilogue_stores_one_vector(tmp_path):
    """Each thread's four operand words are adjacent in the bitcast root: stored from one base,
    one ``st.global.v4.b32`` (XLA's), not four scalar stores."""
    emitter, spec = _emitter(CONCAT_BITCAST)
    assert emitter == "concatenate" and spec.epilogue == "physical"
    ptx = emit_stage(CONCAT_BITCAST, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK-NOT: st.global.b32
CHECK: st.global.v4.b32
CHECK-NOT: st.global.b32
CHECK: ret;
""", tmp_path)
    _on_host(CONCAT_BITCAST)


@pytest.mark.parametrize("batch,rows,cols,tile_rows,vector", [
    (8, 64, 64, 1, 4),     # XLA's loop_map_rows_softmax: ld.global.v4.b32
    (16, 128, 10, 2, 2),   # XLA's model_mlp_forward: 10 columns, ld.global.v2.b32
])
def test_block_level_reduce_over_a_major_dim_reads_row_vectors(tmp_path, batch, rows, cols, tile_rows, vector):
    """``sum(p, dim 0)`` inside a block-level softmax: each thread folds the batch of ``vector``
    adjacent kept elements, read as one ``<vector x float>`` per batch entry."""
    text = _softmax_of_batch_sum(batch, rows, cols, tile_rows)
    emitter, spec = _emitter(text)
    assert emitter == "triton", emitter
    lay = spec.reduce_layout(spec.tiling.reduces[0])
    assert lay.vector == vector and lay.lanes == 1 and lay.warps_per_row == 1
    llvm = emit_stage(text, "llvm", arch="sm_90")
    assert llvm.count(f"load <{vector} x float>") >= batch
    ptx = emit_stage(text, "ptx", arch="sm_90")
    filecheck(ptx, f"""
CHECK: .visible .entry f(
CHECK-NOT: ld.global.nc.b32
CHECK: ld.global.nc.v{vector}.b32
CHECK: bar.sync
CHECK: ret;
""", tmp_path)
    _on_host(text)


# n-body's accelerations: a sum over the bodies of a sum over the coordinates
NBODY = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
fused {
  x = f32[12,3]{1,0} parameter(0)
  w = f32[12]{0} parameter(1)
  xi = f32[12,12,3]{2,1,0} broadcast(x), dimensions={1,2}
  xj = f32[12,12,3]{2,1,0} broadcast(x), dimensions={0,2}
  d = f32[12,12,3]{2,1,0} subtract(xi, xj)
  d2 = f32[12,12,3]{2,1,0} multiply(d, d)
  z = f32[] constant(0)
  r2 = f32[12,12]{1,0} reduce(d2, z), dimensions={2}, to_apply=add
  eps = f32[] constant(0.05)
  e = f32[12,12]{1,0} broadcast(eps), dimensions={}
  s = f32[12,12]{1,0} add(r2, e)
  rs = f32[12,12]{1,0} rsqrt(s)
  wb = f32[12,12]{1,0} broadcast(w), dimensions={1}
  k = f32[12,12]{1,0} multiply(wb, rs)
  kb = f32[12,12,3]{2,1,0} broadcast(k), dimensions={0,1}
  f = f32[12,12,3]{2,1,0} multiply(d, kb)
  ROOT a = f32[12,3]{1,0} reduce(f, z), dimensions={1}, to_apply=add
}
ENTRY e {
  x = f32[12,3]{1,0} parameter(0)
  w = f32[12]{0} parameter(1)
  ROOT r = f32[12,3]{1,0} fusion(x, w), kind=kLoop, calls=fused
}
"""


def test_reduce_over_a_short_unrolled_reduce_is_unrolled(tmp_path):
    """The sum over 12 bodies of values holding a 3-element sum stays within the unrolled
    budget (12 x about 20 instructions): unrolled as XLA's kernel, the 12 weights ``w[j]`` and
    the rows ``x[j, :]`` are read by 128-bit loads (before: a loop, at most 64-bit loads)."""
    emitter, _ = _emitter(NBODY)
    assert emitter == "loop"
    llvm = emit_stage(NBODY, "llvm", arch="sm_90")
    assert "a.r1" not in llvm and "r2.r2" not in llvm    # no reduce loop left
    ptx = emit_stage(NBODY, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry r(
CHECK: ld.global.nc.v4.b32
CHECK: ld.global.nc.v4.b32
CHECK: ld.global.nc.v4.b32
CHECK: ret;
""", tmp_path)
    _on_host(NBODY)


# a transposed convolution's input dilated by interior padding (313,600 elements: unroll 4)
INTERIOR_PAD = """HloModule m
fused {
  p = f32[4,16,16,64]{3,2,1,0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4,35,35,64]{3,2,1,0} pad(p, z), padding=0_0_0x2_2_1x2_2_1x0_0_0
}
ENTRY e {
  p = f32[4,16,16,64]{3,2,1,0} parameter(0)
  ROOT f = f32[4,35,35,64]{3,2,1,0} fusion(p), kind=kLoop, calls=fused
}
"""


def test_unrolled_elements_are_stored_from_element_zero(tmp_path):
    """The offset's mod/div chain over the 35-wide dims does not simplify to a linear form, but
    the unroll symbol enters it only as an added term: elements 1..3 are stored at constant
    distances from element 0's pointer and merge into XLA's ``st.global.v4.b32`` (before:
    ``b32, b32, v2``)."""
    emitter, spec = _emitter(INTERIOR_PAD)
    assert emitter == "loop" and spec.unroll == 4
    llvm = emit_stage(INTERIOR_PAD, "llvm", arch="sm_90")
    filecheck(llvm, """
CHECK: define {{.*}}void @f(
CHECK: [[BASE:%[^ ]+]] = getelementptr inbounds float, ptr %out0.r,
CHECK: getelementptr inbounds float, ptr [[BASE]], i32 0
CHECK: getelementptr inbounds float, ptr [[BASE]], i32 1
CHECK: getelementptr inbounds float, ptr [[BASE]], i32 2
CHECK: getelementptr inbounds float, ptr [[BASE]], i32 3
CHECK: ret void
""", tmp_path)
    ptx = emit_stage(INTERIOR_PAD, "ptx", arch="sm_90")
    filecheck(ptx, """
CHECK: .visible .entry f(
CHECK-NOT: st.global.b32
CHECK: st.global.v4.b32
CHECK-NOT: st.global
CHECK: ret;
""", tmp_path)
    _on_host(INTERIOR_PAD)
