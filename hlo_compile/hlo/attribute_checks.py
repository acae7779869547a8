"""Validation of attributes we keep as text (aliasing, sharding, replica groups, accuracy...).

These are not interpreted by the compiler yet, but malformed ones must still be rejected
the way XLA's parser rejects them. Each checker returns the text unchanged or raises
``ValueError`` with a message in words.
"""
from __future__ import annotations

import math
import re

_SHAPE_INDEX = r"\{\s*(?:-?\d+\s*(?:,\s*-?\d+\s*)*)?\}"


def _shape_index(text: str, pos: int) -> int:
    """Parse ``{i, j}`` at ``pos``; returns the end offset."""
    pos = _ws(text, pos)
    if pos >= len(text) or text[pos] != "{":
        raise ValueError("Expects '{' at the start of ShapeIndex")
    end = text.find("}", pos)
    if end < 0:
        raise ValueError("Expects '}' at the end of ShapeIndex")
    body = text[pos + 1:end]
    for item in (x.strip() for x in body.split(",")):
        if item and not re.fullmatch(r"-?\d+", item):
            if ":" in item or "(" in item:
                raise ValueError("Expects '}' at the end of ShapeIndex")
            raise ValueError(f"expects integer in ShapeIndex, got '{item}'")
    return end + 1


def _ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _int_at(text: str, pos: int) -> int:
    m = re.compile(r"-?\d+").match(text, _ws(text, pos))
    if not m:
        raise ValueError(f"expects integer, got '{text[_ws(text, pos):_ws(text, pos) + 10]}'")
    return m.end()


def _param_and_index(text: str, pos: int) -> int:
    """``(param, {index}[, kind])`` at pos."""
    pos = _ws(text, pos)
    if not text.startswith("(", pos):
        raise ValueError("expects '(' before the parameter number")
    pos = _int_at(text, pos + 1)
    pos = _ws(text, pos)
    if not text.startswith(",", pos):
        raise ValueError("expects ',' after the parameter number")
    pos = _shape_index(text, pos + 1)
    pos = _ws(text, pos)
    if text.startswith(",", pos):
        m = re.compile(r"\s*(may-alias|must-alias)").match(text, pos + 1)
        if not m:
            raise ValueError("expects may-alias or must-alias")
        pos = m.end()
    pos = _ws(text, pos)
    if not text.startswith(")", pos):
        raise ValueError("expects ')' to close the aliased parameter")
    return pos + 1


def _entries(raw: str, entry) -> str:
    text = raw.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("expects a {...} list")
    body = text[1:-1]
    pos = _ws(body, 0)
    while pos < len(body):
        pos = _ws(body, entry(body, pos))
        if pos < len(body):
            if body[pos] != ",":
                raise ValueError("Expects '}' at the end of aliasing description")
            pos = _ws(body, pos + 1)
    return raw


def check_input_output_alias(raw: str) -> str:
    def entry(body: str, pos: int) -> int:
        pos = _shape_index(body, pos)
        pos = _ws(body, pos)
        if not body.startswith(":", pos):
            raise ValueError("expects ':' after the output ShapeIndex")
        return _param_and_index(body, pos + 1)
    return _entries(raw, entry)


def check_buffer_donor(raw: str) -> str:
    return _entries(raw, _param_and_index)


_IOTA = re.compile(r"\[([\d,\s]*)\]\s*<=\s*\[([\d,\s]*)\](?:T\(([\d,\s]*)\))?")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def check_iota_list(raw: str) -> None:
    m = _IOTA.fullmatch(raw.strip())
    if m:
        dims, reshape = _ints(m.group(1)), _ints(m.group(2))
        if math.prod(dims) != math.prod(reshape):
            raise ValueError(f"iota list {raw.strip()}: the reshape dimensions' product {math.prod(reshape)} "
                             f"does not match the tile assignment dimensions product {math.prod(dims)}")


_MESH = re.compile(r"mesh\[(.*?)\]\s*(?:\{(.*)\})?", re.S)


def check_replica_groups(raw: str) -> str:
    text = raw.strip()
    if text.startswith("["):
        check_iota_list(text)
    elif text.startswith("mesh"):
        m = _MESH.fullmatch(text)
        if not m:
            raise ValueError("expects mesh[...] {axes}")
        axes = []
        device_ids = None
        for part in re.split(r",\s*(?![^()]*\))", m.group(1)):
            part = part.strip()
            if part.startswith("device_ids="):
                device_ids = _ints(part[len("device_ids="):].strip("()"))
            elif part:
                name, _, size = part.partition("=")
                axes.append((name.strip().strip("'\""), int(size)))
        total = math.prod(s for _, s in axes)
        if device_ids is not None and len(device_ids) != total:
            raise ValueError(f"mesh has {total} devices but device_ids lists {len(device_ids)}")
        names = [n for n, _ in axes]
        for sel in re.findall(r"'([^']*)'|\"([^\"]*)\"", m.group(2) or ""):
            sel = sel[0] or sel[1]
            if sel in names:
                continue
            if sel.isdigit():
                if int(sel) >= len(names):
                    raise ValueError(f"axis index {sel} is out of bounds for mesh with {len(names)} axes")
                continue
            raise ValueError(f"'{sel}' is not a valid axis name or index of the mesh")
    return raw


def check_sharding(raw: str) -> str:
    for m in re.finditer(r"devices=\[([\d,\s]*)\]\s*(<=\s*\[[\d,\s]*\](?:T\([\d,\s]*\))?|[\d,\s]*)", raw):
        dims = _ints(m.group(1))
        rest = m.group(2).strip()
        if rest.startswith("<="):
            reshape = _ints(re.match(r"<=\s*\[([\d,\s]*)\]", rest).group(1))
            if math.prod(reshape) != math.prod(dims):
                raise ValueError(f"sharding iota {rest} does not match the tile assignment size {math.prod(dims)}")
        else:
            devices = _ints(rest.rstrip(","))
            if len(devices) != math.prod(dims):
                raise ValueError(f"sharding lists {len(devices)} devices, which does not match the tile "
                                 f"assignment size {math.prod(dims)}")
    return raw


_LOG_MODES = ("default", "fusion_debugger", "none", "disabled")


def check_debug_attributes(raw: str) -> str:
    for mode in re.findall(r"log_mode=([A-Za-z_]+)", raw):
        if mode not in _LOG_MODES:
            raise ValueError(f"Invalid debug_log_mode value: {mode}")
    return raw


_ACCURACY_MODES = ("default", "highest")


def check_result_accuracy(raw: str) -> str:
    text = raw.strip()
    m = re.fullmatch(r"\{\s*mode\s*=\s*([A-Za-z_]+)\s*\}", text)
    if m:
        if m.group(1).lower() not in _ACCURACY_MODES:
            raise ValueError(f"unknown result_accuracy mode '{m.group(1)}' (expects default or highest)")
        return raw
    m = re.fullmatch(r"\{\s*tolerance\s*=\s*\{(.*)\}\s*\}", text, re.S)
    if not m:
        raise ValueError("result_accuracy expects {mode=...} or {tolerance={atol=..., rtol=..., ulps=...}}")
    for item in m.group(1).split(","):
        key, _, value = item.partition("=")
        if key.strip() not in ("atol", "rtol", "ulps"):
            raise ValueError(f"unknown result_accuracy tolerance field '{key.strip()}'")
        try:
            float(value)
        except ValueError:
            raise ValueError(f"result_accuracy {key.strip()} expects a number, got '{value.strip()}'") from None
    return raw


CHECKERS = {
    "input_output_alias": check_input_output_alias,
    "buffer_donor": check_buffer_donor,
    "replica_groups": check_replica_groups,
    "sharding": check_sharding,
    "debug_attributes": check_debug_attributes,
    "result_accuracy": check_result_accuracy,
}
