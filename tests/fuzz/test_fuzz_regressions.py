"""Regressions the differential fuzzer (``hlo_compile.fuzz``) found, one test per fixed bug, each
with the shrunk reproducer: host results must equal the interpreter's bit for bit (or the
module must be refused cleanly where the emitter cannot be right)."""
from __future__ import annotations

import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.fuzz.runner import run_case
from hlo_compile.options import CompileOptions


def _all_match(text: str, seed: int = 0) -> None:
    res = run_case(text, seed)
    assert res.reference.status == "ok", res.reference.detail
    for o in res.outcomes:
        assert o.status == "match", f"{o.mode}: {o.status}\n{o.detail}"


# A multi-output loop fusion whose outputs have different element counts: the loop emitter
# walked every output with the first output's thread map, so the smaller output was written past
# its end (heap corruption: later crashes or wrong results) and the larger one crashed the
# emitter (IndexError in the affine emitter: a symbol of the other map). Seeds 7 and 1003.
MULTI_OUTPUT_SIZES = """HloModule fuzz_7
fused_computation.39 {
  param.s3 = pred[1,3]{1,0} parameter(0)
  param.s4 = f32[2]{0} parameter(1)
  ROOT tuple.46 = (f32[2]{0}, pred[1,3]{1,0}) tuple(param.s4, param.s3)
}
ENTRY main {
  arg.s2 = pred[1,3]{1,0} parameter(0)
  arg.s3 = f32[2]{0} parameter(1)
  fusion.47 = (f32[2]{0}, pred[1,3]{1,0}) fusion(arg.s2, arg.s3), kind=kLoop, calls=fused_computation.39
  gte.50 = f32[2]{0} get-tuple-element(fusion.47), index=0
  gte.51 = pred[1,3]{1,0} get-tuple-element(fusion.47), index=1
  ROOT tuple.32 = (f32[2]{0}, pred[1,3]{1,0}) tuple(gte.50, gte.51)
}
"""

MULTI_OUTPUT_SMALLER_SECOND = """HloModule fuzz_1003
fused {
  a = s32[61]{0} parameter(0)
  b = f32[1,8,1,7]{3,2,1,0} parameter(1)
  n = f32[1,8,1,7]{3,2,1,0} negate(b)
  ROOT t = (s32[61]{0}, f32[1,8,1,7]{3,2,1,0}) tuple(a, n)
}
ENTRY main {
  a = s32[61]{0} parameter(0)
  b = f32[1,8,1,7]{3,2,1,0} parameter(1)
  ROOT f = (s32[61]{0}, f32[1,8,1,7]{3,2,1,0}) fusion(a, b), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("text", [MULTI_OUTPUT_SIZES, MULTI_OUTPUT_SMALLER_SECOND], ids=["larger-second",
                                                                                         "smaller-second"])
def test_multi_output_loop_fusion_with_outputs_of_different_sizes(text):
    _all_match(text, 7)


# A dynamic-update-slice whose result has another layout than its operand: the in-place emitter
# started the output as a byte copy of the operand, so every element not updated came out
# transposed. It now leaves such a DUS to the loop emitter.
DUS_LAYOUT_CHANGE = """HloModule m
ENTRY main {
  p = s32[3,4]{1,0} parameter(0)
  u = s32[1,1]{1,0} parameter(1)
  i = s32[] parameter(2)
  ROOT d = s32[3,4]{0,1} dynamic-update-slice(p, u, i, i)
}
"""


def test_in_place_dus_with_a_layout_change():
    _all_match(DUS_LAYOUT_CHANGE)
    plan = plan_module(parse_module(DUS_LAYOUT_CHANGE), CompileOptions(fusion=False))
    assert "in-place-dus emitter declined" in plan.kernels[0].analysis.reason


# The same for scatter (seeds 1021, 1033, 1099, 1137): the output started as a byte copy of an
# operand of another layout, so elements the scatter did not touch came out permuted. No emitter
# can scatter into a relayout of its operand in one kernel: it is refused, naming the layouts.
SCATTER_LAYOUT_CHANGE = """HloModule m
assign {
  p.6 = s32[] parameter(0)
  ROOT p.7 = s32[] parameter(1)
}
ENTRY main {
  p.2 = s32[1,2,2]{2,1,0} parameter(0)
  p.4 = s32[1,1,1,1]{3,2,1,0} parameter(1)
  c.3 = s32[1,1]{1,0} constant({ {0} })
  ROOT scatter.8 = s32[1,2,2]{0,1,2} scatter(p.2, c.3, p.4), update_window_dims={0,1,3}, inserted_window_dims={}, scatter_dims_to_operand_dims={1}, index_vector_dim=1, unique_indices=true, to_apply=assign
}
"""


def test_scatter_with_a_layout_change_matches():
    """Once refused by the scatter emitter; the operand is now copied into the output's layout
    first (passes/scatter_layouts.py)."""
    _all_match(SCATTER_LAYOUT_CHANGE)
    _all_match(SCATTER_LAYOUT_CHANGE.replace("s32[1,2,2]{0,1,2} scatter", "s32[1,2,2]{2,1,0} scatter"))


# reduce-window where the simplifier narrows the indexing map's dimension domain instead of keeping
# a constraint (padding plus window dilation, seed 1110): outputs outside the narrowed domain read
# outside the operand (garbage instead of the init value). And a window that only ever covers
# padding and base-dilation holes (seed 1005): the map is KNOWN EMPTY and the emitter crashed.
REDUCE_WINDOW_NARROWED = """HloModule fuzz_1110
min {
  p.5 = f32[] parameter(0)
  p.6 = f32[] parameter(1)
  ROOT m = f32[] minimum(p.5, p.6)
}
ENTRY main {
  p.2 = f32[31,31]{1,0} parameter(0)
  c.8 = f32[] constant(inf)
  ROOT rw.9 = f32[16,12]{1,0} reduce-window(p.2, c.8), window={size=1x1 stride=2x3 pad=0_0x2_2 rhs_dilate=1x2}, to_apply=min
}
"""

REDUCE_WINDOW_EMPTY = """HloModule fuzz_1005
add {
  p.12 = s32[] parameter(0)
  p.13 = s32[] parameter(1)
  ROOT a = s32[] add(p.12, p.13)
}
ENTRY main {
  arg.s1 = s32[1,4]{1,0} parameter(0)
  c.15 = s32[] constant(7)
  ROOT rw.16 = s32[1,5]{1,0} reduce-window(arg.s1, c.15), window={size=1x1 stride=3x2 pad=0_0x1_2 lhs_dilate=1x2}, to_apply=add
}
"""


@pytest.mark.parametrize("text", [REDUCE_WINDOW_NARROWED, REDUCE_WINDOW_EMPTY], ids=["narrowed-domain", "empty"])
def test_reduce_window_outside_the_indexing_domain(text):
    _all_match(text, 1110)


# The same kind of fusion with a scalar first output and a large second one (seeds 40111, 40201):
# the first output set a one-thread launch and the second was unrolled over thousands of
# elements per thread (80 s of LLVM). The largest output now sets the launch, and the symbols of
# the other outputs' maps are loops at run time.
MULTI_OUTPUT_SCALAR_FIRST = """HloModule fuzz_40201
fused {
  a = s32[] parameter(0)
  b = f32[64,96]{1,0} parameter(1)
  s = s32[] sign(a)
  n = f32[64,96]{0,1} negate(b)
  ROOT t = (s32[], f32[64,96]{0,1}) tuple(s, n)
}
ENTRY main {
  a = s32[] parameter(0)
  b = f32[64,96]{1,0} parameter(1)
  ROOT f = (s32[], f32[64,96]{0,1}) fusion(a, b), kind=kLoop, calls=fused
}
"""


def test_multi_output_loop_fusion_with_a_scalar_first_output_compiles_quickly():
    import time
    t0 = time.perf_counter()
    _all_match(MULTI_OUTPUT_SCALAR_FIRST, 3)
    assert time.perf_counter() - t0 < 30
    plan = plan_module(parse_module(MULTI_OUTPUT_SCALAR_FIRST), CompileOptions())
    assert plan.kernels[0].launch.num_blocks * plan.kernels[0].launch.num_threads >= 64 * 96 // 8


# An indexing-map symbol that only a constraint with a dimension mentions was dropped together with
# the constraint (seed 20060): a reduce-window over a size-1 dimension whose window reaches into
# padding lost ``d1 + s1 in [0, 0]`` once the result expression folded to 0, and every window
# position read the one real element instead of skipping padding.
REDUCE_WINDOW_SIZE_ONE = """HloModule fuzz_20060
min {
  p.5 = f32[] parameter(0)
  p.6 = f32[] parameter(1)
  ROOT m = f32[] minimum(p.5, p.6)
}
ENTRY main {
  p.1 = f32[9,1] parameter(0)
  c.8 = f32[] constant(inf)
  ROOT rw.9 = f32[6,2] reduce-window(p.1, c.8), window={size=4x2 pad=0_0x0_2}, to_apply=min
}
"""


def test_reduce_window_keeps_constraints_that_tie_window_symbols_to_dims():
    from hlo_compile.indexing import affine as A
    from hlo_compile.indexing.indexing_map import IndexingMap, dims_of
    from hlo_compile.indexing.simplifier import simplify
    d0, d1, s0, s1 = A.dim(0), A.dim(1), A.sym(0), A.sym(1)
    m = IndexingMap.make([A.add(d0, s0), A.add(d1, s1)], dims_of((6, 2)), [(0, 3), (0, 1)],
                         constraints={A.add(d0, s0): (0, 8), A.add(d1, s1): (0, 0)})
    kept = simplify(m).remove_unused_symbols()
    assert "d1 + s1 in [0, 0]" in kept.to_text() and len(kept.ranges) == 2
    _all_match(REDUCE_WINDOW_SIZE_ONE, 20060)


# A reshape (or bitcast) between shapes without elements (seed 8168): delinearising over a zero
# dimension divided by a zero stride (ZeroDivisionError in the indexing analysis).
RESHAPE_ZERO_SIZE = """HloModule fuzz_8168
fused {
  p = f32[1]{0} parameter(0)
  c = f32[1,3,8]{2,1,0} constant({ { {3, 0.5, -1, 0.5, 2, 0.5, 1, 0.5}, {3, 1.5, 1, 3, 0.5, 3, 1.5, -1}, {1.5, 2, -1, 0.5, 2, -0.25, -1, -0.25} } })
  s = f32[0,2,0]{2,1,0} slice(c), slice={[1:1], [0:3:2], [5:5:1]}
  r = f32[5,0]{1,0} reshape(s)
  ROOT t = (f32[1]{0}, f32[5,0]{1,0}) tuple(p, r)
}
ENTRY main {
  a = f32[1]{0} parameter(0)
  ROOT f = (f32[1]{0}, f32[5,0]{1,0}) fusion(a), kind=kLoop, calls=fused
}
"""


def test_reshape_between_shapes_without_elements():
    from hlo_compile.indexing.reshape_maps import reshape_map
    assert reshape_map((0, 2, 0), (5, 0)).is_known_empty()
    _all_match(RESHAPE_ZERO_SIZE, 8168)


# Same-rank operands that differ in size-1 dims (a degenerate broadcast: XLA's verifier accepts
# it, the interpreter stretches the size-1 dims): the host read the operand at the result's
# index, past its end (3 of 15 elements wrong, seed 700038).
DEGENERATE_BROADCAST = """HloModule fuzz_700038
ENTRY main {
  a = f32[3,2]{1,0} parameter(0)
  b = f32[3,1]{1,0} parameter(1)
  c = f32[1,4,1]{2,1,0} parameter(2)
  d = f32[3,4,5]{2,1,0} parameter(3)
  gt = pred[3,2]{1,0} compare(a, b), direction=GT
  s = f32[3,4,5]{2,1,0} add(c, d)
  m = f32[3,4,5]{0,1,2} multiply(d, c)
  ROOT t = (pred[3,2]{1,0}, f32[3,4,5]{2,1,0}, f32[3,4,5]{0,1,2}) tuple(gt, s, m)
}
"""


def test_degenerate_broadcast_stretches_size_one_dims():
    _all_match(DEGENERATE_BROADCAST, 700038)
    from hlo_compile.indexing.op_maps import output_to_input
    add = parse_module(DEGENERATE_BROADCAST).entry.instruction("s")
    read_c = output_to_input(add, 0)[0][0]
    assert "(d0, d1, d2) -> (0, d1, 0)" in str(read_c), str(read_c)


# Zero-element operands: a reduce over a zero-size dim (every output is the init value) divided
# by zero choosing the multi-row reduction variant, and a packed (8/16-bit) transpose with a
# zero-size dim divided by zero sizing its tile (seed 730135). Both now take the loop emitter.
ZERO_SIZE_REDUCE = """HloModule zr
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[64,0]{1,0} parameter(0)
  y = f32[0,64]{1,0} parameter(1)
  z = f32[] constant(1)
  r1 = f32[64]{0} reduce(x, z), dimensions={1}, to_apply=add
  r2 = f32[64]{0} reduce(y, z), dimensions={0}, to_apply=add
  r3 = f32[] reduce(x, z), dimensions={0,1}, to_apply=add
  ROOT t = (f32[64]{0}, f32[64]{0}, f32[]) tuple(r1, r2, r3)
}
"""

ZERO_SIZE_TRANSPOSE = """HloModule fuzz_730135
ENTRY main {
  a = bf16[5,0,16]{2,1,0} parameter(0)
  b = s8[0,64,40]{2,1,0} parameter(1)
  t1 = bf16[0,16,5]{2,1,0} transpose(a), dimensions={1,2,0}
  t2 = s8[40,64,0]{2,1,0} transpose(b), dimensions={2,1,0}
  ROOT t = (bf16[0,16,5]{2,1,0}, s8[40,64,0]{2,1,0}) tuple(t1, t2)
}
"""


@pytest.mark.parametrize("text", [ZERO_SIZE_REDUCE, ZERO_SIZE_TRANSPOSE], ids=["reduce", "transpose"])
def test_zero_element_heroes_take_the_loop_emitter(text):
    _all_match(text, 730135)


# A bitcast that changes the element type (same width) in ENTRY, read by an in-place
# dynamic-update-slice: the runtime's copy into the DUS's own buffer went through numpy's typed
# copy, which refuses int32 -> uint32 (a crash, not a wrong result). Buffers are bytes.
BITCAST_TYPE_CHANGE_IN_PLACE = """HloModule btc
ENTRY main {
  a = s32[8]{0} parameter(0)
  u = u32[2]{0} parameter(1)
  i = s32[] parameter(2)
  b = u32[8]{0} bitcast(a)
  ROOT d = u32[8]{0} dynamic-update-slice(b, u, i)
}
"""


def test_bitcast_changing_the_type_feeds_an_in_place_update():
    _all_match(BITCAST_TYPE_CHANGE_IN_PLACE, 5)


# Convolution weights that are inf/NaN over the padding: the padded input is zeros multiplied
# like any other element (0 * inf = NaN), which is what XLA:CPU computes for this module
# (recorded: every output NaN); the elemental convolution skipped padded taps (-inf, inf).
CONV_NONFINITE_WEIGHTS = """HloModule cnf
ENTRY main {
  x = f32[1,4,1]{2,1,0} parameter(0)
  w = f32[3,1,1]{2,1,0} constant({ {{inf}}, {{1}}, {{-inf}} })
  ROOT c = f32[1,4,1]{2,1,0} convolution(x, w), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f
}
"""


def test_convolution_multiplies_padding_zeros_by_nonfinite_weights():
    import numpy as np
    from hlo_compile.fuzz.runner import run_host
    _all_match(CONV_NONFINITE_WEIGHTS, 3)
    for fusion in (True, False):
        (out,) = run_host(CONV_NONFINITE_WEIGHTS, [np.array([[[1], [2], [3], [4]]], np.float32)], fusion)
        assert np.isnan(out).all(), out.ravel()


# Two roots of one dims shared a subgraph although one (the broadcast) feeds, through a select
# that a transpose also reads (so it has a subgraph of its own), the other: the root subgraph and
# the select's called each other forever (the host kernel hung; seed 2000420). That root now has
# a subgraph of its own.
ROOT_READ_THROUGH_A_SHARED_SUBGRAPH = """HloModule fuzz_2000420
fused_computation.13 {
  param.14 = s32[8,13,8]{2,1,0} parameter(0)
  c.3 = pred[] constant(false)
  bcast.4 = pred[8,13,8]{2,1,0} broadcast(c.3), dimensions={}
  select.5 = s32[8,13,8]{2,1,0} select(bcast.4, param.14, param.14)
  transpose.6 = s32[13,8,8]{2,1,0} transpose(select.5), dimensions={1,0,2}
  compare.9 = pred[8,13,8]{1,0,2} compare(select.5, select.5), direction=GT
  ROOT tuple.16 = (pred[8,13,8]{2,1,0}, s32[13,8,8]{2,1,0}, pred[8,13,8]{1,0,2}) tuple(bcast.4, transpose.6, compare.9)
}
ENTRY main {
  p.1 = s32[8,13,8]{2,1,0} parameter(0)
  ROOT fusion.17 = (pred[8,13,8]{2,1,0}, s32[13,8,8]{2,1,0}, pred[8,13,8]{1,0,2}) fusion(p.1), kind=kLoop, calls=fused_computation.13
}
"""


def test_subgraphs_never_call_each_other_in_a_cycle():
    from hlo_compile.codegen.elemental.partitioner import partition
    comp = parse_module(ROOT_READ_THROUGH_A_SHARED_SUBGRAPH).computation("fused_computation.13")
    pc = partition(comp)
    bcast = pc.subgraph_of[comp.instruction("bcast.4")]
    assert bcast.roots == [comp.instruction("bcast.4")], pc.to_text()
    _all_match(ROOT_READ_THROUGH_A_SHARED_SUBGRAPH, 2000420)


# pow(-inf, 0.5) is +inf in C99, LLVM and libdevice (the host gives inf); numpy's vector loop
# gave NaN for some array lengths and inf for others, so the interpreter disagreed with the
# host at random (seed 2001457). The interpreter now sets C99's special cases itself.
POWER_OF_NEGATIVE_INFINITY = """HloModule fuzz_2001457
ENTRY main {
  p.1 = f32[16,1,1,8]{3,2,1,0} parameter(0)
  c.2 = f32[] constant(0.5)
  ROOT power.3 = f32[16,1,1,8]{3,2,1,0} power(p.1, c.2)
}
"""


@pytest.mark.parametrize("n", [1, 7, 64, 128])
def test_power_special_cases_follow_c99(n):
    import math

    import numpy as np
    from hlo_compile.interpreter.elementwise import _float_pow
    specials = [-math.inf, -3.0, -2.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, math.inf, math.nan]
    for x in specials:
        for y in specials:
            got = float(_float_pow(np.full(n, x, np.float64), np.full(n, y, np.float64))[0])
            try:
                want = math.pow(x, y)
            except ValueError:  # 0 ** negative: C99 gives inf, with 0's sign for an odd exponent
                odd = y == math.floor(y) and math.fmod(y, 2)
                want = (math.copysign(math.inf, x) if odd else math.inf) if x == 0 else math.nan
            if math.isnan(want):
                assert math.isnan(got), (x, y, got)
            else:
                assert got == want and math.copysign(1, got) == math.copysign(1, want), (x, y, got, want)
    _all_match(POWER_OF_NEGATIVE_INFINITY, 2001457)
