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


def op(*names: str) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the handler of every opcode in ``names``."""
    def wrap(fn: Handler) -> Handler:
        for n in names:
            if n in OPS:
                raise ValueError(f"opcode {n} registered twice")
            OPS[n] = fn
        return fn
    return wrap
