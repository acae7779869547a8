"""Shared helpers for the indexing tests."""
from __future__ import annotations

import re

import hlo_compile
from hlo_compile.indexing.fusion import instruction_input_to_output, instruction_output_to_input

MAX = """max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_computation {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def module(entry_body: str, extra: str = ""):
    text = "HloModule m\n" + MAX + extra + "\nENTRY e {\n" + entry_body + "\n}\n"
    return hlo_compile.parse_module(text, "test.hlo")


def root(entry_body: str, extra: str = ""):
    return module(entry_body, extra).entry.root


def squash(text: str) -> str:
    """XLA's MatchIndexingString ignores whitespace; the seed document also drops or adds
    a few commas at line ends, so commas are ignored too."""
    return re.sub(r"[\s,]", "", text)


def texts(entry) -> list[str] | None:
    return None if entry is None else sorted(m.to_text() for m in entry)


def out_to_in(inst, operand: int, output: int = 0) -> list[str] | None:
    return texts(instruction_output_to_input(inst, output)[operand])


def in_to_out(inst, operand: int, output: int = 0) -> list[str] | None:
    return texts(instruction_input_to_output(inst, operand)[output])


def assert_maps(actual: list[str] | None, *expected: str) -> None:
    assert actual is not None, "unknown indexing"
    assert sorted(squash(a) for a in actual) == sorted(squash(e) for e in expected), actual
