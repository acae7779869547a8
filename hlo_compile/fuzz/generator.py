"""Random valid HLO modules: ``generate(seed, config)``.

ENTRY starts with a parameter or two, then draws ops from the generator table
(``registry.GENERATORS``, filled by ``ops_*.py``) by weight; an op that cannot apply here is
redrawn (SPMD modules, ``FuzzConfig.spmd``: a world of R x P participants in the header, and
collectives as often as the other ops, ``ops_collective``). Values nothing reads become the
outputs (a tuple when there are several). Runs of instructions are then outlined into fusions
or calls. The text is parsed and verified by our front end before it is returned: a module that
does not verify is a generator bug
(``GeneratorError``)."""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from . import ops_collective, ops_compute, ops_control, ops_elementwise, ops_shape  # noqa: F401  (fill the table)
from .builder import ModuleBuilder, Value
from .config import FuzzConfig
from .gen_core import Gen, Stats
from .outline import outline_fusions
from .registry import run_steps
from .shapes import FTuple

MAX_OUTPUTS = 6
# (replicas, partitions) of SPMD modules: R x P in 2, 4, 8
WORLDS = {(1, 2): 3, (2, 1): 2, (1, 4): 2, (2, 2): 4, (4, 1): 2, (1, 8): 1, (2, 4): 2, (4, 2): 2, (8, 1): 1}


class GeneratorError(Exception):
    """The generator produced a module our front end rejects (a bug of the generator or of the
    front end: the text is attached)."""

    def __init__(self, message: str, text: str):
        super().__init__(message)
        self.text = text


@dataclass
class Generated:
    seed: int
    text: str
    stats: Stats
    exact: list[bool] = field(default_factory=list)  # per output leaf, as the generator meant it


def _root(g: Gen) -> Value:
    outputs = [v for v in g.pool if v.uses == 0]
    if not outputs:
        outputs = [g.pool[-1]]
    if len(outputs) > MAX_OUTPUTS:
        outputs = outputs[-MAX_OUTPUTS:]
    if len(outputs) == 1 and g.chance(0.8):
        return outputs[0]
    return g.comp.add("tuple", FTuple(tuple(o.shape for o in outputs)), outputs)


def _leaf_flags(v: Value, comp) -> list[bool]:
    if v.shape.is_tuple:
        inst = comp.inst_of(v)
        if inst.opcode == "tuple":
            return [f for o in inst.operands for f in _leaf_flags(o, comp)]
        return [v.exact] * len(v.shape.leaves())
    return [v.exact]


def generate(seed: int, cfg: FuzzConfig | None = None, *, verify: bool = True) -> Generated:
    """A random module for ``seed`` (deterministic), verified by our parser and verifier."""
    cfg = cfg or FuzzConfig()
    rng = random.Random(seed)
    if rng.random() < cfg.p_big:  # large dims: the tiled transpose, row reductions, bitonic sort, dot tiles
        cfg = dataclasses.replace(cfg, max_elements=cfg.big_elements, max_ops=max(2, cfg.max_ops * 2 // 3))
    mb = ModuleBuilder(f"fuzz_{seed}")
    if cfg.spmd:
        mb.world = rng.choices(list(WORLDS), weights=list(WORLDS.values()))[0]
    entry = mb.comp("main", "entry")
    stats = Stats()
    g = Gen(rng, cfg, mb, entry, stats)
    for _ in range(rng.randint(1, 2)):
        g.add_to_pool(entry.param(g.shape()))
    run_steps(g, rng.randint(1, cfg.max_ops))
    root = _root(g)
    mb.finish(entry, root, root_last=not (cfg.allows("root-not-last") and rng.random() < 0.3))
    exact = _leaf_flags(root, entry)
    if rng.random() < cfg.p_fusion:
        outline_fusions(g, entry, [])
    text = mb.text()
    if verify:
        check_text(text)
    return Generated(seed, text, stats, exact)


def check_text(text: str):
    """Parse and verify ``text`` with our front end; ``GeneratorError`` when it does not."""
    from ..hlo import parse_module
    from ..hlo.errors import HloError
    try:
        return parse_module(text, "<fuzz>")
    except HloError as e:
        raise GeneratorError(str(e), text) from None
