"""Async pairs, run synchronously: the work happens at the start, the done reads its result.

Shapes follow XLA exactly:

- ``async-start`` (and the ``X-start`` sugar of any other op X): ``((operands...), result,
  context...)``; ``async-update`` passes it on; ``async-done`` returns element 1. The wrapped
  computation (``calls=``, any ``async_execution_thread``) is evaluated as a whole; the sugar
  evaluates X itself, with X's attributes, on the start's operands;
- ``copy-start``: ``(destination, source, u32[])``, ``copy-done`` returns element 0 (host
  offload ``S(5)`` is only a memory space: the value is the same);
- ``rng-get-and-update-state``: XLA's 128-bit counter, one per instruction, starting at
  0x7012395, returned as u64[2] (low word first) then advanced by ``delta``; the state lives in
  ``Evaluator.rng_states`` which the caller keeps across runs of one executable.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..hlo.collective_groups import base_opcode
from ..hlo.errors import HloUnsupportedError
from ..hlo.ir import HloInstruction
from ..hlo.opcodes import ASYNC_SUGAR_EXCLUDED
from .numerics import dtype_of
from .registry import OPS, TOKEN, Handler, op

RNG_STATE_START = 0x7012395
_MASK64 = (1 << 64) - 1


def _zeros(shape) -> Any:
    if shape.is_tuple:
        return tuple(_zeros(s) for s in shape.tuple_shapes)
    if shape.is_token:
        return TOKEN
    return np.zeros(tuple(shape.dimensions), dtype_of(shape.element_type))


def _start_value(inst: HloInstruction, ops: list, result: Any) -> tuple:
    ctx = tuple(_zeros(s) for s in inst.shape.tuple_shapes[2:])
    return (tuple(ops), result) + ctx


@op("async-start")
def _async_start(ev, inst, ops):
    return _start_value(inst, ops, ev.evaluate(inst.attr("calls"), ops))


@op("async-update")
def _async_update(ev, inst, ops):
    return ops[0]


@op("async-done")
def _async_done(ev, inst, ops):
    return ops[0][1]


@op("copy-start")
def _copy_start(ev, inst, ops):
    return (ops[0], ops[0], np.zeros((), np.uint32))


@op("copy-done")
def _copy_done(ev, inst, ops):
    return ops[0][0]


def _wrapped(inst: HloInstruction, opcode: str) -> HloInstruction:
    """The op an ``X-start`` sugar wraps: X with the start's attributes and its result shape."""
    clone = HloInstruction(inst.name, opcode, inst.shape.tuple_shapes[1], inst.operands, inst.attributes,
                           location=inst.location)
    clone.parent = inst.parent
    return clone


def sugar_handler(opcode: str) -> Handler | None:
    """The handler of ``X-start``/``X-update``/``X-done`` for an op X whose async form is sugar."""
    base = base_opcode(opcode)
    if base == opcode or base in ASYNC_SUGAR_EXCLUDED or base not in OPS:
        return None
    if opcode.endswith("-update"):
        return _async_update
    if opcode.endswith("-done"):
        return _async_done
    inner = OPS[base]

    def start(ev, inst, ops):
        s = inst.shape
        if not (s.is_tuple and len(s.tuple_shapes) >= 2):
            raise HloUnsupportedError(f"{inst.opcode} '%{inst.name}': expected the start shape "
                                      "((operands...), result, context...)", inst.location)
        return _start_value(inst, ops, inner(ev, _wrapped(inst, base), ops))
    return start


@op("rng-get-and-update-state")
def _rng_get_and_update_state(ev, inst, ops):
    states = ev.rng_states
    key = (inst.parent.name if inst.parent is not None else "", inst.name)
    value = states.get(key, RNG_STATE_START)
    states[key] = (value + int(inst.attr("delta"))) & ((1 << 128) - 1)
    return np.array([value & _MASK64, value >> 64], dtype=np.uint64)
