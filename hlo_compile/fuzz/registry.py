"""The table of op generators (DESIGN §7: one small function per op, registered by name).

A generator takes a ``Gen`` and appends one op (plus the operands it needed), returning the
new value, or raises ``GenRefused`` when it cannot apply. ``weight`` is its relative
frequency; ``xla`` whether XLA:CPU can run it through xla_ref; ``feature`` a known-bug feature
(``config.KNOWN_BUG_FEATURES``) it needs; ``nested`` whether it may also run inside a loop
body or conditional branch (where there are no parameters to add); ``spmd`` whether it is a
collective, drawn only for SPMD modules (``FuzzConfig.spmd``), then as often as all the others
together."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .config import FuzzConfig
from .gen_core import Gen, GenRefused


@dataclass(frozen=True)
class OpGen:
    name: str
    fn: Callable
    weight: float
    xla: bool
    feature: str | None
    nested: bool  # may run inside a while body / conditional branch
    spmd: bool = False  # a collective: only in SPMD modules


GENERATORS: dict[str, OpGen] = {}


def op_generator(name: str, weight: float = 1.0, xla: bool = True, feature: str | None = None,
                 nested: bool = True, spmd: bool = False):
    def register(fn: Callable) -> Callable:
        if name in GENERATORS:
            raise ValueError(f"op generator {name} registered twice")
        GENERATORS[name] = OpGen(name, fn, weight, xla, feature, nested, spmd)
        return fn
    return register


def _allowed(cfg: FuzzConfig, gen: Gen) -> list[OpGen]:
    out = []
    for og in GENERATORS.values():
        if cfg.only_ops is not None and og.name not in cfg.only_ops:
            continue
        if cfg.xla_compatible and not og.xla:
            continue
        if og.feature is not None and not cfg.allows(og.feature):
            continue
        if gen.depth and not og.nested:
            continue
        if og.spmd and not cfg.spmd:
            continue
        out.append(og)
    return out


def run_steps(g: Gen, steps: int) -> None:
    """Append ``steps`` ops drawn from the table to ``g``'s computation."""
    table = _allowed(g.cfg, g)
    if not table:
        return
    weights = [og.weight for og in table]
    spmd = sum(w for og, w in zip(table, weights) if og.spmd)
    other = sum(w for og, w in zip(table, weights) if not og.spmd)
    if spmd and other:  # collectives as often as everything else
        weights = [w * other / spmd if og.spmd else w for og, w in zip(table, weights)]
    for _ in range(steps):
        for _attempt in range(6):
            og = g.rng.choices(table, weights=weights)[0]
            try:
                og.fn(g)
                break
            except GenRefused:
                continue
