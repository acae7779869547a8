"""Every worked example of XLA's docs/indexing.md with its printed map (whitespace and
line-end commas ignored, as XLA's own MatchIndexingString does)."""
from __future__ import annotations

import pytest

from hlo_compile.indexing.indexing_map import compose
from hlo_compile.indexing.op_maps import scalar_broadcast_map, scalar_read_map
from hlo_compile.indexing.parser import parse_indexing_map
from hlo_compile.indexing.reshape_maps import reshape_map
from hlo_compile.indexing.simplifier import simplify

from indexing_helpers import assert_maps, in_to_out, out_to_in, root, squash


def test_reduce_in_definition_section():
    r = root("""p0 = f32[2,4,8,16] parameter(0)
c = f32[] constant(0)
ROOT out = f32[4,8] reduce(p0, c), dimensions={0,3}, to_apply=max""")
    assert_maps(in_to_out(r, 0), "(d0, d1, d2, d3) -> (d1, d2), domain: d0 in [0, 1], d1 in [0, 3], "
                "d2 in [0, 7], d3 in [0, 15]")
    assert_maps(out_to_in(r, 0), "(d0, d1)[s0, s1] -> (s0, d0, d1, s1), domain: d0 in [0, 3], d1 in [0, 7], "
                "s0 in [0,1], s1 in [0, 15]")


def test_elementwise():
    r = root("""p0 = f32[10, 20] parameter(0)
p1 = f32[10, 20] parameter(1)
ROOT output = f32[10, 20] add(p0, p1)""")
    doc = """(d0, d1) -> (d0, d1),
domain:
d0 in [0, 9],
d1 in [0, 19]"""
    assert_maps(out_to_in(r, 0), doc)
    assert_maps(in_to_out(r, 0), doc)


def test_broadcast():
    r = root("""p0 = f32[20] parameter(0)
ROOT bc0 = f32[10, 20, 30] broadcast(p0), dimensions={1}""")
    assert_maps(out_to_in(r, 0), """(d0, d1, d2) -> (d1),
domain:
d0 in [0, 9],
d1 in [0, 19],
d2 in [0, 29]""")
    assert_maps(in_to_out(r, 0), """(d0)[s0, s1] -> (s0, d0, s1),
domain:
d0 in [0, 19],
s0 in [0, 9],
s1 in [0, 29]""")


def test_iota():
    r = root("ROOT iota = f32[2,4] iota(), iota_dimension=1")
    from hlo_compile.indexing.op_maps import output_to_input
    assert output_to_input(r) == []  # no operands; the document shows the maps of "reading nothing"
    assert squash(scalar_read_map(r.shape).to_text()) == squash("""(d0, d1) -> ()
domain:
d0 in [0, 1]
d1 in [0, 3]""")
    assert squash(scalar_broadcast_map(r.shape).to_text()) == squash("""()[s0, s1] -> (s0, s1)
domain:
s0 in [0, 1]
s1 in [0, 3]""")


def test_dynamic_slice():
    r = root("""src = s32[2, 2, 258] parameter(0)
of1 = s32[] parameter(1)
of2 = s32[] parameter(2)
of3 = s32[] parameter(3)
ROOT ds = s32[1, 2, 32] dynamic-slice(src, of1, of2, of3), dynamic_slice_sizes={1, 2, 32}""")
    assert_maps(out_to_in(r, 0), """(d0, d1, d2){rt0, rt1, rt2} -> (d0 + rt0, d1 + rt1, d2 + rt2),
domain:
d0 in [0, 0],
d1 in [0, 1],
d2 in [0, 31],
rt0 in [0, 1],
rt1 in [0, 0],
rt2 in [0, 226]""")
    for i in (1, 2, 3):
        assert_maps(out_to_in(r, i), """(d0, d1, d2) -> (),
domain:
d0 in [0, 0],
d1 in [0, 1],
d2 in [0, 31]""")


def test_dynamic_update_slice():
    r = root("""src = s32[20,30] parameter(0)
upd = s32[5,10] parameter(1)
of1 = s32[] parameter(2)
of2 = s32[] parameter(3)
ROOT dus = s32[20,30] dynamic-update-slice(s32[20,30] src, s32[5,10] upd, s32[] of1, s32[] of2)""")
    assert_maps(out_to_in(r, 0), "(d0, d1) -> (d0, d1),\ndomain:\nd0 in [0, 19],\nd1 in [0, 29]")
    assert_maps(out_to_in(r, 1), """(d0, d1){rt0, rt1} -> (d0 - rt0, d1 - rt1),
domain:
d0 in [0, 19],
d1 in [0, 29],
rt0 in [0, 15],
rt1 in [0, 20]""")
    for i in (2, 3):
        assert_maps(out_to_in(r, i), "(d0, d1) -> (),\ndomain:\nd0 in [0, 19],\nd1 in [0, 29]")


def test_gather():
    r = root("""operand = f32[33,76,70] parameter(0)
indices = s32[1806,2] parameter(1)
ROOT gather = f32[1806,7,8,4] gather(operand, indices), offset_dims={1,2,3}, collapsed_slice_dims={},
  start_index_map={0,1}, index_vector_dim=1, slice_sizes={7,8,4}""")
    assert_maps(out_to_in(r, 0), """(d0, d1, d2, d3){rt0, rt1} -> (d1 + rt0, d2 + rt1, d3),
domain:
d0 in [0, 1805],
d1 in [0, 6],
d2 in [0, 7],
d3 in [0, 3],
rt0 in [0, 26],
rt1 in [0, 68]""")
    assert_maps(out_to_in(r, 1), """(d0, d1, d2, d3)[s0] -> (d0, s0),
domain:
d0 in [0, 1805],
d1 in [0, 6],
d2 in [0, 7],
d3 in [0, 3],
s0 in [0, 1]""")


def test_transpose():
    r = root("""p0 = f32[3, 12288, 6, 128] parameter(0)
ROOT transpose = f32[3, 6, 128, 12288] transpose(p0), dimensions={0, 2, 3, 1}""")
    assert_maps(out_to_in(r, 0), """(d0, d1, d2, d3) -> (d0, d3, d1, d2),
domain:
d0 in [0, 2],
d1 in [0, 5],
d2 in [0, 127],
d3 in [0, 12287],""")
    assert_maps(in_to_out(r, 0), """(d0, d1, d2, d3) -> (d0, d2, d3, d1),
domain:
d0 in [0, 2],
d1 in [0, 12287],
d2 in [0, 5],
d3 in [0, 127]""")


def test_reverse():
    r = root("""p0 = f32[1, 17, 9, 9] parameter(0)
ROOT reverse = f32[1, 17, 9, 9] reverse(p0), dimensions={1, 2}""")
    doc = """(d0, d1, d2, d3) -> (d0, -d1 + 16, -d2 + 8, d3),
domain:
d0 in [0, 0],
d1 in [0, 16],
d2 in [0, 8],
d3 in [0, 8]"""
    assert_maps(out_to_in(r, 0), doc)
    assert_maps(in_to_out(r, 0), doc)


def test_variadic_reduce():
    r = root("""p0 = f32[256,10] parameter(0)
p0_init = f32[] constant(-inf)
p1 = s32[256,10] parameter(1)
p1_init = s32[] constant(0)
ROOT out = (f32[10], s32[10]) reduce(p0, p1, p0_init, p1_init), dimensions={0}, to_apply=min""",
             extra="""min {
  a0 = f32[] parameter(0)
  a1 = s32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = s32[] parameter(3)
  c = pred[] compare(a0, b0), direction=LE
  v0 = f32[] select(c, a0, b0)
  v1 = s32[] select(c, a1, b1)
  ROOT t = (f32[], s32[]) tuple(v0, v1)
}""")
    assert_maps(out_to_in(r, 0), "(d0)[s0] -> (s0, d0),\ndomain:\nd0 in [0, 9],\ns0 in [0, 255]")
    assert_maps(out_to_in(r, 2), "(d0) -> (),\ndomain:\nd0 in [0, 9]")
    assert_maps(in_to_out(r, 0), "(d0, d1) -> (d1),\ndomain:\nd0 in [0, 255],\nd1 in [0, 9]")
    assert_maps(in_to_out(r, 2), "()[s0] -> (s0),\ndomain:\ns0 in [0, 9]")


def test_slice():
    r = root("""p0 = f32[10, 20, 50] parameter(0)
ROOT slice = f32[5, 3, 25] slice(f32[10, 20, 50] p0), slice={[5:10:1], [3:20:7], [0:50:2]}""")
    assert_maps(out_to_in(r, 0), """(d0, d1, d2) -> (d0 + 5, d1 * 7 + 3, d2 * 2),
domain:
d0 in [0, 4],
d1 in [0, 2],
d2 in [0, 24]""")
    assert_maps(in_to_out(r, 0), """(d0, d1, d2) -> (d0 - 5, (d1 - 3) floordiv 7, d2 floordiv 2),
domain:
d0 in [5, 9],
d1 in [3, 17],
d2 in [0, 48],
(d1 - 3) mod 7 in [0, 0],
d2 mod 2 in [0, 0]""")


RESHAPES = [
    ("f32[4,8]", "f32[32]", "(d0) -> (d0 floordiv 8, d0 mod 8),\ndomain:\nd0 in [0, 31]",
     "(d0, d1) -> (d0 * 8 + d1),\ndomain:\nd0 in [0, 3],\nd1 in [0, 7]"),
    ("f32[32]", "f32[4, 8]", "(d0, d1) -> (d0 * 8 + d1),\ndomain:\nd0 in [0, 3],\nd1 in [0, 7]",
     "(d0) -> (d0 floordiv 8, d0 mod 8),\ndomain:\nd0 in [0, 31]"),
    ("f32[4,8]", "f32[2, 4, 4]",
     "(d0, d1, d2) -> (d0 * 2 + d1 floordiv 2, d2 + (d1 mod 2) * 4),\ndomain:\nd0 in [0, 1],\nd1 in [0, 3],\n"
     "d2 in [0, 3]",
     "(d0, d1) -> (d0 floordiv 2, d1 floordiv 4 + (d0 mod 2) * 2, d1 mod 4),\ndomain:\nd0 in [0, 3],\n"
     "d1 in [0, 7]"),
    ("f32[4, 8, 12]", "f32[32, 3, 4]",
     "(d0, d1, d2) -> (d0 floordiv 8, d0 mod 8, d1 * 4 + d2),\ndomain:\nd0 in [0, 31],\nd1 in [0, 2]\n"
     "d2 in [0, 3]",
     "(d0, d1, d2) -> (d0 * 8 + d1, d2 floordiv 4, d2 mod 4),\ndomain:\nd0 in [0, 3],\nd1 in [0, 7],\n"
     "d2 in [0, 11]"),
]


@pytest.mark.parametrize("src,dst,o2i,i2o", RESHAPES)
def test_reshape(src, dst, o2i, i2o):
    r = root(f"p0 = {src} parameter(0)\nROOT reshape = {dst} reshape(p0)")
    assert_maps(out_to_in(r, 0), o2i)
    assert_maps(in_to_out(r, 0), i2o)


def test_concatenate():
    r = root("""p0 = f32[2, 5, 7] parameter(0)
p1 = f32[2, 11, 7] parameter(1)
p2 = f32[2, 17, 7] parameter(2)
ROOT output = f32[2, 33, 7] concatenate(f32[2, 5, 7] p0, f32[2, 11, 7] p1, f32[2, 17, 7] p2), dimensions={1}""")
    assert_maps(out_to_in(r, 0), "(d0, d1, d2) -> (d0, d1, d2),\ndomain:\nd0 in [0, 1],\nd1 in [0, 4],\nd2 in [0, 6]")
    assert_maps(out_to_in(r, 1), "(d0, d1, d2) -> (d0, d1 - 5, d2),\ndomain:\nd0 in [0, 1],\nd1 in [5, 15],\n"
                "d2 in [0, 6]")
    assert_maps(out_to_in(r, 2), "(d0, d1, d2) -> (d0, d1 - 16, d2),\ndomain:\nd0 in [0, 1],\nd1 in [16, 32],\n"
                "d2 in [0, 6]")
    assert_maps(in_to_out(r, 0), "(d0, d1, d2) -> (d0, d1, d2),\ndomain:\nd0 in [0, 1],\nd1 in [0, 4],\nd2 in [0, 6]")
    assert_maps(in_to_out(r, 1), "(d0, d1, d2) -> (d0, d1 + 5, d2),\ndomain:\nd0 in [0, 1],\nd1 in [0, 10],\n"
                "d2 in [0, 6]")
    assert_maps(in_to_out(r, 2), "(d0, d1, d2) -> (d0, d1 + 16, d2),\ndomain:\nd0 in [0, 1],\nd1 in [0, 16],\n"
                "d2 in [0, 6]")


DOT = """p0 = f32[4, 128, 256] parameter(0)
p1 = f32[4, 256, 64] parameter(1)
ROOT output = f32[4, 128, 64] dot(p0, p1), lhs_batch_dims={0}, rhs_batch_dims={0},
  lhs_contracting_dims={2}, rhs_contracting_dims={1}"""


def test_dot():
    r = root(DOT)
    assert_maps(out_to_in(r, 0), "(d0, d1, d2)[s0] -> (d0, d1, s0),\ndomain:\nd0 in [0, 3],\nd1 in [0, 127],\n"
                "d2 in [0, 63],\ns0 in [0, 255]")
    assert_maps(out_to_in(r, 1), "(d0, d1, d2)[s0] -> (d0, s0, d2),\ndomain:\nd0 in [0, 3],\nd1 in [0, 127],\n"
                "d2 in [0, 63],\ns0 in [0, 255]")
    assert_maps(in_to_out(r, 0), "(d0, d1, d2)[s0] -> (d0, d1, s0),\ndomain:\nd0 in [0, 3],\nd1 in [0, 127],\n"
                "d2 in [0, 255],\ns0 in [0, 63]")


def test_dot_rhs_to_output_document_misprint():
    """The document prints ``(d0, d1, d2)[s0] -> (d0, s0, d1)`` for p1 -> output, but rhs dim 1
    (d1, size 256) is contracting; output dim 2 is rhs dim 2. We print the correct map."""
    r = root(DOT)
    doc = "(d0, d1, d2)[s0] -> (d0, s0, d1), domain: d0 in [0, 3], d1 in [0, 255], d2 in [0, 63], s0 in [0, 127]"
    ours = in_to_out(r, 1)
    assert ours != [doc]
    assert_maps(ours, "(d0, d1, d2)[s0] -> (d0, s0, d2), domain: d0 in [0, 3], d1 in [0, 255], d2 in [0, 63], "
                "s0 in [0, 127]")


def test_pad():
    r = root("""p0 = f32[4, 4] parameter(0)
p1 = f32[] parameter(1)
ROOT pad = f32[12, 16] pad(p0, p1), padding=1_4_1x4_8_0""")
    assert_maps(out_to_in(r, 0), """(d0, d1) -> ((d0 - 1) floordiv 2, d1 - 4),
domain:
d0 in [1, 7],
d1 in [4, 7],
(d0 - 1) mod 2 in [0, 0]""")
    assert_maps(out_to_in(r, 1), "(d0, d1) -> (),\ndomain:\nd0 in [0, 11],\nd1 in [0, 15]")


def test_reduce_window():
    r = root("""c_inf = f32[] constant(-inf)
p0 = f32[1024, 514] parameter(0)
ROOT output = f32[1024, 3] reduce-window(p0, c_inf), window={size=1x512 pad=0_0x0_0}, to_apply=max""")
    assert_maps(out_to_in(r, 0), """(d0, d1)[s0] -> (d0, d1 + s0),
domain:
d0 in [0, 1023],
d1 in [0, 2],
s0 in [0, 511]""")
    assert_maps(out_to_in(r, 1), "(d0, d1) -> (),\ndomain:\nd0 in [0, 1023],\nd1 in [0, 2]")


FUSION_ENTRY = "ROOT fusion = {shape} fusion({args}), kind=kLoop, calls=f"


def _fusion(body: str, params: list[str], shape: str):
    args = ", ".join(f"p{i}" for i in range(len(params)))
    entry = "\n".join(f"p{i} = {s} parameter({i})" for i, s in enumerate(params))
    entry += "\n" + FUSION_ENTRY.format(shape=shape, args=args)
    return root(entry, extra="f {\n" + body + "\n}\n")


def test_fusion_one_input_two_maps():
    r = _fusion("""p0 = f32[1000, 1000] parameter(0)
transpose_p0 = f32[1000, 1000]{0, 1} transpose(p0), dimensions={1, 0}
ROOT a0 = f32[1000, 1000] add(p0, transpose_p0)""", ["f32[1000,1000]"], "f32[1000,1000]")
    assert_maps(out_to_in(r, 0), "(d0, d1) -> (d0, d1), domain: d0 in [0, 999], d1 in [0, 999]",
                "(d0, d1) -> (d1, d0), domain: d0 in [0, 999], d1 in [0, 999]")


def test_fusion_one_input_deduplicated():
    r = _fusion("""p0 = f32[20, 10, 50] parameter(0)
lhs_transpose_1 = f32[10, 20, 50] transpose(p0), dimensions={1, 0, 2}
lhs_e = f32[10, 20, 50] exponential(lhs_transpose_1)
lhs_transpose_2 = f32[10, 50, 20] transpose(lhs_e), dimensions={0, 2, 1}
rhs_transpose_1 = f32[50, 10, 20] transpose(p0), dimensions={2, 1, 0}
rhs_log = f32[50, 10, 20] exponential(rhs_transpose_1)
rhs_transpose_2 = f32[10, 50, 20] transpose(rhs_log), dimensions={1, 0, 2}
ROOT output = f32[10, 50, 20] add(lhs_transpose_2, rhs_transpose_2)""", ["f32[20,10,50]"], "f32[10,50,20]")
    maps = out_to_in(r, 0)
    assert len(maps) == 1
    assert_maps(maps, "(d0, d1, d2) -> (d2, d0, d1), domain: d0 in [0, 9], d1 in [0, 49], d2 in [0, 19]")


SOFTMAX = """p0 = f32[2,65,125]{2,1,0} parameter(0)
bitcast0 = f32[65,2,125]{2,1,0} bitcast(p0)
constant_neg_inf_1 = f32[] constant(-inf)
reduce0 = f32[2,65]{1,0} reduce(p0, constant_neg_inf_1), dimensions={2}, to_apply=max
bitcast1 = f32[130]{0} bitcast(reduce0)
bcast1 = f32[130,125]{1,0} broadcast(bitcast1), dimensions={0}
bitcast2 = f32[65,2,125]{2,1,0} bitcast(bcast1)
subtract0 = f32[65,2,125]{2,1,0} subtract(bitcast0, bitcast2)
exponential0 = f32[65,2,125]{2,1,0} exponential(subtract0)
bitcast3 = f32[65,2,125]{2,1,0} bitcast(p0)
reduce1 = f32[2,65]{1,0} reduce(p0, constant_neg_inf_1), dimensions={2}, to_apply=max
bitcast4 = f32[130]{0} bitcast(reduce1)
bcast2 = f32[130,125]{1,0} broadcast(bitcast4), dimensions={0}
bitcast5 = f32[65,2,125]{2,1,0} bitcast(bcast2)
subtract1 = f32[65,2,125]{2,1,0} subtract(bitcast3, bitcast5)
exponential1 = f32[65,2,125]{2,1,0} exponential(subtract1)
constant_zero_1 = f32[] constant(0)
reduce2 = f32[65,2]{1,0} reduce(exponential1, constant_zero_1), dimensions={2}, to_apply=add_computation
bitcast6 = f32[130]{0} bitcast(reduce2)
bcast3 = f32[130,125]{1,0} broadcast(bitcast6), dimensions={0}
bitcast7 = f32[65,2,125]{2,1,0} bitcast(bcast3)
divide = f32[65,2,125]{2,1,0} divide(exponential0, bitcast7)
ROOT bitcast8 = f32[2,65,125]{2,1,0} bitcast(divide)"""


def test_fusion_softmax():
    """The softmax fusion of the document (its HLO as in XLA's FusionOpWithSoftmax test)."""
    r = _fusion(SOFTMAX, ["f32[2,65,125]"], "f32[2,65,125]")
    assert_maps(out_to_in(r, 0), """(d0, d1, d2)[s0] -> (d0, d1, s0),
domain:
d0 in [0, 1],
d1 in [0, 64],
d2 in [0, 124],
s0 in [0, 124]""", """(d0, d1, d2) -> (d0, d1, d2),
domain:
d0 in [0, 1],
d1 in [0, 64],
d2 in [0, 124]""")


SIMPLIFICATIONS = [
    ("(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16), domain: d0 in [0, 6], d1 in [0, 14]",
     "(d0, d1) -> (d0, d1)"),
    ("(d0, d1, d2) -> ((100d0 + 10d1 + d2) floorDiv 100, ((100d0 + 10d1 + d2) mod 100) floordiv 10, d2 mod 10), "
     "domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]", "(d0, d1, d2) -> (d0, d1, d2)"),
    ("(d0, d1, d2) -> ((16d0 + 4d1 + d2) floordiv 8, (16d0 + 4d1 + d2) mod 8), "
     "domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]",
     "(d0, d1, d2) -> (2d0 + (4d1 + d2) floordiv 8,(4d1 + d2) mod 8)"),
    ("(d0, d1) -> (-(-11d0 - d1 + 109) floordiv 11 + 9), domain: d0 in [0, 9], d1 in [0, 10]",
     "(d0, d1) -> (d0)"),
]


@pytest.mark.parametrize("before,after", SIMPLIFICATIONS)
def test_simplification_rewrites(before, after):
    m = parse_indexing_map(before)
    got = simplify(m)
    head, _, _ = after.partition(" -> ")
    expected = parse_indexing_map(after + ", domain: " + ", ".join(
        f"d{i} in [{lo}, {hi}]" for i, (lo, hi) in enumerate(m.dims)))
    assert got.exprs == expected.exprs, got.to_text()
    assert got.to_text().startswith(head)


def test_chained_reshapes_compose_to_identity():
    first = reshape_map((10, 10, 10), (50, 20))   # output of reshape2 -> its operand
    second = reshape_map((50, 20), (10, 10, 10))  # output of reshape1 -> p0
    got = simplify(compose(first, second))
    assert got.to_text() == "(d0, d1, d2) -> (d0, d1, d2), domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]"


def test_constraint_always_satisfied_is_dropped():
    m = parse_indexing_map("(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [1, 3], d0 + s0 in [0, 20]")
    assert simplify(m).to_text() == "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [1, 3]"


@pytest.mark.parametrize("text,expected", [
    ("(d0, d1) -> (d0), domain: d0 in [0, 9], d1 in [0, 9], d0 * 2 + 4 in [6, 11]",
     "(d0, d1) -> (d0), domain: d0 in [1, 3], d1 in [0, 9]"),
    ("(d0, d1) -> (d0), domain: d0 in [0, 99], d1 in [0, 9], d0 floordiv 10 in [2, 3]",
     "(d0, d1) -> (d0), domain: d0 in [20, 39], d1 in [0, 9]"),
    ("(d0, d1) -> (d0), domain: d0 in [0, 9], d1 in [0, 9], d0 - d1 in [2, 3]",
     "(d0, d1) -> (d0), domain: d0 in [0, 9], d1 in [0, 9], d0 - d1 in [2, 3]"),
])
def test_constraint_tightening(text, expected):
    assert simplify(parse_indexing_map(text)).to_text() == expected
