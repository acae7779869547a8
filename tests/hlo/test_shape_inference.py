"""Shape inference rules, one family at a time (XLA's ShapeInference semantics)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import hlo_compile
from hlo_compile import parse_shape
from hlo_compile.hlo.attributes import decode_dim_labels, decode_padding, decode_slice, decode_window
from hlo_compile.hlo.opcodes import OPCODES
from hlo_compile.hlo.shape import Shape
from hlo_compile.hlo.shape_inference import DECLARED_ONLY, ShapeInferenceError, can_infer, has_rule, infer_shape


def S(text: str):
    return parse_shape(text)


def infer(opcode: str, *operands: str, **attrs):
    return infer_shape(opcode, [S(o) for o in operands], attrs)


def assert_shape(got, expected: str):
    want = S(expected)
    assert got.compatible(want), f"got {got}, expected {want}"
    assert got == want.without_layout().with_layout(got.layout) if got.is_array else True
    if got.is_array:
        assert got.has_default_layout()


def comp(root: str, *params: str):
    """A stand-in computation: what rules read is ``root.shape`` and ``parameters``."""
    return SimpleNamespace(root=SimpleNamespace(shape=S(root)),
                           parameters=[SimpleNamespace(shape=S(p)) for p in params], name="c")


def test_every_opcode_has_a_rule():
    assert OPCODES <= {op for op in OPCODES if has_rule(op)}


@pytest.mark.parametrize("opcode", sorted(DECLARED_ONLY))
def test_declared_only_ops_ask_for_a_shape(opcode):
    assert not can_infer(opcode)
    with pytest.raises(ShapeInferenceError, match="declare"):
        infer_shape(opcode, [S("f32[2]")], {})


def test_unknown_opcode():
    with pytest.raises(ShapeInferenceError, match="no shape rule"):
        infer_shape("frobnicate", [], {})


# ---- elementwise -------------------------------------------------------------------------

def test_binary_same_shape_drops_operand_layout():
    got = infer("add", "f32[2,3]{0,1}", "f32[2,3]{0,1}")
    assert_shape(got, "f32[2,3]")
    assert got.minor_to_major == (1, 0)


def test_binary_scalar_against_array():
    assert_shape(infer("multiply", "f32[]", "f32[4,5]"), "f32[4,5]")
    assert_shape(infer("multiply", "f32[4,5]", "f32[]"), "f32[4,5]")


def test_binary_shape_and_type_mismatches():
    with pytest.raises(ShapeInferenceError, match="incompatible shapes"):
        infer("add", "f32[2,3]", "f32[3,2]")
    with pytest.raises(ShapeInferenceError, match="different element types"):
        infer("add", "f32[2]", "s32[2]")
    with pytest.raises(ShapeInferenceError, match="expects 2 operand"):
        infer("add", "f32[2]")


def test_compare_gives_pred_and_keeps_dims():
    assert_shape(infer("compare", "s32[7,2]", "s32[7,2]", direction="LT"), "pred[7,2]")


def test_complex_real_imag_abs():
    assert_shape(infer("complex", "f32[3]", "f32[3]"), "c64[3]")
    assert_shape(infer("complex", "f64[]", "f64[]"), "c128[]")
    with pytest.raises(ShapeInferenceError):
        infer("complex", "f16[3]", "f16[3]")
    assert_shape(infer("real", "c128[2]"), "f64[2]")
    assert_shape(infer("imag", "c64[2]"), "f32[2]")
    assert_shape(infer("abs", "c64[2]"), "f32[2]")
    assert_shape(infer("abs", "s8[2]"), "s8[2]")


def test_unary_ops_and_type_restrictions():
    assert_shape(infer("is-finite", "bf16[4]"), "pred[4]")
    with pytest.raises(ShapeInferenceError):
        infer("is-finite", "s32[4]")
    assert_shape(infer("exponential", "f16[1,2]{0,1}"), "f16[1,2]")
    assert_shape(infer("not", "pred[3]"), "pred[3]")
    with pytest.raises(ShapeInferenceError):
        infer("not", "f32[3]")
    assert_shape(infer("reduce-precision", "f32[3]", exponent_bits=5, mantissa_bits=10), "f32[3]")
    assert_shape(infer("popcnt", "u32[3]"), "u32[3]")


def test_select_and_clamp():
    assert_shape(infer("select", "pred[2,3]", "f32[2,3]", "f32[2,3]"), "f32[2,3]")
    assert_shape(infer("select", "pred[]", "f32[2,3]", "f32[2,3]"), "f32[2,3]")
    with pytest.raises(ShapeInferenceError, match="predicate"):
        infer("select", "s32[2,3]", "f32[2,3]", "f32[2,3]")
    with pytest.raises(ShapeInferenceError):
        infer("select", "pred[2,3]", "f32[2,3]", "f32[3,2]")
    assert_shape(infer("clamp", "f32[]", "f32[5]", "f32[]"), "f32[5]")
    with pytest.raises(ShapeInferenceError):
        infer("clamp", "f32[4]", "f32[5]", "f32[]")


# ---- tuples, tokens, pass-through --------------------------------------------------------

def test_tuple_and_get_tuple_element():
    t = infer("tuple", "f32[2]", "(s32[], pred[3])")
    assert t.is_tuple and len(t.tuple_shapes) == 2
    assert_shape(infer_shape("get-tuple-element", [t], {"index": 1}).tuple_shapes[1], "pred[3]")
    with pytest.raises(ShapeInferenceError, match="out of range"):
        infer_shape("get-tuple-element", [t], {"index": 2})
    with pytest.raises(ShapeInferenceError, match="must be a tuple"):
        infer("get-tuple-element", "f32[2]", index=0)


def test_tokens_and_barriers():
    assert infer("after-all").is_token
    assert infer("after-all", "token[]", "token[]").is_token
    assert_shape(infer("add-dependency", "f32[3]", "token[]"), "f32[3]")
    with pytest.raises(ShapeInferenceError):
        infer("add-dependency", "f32[3]", "f32[]")
    got = infer("opt-barrier", "(f32[2], s32[])")
    assert got.is_tuple and got.tuple_shapes[1].element_type == "s32"
    assert_shape(infer("get-dimension-size", "f32[3,4]", dimensions=(1,)), "s32[]")
    with pytest.raises(ShapeInferenceError):
        infer("get-dimension-size", "f32[3,4]", dimensions=(2,))


def test_one_device_collectives():
    assert_shape(infer("all-reduce", "f32[8]"), "f32[8]")
    got = infer("all-reduce", "f32[8]", "s32[2]")
    assert got.is_tuple and len(got.tuple_shapes) == 2
    assert_shape(infer("collective-permute", "f32[4,4]"), "f32[4,4]")
    assert_shape(infer("replica-id"), "u32[]")


# ---- data movement -----------------------------------------------------------------------

def test_transpose():
    assert_shape(infer("transpose", "f32[2,3,4]", dimensions=(2, 0, 1)), "f32[4,2,3]")
    with pytest.raises(ShapeInferenceError, match="permutation"):
        infer("transpose", "f32[2,3,4]", dimensions=(0, 0, 1))


def test_slice_with_strides_and_bounds():
    assert_shape(infer("slice", "f32[10,8]", slice=decode_slice("{[0:10:3], [2:7]}")), "f32[4,5]")
    with pytest.raises(ShapeInferenceError, match="out of bounds"):
        infer("slice", "f32[10,8]", slice=decode_slice("{[0:11], [0:8]}"))
    with pytest.raises(ShapeInferenceError):
        infer("slice", "f32[10,8]", slice=decode_slice("{[0:10]}"))


def test_dynamic_slice_and_update():
    assert_shape(infer("dynamic-slice", "f32[10,8]", "s32[]", "s32[]", dynamic_slice_sizes=(2, 8)), "f32[2,8]")
    with pytest.raises(ShapeInferenceError):
        infer("dynamic-slice", "f32[10,8]", "s32[]", "s32[]", dynamic_slice_sizes=(2, 9))
    with pytest.raises(ShapeInferenceError, match="start indices"):
        infer("dynamic-slice", "f32[10,8]", "s32[]", dynamic_slice_sizes=(2, 8))
    with pytest.raises(ShapeInferenceError, match="integer"):
        infer("dynamic-slice", "f32[10,8]", "f32[]", "f32[]", dynamic_slice_sizes=(2, 8))
    assert_shape(infer("dynamic-update-slice", "f32[10,8]", "f32[2,8]", "s32[]", "s32[]"), "f32[10,8]")
    with pytest.raises(ShapeInferenceError, match="larger"):
        infer("dynamic-update-slice", "f32[10,8]", "f32[2,9]", "s32[]", "s32[]")


def test_pad_with_negative_and_interior_padding():
    assert_shape(infer("pad", "f32[4,5]", "f32[]", padding=decode_padding("1_2_1x-1_0_0")), "f32[10,4]")
    with pytest.raises(ShapeInferenceError, match="scalar"):
        infer("pad", "f32[4,5]", "f32[1]", padding=decode_padding("0_0x0_0"))


def test_concatenate_and_reverse():
    assert_shape(infer("concatenate", "f32[2,3]", "f32[2,5]", "f32[2,1]", dimensions=(1,)), "f32[2,9]")
    with pytest.raises(ShapeInferenceError, match="not the concatenated dimension"):
        infer("concatenate", "f32[2,3]", "f32[3,3]", dimensions=(1,))
    assert_shape(infer("reverse", "s8[3,4]", dimensions=(0, 1)), "s8[3,4]")
    with pytest.raises(ShapeInferenceError):
        infer("reverse", "s8[3,4]", dimensions=(2,))


def test_gather_doc_example():
    # XLA's operation-semantics example: operand [3,3], indices [2] of rows, slices [1,3].
    got = infer("gather", "f32[3,3]", "s32[2]", offset_dims=(1,), collapsed_slice_dims=(0,),
                start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 3))
    assert_shape(got, "f32[2,3]")
    got = infer("gather", "f32[16,11]", "s32[5,7,2]", offset_dims=(2, 3), collapsed_slice_dims=(),
                start_index_map=(0, 1), index_vector_dim=2, slice_sizes=(4, 3))
    assert_shape(got, "f32[5,7,4,3]")
    with pytest.raises(ShapeInferenceError, match="slice size"):
        infer("gather", "f32[3,3]", "s32[2]", offset_dims=(1,), collapsed_slice_dims=(0,),
              start_index_map=(0,), index_vector_dim=1, slice_sizes=(2, 3))


def test_scatter_single_and_variadic():
    attrs = dict(update_window_dims=(1,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
                 index_vector_dim=1, to_apply=comp("f32[]", "f32[]", "f32[]"))
    assert_shape(infer("scatter", "f32[5,3]", "s32[2]", "f32[2,3]", **attrs), "f32[5,3]")
    got = infer("scatter", "f32[5,3]", "s32[5,3]", "s32[2]", "f32[2,3]", "s32[2,3]", **attrs)
    assert got.is_tuple and got.tuple_shapes[1].element_type == "s32"
    with pytest.raises(ShapeInferenceError, match="rank"):
        infer("scatter", "f32[5,3]", "s32[2]", "f32[3]", **attrs)


# ---- reductions, dot, convolution --------------------------------------------------------

def test_reduce_single_and_variadic():
    assert_shape(infer("reduce", "f32[4,5,6]", "f32[]", dimensions=(0, 2)), "f32[5]")
    got = infer("reduce", "f32[4,5]", "s32[4,5]", "f32[]", "s32[]", dimensions=(1,))
    assert got.is_tuple
    assert_shape(got.tuple_shapes[0], "f32[4]")
    assert_shape(got.tuple_shapes[1], "s32[4]")
    with pytest.raises(ShapeInferenceError):
        infer("reduce", "f32[4,5]", "f32[]", dimensions=(2,))
    with pytest.raises(ShapeInferenceError, match="scalar"):
        infer("reduce", "f32[4,5]", "f32[5]", dimensions=(0,))


def test_reduce_window_with_stride_padding_dilation():
    window = decode_window("{size=3x2 stride=2x1 pad=1_1x0_0 lhs_dilate=1x2}")
    # dim 0: 7 + 2 pad = 9, windows of 3 stride 2 -> 4; dim 1: dilated 5 -> 9, window 2 -> 8
    assert_shape(infer("reduce-window", "f32[7,5]", "f32[]", window=window), "f32[4,8]")
    got = infer("reduce-window", "f32[7,5]", "s32[7,5]", "f32[]", "s32[]", window=window)
    assert got.is_tuple and got.tuple_shapes[1].dimensions == (4, 8)
    with pytest.raises(ShapeInferenceError, match="window"):
        infer("reduce-window", "f32[7,5]", "f32[]", window=decode_window("{size=3}"))


def test_select_and_scatter():
    window = decode_window("{size=2x2 stride=2x2}")
    assert_shape(infer("select-and-scatter", "f32[4,6]", "f32[2,3]", "f32[]", window=window), "f32[4,6]")
    with pytest.raises(ShapeInferenceError, match="source"):
        infer("select-and-scatter", "f32[4,6]", "f32[2,2]", "f32[]", window=window)


def test_dot_general_batch_then_free_dims():
    got = infer("dot", "f32[8,2,3,5]", "f32[8,5,7]", lhs_batch_dims=(0,), rhs_batch_dims=(0,),
                lhs_contracting_dims=(3,), rhs_contracting_dims=(1,))
    assert_shape(got, "f32[8,2,3,7]")
    assert_shape(infer("dot", "f32[2,3]", "f32[4]"), "f32[2,3,4]")  # no contraction: outer product
    with pytest.raises(ShapeInferenceError, match="contracting"):
        infer("dot", "f32[2,3]", "f32[4,5]", lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))


def test_convolution_nhwc_with_stride_padding_and_groups():
    dn = decode_dim_labels("b01f_01io->b01f")
    window = decode_window("{size=3x3 stride=2x2 pad=1_1x1_1}")
    got = infer("convolution", "f32[8,32,32,16]", "f32[3,3,16,64]", dim_labels=dn, window=window)
    assert_shape(got, "f32[8,16,16,64]")
    got = infer("convolution", "f32[8,32,32,16]", "f32[3,3,4,64]", dim_labels=dn, window=window,
                feature_group_count=4)
    assert_shape(got, "f32[8,16,16,64]")
    got = infer("convolution", "f32[8,32,32,16]", "f32[3,3,16,64]", dim_labels=dn, window=window,
                batch_group_count=2)
    assert_shape(got, "f32[4,16,16,64]")
    with pytest.raises(ShapeInferenceError, match="input features"):
        infer("convolution", "f32[8,32,32,16]", "f32[3,3,8,64]", dim_labels=dn, window=window)
    out_first = decode_dim_labels("b01f_01io->f01b")
    assert_shape(infer("convolution", "f32[8,32,32,16]", "f32[3,3,16,64]", dim_labels=out_first,
                       window=window), "f32[64,16,16,8]")


# ---- sort, topk, map, control flow -------------------------------------------------------

def test_sort_and_topk():
    assert_shape(infer("sort", "f32[5,4]", dimensions=(1,)), "f32[5,4]")
    got = infer("sort", "f32[5,4]", "s32[5,4]", dimensions=(0,))
    assert got.is_tuple and got.tuple_shapes[1].element_type == "s32"
    with pytest.raises(ShapeInferenceError):
        infer("sort", "f32[5,4]", "s32[4,5]", dimensions=(0,))
    got = infer("topk", "bf16[3,10]", k=4)
    assert got.is_tuple
    assert_shape(got.tuple_shapes[0], "bf16[3,4]")
    assert_shape(got.tuple_shapes[1], "s32[3,4]")
    with pytest.raises(ShapeInferenceError):
        infer("topk", "bf16[3,10]", k=11)


def test_calls_use_the_computation_root():
    assert_shape(infer("map", "f32[4]", "f32[4]", to_apply=comp("pred[]", "f32[]", "f32[]")), "pred[4]")
    assert_shape(infer("call", "f32[4]", to_apply=comp("s32[2]", "f32[4]")), "s32[2]")
    assert_shape(infer("fusion", "f32[4]", calls=comp("f32[4,4]{0,1}", "f32[4]")), "f32[4,4]")
    assert_shape(infer("while", "(s32[], f32[3])"), "(s32[], f32[3])")
    branches = (comp("f32[2]", "f32[]"), comp("f32[2]", "s32[]"))
    assert_shape(infer("conditional", "s32[]", "f32[]", "s32[]", branch_computations=branches), "f32[2]")


def test_parser_infers_omitted_shapes():
    m = hlo_compile.parse_module("""
HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,4] parameter(1)
  d = dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = tuple(d, a)
  ROOT g = get-tuple-element(t), index=1
}
""")
    assert m.entry.instruction("d").shape.dimensions == (2, 4)
    assert m.entry.root.shape.dimensions == (2, 3)


_ODD_SHAPES = ["token[]", "(f32[2], s32[])", "()", "f32[]", "s32[3,4]", "pred[3,4]", "c64[3,4]", "f32[<=5,4]",
               "opaque[]"]


# ops whose operands XLA's verifier does not constrain: a tuple of anything; after-all, outfeed
# and send-done only order side effects (their result is a token whatever they take)
_ACCEPTS_ANY = {"tuple", "after-all", "outfeed", "send-done"}


@pytest.mark.parametrize("opcode", sorted(OPCODES))
def test_rules_fail_in_words_never_crash(opcode):
    """Any operand mix (tokens, tuples, scalars) gives a shape or a ShapeInferenceError."""
    attr_sets = [{}, {"dimensions": (0,), "index": 0, "k": 1, "window": (), "slice": (),
                      "padding": (), "dynamic_slice_sizes": (1, 1)}]
    refused = accepted = 0
    for n in range(4):
        for i in range(len(_ODD_SHAPES)):
            operands = [S(_ODD_SHAPES[(i + j) % len(_ODD_SHAPES)]) for j in range(n)]
            for attrs in attr_sets:
                try:
                    shape = infer_shape(opcode, operands, attrs)
                except ShapeInferenceError as e:
                    assert str(e).strip(), f"{opcode}: an error without words"
                    refused += 1
                else:
                    assert isinstance(shape, Shape), f"{opcode} gave {shape!r}, not a Shape"
                    accepted += 1
    assert refused + accepted == 4 * len(_ODD_SHAPES) * len(attr_sets)
    assert refused or opcode in _ACCEPTS_ANY, f"{opcode} accepted every operand mix, tokens and tuples included"
    assert not (refused and opcode == "tuple")


def test_empty_window_is_a_convolution_without_spatial_dimensions():
    """XLA prints ``window={}`` for a convolution with no spatial dimensions (its optimized
    module of a rank-2 convolution holds one) and parses it back."""
    assert decode_window("{}") == ()
    assert decode_window("{ }") == ()
    with pytest.raises(ValueError, match="requires size="):
        decode_window("{stride=2}")
    text = """HloModule m
ENTRY e {
  a = f32[1,2] parameter(0)
  b = f32[2,2] parameter(1)
  ROOT c = f32[1,2] convolution(a, b), window={}, dim_labels=bf_io->bf
}"""
    import numpy as np
    from hlo_compile import parse_module
    from hlo_compile.interpreter import evaluate_module
    x, w = np.array([[1.0, 2.0]], np.float32), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    np.testing.assert_allclose(evaluate_module(parse_module(text), [x, w]), x @ w)
