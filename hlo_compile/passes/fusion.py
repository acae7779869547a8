"""Producer-consumer fusion: lone instructions grouped into multi-instruction fusions.

Modules straight from a framework (``jax.jit(f).lower(...)``) have no fusions; without this
pass every op would be a kernel of its own that writes its result to memory for the next one
to read back. XLA's GPU pipeline fuses them (``InstructionFusion``/``PriorityFusion`` with the
rules of ``gpu_fusible.cc``); this pass applies the core of those rules greedily:

* A group starts at a *consumer*: an elementwise op, ``broadcast``, ``reshape``,
  ``transpose``, ``slice``, ``pad``, ``concatenate``, ``reverse``, ``dynamic-slice``, ``iota``
  or a ``reduce`` (an input fusion, ``kind=kInput``, with the reduce as its hero).
* It absorbs its operands' producers, users before producers, while they are *producers*
  (the consumer ops above, ``gather``, and constants of at most ``MAX_FUSED_CONSTANT``
  elements; never a ``reduce``: its consumers would recompute it per element):
  - a producer all of whose users are already in the group moves into it;
  - a producer with users elsewhere is *duplicated* into the group when it is cheap (not one
    of XLA's expensive ops, see ``EXPENSIVE``) and stays where it is for the other users;
    one whose other users all end up reading duplicates disappears (``remove_dead``);
  - an expensive producer is not fused into a consumer that reads each element several
    times (``broadcast``), so fusion never multiplies transcendental work.
* A group stops growing at ``MAX_FUSED_INSTRUCTIONS`` members or ``MAX_FUSION_OPERANDS``
  operands (XLA's limit on operands and outputs is 96; ours is lower to keep kernels short).

Not done (XLA does them): sibling and producer-consumer multi-output fusion, reduction
epilogue fusion, fusing into ``dot``/``convolution``/``scatter``/``sort``/
``dynamic-update-slice`` consumers, and cost-model priorities. Instructions with control
predecessors are left alone. A group of one instruction is left to
``wrap_lone_instructions``, so single ops keep exactly the fusion they had before this pass.
Fusions are named after their root (the instruction the user wrote) and call
``fused_<root>``; their instructions keep their names.
"""
from __future__ import annotations

import heapq
import math

from hlo_compile.hlo.ir import HloInstruction
from hlo_compile.hlo.opcodes import ELEMENTWISE
from hlo_compile.hlo.rewrite import (NameScope, Target, add_computations, computation_of, module_of,
                                     remove_computations, remove_dead, remove_instructions, replace_instructions)

from .fusion_builder import build_fusion

MAX_FUSED_INSTRUCTIONS = 64
MAX_FUSION_OPERANDS = 32
MAX_FUSED_CONSTANT = 64

# XLA's ``HloInstruction::IsElementwise`` ops it counts as expensive (instruction_fusion.cc):
# worth computing once, never duplicated nor recomputed per reuse
EXPENSIVE = frozenset({
    "acos", "acosh", "asin", "asinh", "atan2", "atanh", "cbrt", "cosh", "cosine", "divide", "erf",
    "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "power", "remainder",
    "rsqrt", "sine", "sinh", "sqrt", "tan", "tanh",
})
_INDEX_OPS = frozenset({"broadcast", "reshape", "transpose", "slice", "pad", "concatenate", "reverse",
                        "dynamic-slice", "iota"})
_NOT_FUSED_ELEMENTWISE = frozenset({"rng", "complex", "real", "imag", "stochastic-convert"})
CONSUMERS = (ELEMENTWISE - _NOT_FUSED_ELEMENTWISE) | _INDEX_OPS | {"reduce"}
PRODUCERS = (ELEMENTWISE - _NOT_FUSED_ELEMENTWISE) | _INDEX_OPS | {"gather", "constant"}
# consumers that read an operand element more than once per output element
_REUSING = frozenset({"broadcast"})


def fuse_instructions(target: Target) -> Target:
    """Group the lone instructions of ``target`` (a computation, or a module's ENTRY) into
    fusions; rewrites in place and returns ``target``."""
    comp = computation_of(target)
    order = {id(inst): i for i, inst in enumerate(comp.post_order())}
    moved: set[int] = set()        # instructions that left the computation for a group
    # operands of the groups formed so far: they must stay in the computation even when all
    # their users end up in a later group (a group reads them through a duplicated member);
    # so must the root, whatever reads it (a ROOT need not be the last instruction)
    read: set[int] = {id(comp.root)}
    groups: list[_Group] = []
    for inst in sorted(comp.instructions, key=lambda i: -order[id(i)]):
        if id(inst) in moved or not _can_root(inst):
            continue
        group = _Group(inst, order)
        group.grow(moved, read)
        if len(group.members) > 1:
            groups.append(group)
            read |= group.outside_operands()
    if not groups:
        return target
    module = module_of(comp)
    names = NameScope.of_computations(module)
    replaced: dict[HloInstruction, HloInstruction] = {}
    for group in groups:
        members = sorted(group.members, key=lambda m: order[id(m)])
        kind = "kInput" if group.root.opcode == "reduce" else "kLoop"
        fusion = build_fusion(members, group.root, names.fresh(f"fused_{group.root.name}"), kind)
        replaced[group.root] = fusion
    add_computations(module, [f.fused_computation for f in replaced.values()], before=comp)
    remove_instructions(comp, [i for i in comp.instructions if id(i) in moved])
    replace_instructions(comp, replaced)
    # a producer duplicated into every group that reads it is dead now, and so is a group
    # rooted at one (it was formed before its readers took copies)
    dead = remove_dead(comp, [d for g in groups for d in g.duplicated.values()] + list(replaced.values()))
    remove_computations(module, [f.fused_computation for f in dead if f.opcode == "fusion"])
    return target


def _no_control(inst: HloInstruction) -> bool:
    return not inst.has_attr("control-predecessors")


def _can_root(inst: HloInstruction) -> bool:
    if inst.opcode not in CONSUMERS or not _no_control(inst):
        return False
    return inst.shape.is_array or inst.opcode == "reduce"  # a variadic reduce has a tuple shape


def _is_producer(inst: HloInstruction) -> bool:
    if inst.opcode not in PRODUCERS or not _no_control(inst) or not inst.shape.is_array:
        return False
    if inst.opcode == "constant":
        return math.prod(inst.shape.dimensions) <= MAX_FUSED_CONSTANT
    return True


def _cheap(inst: HloInstruction) -> bool:
    return inst.opcode not in EXPENSIVE and inst.opcode != "gather"


class _Group:
    """A consumer and the producers fused into it. The work per member is bounded by the
    member's operands and the group's limits, never by how many users a producer has
    elsewhere in the module (a shared constant read by every layer)."""

    def __init__(self, root: HloInstruction, order: dict[int, int]):
        self.root = root
        self.order = order
        self.owned: dict[int, HloInstruction] = {id(root): root}      # moved in (and the root)
        self.duplicated: dict[int, HloInstruction] = {}              # copied in, kept outside
        self._outside: set[int] = {id(op) for op in root.operands}   # operands read from outside
        self._owned_readers: dict[int, int] = {}    # producer → owned members that read it
        self._reused_by: set[int] = set()           # producers a _REUSING member reads

    @property
    def members(self) -> list[HloInstruction]:
        return list(self.owned.values()) + list(self.duplicated.values())

    def outside_operands(self) -> set[int]:
        return set(self._outside)

    def _note_reader(self, inst: HloInstruction, owned: bool) -> None:
        for op_id in {id(op) for op in inst.operands}:
            if owned:
                self._owned_readers[op_id] = self._owned_readers.get(op_id, 0) + 1
            if inst.opcode in _REUSING:
                self._reused_by.add(op_id)

    def grow(self, moved: set[int], read: set[int]) -> None:
        heap: list[tuple[int, int, HloInstruction]] = []
        queued: set[int] = set()

        def push_operands(inst: HloInstruction) -> None:
            for op in inst.operands:
                if id(op) not in queued:
                    queued.add(id(op))
                    heapq.heappush(heap, (-self.order[id(op)], id(op), op))
        self._note_reader(self.root, True)
        push_operands(self.root)
        while heap:
            _, _, p = heapq.heappop(heap)  # users before producers: highest post-order first
            if id(p) in moved or not _is_producer(p):
                continue
            if len(self.owned) + len(self.duplicated) >= MAX_FUSED_INSTRUCTIONS:
                return
            # every queued producer is read by a member (operands are pushed only once their
            # reader joined), so its readers in the group are never none
            if p.opcode in EXPENSIVE and id(p) in self._reused_by:
                continue
            owned = self._owned_readers.get(id(p), 0) == len(p.users) and id(p) not in read
            if not owned and not _cheap(p):
                continue
            outside = (self._outside - {id(p)}) | {id(op) for op in p.operands
                                                   if id(op) not in self.owned and id(op) not in self.duplicated}
            if len(outside) > MAX_FUSION_OPERANDS:
                continue
            self._outside = outside
            if owned:
                self.owned[id(p)] = p
                moved.add(id(p))
            else:
                self.duplicated[id(p)] = p
            self._note_reader(p, owned)
            push_operands(p)
