"""The table of op generators (DESIGN §7: one small function per op, registered by name).

A generator takes a ``Gen`` and appends one op (plus the operands it needed), returning the
new value, or raises ``GenRefused`` when it cannot apply. ``weight`` is its relative
frequency; ``xla`` whether XLA:CPU can run it through xla_ref; ``feature`` a known-bug feature
(``config.KNOWN_BUG_FEATURES``) it needs; ``nested`` whether it may also run inside a loop
body or conditional branch (where there are no parameters to add)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class OpGen:
    name: str
    fn: Callable
    weight: float
    xla: bool
    feature: str | None
    nested: bool  # may run inside a while body / conditional branch


GENERATORS: dict[str, OpGen] = {}


def op_generator(name: str, weight: float = 1.0, xla: bool = True, feature: str | None = None,
                 nested: bool = True):
    def register(fn: Callable) -> Callable:
        if name in GENERATORS:
            raise ValueError(f"op generator {name} registered twice")
        GENERATORS[name] = OpGen(name, fn, weight, xla, feature, nested)
        return fn
    return register
