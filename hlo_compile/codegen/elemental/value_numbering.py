"""Structural keys for index values, so that one element is computed once per index.

The fused emitter caches each (instruction, index) it has emitted. Index values are LLVM
values; two users that reach the same operand element through separate index arithmetic
(a reshape and a transpose back, say) build equal but distinct values, and keyed by identity
the operand is emitted twice. Through a chain of partitioned subgraphs, each calling the one
before twice, that is exponential (a 14-deep chain of 24-element values took 40 s on the
host). ``index_key`` gives pure integer arithmetic a key by its structure (opcode, type,
operands' keys), so equal indices share a key. Anything else (loads, calls, arguments) keys
by identity: only arithmetic on the same inputs is known to give the same number.
"""
from __future__ import annotations

import itertools
from typing import Sequence

from llvmlite import ir

_PURE = frozenset({"add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr", "and", "or",
                   "xor", "zext", "sext", "trunc", "icmp", "select"})
_DEPTH = 32  # deeper expressions key by identity (bounded cost)


_interned: dict[tuple, int] = {}
_INTERN_LIMIT = 1 << 20
_numbers = itertools.count(1)


def _intern(structure: tuple) -> int:
    """A small number for a structure, so keys stay flat however deep the expression.
    Clearing the table only costs cache misses (memoised keys keep their old numbers)."""
    number = _interned.get(structure)
    if number is None:
        if len(_interned) >= _INTERN_LIMIT:
            _interned.clear()
        number = _interned[structure] = next(_numbers)  # never reused, even after a clear
    return number


def value_key(v: ir.Value, depth: int = _DEPTH) -> object:
    """A hashable key equal for values that compute the same integer from the same inputs
    (memoised on the value: index expressions share subexpressions)."""
    if isinstance(v, ir.Constant):
        return ("c", str(v.type), v.constant)
    cached = getattr(v, "_structural_key", None)
    if cached is not None:
        return cached
    if depth > 0 and isinstance(v, ir.Instruction) and v.opname in _PURE and isinstance(v.type, ir.IntType):
        extra = getattr(v, "op", "")  # icmp's predicate
        flags = tuple(getattr(v, "flags", ()))
        key = ("k", _intern((v.opname, extra, str(v.type), flags,
                             tuple(value_key(o, depth - 1) for o in v.operands))))
    else:
        key = ("v", id(v))
    try:
        v._structural_key = key
    except AttributeError:  # a value type without a __dict__: not memoised
        pass
    return key


def index_key(index: Sequence[ir.Value]) -> tuple:
    return tuple(map(value_key, index))
