"""A hand-written reader for the common shape of HLO modules, in front of the Lark parser.

Contract: ``FastPath.parse(text)`` returns exactly the result the Lark parser and its
transformer (``parser._Transformer``) would return for ``text``, or ``None`` ("declined").
It never raises for bad input: on anything it does not recognise, or on any error, it
declines, and ``parse_module`` parses the text with Lark as before, so syntax errors, their
messages and locations, and rare syntax all keep the grammar's behaviour. Semantic errors
are unaffected too: they come from ``_ModuleBuilder``, which gets the same records either way.

How it stays equal to the grammar:

* It tokenizes like Lark's contextual lexer: with Lark's own terminal regexes (taken from the
  built parser), tried in Lark's order (priority, then width, then pattern length, then
  name), restricted to the terminals the parser state accepts, skipping whitespace and
  comments between tokens, and turning a NAME that spells an accepted keyword (``ROOT``,
  ``ENTRY``, ``HloModule``) into that keyword. ``_Reader.lex`` does this for an accepted set.
* It follows the grammar's rules for the parts it knows (the header, stack frames,
  computations with signatures, instructions with array or tuple shapes, plain, typed,
  integer and tuple-typed operands, constants, attributes) and declines on everything else:
  nested instructions, buffer shapes, single-instruction input, a comment where it would
  not expect one, a shape that does not decode.
* It builds every record with the functions in ``records.py`` that the transformer calls,
  on the same token text and offset.

The hot loop (one instruction) matches the coarse tokens INSTR_HEAD, OPERANDS and ATTRIBUTE
directly, since each is the first terminal Lark tries in its state (ATTRIBUTE comes second
to INSTR_HEAD after an instruction, but the two can never both match at one position: one
needs a ',' after optional whitespace, the other a name). ``tests/hlo/test_parser_fast_path.py``
checks the contract on the whole corpus and on mutated inputs.
"""
from __future__ import annotations

import re
from typing import Any

from . import records
from .records import Body, Comp, Instr, Operand, PositionedError
from .shape import Shape

_MAX_TUPLE_DEPTH = 64

# Terminals accepted in the parser states the fast path goes through (from the LALR table of
# hlo_compile/grammars/hlo.lark; a terminal listed here that the state does not accept only makes the
# fast path decline where Lark would fail anyway).
_START = frozenset({"INSTR_HEAD", "BUFFER_OPEN", "CONSTANT", "SHAPE", "OPCALL", "STACK_FRAMES", "NAME",
                    "HLOMODULE", "ENTRY", "ROOT", "LPAR"})
_MODULE_NAME = frozenset({"NAME_COLON", "NAME"})
_AFTER_HEADER = frozenset({"ATTRIBUTE", "STACK_FRAMES", "NAME", "ENTRY"})
_AFTER_COMPUTATION = frozenset({"ATTRIBUTE", "NAME", "ENTRY"})
_COMPUTATION = frozenset({"NAME", "ENTRY"})
_NAME = frozenset({"NAME"})
_COMP_OPEN = frozenset({"LBRACE", "LPAR"})
_PARAM_FIRST = frozenset({"NAME_COLON", "RPAR"})
_PARAM = frozenset({"NAME_COLON"})
_COMMA_OR_CLOSE = frozenset({"COMMA", "RPAR"})
_ARROW = frozenset({"__ANON_0"})
_LBRACE = frozenset({"LBRACE"})
_SHAPE = frozenset({"BUFFER_OPEN", "SHAPE", "LPAR"})
_TUPLE_FIRST = _SHAPE | {"RPAR"}
_INSTRUCTION = frozenset({"INSTR_HEAD", "ATTRIBUTE", "NAME", "ROOT", "RBRACE"})
_EQUAL = frozenset({"EQUAL"})
_BODY = frozenset({"BUFFER_OPEN", "CONSTANT", "SHAPE", "OPCALL", "LPAR"})
_CALL = frozenset({"CONSTANT", "OPCALL"})
_FIRST_OPERAND = frozenset({"OPERANDS", "TYPED_OPERAND", "BUFFER_OPEN", "CONSTANT", "SHAPE", "OPCALL", "NAME",
                            "INT", "LPAR", "RPAR"})
_NEXT_OPERAND = _FIRST_OPERAND - {"OPERANDS", "RPAR"}
_AFTER_OPERAND_SHAPE = frozenset({"CONSTANT", "OPCALL", "NAME", "COMMA", "RPAR"})

# `N)`: an integer operand closing the list (parameter(0)). In the first-operand state no
# terminal but INT can match at a digit or '-' (the rest start with a letter, '%', '/', '('
# or ')'), and after INT the ')' is RPAR.
_INT_CLOSE = re.compile(r"(-?[0-9]+)\)")


class _Decline(Exception):
    pass


class FastPath:
    """Built once from the Lark parser's terminals (``grammar.terminals_of``, which
    ``grammar.fast_path_terminals`` keeps between runs); ``parse`` is reentrant."""

    def __init__(self, terminals: dict[str, Any]) -> None:
        self.ignored = frozenset(terminals["ignored"])
        self.order = list(terminals["order"])  # Lark's BasicLexer order: the first that matches wins
        self._patterns: dict[str, str] = terminals["regex"]
        self._compiled: dict[str, re.Pattern] = {}
        self.keywords: dict[str, str] = dict(terminals["keywords"])
        self._orders: dict[frozenset, tuple] = {}
        self.instr_head = self.pattern("INSTR_HEAD")
        self.operands = self.pattern("OPERANDS")
        self.attribute = self.pattern("ATTRIBUTE")

    def pattern(self, name: str) -> re.Pattern:
        """Terminal ``name``'s compiled regex; compiled on first use (a module that never
        reaches a state accepting a terminal does not pay for its regex)."""
        p = self._compiled.get(name)
        if p is None:
            p = self._compiled[name] = re.compile(self._patterns[name])
        return p

    def parse(self, text: str) -> tuple | None:
        """The transformer's result for ``text`` (``("module", [...])``), or None."""
        try:
            return _Reader(self, text).module()
        except (_Decline, PositionedError):
            return None

    def lexer_order(self, accepted: frozenset) -> tuple:
        order = self._orders.get(accepted)
        if order is None:
            order = tuple((n, self.pattern(n)) for n in self.order if n in accepted or n in self.ignored)
            self._orders[accepted] = order
        return order


class _Reader:
    def __init__(self, fast: FastPath, text: str) -> None:
        self.fast = fast
        self.text = text

    # ---- tokens -----------------------------------------------------------------------
    def lex(self, pos: int, accepted: frozenset) -> tuple[str, int, int]:
        """The next token in a state accepting ``accepted``: (type, start, end); "$END" at the end."""
        text = self.text
        order = self.fast.lexer_order(accepted)
        ignored = self.fast.ignored
        while pos < len(text):
            for name, regex in order:  # noqa: B007 - `name` is read after the loop
                m = regex.match(text, pos)
                if m is not None:
                    break
            else:
                raise _Decline
            if name in ignored:
                pos = m.end()
                continue
            if name == "NAME":
                keyword = self.fast.keywords.get(m.group())
                if keyword in accepted:
                    name = keyword
            return name, pos, m.end()
        return "$END", pos, pos

    def expect(self, pos: int, accepted: frozenset, *types: str) -> tuple[int, int]:
        kind, start, end = self.lex(pos, accepted)
        if kind not in types:
            raise _Decline
        return start, end

    # ---- module and computations --------------------------------------------------------
    def module(self) -> tuple:
        text = self.text
        items: list = []
        kind, start, end = self.lex(0, _START)
        if kind == "HLOMODULE":
            start, end = self.expect(end, _MODULE_NAME, "NAME", "NAME_COLON")
            header = ("header", text[start:end], [])
            kind, start, end = self.lex(end, _AFTER_HEADER)
            while kind == "ATTRIBUTE":
                header[2].append(records.attribute(text[start:end], start))
                kind, start, end = self.lex(end, _AFTER_HEADER)
            items.append(header)
        if kind == "STACK_FRAMES":
            items.append(("frames", text[start:end]))
            kind, start, end = self.lex(end, _COMPUTATION)
        while kind != "$END":
            is_entry = kind == "ENTRY"
            if is_entry:
                kind, start, end = self.lex(end, _NAME)
            if kind != "NAME":
                raise _Decline
            comp, end = self.computation(start, end, is_entry)
            items.append(comp)
            kind, start, end = self.lex(end, _AFTER_COMPUTATION)
            while kind == "ATTRIBUTE":
                comp.attrs.append(records.attribute(text[start:end], start))
                kind, start, end = self.lex(end, _AFTER_COMPUTATION)
        if not any(isinstance(i, Comp) for i in items):
            raise _Decline
        return ("module", items)

    def computation(self, start: int, end: int, is_entry: bool) -> tuple[Comp, int]:
        text = self.text
        name, name_pos = text[start:end], start
        kind, start, end = self.lex(end, _COMP_OPEN)
        signature = None
        if kind == "LPAR":
            params = []
            kind, start, end = self.lex(end, _PARAM_FIRST)
            while kind != "RPAR":
                if kind != "NAME_COLON":
                    raise _Decline
                shape, after = self.shape(end, _SHAPE)
                params.append((text[start:end - 1].lstrip("%"), shape, start))
                kind, _, after = self.lex(after, _COMMA_OR_CLOSE)
                if kind == "COMMA":
                    kind, start, end = self.lex(after, _PARAM)
                else:
                    end = after
            _, end = self.expect(end, _ARROW, "__ANON_0")
            result, end = self.shape(end, _SHAPE)
            signature = (params, result)
            kind, start, end = self.lex(end, _LBRACE)
        if kind != "LBRACE":
            raise _Decline
        instrs, end = self.instructions(end)
        return Comp(is_entry, name.lstrip("%"), name_pos, signature, instrs, []), end

    # ---- instructions -------------------------------------------------------------------
    def instructions(self, pos: int) -> tuple[list[Instr], int]:
        """``instruction+ "}"`` after a computation's '{'."""
        text = self.text
        instr_head = self.fast.instr_head
        instrs: list[Instr] = []
        while True:
            m = instr_head.match(text, pos)
            if m is not None:
                start, end = pos, m.end()
            else:
                kind, start, end = self.lex(pos, _INSTRUCTION)
                if kind == "RBRACE":
                    if not instrs:
                        raise _Decline
                    return instrs, end
                if kind in ("NAME", "ROOT"):
                    instr, pos = self.general_instruction(kind, start, end)
                    instrs.append(instr)
                    continue
                if kind != "INSTR_HEAD":
                    raise _Decline
            operands, pos = self.call_operands(end)
            attrs, pos = self.attributes(pos)
            instrs.append(records.head_instruction(text[start:end], start, operands, attrs))

    def general_instruction(self, kind: str, start: int, end: int) -> tuple[Instr, int]:
        """``ROOT? NAME "=" shape? (OPCALL operands | CONSTANT) ATTRIBUTE*``."""
        text = self.text
        is_root = kind == "ROOT"
        if is_root:
            start, end = self.expect(end, _NAME, "NAME")
        name, name_pos = text[start:end], start
        _, end = self.expect(end, _EQUAL, "EQUAL")
        kind, start, end = self.lex(end, _BODY)
        shape = None
        if kind == "SHAPE":
            shape = records.array_shape(text[start:end], start)
            kind, start, end = self.lex(end, _CALL)
        elif kind == "LPAR":
            shape, end = self.tuple_shape(start, 0)
            kind, start, end = self.lex(end, _CALL)
        if kind == "CONSTANT":
            call = records.constant_call(text[start:end], start)
        elif kind == "OPCALL":
            operands, after = self.call_operands(end)
            call = records.opcall(text[start:end], start, operands)
            end = after
        else:
            raise _Decline
        attrs, end = self.attributes(end)
        return Instr(is_root, name.lstrip("%"), name_pos, Body(shape, call, attrs, call.pos)), end

    def attributes(self, pos: int) -> tuple[list, int]:
        text = self.text
        attribute = self.fast.attribute
        attrs = []
        while (m := attribute.match(text, pos)) is not None:
            attrs.append(records.attribute(m.group(), pos))
            pos = m.end()
        return attrs, pos

    def call_operands(self, pos: int) -> tuple[list, int]:
        """The operands after ``opcode(``, through the closing ')'."""
        text = self.text
        m = self.fast.operands.match(text, pos)
        if m is not None:
            return records.plain_operands(m.group(), pos), m.end()
        m = _INT_CLOSE.match(text, pos)
        if m is not None:
            return [Operand("int", pos, value=int(m.group(1)))], m.end()
        ops: list[Operand] = []
        accepted = _FIRST_OPERAND
        while True:
            kind, start, end = self.lex(pos, accepted)
            if kind == "OPERANDS" and not ops:  # after a comment
                return records.plain_operands(text[start:end], start), end
            if kind == "TYPED_OPERAND":
                op = records.typed_operand(text[start:end], start)
            elif kind == "NAME":
                op = records.name_operand(text[start:end], start)
            elif kind == "INT":
                op = Operand("int", start, value=int(text[start:end]))
            elif kind == "LPAR":
                shape, end = self.tuple_shape(start, 0)
                start, end = self.expect(end, _AFTER_OPERAND_SHAPE, "NAME")
                op = Operand("ref", start, name=text[start:end].lstrip("%"), shape=shape)
            else:
                raise _Decline
            ops.append(op)
            kind, _, pos = self.lex(end, _COMMA_OR_CLOSE)
            if kind == "RPAR":
                return ops, pos
            if kind != "COMMA":
                raise _Decline
            accepted = _NEXT_OPERAND

    # ---- shapes -------------------------------------------------------------------------
    def shape(self, pos: int, accepted: frozenset, depth: int = 0) -> tuple[Shape, int]:
        kind, start, end = self.lex(pos, accepted)
        if kind == "SHAPE":
            return records.array_shape(self.text[start:end], start), end
        if kind == "LPAR":
            return self.tuple_shape(start, depth)
        raise _Decline

    def tuple_shape(self, pos: int, depth: int) -> tuple[Shape, int]:
        """``(shape, ...)`` from the '(' at ``pos``."""
        if depth > _MAX_TUPLE_DEPTH:
            raise _Decline
        elements = []
        kind, start, end = self.lex(pos + 1, _TUPLE_FIRST)
        while kind != "RPAR":
            if kind == "SHAPE":
                elements.append(records.array_shape(self.text[start:end], start))
            elif kind == "LPAR":
                shape, end = self.tuple_shape(start, depth + 1)
                elements.append(shape)
            else:
                raise _Decline
            kind, _, end = self.lex(end, _COMMA_OR_CLOSE)
            if kind == "COMMA":
                kind, start, end = self.lex(end, _SHAPE)
        return Shape.tuple_of(elements), end
