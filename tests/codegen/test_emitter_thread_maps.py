"""Thread -> data indexing maps of every emitter (``KernelSpec.thread_to_input_map`` and
``thread_to_output_map``, the emitters' contract), checked as XLA's ``gpu_test_correctness
--bijection_inputs/--bijection_outputs`` does: enumerate the map's domain and check that every
element of the tensor is reached exactly once (or, where the kernel reads an element several
times by design, as often as it should)."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.options import CompileOptions
from hlo_compile.passes.wrap_fusions import wrap_entry_as_fusion

from test_concat_dus_scatter_emitters import DUS, _scatter_module


def _spec(text: str):
    plan = plan_module(wrap_entry_as_fusion(parse_module(text)), CompileOptions())
    assert len(plan.kernels) == 1
    return plan.kernels[0].spec


def _assert_bijection(m, dims) -> None:
    """Every point of ``m``'s domain lands in ``dims``; every element is hit exactly once."""
    _assert_each_hit(m, dims, 1)


def _assert_each_hit(m, dims, times: int) -> None:
    """Every point of ``m``'s domain lands in ``dims``; every element is hit ``times`` times."""
    assert m.dim_names == ("th_x", "th_y", "th_z", "bl_x", "bl_y", "bl_z")
    hits = Counter(m.evaluate(d, s, r) for d, s, r in m.domain())
    assert len(hits) == math.prod(dims), (len(hits), dims, str(m))
    assert all(0 <= i < n for idx in hits for i, n in zip(idx, dims)), str(m)
    wrong = [k for k, c in hits.items() if c != times]
    assert not wrong, (wrong[:5], [hits[k] for k in wrong[:5]], str(m))


TRANSPOSES = {
    "021 f32[2,40,70]": ("f32[2,40,70]", "f32[2,70,40]", "0,2,1"),
    "2-D f32[33,65]": ("f32[33,65]", "f32[65,33]", "1,0"),
    "210 f32[20,3,40]": ("f32[20,3,40]", "f32[40,3,20]", "2,1,0"),
    "102 f16[40,33,4]": ("f16[40,33,4]", "f16[33,40,4]", "1,0,2"),
}


@pytest.mark.parametrize("name", sorted(TRANSPOSES))
def test_transpose_maps_are_bijections(name):
    src, dst, perm = TRANSPOSES[name]
    spec = _spec(f"""HloModule t
ENTRY e {{
  p = {src} parameter(0)
  ROOT t = {dst} transpose(p), dimensions={{{perm}}}
}}""")
    assert type(spec).__name__ == "TransposeKernelSpec", name
    _assert_bijection(spec.thread_to_input_map(), spec.heroes[0].operands[0].shape.dimensions)
    _assert_bijection(spec.thread_to_output_map(), spec.leaves[0].shape.dimensions)


PACKED = {
    "bf16 [64,96] -> [96,64]": ("bf16[64,96]", "bf16[96,64]", "1,0"),
    "s8 021 [3,40,136] (partial tiles)": ("s8[3,40,136]", "s8[3,136,40]", "0,2,1"),
    "f16 210 [30,16,30]": ("f16[30,16,30]", "f16[30,16,30]", "2,1,0"),
}


@pytest.mark.parametrize("name", sorted(PACKED))
def test_packed_transpose_maps_are_bijections(name):
    src, dst, perm = PACKED[name]
    spec = _spec(f"""HloModule t
ENTRY e {{
  p = {src} parameter(0)
  ROOT t = {dst} transpose(p), dimensions={{{perm}}}
}}""")
    assert type(spec).__name__ == "PackedTransposeKernelSpec", name
    mi, mo = spec.thread_to_input_map(), spec.thread_to_output_map()
    assert len(mi.ranges) == 2 and len(mo.ranges) == 3   # [s0 turn, s1 vector] / [s0, s1 column, s2 row]
    _assert_bijection(mi, spec.heroes[0].operands[0].shape.dimensions)
    _assert_bijection(mo, spec.leaves[0].shape.dimensions)


def test_packed_side_output_map_is_a_bijection():
    spec = _spec("""HloModule t
ENTRY e {
  p = bf16[64,96] parameter(0)
  n = bf16[64,96] negate(p)
  t = bf16[96,64] transpose(n), dimensions={1,0}
  ROOT r = (bf16[96,64], bf16[64,96]) tuple(t, n)
}""")
    assert type(spec).__name__ == "PackedTransposeKernelSpec"
    assert spec.leaves[1].hero is None
    _assert_bijection(spec.thread_to_output_map(1), (64, 96))


def test_packed_maps_are_consistent():
    """Each block writes exactly the transposed images of what it read."""
    spec = _spec("""HloModule t
ENTRY e {
  p = s8[3,40,136] parameter(0)
  ROOT t = s8[3,136,40] transpose(p), dimensions={0,2,1}
}""")
    mi, mo = spec.thread_to_input_map(), spec.thread_to_output_map()
    ins = {(d[3], mi.evaluate(d, s)) for d, s, _ in mi.domain()}
    outs = {(d[3], tuple(mo.evaluate(d, s)[i] for i in (0, 2, 1))) for d, s, _ in mo.domain()}
    assert ins == outs


def test_vectorised_tiled_maps_are_bijections():
    """The tiled transpose with v = 2 (forced on a small shape: the heuristic wants ~1M
    threads): a vector symbol s1, block 64 × 64, bijective maps that agree per block."""
    from dataclasses import replace
    from hlo_compile.codegen.emitters.transpose.tiling import TransposeTiling
    from hlo_compile.codegen.target import LaunchDims
    spec = _spec("""HloModule t
ENTRY e {
  p = bf16[2,70,18] parameter(0)
  ROOT t = bf16[2,18,70] transpose(p), dimensions={0,2,1}
}""")
    assert type(spec).__name__ == "TransposeKernelSpec"   # 18 < 10·v columns: not packed
    t = TransposeTiling.for_transpose(spec.tiling.dims, spec.tiling.perm, 2)
    assert t.tile == (1, 64, 18) and t.per_turn == 256
    spec = replace(spec, tiling=t, launch=LaunchDims((t.num_blocks, 1, 1), (128, 1, 1), 0))
    mi, mo = spec.thread_to_input_map(), spec.thread_to_output_map()
    assert [r for r in mi.ranges] == [(0, t.iterations - 1), (0, 1)], str(mi)
    _assert_bijection(mi, (2, 70, 18))
    _assert_bijection(mo, (2, 18, 70))
    ins = {(d[3], mi.evaluate(d, s)) for d, s, _ in mi.domain()}
    outs = {(d[3], tuple(mo.evaluate(d, s)[i] for i in (0, 2, 1))) for d, s, _ in mo.domain()}
    assert ins == outs


def test_transpose_maps_are_consistent():
    """Phase 2 reads back what phase 1 stored: the thread writing output[j] at s0 holds the
    element that the transpose takes from input[perm^-1 j]; the maps agree on the tile."""
    spec = _spec("""HloModule t
ENTRY e {
  p = f32[2,40,70] parameter(0)
  ROOT t = f32[2,70,40] transpose(p), dimensions={0,2,1}
}""")
    mi, mo = spec.thread_to_input_map(), spec.thread_to_output_map()
    ins = {(d[3], mi.evaluate(d, s)) for d, s, _ in mi.domain()}
    outs = {(d[3], tuple(mo.evaluate(d, s)[i] for i in (0, 2, 1))) for d, s, _ in mo.domain()}
    assert ins == outs   # each block reads and writes the same set of elements


def test_transpose_maps_printed_in_report():
    spec = _spec("""HloModule t
ENTRY e {
  p = f32[2,40,70] parameter(0)
  ROOT t = f32[2,70,40] transpose(p), dimensions={0,2,1}
}""")
    text = "\n".join(spec.report_lines())
    assert "thread -> input (%p): (th_x, th_y, th_z, bl_x, bl_y, bl_z)[s0] -> (" in text
    assert "thread -> output 0 (%t): (th_x, th_y, th_z, bl_x, bl_y, bl_z)[s0] -> (" in text


REDUCTIONS = {
    "row [3,100]": ("f32[3,100]", "f32[3]", "1", "row"),
    "column [70,50]": ("f32[70,50]", "f32[50]", "0", "column"),
    "row [4,6,300] over {0,2}": ("f32[4,6,300]", "f32[6]", "0,2", "row"),
    "column [5,70,40]": ("f32[5,70,40]", "f32[5,40]", "1", "column"),
    "multi-row [100,8]": ("f32[100,8]", "f32[100]", "1", "multi-row"),
    "row bf16 [5,512]": ("bf16[5,512]", "bf16[5]", "1", "row"),
    "column bf16 [40,300]": ("bf16[40,300]", "bf16[300]", "0", "column"),
    "full [64,64]": ("f32[64,64]", "f32[]", "0,1", "row"),
}


def _reduce_module(src: str, dst: str, dims: str) -> str:
    et = src.split("[")[0]
    return f"""HloModule r
add {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT s = {et}[] add(a, b)
}}
ENTRY e {{
  p = {src} parameter(0)
  z = {et}[] constant(0)
  ROOT r = {dst} reduce(p, z), dimensions={{{dims}}}, to_apply=add
}}"""


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_maps_are_bijections(name):
    src, dst, dims, variant = REDUCTIONS[name]
    spec = _spec(_reduce_module(src, dst, dims))
    assert type(spec).__name__ == "ReductionKernelSpec", name
    assert spec.variant == variant, (name, spec.variant)
    _assert_bijection(spec.thread_to_input_map(), spec.heroes[0].operands[0].shape.dimensions)
    _assert_bijection(spec.thread_to_output_map(), spec.reduce_roots[0].shape.dimensions)


def test_reduction_input_map_groups_by_output():
    """Every input element a thread folds belongs to the output element that thread's group
    writes: per block, the reduced-away images of the input map are the output map's."""
    spec = _spec(_reduce_module("f32[70,50]", "f32[50]", "0"))
    mi, mo = spec.thread_to_input_map(), spec.thread_to_output_map()
    ins = {(d[3], d[4], mi.evaluate(d, s)[1]) for d, s, _ in mi.domain()}
    outs = {(d[3], d[4], mo.evaluate(d, s)[0]) for d, s, _ in mo.domain()}
    assert ins == outs


def test_reduction_maps_printed_in_report():
    spec = _spec(_reduce_module("f32[3,100]", "f32[3]", "1"))
    text = "\n".join(spec.report_lines())
    assert "thread -> input (%p): (th_x, th_y, th_z, bl_x, bl_y, bl_z)[s0, s1, s2] -> (" in text
    assert "thread -> output (%r): (th_x, th_y, th_z, bl_x, bl_y, bl_z) -> (" in text


# ---- the other emitters ----------------------------------------------------------------------------

def _fusion_spec(text: str, kind: str):
    """The spec of the one kernel of ``text`` (a module with its fusions), checking its emitter."""
    plan = plan_module(parse_module(text), CompileOptions())
    (kernel,) = plan.kernels
    assert kernel.analysis.emitter == kind, kernel.analysis.reason
    return kernel


def test_loop_maps_are_bijections():
    spec = _spec("""HloModule t
ENTRY e {
  p = f32[33,65]{0,1} parameter(0)
  ROOT n = f32[33,65] negate(p)
}""")
    assert type(spec).__name__ == "LoopKernelSpec"
    _assert_bijection(spec.thread_to_output_map(), (33, 65))
    _assert_bijection(spec.thread_to_input_map(), (33, 65))


def test_unrolled_loop_maps_are_bijections():
    spec = _spec("""HloModule t
ENTRY e {
  p = f32[512,512] parameter(0)
  ROOT n = f32[512,512] exponential(p)
}""")
    assert spec.unroll == 4
    _assert_bijection(spec.thread_to_output_map(), (512, 512))


def test_loop_maps_of_outputs_of_other_sizes():
    kernel = _fusion_spec("""HloModule t
fused {
  p = f32[40,30] parameter(0)
  q = f32[30] parameter(1)
  n = f32[40,30] negate(p)
  a = f32[30] abs(q)
  ROOT t = (f32[40,30], f32[30]) tuple(n, a)
}
ENTRY e {
  p = f32[40,30] parameter(0)
  q = f32[30] parameter(1)
  ROOT f = (f32[40,30], f32[30]) fusion(p, q), kind=kLoop, calls=fused
}""", "loop")
    spec = kernel.spec
    _assert_bijection(spec.thread_to_output_map(0), (40, 30))
    _assert_bijection(spec.thread_to_output_map(1), (30,))
    _assert_bijection(spec.thread_to_input_map(hero=1), (30,))   # abs(q): q at the root's index


def test_concatenate_maps_are_bijections():
    kernel = _fusion_spec("""HloModule t
fused {
  a = f32[10,7] parameter(0)
  b = f32[10,5] parameter(1)
  c = f32[10,3] parameter(2)
  ROOT k = f32[10,15] concatenate(a, b, c), dimensions={1}
}
ENTRY e {
  a = f32[10,7] parameter(0)
  b = f32[10,5] parameter(1)
  c = f32[10,3] parameter(2)
  ROOT f = f32[10,15] fusion(a, b, c), kind=kLoop, calls=fused
}""", "concatenate")
    for operand, dims in enumerate([(10, 7), (10, 5), (10, 3)]):
        _assert_bijection(kernel.spec.thread_to_input_map(operand=operand), dims)
    assert kernel.spec.thread_to_output_map() is None   # the operand's offset: no one affine map


def test_in_place_dus_update_map_is_a_bijection():
    kernel = _fusion_spec(DUS, "in-place-dus")
    _assert_bijection(kernel.spec.thread_to_input_map(), (5, 6))
    assert kernel.spec.thread_to_output_map() is None   # where it writes depends on the start indices


def test_scatter_update_map_is_a_bijection():
    spec = _spec(_scatter_module("f32", "add", n=6, rows=20, cols=8))
    _assert_bijection(spec.thread_to_input_map(operand=2), (6, 8))
    assert spec.thread_to_input_map(operand=0) is None and spec.thread_to_output_map() is None


def _sort_text(shape: str, dim: int) -> str:
    return f"""HloModule t
lt {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}}
ENTRY e {{
  p = f32[{shape}] parameter(0)
  ROOT s = f32[{shape}] sort(p), dimensions={{{dim}}}, to_apply=lt
}}"""


def test_bitonic_sort_maps_are_bijections():
    spec = _spec(_sort_text("13,20", 1))
    assert type(spec).__name__ == "BitonicSortKernelSpec"
    _assert_bijection(spec.thread_to_input_map(), (13, 20))
    _assert_bijection(spec.thread_to_output_map(), (13, 20))   # slot s of a row: the element of rank s


def test_rank_sort_input_map_is_a_bijection():
    spec = _spec(_sort_text("300,1", 1))   # rows of one element: the rank sort
    assert type(spec).__name__ == "SortKernelSpec"
    _assert_bijection(spec.thread_to_input_map(), (300, 1))
    assert spec.thread_to_output_map() is None   # where an element goes is its rank


DOT = """HloModule t
ENTRY e {
  a = f32[3,70,40] parameter(0)
  b = f32[3,40,66] parameter(1)
  ROOT d = f32[3,70,66] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2},
      rhs_contracting_dims={1}
}"""


def test_dot_maps():
    """Output maps of both paths are bijections; each operand element is staged once per block
    of the other operand's tiles (two: 66 columns and 70 rows over 64-wide tiles)."""
    spec = _spec(DOT)
    assert type(spec).__name__ == "DotKernelSpec"
    _assert_bijection(spec.thread_to_output_map(), (3, 70, 66))
    _assert_bijection(spec.mma_thread_to_output_map(), (3, 70, 66))
    _assert_each_hit(spec.thread_to_input_map(operand=0), (3, 70, 40), 2)
    _assert_each_hit(spec.thread_to_input_map(operand=1), (3, 40, 66), 2)


def test_convolution_maps():
    """The output map is a bijection; each kernel element is staged once per block row (4);
    every input element is read (3x3 windows, padding 1) and every read is inside the input."""
    spec = _spec("""HloModule t
ENTRY e {
  x = f32[2,10,10,8] parameter(0)
  w = f32[3,3,8,16] parameter(1)
  ROOT c = f32[2,10,10,16] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}""")
    assert type(spec).__name__ == "ConvKernelSpec"
    _assert_bijection(spec.thread_to_output_map(), (2, 10, 10, 16))
    _assert_each_hit(spec.thread_to_input_map(operand=1), (3, 3, 8, 16), 4)
    m = spec.thread_to_input_map()
    reads = {m.evaluate(d, s) for d, s, _ in m.domain()}
    assert len(reads) == 2 * 10 * 10 * 8 and all(0 <= i < n for r in reads for i, n in zip(r, (2, 10, 10, 8)))
