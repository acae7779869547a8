"""The parser against XLA's own HLO: every valid file parses, every invalid one is rejected
with an HloError, canonical files print back byte for byte, and printing reaches a fixpoint."""
from __future__ import annotations

from pathlib import Path

import pytest

import hlo_compile
from hlo_compile import HloError

# Files under the corpus that are not HLO text we should accept, with the reason.
NOT_HLO_TEXT = {
    "xla/hlo/translate/hlo_to_mhlo/tests/dynamic_param.hlo": "HloModuleProto text format (pbtxt), not HLO text",
    "xla/hlo/translate/hlo_to_mhlo/tests/module_attributes.hlo": "HloModuleProto text format (pbtxt)",
    "xla/hlo/translate/hlo_to_mhlo/tests/simple.hlo": "HloModuleProto text format (pbtxt)",
    "xla/hlo/translate/hlo_to_mhlo/tests/spmd_module_sharding.hlo": "HloModuleProto text format (pbtxt)",
    "xla/hlo/translate/hlo_to_mhlo/tests/stacktrace_to_location.hlo": "HloModuleProto text format (pbtxt)",
    "test__AllReduceWithMode.hlo": "a printf template: XLA's test substitutes '%s' before parsing",
}


def _valid_files(corpus: Path) -> list[Path]:
    root = corpus / "xla"
    files = sorted((root / "parser_tests").glob("*.hlo")) + sorted((root / "repo").rglob("*.hlo"))
    return files


def _key(path: Path) -> str:
    parts = path.as_posix()
    return parts.split("/repo/", 1)[1] if "/repo/" in parts else path.name


def test_every_valid_corpus_file_parses(corpus: Path) -> None:
    failures = []
    files = _valid_files(corpus)
    assert len(files) > 700
    for f in files:
        if _key(f) in NOT_HLO_TEXT:
            continue
        try:
            hlo_compile.parse_modules(f.read_text(), str(f), verify=False)
        except HloError as e:
            failures.append(f"{_key(f)}: {str(e).splitlines()[0]}")
    assert not failures, f"{len(failures)} files fail:\n" + "\n".join(failures[:30])


def test_excluded_files_really_are_not_hlo_text(corpus: Path) -> None:
    for f in _valid_files(corpus):
        if _key(f) in NOT_HLO_TEXT:
            with pytest.raises(HloError):
                hlo_compile.parse_modules(f.read_text(), str(f))


def test_every_invalid_file_raises_hlo_error(corpus: Path) -> None:
    files = sorted((corpus / "xla" / "parser_tests_invalid").glob("*.hlo"))
    assert len(files) == 107
    accepted, crashed = [], []
    for f in files:
        try:
            hlo_compile.parse_modules(f.read_text(), str(f))
            accepted.append(f.name)
        except HloError as e:
            assert e.location is None or e.location.line >= 1
        except Exception as e:  # noqa: BLE001 - any other exception is the bug we look for
            crashed.append(f"{f.name}: {e!r}")
    assert not crashed, "\n".join(crashed)
    assert not accepted, f"{len(accepted)} invalid files accepted: {accepted}"


def _roundtrip_files(corpus: Path) -> list[Path]:
    return sorted((corpus / "xla" / "parser_tests").glob("roundtrip_*.hlo"))


def test_roundtrip_files_print_back_byte_identical(corpus: Path) -> None:
    files = _roundtrip_files(corpus)
    assert len(files) == 175
    differ = []
    for f in files:
        text = f.read_text()
        form = "long" if f.name.startswith("roundtrip_long") else "short"
        module = hlo_compile.parse_module(text, str(f), verify=False)
        if module.to_text(form) != text:
            differ.append(f.name)
    assert not differ, f"{len(differ)} files print differently: {differ}"


@pytest.mark.slow
def test_printing_reaches_a_fixpoint(corpus: Path) -> None:
    files = _valid_files(corpus) + sorted((corpus / "jax").glob("*/*.hlo"))
    not_fixed = []
    for f in files:
        if _key(f) in NOT_HLO_TEXT:
            continue
        for module in hlo_compile.parse_modules(f.read_text(), str(f), verify=False):
            for form in ("long", "short"):
                once = module.to_text(form)
                twice = hlo_compile.parse_module(once, f"{f.name}.{form}", verify=False).to_text(form)
                if once != twice:
                    not_fixed.append(f"{_key(f)} ({form})")
    assert not not_fixed, f"{len(not_fixed)}: {not_fixed[:20]}"


def test_jax_corpus_parses(corpus: Path) -> None:
    files = sorted((corpus / "jax").glob("*/*.hlo"))
    assert files
    for f in files:
        text = f.read_text()
        module = hlo_compile.parse_module(text, str(f), verify=False)
        entry = module.entry
        # the ROOT is the instruction the text marks so, and every instruction line was kept
        marked = [ln.split("=")[0].split()[-1].lstrip("%") for ln in _entry_lines(text) if ln.lstrip().startswith("ROOT ")]
        assert marked == [entry.root.name], f"{f}: ROOT {entry.root.name}, text marks {marked}"
        assert len(entry.instructions) == len(_entry_lines(text)), f.name
        # and it prints back to a module that parses to the same text
        again = hlo_compile.parse_module(module.to_text(), f"{f}.printed", verify=False)
        assert again.to_text() == module.to_text(), f.name


def _entry_lines(text: str) -> list[str]:
    """The instruction lines of the ENTRY computation's body."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ENTRY "))
    body = []
    for ln in lines[start + 1:]:
        if ln.strip() == "}":
            break
        if "=" in ln and not ln.strip().startswith("//"):
            body.append(ln)
    return body


# XLA's non-roundtrip cases whose printed form we do not reproduce exactly, and why.
NONROUNDTRIP_DIFFERENCES = {
    "CompactGteNameCollision": "instruction order: XLA places the generated get-tuple-element before "
                               "a later parameter; we insert it where it is first used",
}


def test_nonroundtrip_inputs_print_as_expected_outputs(corpus: Path) -> None:
    """XLA's non-roundtrip cases (nested instructions, compact GTE, implied attributes): the
    input, printed in the short form, equals the expected output modulo whitespace."""
    root = corpus / "xla" / "parser_tests"
    inputs = sorted(root.glob("nonroundtrip__*__input.hlo"))
    assert len(inputs) == 11
    mismatched = set()
    for f in inputs:
        expected = (root / f.name.replace("__input", "__expected_output")).read_text()
        got = hlo_compile.parse_module(f.read_text(), str(f)).to_text("short")
        if "".join(got.split()) != "".join(expected.split()):
            mismatched.add(f.name.split("__")[1])
    assert mismatched == set(NONROUNDTRIP_DIFFERENCES)
