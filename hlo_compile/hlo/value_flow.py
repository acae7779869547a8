"""Where the bits of a value go: a forward flow of tuple leaves through the ops that only move
data, across tuples, ``opt-barrier``, ``while``, ``call`` and ``conditional``.

Used to check that a value whose exact bits this project does not reproduce (Transformer
Engine's ``rng_state``, for one) is only ever *read* by the call that understands it: the
flow follows the value through everything that merely stores or moves it (a scan stacking it
into its carry with ``dynamic-update-slice`` and reading it back with ``dynamic-slice`` in a
later loop, a rematerialisation barrier...) and reports every other reader, and whether it
reaches the module's result.

A tainted path ``p`` of an instruction means every leaf of its shape under tuple index ``p``
may hold those bits (``()``: the whole value). Array movers taint their whole result when a
data operand is tainted; reading a tainted value anywhere else (an index operand, a predicate,
arithmetic, a fusion) is a reader.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from .ir import HloComputation, HloInstruction, HloModule

Path = tuple[int, ...]

# array ops whose result holds their data operands' bits, moved, never computed on:
# opcode -> the operand positions that carry data (None: all of them)
_ARRAY_MOVERS: dict[str, tuple[int, ...] | None] = {
    "copy": (0,), "bitcast": (0,), "reshape": (0,), "transpose": (0,), "broadcast": (0,), "slice": (0,),
    "reverse": (0,), "dynamic-slice": (0,), "dynamic-update-slice": (0, 1), "pad": (0, 1),
    "concatenate": None,
}


@dataclass
class Flow:
    """The result of ``follow``: ``readers`` are ``(instruction, operand index)`` pairs that
    read the tainted bits other than to move them; ``reaches_result``: the entry's result holds
    some of them; ``tainted``: the instructions that hold them (by id)."""

    readers: list[tuple[HloInstruction, int]] = field(default_factory=list)
    reaches_result: bool = False
    tainted: dict[int, set[Path]] = field(default_factory=dict)


class _CallSites:
    """For each computation of a module, the instructions that call it as a while body or
    condition, a call's ``to_apply`` or a conditional branch (by computation id)."""

    def __init__(self, module: HloModule):
        self.sites: dict[int, list[HloInstruction]] = {}
        for comp in module.computations:
            for inst in comp.instructions:
                if inst.opcode in ("while", "call", "conditional"):
                    for callee in inst.called_computations():
                        self.sites.setdefault(id(callee), []).append(inst)

    def of(self, comp: HloComputation | None) -> list[HloInstruction]:
        return self.sites.get(id(comp), []) if comp is not None else []


def _branches(inst: HloInstruction) -> list[HloComputation]:
    if inst.has_attr("branch_computations"):
        return list(inst.attr("branch_computations"))
    return [inst.attr("true_computation"), inst.attr("false_computation")]


def _callee_params(inst: HloInstruction, operand: int) -> list[HloInstruction]:
    """The parameters of ``inst``'s callees that receive its operand ``operand`` (while, call,
    conditional); [] when that operand is not passed on (a conditional's branch index)."""
    if inst.opcode == "while":
        return [inst.attr("body").parameter(0), inst.attr("condition").parameter(0)]
    if inst.opcode == "call":
        return [inst.attr("to_apply").parameter(operand)]
    if operand == 0:
        return []
    return [_branches(inst)[operand - 1].parameter(0)]


class _Follower:
    def __init__(self, module: HloModule, sites: _CallSites):
        self.module = module
        self.sites = sites
        self.flow = Flow()
        self.queue: deque[HloInstruction] = deque()
        self._reported: set[tuple[int, int]] = set()

    def taint(self, inst: HloInstruction, paths: Iterable[Path]) -> None:
        have = self.flow.tainted.setdefault(id(inst), set())
        new = {p for p in paths if not any(p[:len(q)] == q for q in have)}
        if new:
            have |= new
            self.queue.append(inst)

    def paths(self, inst: HloInstruction) -> set[Path]:
        return self.flow.tainted.get(id(inst), set())

    def read(self, user: HloInstruction, operand: int) -> None:
        key = (id(user), operand)
        if key not in self._reported:
            self._reported.add(key)
            self.flow.readers.append((user, operand))

    def run(self) -> Flow:
        while self.queue:
            inst = self.queue.popleft()
            paths = self.paths(inst)
            for user in inst.users:
                for k, op in enumerate(user.operands):
                    if op is inst:
                        self.move(user, k, paths)
            comp = inst.parent
            if inst.is_root:
                if comp is self.module.entry:
                    self.flow.reaches_result = True
                for site in self.sites.of(comp):
                    if site.opcode == "while" and comp is site.attr("condition"):
                        self.read(site, 0)          # the bits decide the trip count
                        continue
                    self.taint(site, paths)
                    if site.opcode == "while":      # the body's result is the next trip's parameter
                        for param in _callee_params(site, 0):
                            self.taint(param, paths)
        return self.flow

    def move(self, user: HloInstruction, k: int, paths: set[Path]) -> None:
        """Carry ``paths`` of ``user``'s operand ``k`` into ``user`` (or report the read)."""
        op = user.opcode
        if op == "get-tuple-element":
            i = user.tuple_index
            self.taint(user, [()] if () in paths else [p[1:] for p in paths if p[0] == i])
        elif op == "tuple":
            self.taint(user, [(k,) + p for p in paths])
        elif op == "opt-barrier":
            self.taint(user, paths)
        elif op in ("while", "call", "conditional"):
            params = _callee_params(user, k)
            if not params:
                self.read(user, k)
            for param in params:
                self.taint(param, paths)
            if op == "while":             # zero trips: the result is the operand
                self.taint(user, paths)
        elif op in _ARRAY_MOVERS and (_ARRAY_MOVERS[op] is None or k in _ARRAY_MOVERS[op]):
            self.taint(user, [()])
        else:
            self.read(user, k)


def follow(module: HloModule, sources: Iterable[tuple[HloInstruction, Path]],
           sites: _CallSites | None = None) -> Flow:
    """Follow the bits of each ``(instruction, tuple path)`` of ``sources`` through ``module``."""
    f = _Follower(module, sites or call_sites(module))
    for inst, path in sources:
        f.taint(inst, [path])
    return f.run()


def call_sites(module: HloModule) -> _CallSites:
    """The call sites of ``module``'s computations, to share between several ``follow`` calls."""
    return _CallSites(module)
