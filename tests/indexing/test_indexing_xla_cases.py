"""Cases whose expected maps come from XLA's indexing_analysis_test.cc (facts restated; our
term order follows the seed document where the two differ, noted per case), plus layout maps
and the --emit=indexing report."""
from __future__ import annotations

import itertools
import json

import pytest

from hlo_compile.indexing.layout_maps import linear_index_map, physical_index_map
from hlo_compile.indexing.report import indexing_report_json, indexing_report_text

from indexing_helpers import assert_maps, in_to_out, module, out_to_in, root


def test_bitcast_transpose_reshape_transpose():
    r = root("p0 = f32[16, 17, 3] parameter(0)\nROOT b = f32[51, 16]{0, 1} bitcast(p0)")
    assert_maps(out_to_in(r, 0), "(d0, d1) -> (d1, d0 floordiv 3, d0 mod 3), domain: d0 in [0, 50], d1 in [0, 15]")
    assert_maps(in_to_out(r, 0), "(d0, d1, d2) -> (d1 * 3 + d2, d0), domain: d0 in [0, 15], d1 in [0, 16], "
                "d2 in [0, 2]")


def test_bitcast_is_transpose_and_keeps_size_one_dims():
    r = root("p0 = f32[3, 12288, 6, 128] parameter(0)\nROOT b = f32[3, 6, 128, 12288]{2, 1, 3, 0} bitcast(p0)")
    assert_maps(out_to_in(r, 0), "(d0, d1, d2, d3) -> (d0, d3, d1, d2), domain: d0 in [0, 2], d1 in [0, 5], "
                "d2 in [0, 127], d3 in [0, 12287]")
    r = root("p0 = f32[32] parameter(0)\nROOT b = f32[1, 32] bitcast(p0)")
    assert_maps(out_to_in(r, 0), "(d0, d1) -> (d0 * 32 + d1), domain: d0 in [0, 0], d1 in [0, 31]")


def test_bitcast_with_tiles_is_unknown():
    r = root("p0 = f32[8, 8]{1,0:T(2,2)} parameter(0)\nROOT b = f32[64] bitcast(p0)")
    assert out_to_in(r, 0) is None


def test_reduce_window_padding_stride_and_dilations():
    r = root("c = f32[] constant(0)\np0 = f32[13, 17] parameter(0)\nROOT rw = f32[7, 17] reduce-window(p0, c), "
             "window={size=3x2 stride=2x1 pad=1_1x0_1}, to_apply=max")
    assert_maps(out_to_in(r, 0), "(d0, d1)[s0, s1] -> (d0 * 2 + s0 - 1, d1 + s1), domain: d0 in [0, 6], "
                "d1 in [0, 16], s0 in [0, 2], s1 in [0, 1], d0 * 2 + s0 in [1, 13], d1 + s1 in [0, 16]")
    r = root("c = f32[] constant(0)\np0 = f32[2, 3] parameter(0)\nROOT rw = f32[3, 5] reduce-window(p0, c), "
             "window={size=1x1 pad=0_0x0_0 lhs_dilate=2x2}, to_apply=max")
    assert_maps(out_to_in(r, 0), "(d0, d1) -> (d0 floordiv 2, d1 floordiv 2), domain: d0 in [0, 2], d1 in [0, 4], "
                "d0 mod 2 in [0, 0], d1 mod 2 in [0, 0]")
    r = root("c = f32[] constant(0)\np0 = f32[7, 3] parameter(0)\nROOT rw = f32[4, 3] reduce-window(p0, c), "
             "window={size=2x1 pad=0_0x0_0 rhs_dilate=3x1}, to_apply=max")
    assert_maps(out_to_in(r, 0), "(d0, d1)[s0] -> (d0 + s0 * 3, d1), domain: d0 in [0, 3], d1 in [0, 2], "
                "s0 in [0, 1]")


CONV = "p0 = f32[1,12,10,4] parameter(0)\np1 = f32[4,3,5,8] parameter(1)\n"


def test_convolution():
    r = root(CONV + "ROOT c = f32[1,6,5,8] convolution(p0, p1), window={size=3x5 stride=2x2 pad=1_1x2_2}, "
             "dim_labels=b01f_i01o->b01f")
    assert_maps(out_to_in(r, 0), "(d0, d1, d2, d3)[s0, s1, s2] -> (d0, d1 * 2 + s0 - 1, d2 * 2 + s1 - 2, s2), "
                "domain: d0 in [0, 0], d1 in [0, 5], d2 in [0, 4], d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], "
                "s2 in [0, 3], d1 * 2 + s0 in [1, 12], d2 * 2 + s1 in [2, 11]")
    assert_maps(out_to_in(r, 1), "(d0, d1, d2, d3)[s0, s1, s2] -> (s2, s0, s1, d3), domain: d0 in [0, 0], "
                "d1 in [0, 5], d2 in [0, 4], d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3]")


def test_convolution_feature_groups_term_order():
    """XLA prints ``(d3 floordiv 8) * 4 + s2``; we order symbols before divisions, as the
    seed document does."""
    r = root("p0 = f32[1,12,10,24] parameter(0)\np1 = f32[4,3,5,48] parameter(1)\nROOT c = f32[1,10,6,48] "
             "convolution(p0, p1), window={size=3x5 pad=0_0x0_0}, dim_labels=b01f_i01o->b01f, feature_group_count=6")
    assert_maps(out_to_in(r, 0), "(d0, d1, d2, d3)[s0, s1, s2] -> (d0, d1 + s0, d2 + s1, s2 + (d3 floordiv 8) * 4), "
                "domain: d0 in [0, 0], d1 in [0, 9], d2 in [0, 5], d3 in [0, 47], s0 in [0, 2], s1 in [0, 4], "
                "s2 in [0, 3]")


def test_dot_general_dims():
    r = root("p0 = f32[4, 38, 17, 11, 18, 10] parameter(0)\np1 = f32[17, 10, 16, 18, 22, 38] parameter(1)\n"
             "ROOT dot = f32[10, 38, 4, 11, 16, 22] dot(p0, p1), lhs_batch_dims={5,1}, rhs_batch_dims={1,5}, "
             "lhs_contracting_dims={4,2}, rhs_contracting_dims={3,0}")
    dom = ("d0 in [0, 9], d1 in [0, 37], d2 in [0, 3], d3 in [0, 10], d4 in [0, 15], d5 in [0, 21], "
           "s0 in [0, 17], s1 in [0, 16]")
    assert_maps(out_to_in(r, 0), f"(d0, d1, d2, d3, d4, d5)[s0, s1] -> (d2, d1, s1, d3, s0, d0), domain: {dom}")
    assert_maps(out_to_in(r, 1), f"(d0, d1, d2, d3, d4, d5)[s0, s1] -> (s1, d0, d4, s0, d5, d1), domain: {dom}")


def test_unsupported_op_is_unknown():
    r = root("p1 = f32[4,4] parameter(0)\np2 = f32[4,3] parameter(1)\nROOT out = f32[4,3] triangular-solve(p1, p2), "
             "left_side=true, lower=true, transpose_a=NO_TRANSPOSE, unit_diagonal=true")
    assert out_to_in(r, 0) is None and out_to_in(r, 1) is None and in_to_out(r, 0) is None


def _fusion(body: str, entry: str):
    return root(entry, extra="f {\n" + body + "\n}\n")


def test_fusion_with_unsupported_op():
    r = _fusion("""p0 = f32[20, 20] parameter(0)
p1 = f32[4,4] parameter(1)
p2 = f32[4,3] parameter(2)
lhs = f32[4,3] triangular-solve(p1, p2), left_side=true, lower=true, transpose_a=NO_TRANSPOSE, unit_diagonal=true
rhs = f32[4, 3] slice(p0), slice={[0:20:6], [0:5:2]}
ROOT add = f32[4, 3] add(lhs, rhs)""", """p0 = f32[20, 20] parameter(0)
p1 = f32[4, 4] parameter(1)
p2 = f32[4, 3] parameter(2)
ROOT fusion = f32[4, 3] fusion(p0, p1, p2), kind=kLoop, calls=f""")
    assert_maps(out_to_in(r, 0), "(d0, d1) -> (d0 * 6, d1 * 2), domain: d0 in [0, 3], d1 in [0, 2]")
    assert out_to_in(r, 1) is None and out_to_in(r, 2) is None


def test_fusion_dynamic_slice_of_dynamic_slice_and_constant_offsets():
    r = _fusion("""src = s32[150, 64] parameter(0)
of11 = s32[] parameter(1)
of12 = s32[] parameter(2)
of21 = s32[] parameter(3)
of22 = s32[] parameter(4)
ds1 = s32[50, 32] dynamic-slice(src, of11, of12), dynamic_slice_sizes={50, 32}
ROOT ds2 = s32[25, 16] dynamic-slice(ds1, of21, of22), dynamic_slice_sizes={25, 16}""",
                "\n".join(f"p{i} = {'s32[150,64]' if i == 0 else 's32[]'} parameter({i})" for i in range(5))
                + "\nROOT fusion = s32[25, 16] fusion(p0, p1, p2, p3, p4), kind=kLoop, calls=f")
    assert_maps(out_to_in(r, 0), "(d0, d1){rt0, rt1, rt2, rt3} -> (d0 + rt0 + rt2, d1 + rt1 + rt3), domain: "
                "d0 in [0, 24], d1 in [0, 15], rt0 in [0, 100], rt1 in [0, 32], rt2 in [0, 25], rt3 in [0, 16]")
    r = _fusion("""p0 = s32[100] parameter(0)
offset = s64[] constant(99)
ROOT ds = s32[10] dynamic-slice(p0, offset), dynamic_slice_sizes={10}""",
                "p0 = s32[100] parameter(0)\nROOT fusion = s32[10] fusion(p0), kind=kLoop, calls=f")
    assert_maps(out_to_in(r, 0), "(d0){rt0} -> (d0 + rt0), domain: d0 in [0, 9], rt0 in [0, 90]")
    r = _fusion("""p0 = s32[4096] parameter(0)
offset = s64[] constant(42)
ROOT ds = s32[10] dynamic-slice(p0, offset), dynamic_slice_sizes={10}""",
                "p0 = s32[4096] parameter(0)\nROOT fusion = s32[10] fusion(p0), kind=kLoop, calls=f")
    assert_maps(out_to_in(r, 0), "(d0) -> (d0 + 42), domain: d0 in [0, 9]")


@pytest.mark.parametrize("body,params,shape,expected", [
    ("""p0 = f32[2, 5, 7] parameter(0)
p1 = f32[2, 11, 7] parameter(1)
p2 = f32[2, 17, 7] parameter(2)
concat = f32[2, 33, 7] concatenate(p0, p1, p2), dimensions={1}
ROOT slice = f32[2, 11, 7] slice(concat), slice={[0:2:1], [0:33:3], [0:7:1]}""",
     ["f32[2,5,7]", "f32[2,11,7]", "f32[2,17,7]"], "f32[2,11,7]",
     ["(d0, d1, d2) -> (d0, d1 * 3, d2), domain: d0 in [0, 1], d1 in [0, 1], d2 in [0, 6]",
      "(d0, d1, d2) -> (d0, d1 * 3 - 5, d2), domain: d0 in [0, 1], d1 in [2, 5], d2 in [0, 6]",
      "(d0, d1, d2) -> (d0, d1 * 3 - 16, d2), domain: d0 in [0, 1], d1 in [6, 10], d2 in [0, 6]"]),
    ("""p0 = f32[2, 5, 7] parameter(0)
p1 = f32[2, 11, 7] parameter(1)
p2 = f32[2, 17, 7] parameter(2)
concat = f32[2, 33, 7] concatenate(p0, p1, p2), dimensions={1}
ROOT slice = f32[2, 3, 7] slice(concat), slice={[0:2:1], [0:5:2], [0:7:1]}""",
     ["f32[2,5,7]", "f32[2,11,7]", "f32[2,17,7]"], "f32[2,3,7]",
     ["(d0, d1, d2) -> (d0, d1 * 2, d2), domain: d0 in [0, 1], d1 in [0, 2], d2 in [0, 6]", "KNOWN EMPTY",
      "KNOWN EMPTY"]),
    ("""p0 = f32[150, 20, 10, 50] parameter(0)
p0_init = f32[] parameter(1)
reduce_1 = f32[20, 10] reduce(p0, p0_init), dimensions={0, 3}, to_apply=max
ROOT reduce_2 = f32[10] reduce(reduce_1, p0_init), dimensions={0}, to_apply=max""",
     ["f32[150,20,10,50]", "f32[]"], "f32[10]",
     ["(d0)[s0, s1, s2] -> (s0, s2, d0, s1), domain: d0 in [0, 9], s0 in [0, 149], s1 in [0, 49], s2 in [0, 19]",
      "(d0) -> (), domain: d0 in [0, 9]"]),
    ("""p0 = f32[10, 11] parameter(0)
reverse.0 = f32[10, 11] reverse(p0), dimensions={0, 1}
reshape.0 = f32[110] reshape(reverse.0)
reverse.1 = f32[110] reverse(reshape.0), dimensions={0}
ROOT reshape.1 = f32[10, 11] reshape(reverse.1)""", ["f32[10,11]"], "f32[10,11]",
     ["(d0, d1) -> (d0, d1), domain: d0 in [0, 9], d1 in [0, 10]"]),
])
def test_fusions_from_xla(body, params, shape, expected):
    entry = "\n".join(f"p{i} = {s} parameter({i})" for i, s in enumerate(params))
    entry += f"\nROOT fusion = {shape} fusion({', '.join(f'p{i}' for i in range(len(params)))}), kind=kLoop, calls=f"
    r = _fusion(body, entry)
    for i, e in enumerate(expected):
        assert_maps(out_to_in(r, i), e)


def test_layout_maps_match_tiling():
    m = module("""p0 = f32[5,9,7]{0,2,1:T(2,4)(2,1)} parameter(0)
p1 = f32[3,10,6]{2,1,0:T(*,8,4)} parameter(1)
p2 = f32[6,4]{0,1} parameter(2)
ROOT t = (f32[5,9,7]{0,2,1:T(2,4)(2,1)}, f32[3,10,6]{2,1,0:T(*,8,4)}, f32[6,4]{0,1}) tuple(p0, p1, p2)""")
    for p in m.entry.parameters:
        s = p.shape
        lm = linear_index_map(s)
        for idx in itertools.product(*[range(n) for n in s.dimensions]):
            assert lm.evaluate(idx)[0] == s.linear_index(idx)
    assert physical_index_map(m.entry.parameters[2].shape).to_text() == \
        "(d0, d1) -> (d1, d0), domain: d0 in [0, 5], d1 in [0, 3]"


def test_report_text_and_json():
    m = module("""p0 = f32[4, 8] parameter(0)
p1 = f32[4, 8] parameter(1)
ROOT fusion = f32[8, 4] fusion(p0, p1), kind=kLoop, calls=f""", extra="""f {
  a = f32[4, 8] parameter(0)
  b = f32[4, 8] parameter(1)
  s = f32[4, 8] add(a, b)
  ROOT t = f32[8, 4] transpose(s), dimensions={1, 0}
}
""")
    doc = indexing_report_json(m)
    json.dumps(doc)
    (inst,) = doc["instructions"]
    assert inst["name"] == "fusion" and inst["opcode"] == "fusion"
    o2i = [x for x in inst["indexing"] if x["direction"] == "output_to_input" and x["operand"] == 0][0]
    assert o2i["maps"] == [{"dims": [[0, 7], [0, 3]], "symbols": [], "rt_vars": [], "exprs": ["d1", "d0"],
                            "constraints": [], "known_empty": False}]
    i2o = [x for x in inst["indexing"] if x["direction"] == "input_to_output" and x["operand"] == 1][0]
    assert i2o["maps"][0]["exprs"] == ["d1", "d0"] and i2o["output"] == 0
    text = indexing_report_text(m)
    assert "output 0 -> operand 0:\n    (d0, d1) -> (d1, d0), domain: d0 in [0, 7], d1 in [0, 3]" in text
