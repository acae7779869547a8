"""The opcode table of the interpreter: one small function per opcode, registered by name.

A handler is ``fn(ev, inst, operands) -> value`` where ``ev`` is the running ``Evaluator``
(for called computations, the seed, ...), ``inst`` the instruction and ``operands`` the
already-evaluated operand values (numpy arrays, tuples of values, or ``TOKEN``).
"""
from __future__ import annotations

from typing import Any, Callable

Handler = Callable[[Any, Any, list], Any]

OPS: dict[str, Handler] = {}


class Token:
    """The value of a token (after-all, infeed/outfeed ordering): carries nothing."""

    def __repr__(self) -> str:
        return "TOKEN"


TOKEN = Token()


def registrar(table: dict[str, Handler], what: str) -> Callable[..., Callable[[Handler], Handler]]:
    """A decorator factory registering a handler under names in ``table`` (each name once;
    ``what`` names the kind of key in the error)."""
    def register(*names: str) -> Callable[[Handler], Handler]:
        def wrap(fn: Handler) -> Handler:
            for n in names:
                if n in table:
                    raise ValueError(f"{what} {n} registered twice")
                table[n] = fn
            return fn
        return wrap
    return register


# ``@op(*opcodes)``: register ``fn`` as the handler of every opcode named
op = registrar(OPS, "opcode")
