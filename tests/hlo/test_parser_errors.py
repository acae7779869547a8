"""Malformed HLO gives compiler-style errors: file:line:col, the line, a caret, words."""
from __future__ import annotations

import subprocess
import sys

import pytest

import hlo_compile
from hlo_compile import HloError, HloParseError

GOOD = """HloModule m

ENTRY main {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}
"""


def _error(text: str) -> HloError:
    with pytest.raises(HloError) as info:
        hlo_compile.parse_module(text, "bad.hlo")
    return info.value


@pytest.mark.parametrize("text, line, column, words", [
    (GOOD.replace("negate(p)", "negate(p"), 6, 1, "unexpected"),
    # `garbage` reads as the name of a next instruction, so the error is at what follows it.
    (GOOD.replace("parameter(0)", "parameter(0) garbage"), 5, 3, "expected '='"),
    (GOOD.replace("negate(p)", "negate(q)"), 5, 26, "instruction does not exist: q"),
    (GOOD.replace("negate(p)", "frobnicate(p)"), 5, 19, "Unknown opcode: frobnicate"),
    (GOOD.replace("ROOT n", "ROOT p"), 5, 8, "defined twice"),
    (GOOD.replace("  p = f32[4]", "  ROOT p = f32[4]"), 5, 8, "only one ROOT"),
    (GOOD.replace("negate(p)", "negate(p), dimensions={0}"), 5, 30, 'unexpected attribute "dimensions"'),
    (GOOD.replace("p = f32[4] parameter(0)", "s1 = f32[4] parameter(0)"), 4, 3, "element type"),
    ("HloModule m\nENTRY e {\n  ROOT c = u8[] constant(300)\n}\n", 3, 26, "out of range"),
    ("HloModule m\nENTRY e {\n  ROOT c = f32[2] constant({1, 2, 3})\n}\n", 3, 36, "expects 2 elements"),
    ("HloModule m\nENTRY e {\n  ROOT c = f32[2]{0,1} constant({1, 2})\n}\n", 3, 12, "minor_to_major"),
    (GOOD.replace("/", "") + "/* never closed", 7, 1, "unterminated /* comment"),
])
def test_error_location_and_message(text: str, line: int, column: int, words: str) -> None:
    e = _error(text)
    assert isinstance(e, HloError)
    assert e.location is not None
    assert (e.location.filename, e.location.line, e.location.column) == ("bad.hlo", line, column), str(e)
    assert words in e.message
    rendered = str(e).splitlines()
    assert rendered[0].startswith(f"bad.hlo:{line}:{column}: error: ")
    assert rendered[1] == text.splitlines()[line - 1]
    assert rendered[2] == " " * (column - 1) + "^"


def test_expected_tokens_are_words_not_lark_names() -> None:
    e = _error("HloModule m\nENTRY e {\n  ROOT x = f32[] add(\n")
    assert "end of input" in e.message
    for lark_name in ("__ANON", "$END", "LPAR", "RPAR", "NAME_COLON"):
        assert lark_name not in e.message


def test_shape_mismatch_names_instruction_and_line() -> None:
    text = GOOD.replace("ROOT n = f32[4] negate(p)", "ROOT n = f32[5] negate(p)")
    e = _error(text)
    assert e.location is not None and e.location.line == 5
    assert "n" in e.message and "f32[5]" in e.message


def test_parse_shape_public_api() -> None:
    s = hlo_compile.parse_shape("(f32[2,3]{0,1}, s32[<=4])")
    assert s.is_tuple and s.tuple_shapes[0].minor_to_major == (0, 1)
    assert s.tuple_shapes[1].dynamic_dimensions == (True,)
    with pytest.raises(HloParseError):
        hlo_compile.parse_shape("f32[2")


def test_split_input_file_keeps_file_line_numbers() -> None:
    text = GOOD + "// -----\n" + GOOD.replace("negate(p)", "negate(zz)")
    with pytest.raises(HloError) as info:
        hlo_compile.parse_modules(text, "two.hlo")
    assert info.value.location.line == 5 + 7
    assert len(hlo_compile.parse_modules(GOOD + "// -----\n" + GOOD, "two.hlo")) == 2


def test_cli_reports_errors_without_traceback(tmp_path) -> None:
    bad = tmp_path / "bad.hlo"
    bad.write_text(GOOD.replace("negate(p)", "negate(q)"))
    proc = subprocess.run([sys.executable, "-m", "hlo_compile.cli.compile", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{bad}:5:26: error: instruction does not exist: q" in proc.stderr


def test_cli_missing_file_is_exit_2(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hlo_compile.cli.compile", str(tmp_path / "nope.hlo")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_dump_names_stay_inside_the_dump_directory(tmp_path) -> None:
    from hlo_compile.driver.pipeline import safe_file_name
    for hostile in ("../../etc/passwd", "/abs/path", "..", "a/b\\c", ""):
        name = safe_file_name(hostile)
        assert "/" not in name and "\\" not in name and not name.startswith(".")
        assert (tmp_path / name).resolve().parent == tmp_path.resolve()
