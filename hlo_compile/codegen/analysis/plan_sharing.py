"""One emitter plan for every fusion of the same structure (issue 17: plan once per kernel).

A model repeats its layers: Llama 8B's 6,804 fusions are 294 distinct kernels, and planning
(partitioning, indexing maps, the simplifier) costs the same for every copy. Fusions with the
same ``plan_key`` (the fused computation's fingerprint, the fusion's shapes and its own
attributes: everything an emitter's planner reads) get the same plan, so the first one is
planned and the others take a copy of its ``KernelSpec`` with every reference to the first
fusion's instructions re-pointed at their own (``retarget``): the plan's reports, maps and
buffers name the fusion they describe. Each fusion still gets its own analysis (cheap: the
hero search); where it does not choose what the first fusion's did, the fusion is planned on
its own. The copy is a plan for reports, launch and buffers; a kernel that is emitted is
planned afresh (``plan_module``), so the emitted IR never depends on another fusion's names.
"""
from __future__ import annotations

import dataclasses
import re
from enum import Enum
from typing import Any

from ...hlo import HloComputation, HloInstruction
from ...hlo.fingerprint import computation_fingerprint
from ...indexing.affine import Expr
from ...indexing.indexing_map import IndexingMap
from .fusion_analysis import FusionAnalysis
from ..elemental.partitioner import Subgraph
from ...indexing.memo import BoundedMemo

# the fusion's attributes that do not change its kernel
_NOT_PLANNED = frozenset({"calls", "metadata", "statistics", "control-predecessors", "frontend_attributes"})


def plan_key(fusion: HloInstruction, memo: dict[int, str] | None = None) -> tuple:
    """What an emitter's planner reads from ``fusion``: the fused computation (by fingerprint:
    opcodes, shapes and layouts, attributes, constants), the fusion's output and operand
    shapes and its own attributes but its name and metadata. Equal keys give equal plans."""
    own = tuple(sorted((n, a.raw) for n, a in fusion.attributes.items() if n not in _NOT_PLANNED))
    return (computation_fingerprint(fusion.fused_computation, memo), _shape_text(fusion.shape),
            tuple(_shape_text(o.shape) for o in fusion.operands), own)


_SHAPE_TEXTS: BoundedMemo[str] = BoundedMemo(4096)


def _shape_text(shape) -> str:
    """``str(shape)``, kept per shape (frozen; equal shapes print alike): a module's fusions
    share few shapes, and printing one is most of ``plan_key`` after the fingerprint."""
    return _SHAPE_TEXTS.get(shape, lambda: str(shape))  # (unhashable shapes: printed each time)


class SharedPlans:
    """Planning state of one module: the first plan of each ``plan_key`` with its analysis'
    ``analysis_signature``, and the fingerprints computed so far (by computation id)."""

    def __init__(self) -> None:
        self.first: dict[tuple, tuple[Any, tuple]] = {}
        self.fingerprints: dict[int, str] = {}


def analysis_signature(analysis: FusionAnalysis) -> tuple:
    """What must match between two analyses for one plan to serve both: the emitters, the
    variant and where the roots and heroes are (positions in the fused computation)."""
    position = {id(inst): k for k, inst in enumerate(analysis.computation.instructions)}
    return (analysis.xla_emitter, analysis.emitter, analysis.variant,
            tuple(position.get(id(r)) for r in analysis.roots), tuple(position.get(id(h)) for h in analysis.heroes),
            None if analysis.hero_reduce is None else position.get(id(analysis.hero_reduce)),
            analysis.smallest_input_bits, analysis.smallest_output_bits)


class Correspondence:
    """The instructions and computations of one fusion paired with those of another of the
    same ``plan_key`` (same order: the fingerprints are equal), and their names."""

    def __init__(self, source: HloInstruction, target: HloInstruction):
        self.objects: dict[int, Any] = {id(source): target}
        self.names: dict[str, str] = {source.name: target.name}
        self._pair(source.fused_computation, target.fused_computation)

    def _pair(self, a: HloComputation, b: HloComputation) -> None:
        if id(a) in self.objects:
            return
        self.objects[id(a)] = b
        if len(a.instructions) != len(b.instructions):
            raise ValueError(f"computations {a.name} and {b.name} differ")
        for x, y in zip(a.instructions, b.instructions):
            self.objects[id(x)] = y
            self.names.setdefault(x.name, y.name)
            for name, attr in x.attributes.items():
                if name not in y.attributes:   # one the fingerprint ignores (metadata...): no computation
                    continue
                v, w = attr.value, y.attributes[name].value
                if isinstance(v, HloComputation):
                    self._pair(v, w)
                elif isinstance(v, (list, tuple)) and v and all(isinstance(c, HloComputation) for c in v):
                    for c, d in zip(v, w):
                        self._pair(c, d)

    def text(self, s: str) -> str:
        """``s`` with each ``%name`` of the source fusion's instructions renamed."""
        if "%" not in s:
            return s
        return _NAME.sub(lambda m: "%" + self.names.get(m.group(1), m.group(1)), s)


_NAME = re.compile(r"%([A-Za-z_][\w.\-]*)")
_ATOMS = (str, int, float, bool, bytes, type(None), Enum, Expr, range)


def retarget(value: Any, corr: Correspondence, _seen: dict[int, Any] | None = None) -> Any:
    """``value`` with every instruction and computation of the source fusion replaced by the
    target's (through lists, tuples, dicts, sets and dataclasses; string keys naming an
    instruction and ``%name`` in strings renamed). Objects holding nothing to replace are
    returned as they are (never copied: emitters compare some by identity)."""
    seen = {} if _seen is None else _seen
    if isinstance(value, (HloInstruction, HloComputation)):
        return corr.objects.get(id(value), value)
    if isinstance(value, str):
        return corr.text(value)
    if isinstance(value, _ATOMS) or isinstance(value, type):
        return value
    key = id(value)
    if key in seen:
        return seen[key]
    seen[key] = value  # a cycle back to it: left as is
    out = _retarget_inner(value, corr, seen)
    seen[key] = out
    return out


def _retarget_inner(value: Any, corr: Correspondence, seen: dict[int, Any]) -> Any:
    if isinstance(value, IndexingMap):  # the expressions hold no instruction; runtime sources may
        if not value.rt_sources:
            return value
        sources = retarget(value.rt_sources, corr, seen)
        return value if sources is value.rt_sources else dataclasses.replace(value, rt_sources=sources)
    if isinstance(value, list):
        items = [retarget(v, corr, seen) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(value, tuple):
        items = [retarget(v, corr, seen) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        pairs = [(corr.names.get(k, k) if isinstance(k, str) else retarget(k, corr, seen), retarget(v, corr, seen))
                 for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items())):
            return value
        return dict(pairs)
    if isinstance(value, (set, frozenset)):
        items = [retarget(v, corr, seen) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
    if dataclasses.is_dataclass(value):
        state = vars(value) if hasattr(value, "__dict__") else {f.name: getattr(value, f.name)
                                                                 for f in dataclasses.fields(value)}
        changed = {k: retarget(v, corr, seen) for k, v in state.items()}
        if all(changed[k] is v for k, v in state.items()):
            return value
        if isinstance(value, Subgraph) and value.roots and value.name.endswith(value.roots[0].name):
            # named after its first root (``partitioner``): after the target's
            changed["name"] = value.name[:len(value.name) - len(value.roots[0].name)] + changed["roots"][0].name
        out = object.__new__(type(value))
        for k, v in changed.items():
            object.__setattr__(out, k, v)
        return out
    return value
