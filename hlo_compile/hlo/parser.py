"""HLO text → IR.

Lark (LALR, contextual lexer, grammar in ``hlo_compile/grammars/hlo.lark``) runs the transformer of
``lark_reader.py`` while it parses, so no parse tree is built: rules turn straight into small records
(``records.py``). In front of it, a hand-written fast path (``fast_path.py``) reads common
modules into the very same records, or declines and leaves the text to Lark, so every syntax
error still comes from the grammar. A second pass (``_ModuleBuilder``) resolves names,
computations and shapes and builds the IR, raising ``HloParseError`` with a location for
every problem.
"""
from __future__ import annotations

import functools
import gc
import os
import re
from typing import Any

from . import attributes as attrs_mod
from .async_checks import check_async
from .allowed_attributes import REQUIRED_ATTRIBUTES, allowed_attributes
from .attributes import Attribute
from .errors import HloParseError, HloVerifyError, LineIndex, location_at
from .fast_path import FastPath
from .grammar import fast_path_terminals
from .ir import HloComputation, HloInstruction, HloModule
from .literal import LiteralError, parse_literal, scalar_value
from .opcodes import ASYNC_SUGAR_EXCLUDED, OPCODES
from .records import Body, Comp, Instr, Operand, PositionedError, RawAttr
from .shape import Shape
from .shape_inference import ShapeInferenceError, infer_shape
from .shape_text import ShapeError, parse_shape_text
from .sizes import available_memory, format_bytes, shape_bytes
from .verifier import verify_module
from .element_types import ELEMENT_TYPES, TYPE_ALIASES


_TRANSCENDENTAL = frozenset({"exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "sine",
                             "cosine", "tan", "tanh", "sqrt", "rsqrt", "cbrt", "erf", "acos", "acosh", "asin",
                             "asinh", "atanh", "cosh", "sinh"})


# ---- building the IR ---------------------------------------------------------------------

class _ModuleBuilder:
    def __init__(self, text: str, filename: str):
        self.text = text
        self.filename = filename
        self.computations: dict[str, HloComputation] = {}
        self.order: list[HloComputation] = []
        self.lines = LineIndex(text, filename)

    def error(self, message: str, pos: int, cls: type = HloParseError) -> HloParseError:
        return cls(message, self.lines.location(pos))

    # -- attributes ---------------------------------------------------------------------
    def attr_raw(self, a: RawAttr) -> str:
        return a.raw or self.text[a.start:a.end]

    def decode_attrs(self, raw_attrs: list[RawAttr], opcode: str | None, scope: dict | None) -> dict[str, Attribute]:
        out: dict[str, Attribute] = {}
        allowed = allowed_attributes(opcode) if opcode else None
        for a in raw_attrs:
            if a.name in out:
                raise self.error(f"attribute '{a.name}' is given twice", a.name_pos)
            if allowed is not None and a.name not in allowed:
                raise self.error(f"unexpected attribute \"{a.name}\" for {opcode}", a.name_pos)
            raw = self.attr_raw(a)
            try:
                value = attrs_mod.decode(a.name, raw)
            except ValueError as e:
                raise self.error(f"attribute {a.name}: {e}", a.start) from None
            value = self.resolve_attr(a, value, scope)
            out[a.name] = Attribute(a.name, raw, value)
        return out

    def resolve_attr(self, a: RawAttr, value: Any, scope: dict | None) -> Any:
        if a.name in attrs_mod.COMPUTATION_ATTRS:
            if isinstance(value, str) and value.startswith("{"):
                return self.inline_computation(a)
            return self.lookup_computation(value, a.start)
        if a.name in attrs_mod.COMPUTATION_LIST_ATTRS:
            if any(n.startswith("{") for n in value):
                return self.inline_computation_list(a)
            return tuple(self.lookup_computation(n, a.start) for n in value)
        if a.name == "control-predecessors" and scope is not None:
            out = []
            for n in value:
                if n not in scope:
                    raise self.error(f"'{n}' is not defined", a.start)
                out.append(scope[n])
            return tuple(out)
        if a.name == "api_version":
            known = ("API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
                     "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI")
            if value == "API_VERSION_UNSPECIFIED":
                raise self.error("Invalid API version: API_VERSION_UNSPECIFIED", a.start)
            if value not in known:
                raise self.error(f"Unknown API version: {value}", a.start)
        return value

    def lookup_computation(self, name: str, pos: int) -> HloComputation:
        comp = self.computations.get(name)
        if comp is None:
            raise self.error(f"computation does not exist: {name}", pos)
        return comp

    def inline_computation(self, a: RawAttr, start: int | None = None, end: int | None = None) -> HloComputation:
        """Parse ``{ ... }`` at text[start:end] as an anonymous computation. The text before it
        is blanked (newlines kept) so that offsets, lines and columns match the file."""
        start = a.start if start is None else start
        end = a.end if end is None else end
        padded = re.sub(r"[^\n]", " ", self.text[:start]) + self.text[start:end]
        instrs = _lark_parse(padded, "computation_body", self.text, self.filename)
        name = f"{a.name}.inline.{start}"
        comp = self.build_computation(Comp(False, name, start, None, instrs))
        comp.attributes["inline"] = Attribute("inline", "true", True)
        return comp

    def inline_computation_list(self, a: RawAttr) -> tuple[HloComputation, ...]:
        """``{{...}, {...}}``: a list of inline computations."""
        out = []
        depth = 0
        block_start = -1
        for i in range(a.start + 1, a.end - 1):
            ch = self.text[i]
            if ch == "{":
                if depth == 0:
                    block_start = i
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    out.append(self.inline_computation(a, block_start, i + 1))
        return tuple(out)

    # -- instructions -------------------------------------------------------------------
    def check_name(self, name: str, pos: int) -> None:
        if name in ELEMENT_TYPES or name in TYPE_ALIASES:
            raise self.error(f"expects name, but '{name}' is an element type and cannot name an instruction", pos)

    def build_instruction(self, name: str, body: Body, comp: "_CompState", is_top: bool = True) -> HloInstruction:
        call = body.call
        opcode = call.opcode
        self.check_opcode(opcode, call.pos)
        operands: list[HloInstruction] = []
        declared: list[Shape | None] = []
        param_number = None
        for op in call.operands:
            if op.kind == "int":
                if opcode != "parameter":
                    raise self.error(f"expects an operand name, got the integer {op.value}", op.pos)
                if param_number is not None:
                    raise self.error("parameter takes one number", op.pos)
                param_number = op.value
                continue
            inst, shape = self.resolve_operand(op, comp)
            operands.append(inst)
            declared.append(shape)
        if opcode == "parameter":
            if param_number is None or param_number < 0:
                raise self.error("parameter expects a non-negative parameter number, e.g. parameter(0)", call.pos)
        attributes = self.decode_attrs(body.attrs, opcode, comp.names)
        if opcode == "broadcast" and "dimensions" not in attributes and len(operands) == 1 \
                and operands[0].shape.is_scalar:
            attributes["dimensions"] = Attribute("dimensions", "{}", ())  # implied for a scalar operand
        self.check_opcode_attrs(opcode, attributes, operands, call.pos)
        for req in REQUIRED_ATTRIBUTES.get(opcode, ()):
            if req not in attributes:
                raise self.error(f"{opcode} requires attribute {req}=", call.pos)
        shape = body.shape
        if shape is None:
            shape = self.infer(opcode, operands, attributes, call.pos)
        inst = HloInstruction(name, opcode, shape, operands, attributes,
                              literal_text=call.constant_text, parameter_number=param_number,
                              location=self.lines.location(body.pos if not is_top else comp.name_pos))
        inst.declared_operand_shapes = declared
        for op, d in zip(operands, declared):
            if d is not None and d is not op.shape and not d.compatible(op.shape):  # shapes are memoized
                raise self.error(f"The declared operand shape {d} is not compatible with the shape of the "
                                 f"operand instruction {op.shape}.", call.pos)
        if opcode == "constant":
            self.check_constant_fits(name, shape, call)
            try:
                # a plain scalar is checked without numpy and its array made when asked for
                if scalar_value(call.constant_text or "", shape) is None:
                    inst._literal = parse_literal(call.constant_text or "", shape)
            except LiteralError as e:
                start = call.pos + self.text[call.pos:].index("(") + 1
                raise self.error(str(e), start + e.offset) from None
            except (MemoryError, OverflowError, ValueError) as e:  # numpy refused the allocation
                raise self.error(f"constant {name}: {shape} cannot be held in memory ({e})", call.pos) from None
        return inst

    def check_constant_fits(self, name: str, shape: Shape, call) -> None:
        """A constant's value is built in memory as it is parsed: refuse one that cannot be
        (a scalar written for a whole array takes a list entry per element while it is built)."""
        need = shape_bytes(shape)
        if need < 1 << 28:
            return
        if "{...}" not in (call.constant_text or ""):
            need += 8 * sum(s.element_count() for _, s in shape.leaves() if s.is_array)
        free = available_memory()
        if free is not None and need > free:
            raise self.error(f"constant {name}: {shape} needs {format_bytes(need)} of memory to be read; "
                             f"{format_bytes(free)} are available", call.pos)

    def check_opcode_attrs(self, opcode: str, attributes: dict[str, Attribute], operands: list[HloInstruction],
                           pos: int) -> None:
        """Attribute rules that depend on the opcode or the operands."""
        labels = attributes.get("dim_labels")
        if labels is not None and isinstance(labels.value, str) and opcode == "convolution":
            raise self.error(f"convolution dimension numbers '{labels.raw}' may not contain '?'", pos)
        if "result_accuracy" in attributes and opcode not in _TRANSCENDENTAL:
            raise self.error(f"result_accuracy is only allowed on unary transcendental ops, not {opcode}", pos)
        if opcode == "conditional" and operands:
            pred_index = operands[0].shape.element_type == "pred"
            if pred_index and "branch_computations" in attributes:
                raise self.error('unexpected attribute "branch_computations": a conditional with a pred '
                                 "index takes true_computation= and false_computation=", pos)
            if not pred_index and ("true_computation" in attributes or "false_computation" in attributes):
                raise self.error("a conditional with an integer index takes branch_computations=", pos)
        constraints = attributes.get("operand_layout_constraints")
        if constraints is not None:
            try:
                shapes = parse_shape_text("(" + constraints.raw.strip()[1:-1] + ")").tuple_shapes
            except ShapeError as e:
                raise self.error(f"operand_layout_constraints: {e}", pos) from None
            if len(shapes) != len(operands):
                raise self.error(f"Expected {len(operands)} operand layout constraints, {len(shapes)} given", pos)
            for i, (c, op) in enumerate(zip(shapes, operands)):
                if not c.compatible(op.shape):
                    raise self.error(f"operand {i} is not compatible with operand shape: constraint {c}, "
                                     f"operand {op.shape}", pos)
            constraints.value = shapes

    def check_opcode(self, opcode: str, pos: int) -> None:
        if opcode in OPCODES:
            return
        for suffix in ("-start", "-update", "-done"):
            if opcode.endswith(suffix):
                base = opcode[: -len(suffix)]
                if base in OPCODES and base not in ASYNC_SUGAR_EXCLUDED:
                    return
        raise self.error(f"Unknown opcode: {opcode}", pos)

    def infer(self, opcode: str, operands: list[HloInstruction], attributes: dict, pos: int) -> Shape:
        try:
            return infer_shape(opcode, [o.shape for o in operands], {k: a.value for k, a in attributes.items()})
        except ShapeInferenceError as e:
            raise self.error(f"cannot infer the shape of {opcode}: {e}; write the shape", pos) from None

    def resolve_operand(self, op: Operand, comp: "_CompState") -> tuple[HloInstruction, Shape | None]:
        if op.kind == "nested":
            nested_name = comp.fresh_name(op.body.call.opcode + ".anon")
            inst = self.build_instruction(nested_name, op.body, comp, is_top=False)
            comp.add(inst)
            return inst, None
        if op.kind == "shape":
            if not comp.single:
                raise self.error("expects an operand name after the shape", op.pos)
            inst = comp.implicit_parameter(comp.fresh_name("parameter"), op.shape)
            return inst, op.shape
        name = op.name
        if "#" in name:
            return self.compact_gte(name, op, comp), op.shape
        inst = comp.names.get(name)
        if inst is None:
            if comp.single and op.shape is not None:
                inst = comp.implicit_parameter(name, op.shape)
            else:
                raise self.error(f"instruction does not exist: {name}", op.pos)
        return inst, op.shape

    def compact_gte(self, name: str, op: Operand, comp: "_CompState") -> HloInstruction:
        base, *indices = name.split("#")
        inst = comp.names.get(base)
        if inst is None:
            raise self.error(f"instruction does not exist: {base}", op.pos)
        path = base
        for idx_text in indices:
            if not re.fullmatch(r"-?\d+", idx_text):
                raise self.error(f"expects integer tuple index after '#', got '{idx_text}'", op.pos)
            idx = int(idx_text)
            if not inst.shape.is_tuple:
                raise self.error(f"GTE operand must be tuple, but {path} has shape {inst.shape}", op.pos)
            if not 0 <= idx < len(inst.shape.tuple_shapes):
                raise self.error(f"GTE index {idx} out of bounds for {path} with shape {inst.shape}", op.pos)
            path = f"{path}#{idx}"
            existing = comp.names.get(path)
            if existing is None:
                gte = HloInstruction(comp.fresh_name(path.replace("#", "_")), "get-tuple-element",
                                     inst.shape.tuple_shapes[idx], [inst],
                                     {"index": Attribute("index", str(idx), idx)},
                                     location=self.lines.location(op.pos))
                comp.add(gte)
                comp.names[path] = gte
                existing = gte
            inst = existing
        return inst

    # -- computations -------------------------------------------------------------------
    def build_computation(self, c: Comp, single: bool = False) -> HloComputation:
        state = _CompState(c.name, c.pos, single)
        state.reserved = {ri.name for ri in c.instrs}
        root = None
        for ri in c.instrs:
            self.check_name(ri.name, ri.pos)
            if ri.name in state.names:
                raise self.error(f"instruction '{ri.name}' is defined twice in computation {c.name}", ri.pos)
            state.name_pos = ri.pos
            inst = self.build_instruction(ri.name, ri.body, state)
            state.add(inst)
            if ri.is_root:
                if root is not None:
                    raise self.error("one computation should have only one ROOT", ri.pos)
                root = inst
        if not state.instructions:
            raise self.error(f"computation {c.name} has no instructions", c.pos)
        if root is None:
            root = state.instructions[-1]
        numbers: dict[int, HloInstruction] = {}
        for inst in state.instructions:
            if inst.opcode == "parameter":
                if inst.parameter_number in numbers:
                    raise HloParseError(f"Duplicate parameter number {inst.parameter_number}", inst.location)
                numbers[inst.parameter_number] = inst
        if numbers and sorted(numbers) != list(range(len(numbers))):
            missing = min(set(range(len(numbers))) - set(numbers))
            raise self.error(f"computation {c.name} has parameter numbers {sorted(numbers)}; "
                             f"parameter({missing}) is missing", c.pos, HloVerifyError)
        problem = check_async(state.instructions, _async_sugar_opcodes(state.instructions))
        if problem is not None:
            message, inst = problem
            raise HloParseError(message, inst.location)
        attributes = self.decode_attrs(c.attrs, None, None)
        comp = HloComputation(c.name, state.instructions, root, is_entry=c.is_entry,
                              has_signature=c.signature is not None, attributes=attributes,
                              location=self.lines.location(c.pos))
        if c.signature is not None:
            params, result = c.signature
            if not result.compatible(root.shape):
                raise self.error(f"Shape of computation {c.name}, {result}, is not compatible with that of its "
                                 f"root instruction {root.name}, {root.shape}", c.pos)
            # Like XLA, the declared parameter list is not checked against the parameters.
        return comp

    def build_module(self, result: tuple) -> HloModule:
        kind, payload = result
        if kind == "single":
            return self.build_single(payload)
        header = None
        frames = ""
        comps: list[Comp] = []
        for item in payload:
            if isinstance(item, Comp):
                comps.append(item)
            elif item[0] == "header":
                header = item
            elif item[0] == "frames":
                frames = item[1]
        entries = [c for c in comps if c.is_entry]
        if len(entries) > 1:
            raise self.error("expects only one ENTRY", entries[1].pos)
        for c in comps:
            if c.name in self.computations:
                raise self.error(f"computation {c.name} is defined twice", c.pos)
            comp = self.build_computation(c)
            self.computations[c.name] = comp
            self.order.append(comp)
        entry = next((self.computations[c.name] for c in comps if c.is_entry), self.order[-1])
        entry.is_entry = True
        if header is not None:
            name_tok = header[1]
            name = str(name_tok).rstrip(":").lstrip("%")
            module_attrs = self.decode_attrs(header[2], None, None)
        else:
            name, module_attrs = f"module_{entry.name}", {}
        inline = [c for c in self.all_inline()]
        module = HloModule(name, self.order + inline, entry, module_attrs, frames, header is not None)
        self.check_entry_layout(module, header[2] if header else [])
        return module

    def all_inline(self) -> list[HloComputation]:
        seen = {id(c) for c in self.order}
        out = []
        stack = list(self.order)
        while stack:
            c = stack.pop()
            for inst in c.instructions:
                for sub in inst.called_computations():
                    if id(sub) not in seen:
                        seen.add(id(sub))
                        out.append(sub)
                        stack.append(sub)
        return out

    def check_entry_layout(self, module: HloModule, raw_attrs: list[RawAttr]) -> None:
        attr = module.attributes.get("entry_computation_layout")
        if attr is None:
            return
        pos = next(a.start for a in raw_attrs if a.name == "entry_computation_layout")
        text = attr.raw.strip()
        if not (text.startswith("{") and text.endswith("}")):
            raise self.error("entry_computation_layout expects {(params)->result}", pos)
        body = re.sub(r"/\*.*?\*/", "", text[1:-1])
        depth = 0
        arrow = -1
        for i, ch in enumerate(body):
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "-" and depth == 0 and body.startswith("->", i):
                arrow = i
                break
        if arrow < 0:
            raise self.error("entry_computation_layout expects {(params)->result}", pos)
        try:
            params = parse_shape_text(body[:arrow])
            result = parse_shape_text(body[arrow + 2:])
        except ShapeError as e:
            raise self.error(f"entry_computation_layout: {e}", pos) from None
        attr.value = (params.tuple_shapes, result)

    def build_single(self, payload: Any) -> HloModule:
        if isinstance(payload, Instr):
            name, body, pos = payload.name, payload.body, payload.pos
        else:
            body = payload
            name, pos = body.call.opcode, body.pos
        c = Comp(True, "", pos, None, [Instr(True, name, pos, body)])
        comp = self.build_computation(c, single=True)
        comp.name = f"{comp.root.opcode}.computation" if not comp.name else comp.name
        comp.is_entry = True
        self.order.append(comp)
        return HloModule(f"module_{comp.name}", self.order + self.all_inline(), comp, {}, "", False)


def _async_sugar_opcodes(instructions: list[HloInstruction]) -> set[str]:
    return {i.opcode for i in instructions if i.opcode not in OPCODES}


class _CompState:
    def __init__(self, name: str, pos: int, single: bool):
        self.name = name
        self.name_pos = pos
        self.single = single
        self.names: dict[str, HloInstruction] = {}
        self.instructions: list[HloInstruction] = []
        self.next_param = 0
        self.reserved: set[str] = set()  # names written in the text, for naming generated ones

    def add(self, inst: HloInstruction) -> None:
        self.names[inst.name] = inst
        self.instructions.append(inst)

    def fresh_name(self, base: str) -> str:
        """``base``, or ``base.N``: unique among the instructions built and those still to come."""
        taken = lambda n: n in self.names or n in self.reserved  # noqa: E731
        if not taken(base):
            return base
        i = 1
        while taken(f"{base}.{i}"):
            i += 1
        return f"{base}.{i}"

    def implicit_parameter(self, name: str, shape: Shape) -> HloInstruction:
        inst = HloInstruction(name, "parameter", shape, [], {}, parameter_number=self.next_param)
        self.next_param += 1
        self.add(inst)
        return inst


# ---- public API --------------------------------------------------------------------------

LARK_ONLY_ENV = "HLO_COMPILE_LARK_ONLY"


def _lark_parse(text: str, start: str, error_text: str, filename: str) -> Any:
    """Lark's parse of ``text`` from rule ``start``; its errors as ``HloParseError`` located in
    ``error_text``. Lark and the transformer are imported here, on the first text the fast
    path declines: a compile whose module it reads loads neither."""
    from .lark_reader import lark_parse
    return lark_parse(text, start, error_text, filename)


def _lark_parser() -> Any:
    from .lark_reader import lark_parser
    return lark_parser()


@functools.lru_cache(maxsize=None)
def _fast_path() -> FastPath:
    return FastPath(fast_path_terminals(_lark_parser))


def _use_fast_path(fast_path: bool | None) -> bool:
    if fast_path is not None:
        return fast_path
    return os.environ.get(LARK_ONLY_ENV, "") in ("", "0")


def parse_module(text: str, filename: str = "<string>", verify: bool = True, *,
                 fast_path: bool | None = None) -> HloModule:
    """Parse HLO text (a module, header-less computations, or a single instruction).

    Common modules are read by a hand-written fast path (``fast_path.py``) that gives exactly
    the Lark parser's result or declines, and then Lark parses. ``fast_path=False``, or the
    environment variable ``HLO_COMPILE_LARK_ONLY=1`` when ``fast_path`` is None, parses with
    Lark only (tests compare the two).
    """
    # Parsing allocates a few objects per character and frees almost none: the cyclic
    # collector would rescan the growing module over and over, for nothing. Pause it.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_module(text, filename, verify, _use_fast_path(fast_path))
    finally:
        if gc_was_enabled:
            gc.enable()


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _parse_module(text: str, filename: str, verify: bool, fast: bool) -> HloModule:
    if not _COMMENTS.sub("", text).strip():
        raise HloParseError("empty input: expected an HLO module ('HloModule NAME' and its computations)",
                            location_at(text, 0, filename))
    try:
        result = _fast_path().parse(text) if fast else None
        if result is None:
            result = _lark_parse(text, "start", text, filename)
        module = _ModuleBuilder(text, filename).build_module(result)
    except PositionedError as e:
        raise HloParseError(e.message, location_at(text, e.pos, filename)) from None
    except RecursionError:
        raise HloParseError("input is nested too deeply", location_at(text, 0, filename)) from None
    if verify:
        verify_module(module)
    return module


_SPLIT = re.compile(r"^// -----[ \t]*$", re.M)


def parse_modules(text: str, filename: str = "<string>", verify: bool = True, *,
                  fast_path: bool | None = None) -> list[HloModule]:
    """Parse a file holding several modules separated by ``// -----`` lines (hlo-opt's
    ``--split-input-file``). Locations refer to lines of the whole file. ``fast_path`` as for
    ``parse_module``."""
    modules = []
    start = 0
    pieces = []
    for m in _SPLIT.finditer(text):
        pieces.append((start, m.start()))
        start = m.end()
    pieces.append((start, len(text)))
    for a, b in pieces:
        chunk = text[a:b]
        if not chunk.strip() or not re.sub(r"//[^\n]*|/\*.*?\*/", "", chunk, flags=re.S).strip():
            continue
        # keep offsets: lines and columns match the file (every character before the chunk but
        # newlines a space; by lines: a regex substitution per character took ~1 s per corpus pass)
        padded = "\n".join(" " * len(line) for line in text[:a].split("\n")) + chunk
        modules.append(parse_module(padded, filename, verify, fast_path=fast_path))
    return modules


def parse_shape(text: str) -> Shape:
    """Parse a shape such as ``f32[2,3]{0,1}`` or ``(f32[], s32[4])``."""
    try:
        return parse_shape_text(text)
    except ShapeError as e:
        raise HloParseError(str(e), location_at(text, e.offset, "<shape>")) from None
