"""The computation partitioner: splits a fused computation into subgraphs, one function each.

A value read at several different indices must not be recomputed inline at each reader's
index inside one straight-line body without care, and must not be computed once and reused
either: it is a function of its index. So, as XLA's emitters do, the fused computation is cut
into subgraphs:

- the fusion's outputs (the roots, a tuple root's operands) form the root subgraph (roots of
  different dims, e.g. a root and its bitcast, each group in a subgraph of its own);
- an instruction with a single user (counting repeated operands as one user) joins that
  user's subgraph: it is evaluated wherever its user needs it;
- an instruction with several users joins them only if they all lie in one subgraph and all
  read it at the same index relative to that subgraph's root (the composed indexing maps are
  equal); otherwise it becomes the root of a subgraph of its own, emitted as a function of
  its index that each reader calls.

Parameters and constants belong to no subgraph: every reader loads them directly.
For ``add(log(p), transpose(log(p)))`` this gives {add, transpose} and {log}: with the
kernel entry that calls the root subgraph, three functions.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...hlo import HloComputation, HloInstruction
from ...hlo.opcodes import ELEMENTWISE
from ...indexing.affine import DIM, Var
from ...indexing.indexing_map import IndexingMap, compose
from ...indexing.op_maps import output_to_input
from ...indexing.simplifier import simplify

_LEAVES = ("parameter", "constant")


@dataclass
class Subgraph:
    """Instructions evaluated together in one function of the root's output index."""

    name: str
    roots: list[HloInstruction]
    instructions: list[HloInstruction] = field(default_factory=list)  # post-order
    preloads: list[HloInstruction] | None = None  # see PartitionedComputation.reads_at_root_index


@dataclass
class PartitionedComputation:
    computation: HloComputation
    subgraphs: list[Subgraph]                       # the fusion roots' subgraphs first
    subgraph_of: dict[HloInstruction, Subgraph]    # instruction → its subgraph (not leaves)
    index_from_root: dict[HloInstruction, IndexingMap | None] = field(default_factory=dict)

    def reads_at_root_index(self, sg: Subgraph) -> list[HloInstruction]:
        """Parameters that ``sg`` reads exactly at its roots' index (operands of elementwise
        instructions evaluated at the root index): the loop emitter loads them up front."""
        if sg.preloads is None:
            sg.preloads = self._reads_at_root_index(sg)
        return sg.preloads

    def _reads_at_root_index(self, sg: Subgraph) -> list[HloInstruction]:
        out: list[HloInstruction] = []
        for inst in sg.instructions:
            m = self.index_from_root.get(inst)
            if inst.opcode not in ELEMENTWISE or m is None or not _is_identity(m):
                continue
            for op in inst.operands:
                if (op.opcode == "parameter" and op.shape.is_array and op not in out
                        and tuple(op.shape.dimensions) == tuple(inst.shape.dimensions)):
                    out.append(op)
        return sorted(out, key=lambda p: p.parameter_number)

    def is_subgraph_root(self, inst: HloInstruction) -> bool:
        sg = self.subgraph_of.get(inst)
        return sg is not None and inst in sg.roots

    def flattened_size(self) -> int:
        """Instructions the fusion's subgraphs come to once every call is inlined: each call
        of a subgraph copies its body, and the bodies of the subgraphs it calls in turn.

        A chain of subgraphs that each call the two before it (threefry's rounds: ``x0 + x1``
        and ``rotl(x1) ^ (x0 + x1)`` both read both) is linear here as a DAG but exponential
        once flattened, which is what LLVM's always-inliner does before any CSE can merge the
        copies. Calls at several indices count once (an under-estimate there is harmless)."""
        callees: dict[int, list[Subgraph]] = {}
        for sg in self.subgraphs:
            seen: dict[int, Subgraph] = {}
            for inst in sg.instructions:
                for op in inst.operands:
                    other = self.subgraph_of.get(op)
                    if other is not None and other is not sg:
                        seen.setdefault(id(other), other)
            callees[id(sg)] = list(seen.values())
        size: dict[int, int] = {}
        for start in self.subgraphs:  # iterative post-order DFS (deep chains: no recursion)
            if id(start) in size:
                continue
            stack, on_path = [(start, False)], set()
            while stack:
                sg, expanded = stack.pop()
                if id(sg) in size or not expanded and id(sg) in on_path:  # (a cycle: no partition has one)
                    continue
                if expanded:
                    on_path.discard(id(sg))
                    size[id(sg)] = len(sg.instructions) + sum(size.get(id(c), 0) for c in callees[id(sg)])
                    continue
                on_path.add(id(sg))
                stack.append((sg, True))
                stack.extend((c, False) for c in callees[id(sg)] if id(c) not in size and id(c) not in on_path)
        roots = {id(self.subgraph_of[r]) for r in fusion_roots(self.computation) if r in self.subgraph_of}
        return sum(size[i] for i in roots) if roots else sum(size.values())

    def to_text(self) -> str:
        lines = []
        for sg in self.subgraphs:
            roots = ", ".join(r.name for r in sg.roots)
            body = ", ".join(i.name for i in sg.instructions)
            lines.append(f"subgraph {sg.name}: roots [{roots}] instructions [{body}]")
        return "\n".join(lines)


def _is_identity(m: IndexingMap) -> bool:
    """``(d0, ..., dn) -> (d0, ..., dn)`` with nothing else (checked structurally: cheap)."""
    if m.ranges or m.rts or m.constraints or len(m.exprs) != len(m.dims):
        return False
    return all(isinstance(e, Var) and e.kind == DIM and e.index == i for i, e in enumerate(m.exprs))


def fusion_roots(comp: HloComputation) -> list[HloInstruction]:
    """The fusion's outputs: a tuple root's operands, else the root."""
    root = comp.root
    return list(root.operands) if root.opcode == "tuple" else [root]


def _root_dims(r: HloInstruction) -> tuple[int, ...]:
    shape = r.shape.tuple_shapes[0] if r.shape.is_tuple else r.shape
    return tuple(shape.dimensions)


def _operand_maps(user: HloInstruction, operand: HloInstruction,
                  entries_of: dict[int, list] | None = None) -> list[IndexingMap] | None:
    """Maps from ``user``'s output index to ``operand``'s (None when unknown or ambiguous);
    ``entries_of``: ``output_to_input(user, 0)`` by user id, kept over one partitioning
    (a user is asked once per operand)."""
    if user.shape.is_tuple:
        return None
    maps: list[IndexingMap] = []
    entries = None if entries_of is None else entries_of.get(id(user))
    if entries is None:
        entries = output_to_input(user, 0)
        if entries_of is not None:
            entries_of[id(user)] = entries
    for op, entry in zip(user.operands, entries):
        if op is not operand:
            continue
        if entry is None or len(entry) != 1 or entry[0].rts:
            return None
        maps.append(entry[0])
    return maps


def partition(comp: HloComputation, name_prefix: str = "") -> PartitionedComputation:
    """The subgraphs of ``comp`` (see the module doc). Roots of one dims share a subgraph unless
    that makes subgraphs call each other in a cycle (a root read by another subgraph that the
    group's other roots read: ``t = tuple(b, compare(select(b, x, x), ..))`` with the select
    shared by a transpose): such roots get a subgraph of their own."""
    alone: set[int] = set()
    while True:
        pc = _partition(comp, name_prefix, alone)
        more = _roots_closing_cycles(pc) - alone
        if not more:
            return pc
        alone |= more


def _roots_closing_cycles(pc: PartitionedComputation) -> set[int]:
    """Roots of multi-root subgraphs that a subgraph on a cycle of calls reads."""
    calls: dict[int, set[int]] = {id(sg): set() for sg in pc.subgraphs}
    by_id = {id(sg): sg for sg in pc.subgraphs}
    for sg in pc.subgraphs:
        for inst in sg.instructions:
            for op in inst.operands:
                other = pc.subgraph_of.get(op)
                if other is not None and other is not sg:
                    calls[id(sg)].add(id(other))
    out: set[int] = set()
    for sg in pc.subgraphs:
        for callee in calls[id(sg)]:
            target = by_id[callee]
            if len(target.roots) > 1 and _reaches(calls, callee, id(sg)):
                out |= {id(op) for inst in sg.instructions for op in inst.operands if op in target.roots}
    return out


def _reaches(calls: dict[int, set[int]], start: int, goal: int) -> bool:
    seen, stack = set(), [start]
    while stack:
        node = stack.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(calls[node])
    return False


def _partition(comp: HloComputation, name_prefix: str, alone: set[int]) -> PartitionedComputation:
    roots = list(dict.fromkeys(fusion_roots(comp)))
    # roots are grouped by their dims: each group is evaluated at its own output index
    groups: dict[tuple, list[HloInstruction]] = {}
    for r in roots:
        if r.opcode not in _LEAVES:
            groups.setdefault(("alone", id(r)) if id(r) in alone else _root_dims(r), []).append(r)
    root_groups = list(groups.values()) or [[comp.root]]
    subgraph_of: dict[HloInstruction, Subgraph] = {}
    index_from_root: dict[HloInstruction, IndexingMap | None] = {}
    entries_of: dict[int, list] = {}
    subgraphs = []
    for group in root_groups:
        sg = Subgraph(f"{name_prefix}{group[0].name}", group)
        subgraphs.append(sg)
        for r in group:
            subgraph_of[r] = sg
            index_from_root[r] = IndexingMap.identity(r.shape.dimensions) if r.shape.is_array else None
    for inst in reversed(comp.instructions):
        if inst in subgraph_of or inst.opcode in _LEAVES or inst is comp.root and inst.opcode == "tuple":
            continue
        users = list(dict.fromkeys(u for u in inst.users))
        sg = _joined_subgraph(inst, users, subgraph_of, index_from_root, entries_of)
        if sg is None:
            sg = Subgraph(f"{name_prefix}{inst.name}", [inst])
            subgraphs.append(sg)
            index_from_root[inst] = IndexingMap.identity(inst.shape.dimensions) if inst.shape.is_array else None
        subgraph_of[inst] = sg
    for inst in comp.instructions:
        sg = subgraph_of.get(inst)
        if sg is not None:
            sg.instructions.append(inst)
    return PartitionedComputation(comp, subgraphs, subgraph_of, index_from_root)


def _joined_subgraph(inst, users, subgraph_of, index_from_root, entries_of=None) -> Subgraph | None:
    """The users' subgraph if ``inst`` may be evaluated inside it, else None."""
    user_sgs = {id(subgraph_of.get(u)) for u in users}
    if len(users) == 0 or None in (subgraph_of.get(u) for u in users):
        return None
    if len(users) == 1:
        u = users[0]
        index_from_root[inst] = _through(u, inst, index_from_root, entries_of)
        return subgraph_of[u]
    if len(user_sgs) != 1:
        return None
    seen: set = set()
    first: IndexingMap | None = None
    for u in users:
        m = _through(u, inst, index_from_root, entries_of)
        if m is None:
            return None
        seen.add(m.key())
        first = m
    if len(seen) != 1:
        return None
    index_from_root[inst] = first
    return subgraph_of[users[0]]


def _through(user, inst, index_from_root, entries_of=None) -> IndexingMap | None:
    """The subgraph root's index → ``inst``'s index, when read through ``user``."""
    outer = index_from_root.get(user)
    maps = _operand_maps(user, inst, entries_of)
    if outer is None or not maps:
        return None
    composed = {}
    for m in maps:
        if _is_identity(outer):
            c = m
        elif _is_identity(m):
            c = outer
        else:
            c = simplify(compose(outer, m)).remove_unused_symbols()
        composed.setdefault(c.key(), c)
    if len(composed) != 1:
        return None
    return next(iter(composed.values()))
