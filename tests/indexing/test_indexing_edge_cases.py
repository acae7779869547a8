"""Issue 15, item 7: three indexing cases against XLA's maps (``indexing_analysis_test.cc``):
a reshape of a zero-element shape, a convolution with window reversal, a gather whose
indices are an iota. Where XLA's map is wrong (an iota whose values leave the clamped range)
ours is exact, and every map is checked point by point against the op's semantics."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import hlo_compile
from hlo_compile.interpreter import evaluate_module

from indexing_helpers import assert_maps, in_to_out, out_to_in, root


# ---- reshape of a zero-element shape: XLA's map is known empty (its domain has no point) ----

@pytest.mark.parametrize("src,dst", [("f32[0,4]", "f32[2,0,3]"), ("f32[0]", "f32[0,5]"), ("f32[2,0]", "f32[0]"),
                                     ("f32[1000,10,0]", "f32[100,100,0]")])
def test_reshape_of_zero_elements_is_known_empty(src, dst):
    r = root(f"p0 = {src} parameter(0)\nROOT r = {dst} reshape(p0)")
    assert out_to_in(r, 0) == ["KNOWN EMPTY"]
    assert in_to_out(r, 0) == ["KNOWN EMPTY"]


def test_zero_element_reshape_inside_a_fusion_has_indexing():
    from hlo_compile.options import CompileOptions
    from hlo_compile.driver.pipeline import run_pipeline
    text = """HloModule m
fused {
  p0 = f32[0,4] parameter(0)
  r = f32[4,0] reshape(p0)
  b = f32[2,0,2] bitcast(r)
  ROOT n = f32[2,0,2] negate(b)
}
ENTRY e {
  p0 = f32[0,4] parameter(0)
  ROOT f = f32[2,0,2] fusion(p0), kind=kLoop, calls=fused
}"""
    module = hlo_compile.parse_module(text)
    assert out_to_in(module.entry.root, 0) == ["KNOWN EMPTY"]
    out = run_pipeline(module, CompileOptions(), emit="indexing").artifacts["indexing"]
    assert "KNOWN EMPTY" in out


# ---- convolution with window reversal: the maps without reversal (XLA ignores it) -----------

CONV = "p0 = f32[1,12,10,4] parameter(0)\np1 = f32[4,3,5,8] parameter(1)\n"
CONV_LHS = ("(d0, d1, d2, d3)[s0, s1, s2] -> (d0, d1 * 2 + s0 - 1, d2 * 2 + s1 - 2, s2), domain: d0 in [0, 0], "
            "d1 in [0, 5], d2 in [0, 4], d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3], "
            "d1 * 2 + s0 in [1, 12], d2 * 2 + s1 in [2, 11]")
CONV_RHS = ("(d0, d1, d2, d3)[s0, s1, s2] -> (s2, s0, s1, d3), domain: d0 in [0, 0], d1 in [0, 5], d2 in [0, 4], "
            "d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3]")


@pytest.mark.parametrize("reversal", ["rhs_reversal=1x1", "rhs_reversal=0x1", "rhs_reversal=1x0"])
def test_convolution_with_window_reversal(reversal):
    r = root(CONV + "ROOT c = f32[1,6,5,8] convolution(p0, p1), window={size=3x5 stride=2x2 pad=1_1x2_2 "
             f"{reversal}}}, dim_labels=b01f_i01o->b01f")
    assert_maps(out_to_in(r, 0), CONV_LHS)
    assert_maps(out_to_in(r, 1), CONV_RHS)


def test_convolution_with_window_reversal_maps_cover_what_each_output_reads():
    """Each output element of a reversed convolution depends on exactly the input elements the
    map names (perturb one input element, see which outputs change); the kernel map names every
    window position, as XLA's: a kernel element over padding is multiplied by the padding's zero."""
    text = ("HloModule m\nENTRY e {\n  p0 = f32[1,7,3] parameter(0)\n  p1 = f32[3,3,2] parameter(1)\n"
            "  ROOT c = f32[1,4,2] convolution(p0, p1), window={size=3 stride=2 pad=1_1 rhs_reversal=1}, "
            "dim_labels=b0f_0io->b0f\n}\n")
    module = hlo_compile.parse_module(text)
    conv = module.entry.root
    rng = np.random.default_rng(0)
    args = [rng.uniform(1, 2, (1, 7, 3)).astype(np.float32), rng.uniform(1, 2, (3, 3, 2)).astype(np.float32)]
    base = evaluate_module(module, args)
    from hlo_compile.indexing.fusion import instruction_output_to_input
    maps = instruction_output_to_input(conv, 0)
    for operand in (0, 1):
        (m,) = maps[operand]
        for elem in itertools.product(*(range(n) for n in args[operand].shape)):
            bumped = [a.copy() for a in args]
            bumped[operand][elem] += 1000.0
            out = evaluate_module(module, bumped)
            readers = {tuple(int(v) for v in i) for i in np.argwhere(np.abs(out - base) > 1e-3)}
            named = {o for o in itertools.product(range(1), range(4), range(2)) if _reads(m, o, elem)}
            if operand == 0:
                assert readers == named, (elem, readers, named)
            else:  # a kernel element that meets only padding is still read (times the zero padding)
                assert readers <= named and named == {o for o in itertools.product(range(1), range(4), range(2))
                                                      if o[2] == elem[2]}, (elem, readers, named)


def _reads(m, out, elem) -> bool:
    """Whether the map sends output ``out`` to operand element ``elem`` for some symbols."""
    from hlo_compile.indexing import affine as A
    for syms in itertools.product(*(range(lo, hi + 1) for lo, hi in m.ranges)):
        if not m.satisfies(list(out), list(syms), []):
            continue
        if tuple(A.evaluate(e, list(out), list(syms), []) for e in m.exprs) == elem:
            return True
    return False


# ---- gather with iota indices --------------------------------------------------------------

def _gather_fusion(indices: str, operand: str = "f32[33,76]", n: int = 42) -> object:
    text = f"""HloModule m
fused_computation {{
  p0 = {operand} parameter(0)
  {indices}
  ROOT gather = f32[{n},1,1] gather(p0, idx), offset_dims={{1,2}}, collapsed_slice_dims={{}},
    start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,1}}
}}
ENTRY main {{
  p0 = {operand} parameter(0)
  ROOT fusion = f32[{n},1,1] fusion(p0), kind=kInput, calls=fused_computation
}}"""
    return hlo_compile.parse_module(text)


def test_gather_iota_inside_the_range_is_xlas_map():
    """All iota values are valid starts: XLA's map ``(d0, 0)`` exactly, no runtime variable."""
    m = _gather_fusion("idx = s64[42,1] iota(), iota_dimension=0", "f32[50,76]")
    assert_maps(out_to_in(m.entry.root, 0), "(d0, d1, d2) -> (d0, 0), domain: d0 in [0, 41], d1 in [0, 0], "
                "d2 in [0, 0]")


def test_gather_iota_as_constant():
    """XLA's FusionWithRTVarsSimplification_IotaAsConstant: iota along the index vector is 0."""
    m = _gather_fusion("idx = s64[42,1] iota(), iota_dimension=1")
    assert_maps(out_to_in(m.entry.root, 0), "(d0, d1, d2) -> (0, 0), domain: d0 in [0, 41], d1 in [0, 0], "
                "d2 in [0, 0]")


def test_gather_iota_beyond_the_range_is_clamped_exactly():
    """XLA's FusionWithRTVarsSimplification_Iota (f32[33,76], iota of 42) gives ``(d0, 0)`` for
    d0 up to 41, out of bounds past 32 (gather clamps the start to 32). Ours: the same map
    where the iota is a valid start, the clamped row 32 beyond: no point XLA's excludes for
    d0 <= 32, and the real element (not an out-of-bounds one) past it."""
    m = _gather_fusion("idx = s64[42,1] iota(), iota_dimension=0")
    assert_maps(out_to_in(m.entry.root, 0),
                "(d0, d1, d2) -> (d0, 0), domain: d0 in [0, 32], d1 in [0, 0], d2 in [0, 0]",
                "(d0, d1, d2) -> (32, 0), domain: d0 in [33, 41], d1 in [0, 0], d2 in [0, 0]")


def test_gather_iota_in_entry_two_index_columns_matches_the_interpreter():
    """A gather in ENTRY (the instruction's own map) with iota indices of two columns whose
    clamps start at different rows: every output element reads exactly the element the maps
    name (checked against the interpreter's result)."""
    body = ("p0 = f32[33,76,5] parameter(0)\nidx = s32[90,2] iota(), iota_dimension=0\n"
            "ROOT g = f32[90,7,8,5] gather(p0, idx), offset_dims={1,2,3}, collapsed_slice_dims={}, "
            "start_index_map={0,1}, index_vector_dim=1, slice_sizes={7,8,5}")
    r = root(body)
    maps = out_to_in(r, 0)
    assert len(maps) == 3 and not any("rt" in t for t in maps), maps
    module = hlo_compile.parse_module("HloModule m\nENTRY e {\n" + body + "\n}\n")
    x = np.arange(33 * 76 * 5, dtype=np.float32).reshape(33, 76, 5)
    out = evaluate_module(module, [x])
    from hlo_compile.indexing import affine as A
    from hlo_compile.indexing.fusion import instruction_output_to_input
    ims = instruction_output_to_input(module.entry.root, 0)[0]
    for o in itertools.product(range(90), range(0, 7, 3), range(0, 8, 3), range(0, 5, 2)):
        hits = [m for m in ims if m.satisfies(list(o), [], [])]
        assert len(hits) == 1, o
        elem = tuple(A.evaluate(e, list(o), [], []) for e in hits[0].exprs)
        assert out[o] == x[elem], (o, elem)
