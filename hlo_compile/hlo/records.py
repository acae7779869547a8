"""The records the front end produces while it reads HLO text, and the functions that build
them from token text.

Two readers produce these records: the Lark transformer in ``parser.py`` and the fast path
in ``fast_path.py``. Both call the builders below with the same token text and offset, so a
token gives the same record whichever reader found it. ``parser._ModuleBuilder`` turns the
records into IR.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .shape import Shape
from .shape_text import ShapeError, parse_array_shape


class PositionedError(Exception):
    """A problem at an offset of the text (turned into an HloParseError with a location)."""

    def __init__(self, message: str, pos: int):
        super().__init__(message)
        self.message = message
        self.pos = pos


@dataclass(slots=True)
class RawAttr:
    name: str
    start: int  # offset of the value's first character
    end: int
    name_pos: int
    raw: str = ""


@dataclass(slots=True)
class Call:
    opcode: str
    pos: int
    operands: list
    constant_text: str | None = None


@dataclass(slots=True)
class Body:
    shape: Shape | None
    call: Call
    attrs: list[RawAttr]
    pos: int


@dataclass(slots=True)
class Operand:
    kind: str  # "ref" | "int" | "shape" | "nested"
    pos: int
    name: str = ""
    shape: Shape | None = None
    body: Body | None = None
    value: int = 0


@dataclass(slots=True)
class Instr:
    is_root: bool
    name: str
    pos: int
    body: Body


@dataclass(slots=True)
class Comp:
    is_entry: bool
    name: str
    pos: int
    signature: tuple | None
    instrs: list[Instr]
    attrs: list[RawAttr] = field(default_factory=list)


# ---- builders: token text (and the offset of its first character) → record ---------------

def array_shape(text: str, pos: int) -> Shape:
    """A SHAPE token (memoized: a module repeats the same few shapes)."""
    try:
        return parse_array_shape(text)
    except ShapeError as e:
        raise PositionedError(str(e), pos) from None


_ATTRIBUTE_NAME = re.compile(r"\s*,\s*([A-Za-z_][A-Za-z0-9_.\-]*)=\s*")
_TYPED_OPERAND = re.compile(r"(.*?[\]}])\s+(%?\S+)$", re.S)
_PLAIN_OPERAND = re.compile(r"(?:/\*.*?\*/\s*)?(?:([a-z][a-z0-9_]*\[[^\]]*\](?:\{[^{}]*\})?)\s+)?%?"
                            r"([A-Za-z_][A-Za-z0-9_.\-]*(?:#-?[A-Za-z0-9_]+)*)", re.S)
_INSTR_HEAD = re.compile(r"\s*(ROOT\s+)?%?([A-Za-z_][A-Za-z0-9_.\-]*(?:#-?[A-Za-z0-9_]+)*)\s*=\s*"
                         r"(\S+?\[[^\]]*\](?:\{[^{}]*\})?)\s*([a-z][a-z0-9\-]*)\(", re.S)


def attribute(tok: str, start: int) -> RawAttr:
    """An ATTRIBUTE token ``, name=value``."""
    m = _ATTRIBUTE_NAME.match(tok)
    return RawAttr(m.group(1), start + m.end(), start + len(tok), start + m.start(1), tok[m.end():])


def plain_operands(tok: str, start: int) -> list[Operand]:
    """An OPERANDS token: ``f32[2]{0} %a, %b)``."""
    out = []
    for m in _PLAIN_OPERAND.finditer(tok):
        shape_text = m.group(1)
        shape = array_shape(shape_text, start + m.start(1)) if shape_text else None
        out.append(Operand("ref", start + m.start(2), m.group(2), shape))
    return out


def typed_operand(tok: str, start: int) -> Operand:
    """A TYPED_OPERAND token: ``f32[2]{0} %a``."""
    m = _TYPED_OPERAND.match(tok)
    shape = array_shape(m.group(1), start)
    return Operand("ref", start + m.start(2), m.group(2).lstrip("%"), shape)


def name_operand(tok: str, start: int) -> Operand:
    """A NAME token as an operand."""
    return Operand("ref", start, tok.lstrip("%"))


def head_instruction(tok: str, start: int, operands: list, attrs: list[RawAttr]) -> Instr:
    """An instruction from an INSTR_HEAD token (``ROOT %x = f32[2]{0} add(``), its operands and
    attributes."""
    m = _INSTR_HEAD.match(tok)
    shape = array_shape(m.group(3), start + m.start(3))
    pos = start + m.start(4)
    call = Call(m.group(4), pos, operands)
    return Instr(bool(m.group(1)), m.group(2), start + m.start(2), Body(shape, call, attrs, pos))


def constant_call(tok: str, start: int) -> Call:
    """A CONSTANT token ``constant(...)``: the literal text between the parentheses."""
    return Call("constant", start, [], tok[tok.index("(") + 1:-1])


def opcall(tok: str, start: int, operands: list) -> Call:
    """An OPCALL token ``add(`` and its operands."""
    return Call(tok[:-1].strip(), start, operands)
