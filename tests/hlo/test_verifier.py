"""The verifier: unit cases, the invalid corpus it must reject, the valid corpus it must accept."""
from __future__ import annotations

from pathlib import Path

import pytest

import hlo_compile
from hlo_compile.hlo.errors import HloError, HloParseError, HloVerifyError
from conftest import corpus_root


def parse(text: str):
    return hlo_compile.parse_module(text, "t.hlo")


def rejects(text: str, *fragments: str) -> HloVerifyError:
    with pytest.raises(HloVerifyError) as info:
        parse(text)
    for f in fragments:
        assert f in info.value.message, f"{f!r} not in {info.value.message!r}"
    assert info.value.location is not None and info.value.location.filename == "t.hlo"
    return info.value


ADD = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
"""


# ---- declared versus inferred shapes -----------------------------------------------------

def test_declared_shape_mismatch_names_instruction_opcode_and_shapes():
    e = rejects("""
HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  ROOT n = f32[3,2] negate(a)
}""", "n (negate)", "f32[3,2]", "f32[2,3]")
    assert e.location.line == 5


def test_layouts_are_ignored_but_types_are_not():
    parse("""
HloModule m
ENTRY e {
  a = f32[2,3]{0,1} parameter(0)
  ROOT n = f32[2,3]{1,0} negate(a)
}""")
    rejects("""
HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  ROOT n = f16[2,3] negate(a)
}""", "f16[2,3]")


def test_dot_and_convolution_may_choose_their_element_type():
    parse("""
HloModule m
ENTRY e {
  a = bf16[2,3] parameter(0)
  b = bf16[3,4] parameter(1)
  ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    rejects("""
HloModule m
ENTRY e {
  a = bf16[2,3] parameter(0)
  b = bf16[3,4] parameter(1)
  ROOT d = f32[2,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""", "f32[2,5]", "f32[2,4]")


def test_operand_count():
    rejects("""
HloModule m
ENTRY e {
  a = f32[2] parameter(0)
  ROOT n = f32[2] add(a)
}""", "expects 2 operand")


def test_inference_failure_is_reported():
    rejects("""
HloModule m
ENTRY e {
  a = f32[4,5] parameter(0)
  ROOT s = f32[4,5] slice(a), slice={[0:4], [0:6]}
}""", "s (slice)", "out of bounds")


def test_tokens_tuples_and_dynamic_shapes_verify():
    parse("""
HloModule m
ENTRY e {
  a = f32[<=4,3] parameter(0)
  t = token[] after-all()
  d = f32[<=4,3] add-dependency(a, t)
  n = f32[<=4,3] negate(d)
  s = s32[] get-dimension-size(n), dimensions={0}
  tup = (f32[<=4,3], s32[], token[]) tuple(n, s, t)
  ROOT g = token[] get-tuple-element(tup), index=2
}""")


# ---- declared-shape ops ------------------------------------------------------------------

def test_reshape_element_count():
    rejects("""
HloModule m
ENTRY e {
  a = f32[4,8] parameter(0)
  ROOT r = f32[31] reshape(a)
}""", "expects the same number of elements in result shape f32[31] and operand shape f32[4,8]")


def test_broadcast_dimensions():
    parse("""
HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  ROOT b = f32[2,3] broadcast(a), dimensions={1}
}""")
    rejects("""
HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  ROOT b = f32[2,3] broadcast(a), dimensions={0}
}""", "broadcast")
    rejects("""
HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  ROOT b = f32[2,3] broadcast(a)
}""", "dimensions")


def test_convert_and_bitcast_convert():
    parse("""
HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  c = s32[2,3] convert(a)
  b = u8[2,3,4] bitcast-convert(a)
  ROOT w = f32[2,3] bitcast-convert(b)
}""")
    rejects("""
HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  ROOT c = s32[3,2] convert(a)
}""", "convert")
    rejects("""
HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  ROOT b = u8[2,3] bitcast-convert(a)
}""", "bitcast-convert")


# ---- called computations -----------------------------------------------------------------

def test_reducer_signature():
    parse("HloModule m\n" + ADD + """
ENTRY e {
  a = f32[4,5] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(a, z), dimensions={1}, to_apply=add
}""")
    rejects("""
HloModule m
one {
  x = f32[] parameter(0)
  ROOT n = f32[] negate(x)
}
ENTRY e {
  a = f32[4,5] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(a, z), dimensions={1}, to_apply=one
}""", "must take 2 parameters")


def test_while_body_and_condition():
    loop = """
body {
  p = (s32[], f32[3]) parameter(0)
  ROOT g = f32[3] get-tuple-element(p), index=1
}
cond {
  p = (s32[], f32[3]) parameter(0)
  ROOT c = pred[] constant(true)
}
"""
    rejects("HloModule m\n" + loop + """
ENTRY e {
  s = (s32[], f32[3]) parameter(0)
  ROOT w = (s32[], f32[3]) while(s), condition=cond, body=body
}""", "while body body returns f32[3]")
    parse("HloModule m\n" + loop.replace("ROOT g = f32[3] get-tuple-element(p), index=1", "ROOT g = (s32[], f32[3]) copy(p)")
          + """
ENTRY e {
  s = (s32[], f32[3]) parameter(0)
  ROOT w = (s32[], f32[3]) while(s), condition=cond, body=body
}""")


def test_conditional_index_and_branches():
    branches = """
b0 {
  p = f32[4] parameter(0)
  ROOT r = f32[4] ceil(p)
}
b1 {
  p = f32[4] parameter(0)
  ROOT r = f32[4] floor(p)
}
"""
    parse("HloModule m\n" + branches + """
ENTRY e {
  i = s32[] parameter(0)
  x = f32[4] parameter(1)
  ROOT c = f32[4] conditional(i, x, x), branch_computations={b0, b1}
}""")
    rejects("HloModule m\n" + branches + """
ENTRY e {
  i = s32[2] parameter(0)
  x = f32[4] parameter(1)
  ROOT c = f32[4] conditional(i, x, x), branch_computations={b0, b1}
}""", "The first operand must be a scalar of PRED or S32")
    rejects("HloModule m\n" + branches + """
ENTRY e {
  i = s32[] parameter(0)
  x = f32[4] parameter(1)
  ROOT c = f32[4] conditional(i, x), branch_computations={b0, b1}
}""", "2 branches but 1 branch operands")


def test_fusion_parameters_must_match_operands():
    fused = """
fused {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  ROOT a = f32[4] add(p0, p1)
}
"""
    parse("HloModule m\n" + fused + """
ENTRY e {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x, x), kind=kLoop, calls=fused
}""")
    rejects("HloModule m\n" + fused + """
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[5] parameter(1)
  ROOT f = f32[4] fusion(x, y), kind=kLoop, calls=fused
}""", "fused computation fused parameter 1 has shape f32[4] but is given f32[5]")


def test_sort_comparator():
    rejects("HloModule m\n" + ADD + """
ENTRY e {
  a = f32[4] parameter(0)
  ROOT s = f32[4] sort(a), dimensions={0}, to_apply=add
}""", "sort comparator add must return pred[]")


# ---- corpus ------------------------------------------------------------------------------

# parser_tests_invalid files that the verifier (rather than the parser) must reject, with a
# fragment of XLA's expected message where XLA's test checks one.
INVALID_FOR_VERIFIER = {
    "test__AllGatherEmptyDimensions.hlo": "dimension",
    "test__CheckIndexedConditionalDimension.hlo": "The first operand must be a scalar",
    "test__CheckIndexedConditionalElementType.hlo": "The first operand must be a scalar of PRED or S32",
    "test__ConditionalNoOperands.hlo": "operand",
    "test__NestedBroadcastWithoutDimensionsAttribute.hlo": "dimensions",
    "test__NontupleInfeed.hlo": "infeed must have a non-empty tuple shape",
    "test__ParseDynamicReshapeDimSizeOperandCountMismatch.hlo":
        "expects one dim size operand per result dimension; got 1 for 2 result dimensions",
    "test__ParseDynamicReshapeElementCountMismatch.hlo":
        "expects the same number of elements in result shape f32[4,<=7] and operand shape f32[4,<=8]",
    "test__ParseDynamicReshapeMissingOperands.hlo": "DynamicReshape requires at least one operand.",
    "test__ParseReshapeElementCountMismatch.hlo":
        "expects the same number of elements in result shape f32[31] and operand shape f32[4,8]",
    "test__RecvNonTupleShape.hlo": "recv",
    "test__ReduceScatterEmptyDimensions.hlo": "dimension",
    "test__RngBitGeneratorNoOperands.hlo": "operand",
    "test__AsyncDoneZeroOperandsRejected.hlo": "operand",
    "test__AsyncUpdateZeroOperandsRejected.hlo": "operand",
}

# Corpus files outside parser_tests_invalid/ that XLA's own verifier rejects: they come from
# tests that parse without verifying (parser-only tests, text tools, translation tests).
XLA_UNVERIFIED = {
    "xla/parser_tests/singleop__CanonicalOpWithNested.hlo": "while condition takes 2 parameters, returns f32",
    "xla/parser_tests/test__AsyncDoneNoAsyncStart.hlo": "tuple declared ((f32[2,3]),...) from f32[2,3]",
    "xla/parser_tests/test__AsyncUpdateAndAsyncDoneNoAsyncStart.hlo": "same tuple as above",
    "xla/parser_tests/test__DesugarParsingTest_CallStart_LateBinding_WithLayout.hlo":
        "tuple (s32[1024]) of an s32[]",
    "xla/repo/xla/hlo/tools/tests/generate_hlo_test_checks_test_input.hlo": "call passes f32[4] to f32[] params",
    "xla/repo/xla/hlo/tools/tests/generate_hlo_test_checks_test_output.hlo": "same as the input file",
    "xla/repo/xla/hlo/transforms/tests/operand_upcaster.hlo": "dot of two [8] without contraction declared [8]",
    "xla/repo/xla/hlo/transforms/tests/rewrite_bf16_conv_to_onednn.hlo": "convolution batch/spatial mismatch",
    "xla/repo/xla/hlo/translate/hlo_to_mhlo/tests/import.hlo": "convolution window size 3, kernel size 2",
    "xla/repo/xla/hlo/translate/hlo_to_mhlo/tests/while.hlo": "broadcast f32[1] to f32[3] with dimensions={0}",
    "xla/repo/xla/tools/print_indexing_test.hlo": "fusion passes s32[1024] to an s32[] parameter",
    "xla/repo/xla/tools/tests/data/invalid_concat.hlo": "deliberately invalid concatenate",
}


def _valid_files() -> list[Path]:
    root = corpus_root()
    if root is None:
        return []
    files = sorted((root / "xla" / "repo").rglob("*.hlo"))
    files += sorted((root / "xla" / "parser_tests").glob("*.hlo"))
    files += sorted((root / "jax").glob("*/*.hlo"))
    return files


def _rel(path: Path) -> str:
    root = corpus_root()
    return str(path.relative_to(root)) if root else str(path)


@pytest.mark.parametrize("name", sorted(INVALID_FOR_VERIFIER))
def test_invalid_corpus_file_is_rejected_with_location(corpus, name):
    path = corpus / "xla" / "parser_tests_invalid" / name
    text = path.read_text()
    with pytest.raises(HloError) as info:
        hlo_compile.parse_modules(text, str(path))
    err = info.value
    assert INVALID_FOR_VERIFIER[name] in err.message
    assert err.location is not None and err.location.filename == str(path)
    assert 1 <= err.location.line <= text.count("\n") + 1


# Corpus files that are not HLO text, which XLA's own parser refuses too (checked through
# ../shared/tools/xla_ref.py): lit tests that start with ``# RUN:`` lines (hlo-translate strips
# them), and a parser-test template with its ``%s`` placeholder left in.
NOT_HLO_TEXT = {"xla/parser_tests/test__AllReduceWithMode.hlo": "a '%s' template placeholder"}


def _not_hlo_text(rel: str, text: str) -> str | None:
    if text.lstrip().startswith("# RUN:"):
        return "a lit test with '# RUN:' lines"
    return NOT_HLO_TEXT.get(rel)


@pytest.mark.parametrize("path", _valid_files(), ids=_rel)
def test_valid_corpus_file_verifies(corpus, path):
    rel = _rel(path)
    text = path.read_text()
    why_not = _not_hlo_text(rel, text)
    if why_not is not None:
        with pytest.raises(HloParseError):
            hlo_compile.parse_modules(text, str(path))
        return
    try:
        hlo_compile.parse_modules(text, str(path))
    except HloVerifyError as e:
        if rel in XLA_UNVERIFIED:
            return
        raise AssertionError(f"verifier rejected a valid file: {e}") from None
    assert rel not in XLA_UNVERIFIED, \
        f"{rel} is listed as unverifiable by XLA but verified; the list is stale"


def test_mixed_precision_elementwise_is_accepted():
    parse("""
HloModule m
ENTRY e {
  a = bf16[4] parameter(0)
  b = f32[4] parameter(1)
  ROOT s = bf16[4] add(a, b)
}""")
    rejects("""
HloModule m
ENTRY e {
  a = bf16[4] parameter(0)
  b = f32[4] parameter(1)
  ROOT s = s32[4] add(a, b)
}""", "s32[4]")


@pytest.mark.parametrize("line", [
    "ROOT r = f32[2] convert(t)",
    "ROOT r = f32[2] reshape(tok)",
    "ROOT r = f32[2] broadcast(t), dimensions={0}",
    "ROOT r = u8[4] bitcast-convert(tok)",
    "ROOT r = f32[2] sort(t), dimensions={0}, to_apply=lt",
    "ROOT r = f32[2] dynamic-reshape(t, tok)",
    "ROOT r = f32[2] negate(tok)",
    "ROOT r = f32[2] reduce(t, tok), dimensions={0}, to_apply=lt",
    "ROOT r = f32[2] get-tuple-element(tok), index=0",
    "ROOT r = f32[2] map(t), to_apply=lt",
    "ROOT r = f32[2] conditional(t)",
])
def test_odd_operands_give_errors_not_crashes(line):
    with pytest.raises(HloVerifyError):
        parse("""
HloModule m
lt {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT c = pred[] compare(x, y), direction=LT
}
ENTRY e {
  t = (f32[2], s32[]) parameter(0)
  tok = token[] after-all()
  """ + line + "\n}")
