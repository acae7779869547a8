"""The Lark side of the HLO parser: the transformer that turns the grammar's rules into the
records of ``records.py`` while Lark parses (no parse tree is built), and Lark's errors as
``HloParseError``. Imported only when the fast path (``fast_path.py``) declines a text, or
when Lark alone is asked for (``HLO_COMPILE_LARK_ONLY``): a compile whose module the fast path
reads never loads Lark.
"""
from __future__ import annotations

import re
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from . import records
from .errors import HloParseError, location_at
from .grammar import build_parser
from .records import Body, Comp, Instr, Operand, RawAttr
from .shape import Shape


def _operands(item: Any) -> list:
    """The operands of a call: a list from the general rules, or one OPERANDS token."""
    if not isinstance(item, Token):
        return item
    return records.plain_operands(str(item), item.start_pos)


def _attrs(tokens: list) -> list[RawAttr]:
    return [records.attribute(str(a), a.start_pos) for a in tokens]


class _Transformer(Transformer):
    """Callbacks run by the LALR parser as each rule is reduced."""

    def shape(self, c):
        return records.array_shape(str(c[0]), c[0].start_pos)

    def tuple_shape(self, c):
        return Shape.tuple_of(c)

    def buffer_shape(self, c):
        return Shape("buffer", tuple_shapes=(c[1],))

    def opcall(self, c):
        tok = c[0]
        return records.opcall(str(tok), tok.start_pos, _operands(c[1]))

    def operand_list(self, c):
        return c

    def fast_instruction(self, c):
        tok = c[0]
        return records.head_instruction(str(tok), tok.start_pos, _operands(c[1]), _attrs(c[2:]))

    def instruction_body(self, c):
        shape = None
        i = 0
        if isinstance(c[0], Shape):
            shape = c[0]
            i = 1
        call = c[i]
        if isinstance(call, Token):  # CONSTANT
            call = records.constant_call(str(call), call.start_pos)
        return Body(shape, call, _attrs(c[i + 1:]), call.pos)

    def operand(self, c):
        if len(c) == 1 and isinstance(c[0], Token):
            tok = c[0]
            if tok.type == "TYPED_OPERAND":
                return records.typed_operand(str(tok), tok.start_pos)
            if tok.type == "NAME":
                return records.name_operand(str(tok), tok.start_pos)
            return Operand("int", tok.start_pos, value=int(tok)) if re.fullmatch(r"-?\d+", tok) else \
                Operand("ref", tok.start_pos, name=str(tok))
        if len(c) == 1:  # a shape alone (single-instruction form)
            return Operand("shape", -1, shape=c[0])
        return Operand("ref", c[1].start_pos, name=str(c[1]).lstrip("%"), shape=c[0])

    def nested_operand(self, c):
        shape = c[0] if isinstance(c[0], Shape) else None
        call = c[-1]
        return Operand("nested", call.pos, body=Body(shape, call, [], call.pos))

    def nested_constant(self, c):
        shape = c[0] if isinstance(c[0], Shape) else None
        tok = c[-1]
        call = records.constant_call(str(tok), tok.start_pos)
        return Operand("nested", tok.start_pos, body=Body(shape, call, [], tok.start_pos))

    def instruction(self, c):
        is_root = isinstance(c[0], Token) and c[0].type == "ROOT"
        name_tok = c[1] if is_root else c[0]
        return Instr(is_root, str(name_tok).lstrip("%"), name_tok.start_pos, c[-1])

    def param(self, c):
        return (str(c[0])[:-1].lstrip("%"), c[1], c[0].start_pos)

    def signature(self, c):
        return (c[:-1], c[-1])

    def computation(self, c):
        i = 0
        is_entry = isinstance(c[0], Token) and c[0].type == "ENTRY"
        if is_entry:
            i = 1
        name_tok = c[i]
        i += 1
        sig = None
        if i < len(c) and isinstance(c[i], tuple):
            sig = c[i]
            i += 1
        instrs = [x for x in c[i:] if isinstance(x, Instr)]
        attrs = _attrs([x for x in c[i:] if isinstance(x, Token) and x.type == "ATTRIBUTE"])
        return Comp(is_entry, str(name_tok).lstrip("%"), name_tok.start_pos, sig, instrs, attrs)

    def computation_body(self, c):
        return c

    def module_name(self, c):
        return c[0]

    def module_header(self, c):
        return ("header", c[0], _attrs(c[1:]))

    def stack_frames(self, c):
        return ("frames", str(c[0]))

    def module(self, c):
        return ("module", c)

    def single_instruction(self, c):
        return ("single", c[0])


# ---- error messages ----------------------------------------------------------------------

_TERMINAL_WORDS = {
    "NAME": "a name", "NAME_COLON": "a parameter name followed by ':'", "ATTR_NAME": "an attribute (name=value)",
    "OPCALL": "an opcode followed by '('", "SHAPE": "a shape", "TYPED_OPERAND": "an operand",
    "CONSTANT": "constant(...)", "BRACE_BLOCK": "a {...} value", "PAREN_BLOCK": "a (...) value",
    "STRING": "a string", "STACK_FRAMES": "stack frames", "ATTRIBUTE": "', attribute=value'",
    "INSTR_HEAD": "an instruction", "OPERANDS": "operands",
    "ENTRY": "ENTRY", "ROOT": "ROOT", "HLOMODULE": "HloModule", "BUFFER_OPEN": "b(", "INT": "an integer",
    "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "COMMA": "','", "EQUAL": "'='",
    "$END": "end of input",
}


def _words(expected: set[str]) -> str:
    names = []
    for t in sorted(expected):
        if t in _TERMINAL_WORDS:
            names.append(_TERMINAL_WORDS[t])
        elif t.startswith("__ANON") or t == "MINUS":
            names.append("'->'")
        else:
            names.append(t.lower())
    names = sorted(set(names))
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _describe(tok: Token) -> str:
    if tok.type == "$END":
        return "end of input"
    text = str(tok).strip()
    if tok.type in ("INSTR_HEAD", "OPERANDS", "ATTRIBUTE"):  # coarse tokens: name the first word
        text = re.split(r"[\s(]", text.lstrip(","). strip(), maxsplit=1)[0] or text[:1]
    if len(text) > 40:
        text = text[:37] + "..."
    return f"'{text}'"


def _lark_error(e: UnexpectedInput, text: str, filename: str) -> HloParseError:
    if isinstance(e, UnexpectedToken):
        tok = e.token
        pos = tok.start_pos if tok.type != "$END" and tok.start_pos is not None else len(text)
        msg = f"unexpected {_describe(tok)}; expected {_words(set(e.expected))}"
        if tok.type == "$END":
            msg = f"unexpected end of input; expected {_words(set(e.expected))}"
    elif isinstance(e, UnexpectedCharacters):
        pos = e.pos_in_stream
        ch = text[pos] if pos < len(text) else ""
        if text.startswith("/*", pos):
            msg = "unterminated /* comment"
        elif ch in "\"'":
            msg = "unterminated string"
        elif ch in "{(" and e.allowed and ({"BRACE_BLOCK", "PAREN_BLOCK"} & set(e.allowed)):
            msg = f"unbalanced '{ch}'"
        else:
            msg = f"unexpected character '{ch}'" + (f"; expected {_words(set(e.allowed))}" if e.allowed else "")
    elif isinstance(e, UnexpectedEOF):
        pos = len(text)
        msg = f"unexpected end of input; expected {_words(set(e.expected))}"
    else:  # pragma: no cover
        pos = 0
        msg = str(e)
    return HloParseError(msg, location_at(text, pos, filename))


def lark_parser() -> Lark:
    """The LALR parser with this module's transformer (built once, ``grammar.build_parser``)."""
    return build_parser(_Transformer)


def lark_parse(text: str, start: str, error_text: str, filename: str) -> Any:
    """The transformer's result for ``text`` from rule ``start``; a syntax error as an
    ``HloParseError`` located in ``error_text`` (the whole file)."""
    try:
        return lark_parser().parse(text, start=start)
    except UnexpectedInput as e:
        raise _lark_error(e, error_text, filename) from None
