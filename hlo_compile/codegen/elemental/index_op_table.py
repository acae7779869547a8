"""The opcode table of the elemental emitter's index-transforming ops, one function per opcode.

``index_ops`` (broadcast, reshape, slice, pad, gather, reduce...), ``elemental_contraction``
(dot, convolution) and ``elemental_select_scatter`` register their handlers here with
``@index_op``; ``FusedEmitter`` looks an instruction's opcode up. A handler gets the
``FusedEmitter``, the instruction and its output index, computes the index its operands are
read at, recurses through ``fe.value`` and returns the value.
"""
from __future__ import annotations

from typing import Callable

Handler = Callable[..., object]  # (FusedEmitter, instruction, index) -> value
INDEX_OPS: dict[str, Handler] = {}


def index_op(*names: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of every opcode in ``names``."""
    def register(fn: Handler) -> Handler:
        for n in names:
            if n in INDEX_OPS:
                raise ValueError(f"index op {n} registered twice")
            INDEX_OPS[n] = fn
        return fn
    return register
