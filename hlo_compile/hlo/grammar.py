"""Loads ``hlo_compile/grammars/hlo.lark`` (shipped as ``hlo_compile.grammars``) and builds the LALR parser.

The grammar file marks a few terminals as ``/@NAME@/`` placeholders: their regexes
(balanced ``{...}``/``(...)`` blocks, the element-type alternation) are generated here so the
grammar stays readable. Balanced blocks are matched to a fixed nesting depth with possessive
quantifiers, so a failed match is linear in the text it scans (no catastrophic backtracking).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from lark import Lark

from .element_types import ELEMENT_TYPES, TYPE_ALIASES

BLOCK_DEPTH = 16

_STRING = r'"(?:[^"\\]|\\.)*+"|\'(?:[^\'\\]|\\.)*+\''
_COMMENT = r"/\*(?:[^*]|\*(?!/))*+\*/"


def _balanced(open_: str, close: str, depth: int) -> str:
    """Regex for an ``open_ ... close`` block with strings and comments, nested ``depth`` deep."""
    o, c = re.escape(open_), re.escape(close)
    alternatives = [rf"[^{o}{c}\"'/]++", _STRING, _COMMENT, "/"]
    if depth > 0:
        alternatives.append(_balanced(open_, close, depth - 1))
    return rf"{o}(?:" + "|".join(alternatives) + rf")*+{c}"


def _type_names() -> str:
    names = sorted(list(ELEMENT_TYPES) + list(TYPE_ALIASES), key=len, reverse=True)
    return "(?:" + "|".join(re.escape(n) for n in names) + ")"


_NAME = r"%?[A-Za-z_][A-Za-z0-9_.\-]*+(?:#-?[A-Za-z0-9_]+)*"
# An array shape with its optional layout. As in XLA, a `{` after the dims starts a layout
# only if an integer or ':' follows it.
SHAPE_RE = _type_names() + r"\[[^\]\n]*\](?:\{(?=\s*[0-9:])[^{}\n]*\})?"


_OPCODE = r"[a-z][a-z0-9\-]*+"
_INT = r"-?\d++"
_SCALAR_VALUE = r"[^\s,{}()\"'\[\]=]++(?:\[[^\]\n]*\](?:\{[^{}\n]*\})?)?"
_IOTA_LIST = r"\[[0-9,\s]*\]\s*<=\s*\[[0-9,\s]*\](?:T\([0-9,\s]*\))?"
_MESH = r"mesh\[[^\]\n]*\](?:\s*\{[^{}\n]*\})?"


def placeholder_regexes() -> dict[str, str]:
    paren = _balanced("(", ")", BLOCK_DEPTH)
    brace = _balanced("{", "}", BLOCK_DEPTH)
    # custom-call's `literal=s32[2]{0} {1, 2}` / `literal=f32[] 0.1`: a shape, then a literal.
    shaped_literal = SHAPE_RE + r"\s++(?:" + _balanced("{", "}", 4) + r"|-?[A-Za-z0-9_.]+(?:\(0x[0-9a-fA-F]+\))?)"
    value = "(?:" + "|".join([shaped_literal, brace, paren, _STRING, _IOTA_LIST, _MESH, _SCALAR_VALUE]) + ")"
    item = rf"(?:{_COMMENT}\s*+)?(?:{SHAPE_RE}\s++)?{_NAME}"
    return {
        "SHAPE": SHAPE_RE,
        # A long-form operand: shape and name. Not a nested instruction (`f32[2] add(...)`).
        "TYPED_OPERAND": SHAPE_RE + r"\s++" + _NAME + r"(?![A-Za-z0-9_.\-#(]|\s*\()",
        "CONSTANT": r"constant\s*" + paren,
        # Leading whitespace is part of the coarse tokens: one lexer match instead of two.
        "INSTR_HEAD": rf"\s*+(?:ROOT\s++)?{_NAME}\s*=\s*{SHAPE_RE}\s*(?!constant\b){_OPCODE}\(",
        # A list of plain operands (names, optionally with shapes) and the closing ')'.
        "OPERANDS": rf"\s*(?:{item}\s*(?:,\s*{item}\s*)*+)?\)",
        "ATTRIBUTE": r"\s*+,\s*[A-Za-z_][A-Za-z0-9_.\-]*=\s*" + value,
        # XLA's stack-frame tables: four keyword-headed sections of `id "string"` or
        # `id {fields}` lines, kept verbatim.
        "STACK_FRAMES": r"FileNames(?:\s++(?:\d+\s++(?:" + _STRING + r"|\{[^{}]*+\})|FunctionNames\b|FileLocations\b|StackFrames\b))*+",
    }


def grammar_path() -> Path:
    """``hlo_compile/grammars/hlo.lark`` (package data, in a checkout and in a wheel)."""
    path = Path(__file__).resolve().parents[1] / "grammars" / "hlo.lark"
    if not path.is_file():
        raise FileNotFoundError(f"the HLO grammar is missing ({path}); reinstall hlo-compile")
    return path


def grammar_text() -> str:
    text = grammar_path().read_text(encoding="utf-8")
    for name, regex in placeholder_regexes().items():
        text = text.replace(f"/@{name}@/", "/" + regex.replace("/", "\\/") + "/")
    return text


def _parser_cache_file(text: str) -> str | bool:
    """Where Lark keeps the analysed grammar between runs (building the LALR tables takes
    longer than parsing a small module): ``lark-<hash of the grammar and Lark's version>.pickle``
    in the compile cache directory (``$HLO_COMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo-compile``,
    else ``~/.cache/hlo-compile``; the same rule as ``kernel_cache.default_cache_dir``, which
    ``hlo/`` may not import). False (no cache) when the directory cannot be made."""
    import hashlib
    import os

    import lark
    root = os.environ.get("HLO_COMPILE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hlo-compile")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        return False
    digest = hashlib.sha256(f"{lark.__version__}\n{text}".encode()).hexdigest()[:24]
    return os.path.join(root, f"lark-{digest}.pickle")


@functools.lru_cache(maxsize=None)
def build_parser(transformer_cls: type) -> Lark:
    text = grammar_text()
    # Lark checks the file against the grammar and options itself and rebuilds on a mismatch
    # or a damaged file; the transformer is not part of what it stores
    return Lark(text, parser="lalr", lexer="contextual", transformer=transformer_cls(),
                maybe_placeholders=False, propagate_positions=False, cache=_parser_cache_file(text),
                start=["start", "computation_body"])
