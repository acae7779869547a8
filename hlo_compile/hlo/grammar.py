"""Loads ``hlo_compile/grammars/hlo.lark`` (shipped as ``hlo_compile.grammars``) and builds the LALR parser.

The grammar file marks a few terminals as ``/@NAME@/`` placeholders: their regexes
(balanced ``{...}``/``(...)`` blocks, the element-type alternation) are generated here so the
grammar stays readable. Balanced blocks are matched to a fixed nesting depth with possessive
quantifiers, so a failed match is linear in the text it scans (no catastrophic backtracking).
"""
from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .element_types import ELEMENT_TYPES, TYPE_ALIASES

if TYPE_CHECKING:  # pragma: no cover
    from lark import Lark

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


def _cache_root() -> str | None:
    """The compile cache directory (``$HLO_COMPILE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hlo-compile``,
    else ``~/.cache/hlo-compile``; the same rule as ``kernel_cache.default_cache_dir``, which
    ``hlo/`` may not import), made if missing; None when it cannot be made."""
    root = os.environ.get("HLO_COMPILE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "hlo-compile")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        return None
    return root


def _digest(lark_version: str, text: str) -> str:
    import hashlib
    return hashlib.sha256(f"{lark_version}\n{text}".encode()).hexdigest()[:24]


def _parser_cache_file(text: str) -> str | bool:
    """Where Lark keeps the analysed grammar between runs (building the LALR tables takes
    longer than parsing a small module): ``lark-<hash of the grammar and Lark's version>.pickle``
    in the compile cache directory (``_cache_root``). False (no cache) when the directory
    cannot be made."""
    import lark
    root = _cache_root()
    if root is None:
        return False
    return os.path.join(root, f"lark-{_digest(lark.__version__, text)}.pickle")


@functools.lru_cache(maxsize=None)
def build_parser(transformer_cls: type) -> Lark:
    from lark import Lark
    text = grammar_text()
    # Lark checks the file against the grammar and options itself and rebuilds on a mismatch
    # or a damaged file; the transformer is not part of what it stores
    return Lark(text, parser="lalr", lexer="contextual", transformer=transformer_cls(),
                maybe_placeholders=False, propagate_positions=False, cache=_parser_cache_file(text),
                start=["start", "computation_body"])


# ---- the fast path's terminals, without Lark ------------------------------------------------

# what ``fast_path_terminals`` keeps (bump when it or the parser's Lark options change)
_TERMINALS_FORMAT = "lalr-contextual-1"
_VERSION_LINE = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*["']([^"'\n]+)["']""", re.M)


def _lark_version_unimported() -> str | None:
    """Lark's ``__version__`` read from its ``__init__.py`` without importing it (the import
    costs tens of milliseconds); None where it cannot be read so (then Lark is imported)."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("lark")
        if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
            return None
        with open(spec.origin, encoding="utf-8") as f:
            m = _VERSION_LINE.search(f.read())
    except (OSError, ImportError, ValueError, UnicodeDecodeError):
        return None
    return m.group(1) if m else None


def terminals_of(lark: Lark) -> dict[str, Any]:
    """What the fast path (``fast_path.FastPath``) takes from the built parser: ``order``, the
    terminals' names in Lark's BasicLexer order (lark/lexer.py: priority, then width, then
    pattern length, then name; the first that matches wins); ``regex``, each terminal's
    regular expression as Lark matches it; ``ignored``, the terminals skipped between tokens
    (``lexer_conf``, not ``ignore_tokens``: a Lark loaded from its cache file has no
    ``ignore_tokens``); ``keywords``: string terminals that NAME also matches, by their text
    (matched as NAME and then renamed: Lark's "unless" callback)."""
    from lark.lexer import PatternStr
    terminals = sorted(lark.terminals, key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value),
                                                       t.name))
    regex = {t.name: t.pattern.to_regexp() for t in terminals}
    name_re = re.compile(regex["NAME"])
    return {"order": [t.name for t in terminals], "regex": regex, "ignored": sorted(lark.lexer_conf.ignore),
            "keywords": {t.pattern.value: t.name for t in terminals
                         if isinstance(t.pattern, PatternStr) and name_re.fullmatch(t.pattern.value)}}


def _valid_terminals(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("format") != _TERMINALS_FORMAT:
        return False
    order, regex, ignored, keywords = (data.get(k) for k in ("order", "regex", "ignored", "keywords"))
    return isinstance(order, list) and isinstance(regex, dict) and isinstance(ignored, list) \
        and isinstance(keywords, dict) and sorted(order) == sorted(regex) and "NAME" in regex \
        and all(isinstance(v, str) for v in regex.values()) and set(ignored) <= set(regex) \
        and all(isinstance(k, str) and v in regex for k, v in keywords.items())


def fast_path_terminals(build: Callable[[], Lark]) -> dict[str, Any]:
    """``terminals_of`` the parser ``build()`` returns (``build_parser``'s), kept as JSON beside
    Lark's own cache (``lark-terminals-<hash of the grammar and Lark's version>.json``): a
    module the fast path reads then loads neither Lark nor its pickled tables. ``build`` is
    called only when the file is missing or does not hold what this code writes."""
    text = grammar_text()
    version = _lark_version_unimported()
    if version is None:
        import lark
        version = lark.__version__
    root = _cache_root()
    path = None if root is None else os.path.join(root, f"lark-terminals-{_digest(version, text)}.json")
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if _valid_terminals(data):
                return data
        except (OSError, ValueError):
            pass
    data = {"format": _TERMINALS_FORMAT, **terminals_of(build())}
    if path is not None:
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return data
