"""Disjoint reduction groups (XLA's ``GroupDisjointReductions``): roots that share no
computation are reduced by different blocks, one group per ``blockIdx.z``."""
from __future__ import annotations

from ....hlo import HloInstruction
from ...analysis.fusion_analysis import find_hero


def _broadcasted_constant_or_scalar(inst: HloInstruction) -> bool:
    """XLA's ``hlo_query::IsBroadcastedConstantOrScalar``."""
    def scalar(i):
        return i.shape.is_array and i.shape.rank == 0
    return (inst.opcode == "constant" or scalar(inst)
            or (inst.opcode == "broadcast" and (inst.operands[0].opcode == "constant" or scalar(inst.operands[0]))))


def group_disjoint_reductions(roots: list[HloInstruction], reduce_roots: list[HloInstruction],
                              heroes: list[HloInstruction]) -> list[tuple[list, list, list]]:
    """XLA's ``GroupDisjointReductions``: roots reached from a common instruction of the
    fusion share a group; every non-reduction root joins one group (XLA does not yet handle
    aliasing between a fusion's inputs and outputs); a broadcast constant or scalar joins at
    most one reduction root (recomputing it is cheap). Returns ``(heroes, reduce roots, side
    roots)`` per group, groups in order of their first root."""
    n = len(roots)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def merge(i, j):
        i, j = find(i), find(j)
        if i != j:
            parent[max(i, j)] = min(i, j)

    is_reduction = [any(r is x for x in reduce_roots) for r in roots]
    if n > 1:
        side = [i for i in range(n) if not is_reduction[i]]
        for i in side[1:]:
            merge(side[0], i)
        # roots reached from each instruction (the instruction itself included)
        reached: dict[int, tuple[HloInstruction, set[int]]] = {}
        for i, r in enumerate(roots):
            stack = [r]
            while stack:
                x = stack.pop()
                entry = reached.setdefault(id(x), (x, set()))
                if i in entry[1]:
                    continue
                entry[1].add(i)
                stack.extend(x.operands)
        for inst, hits in reached.values():
            ids, added_reduce = [], False
            for i in range(n):
                if is_reduction[i] and added_reduce and _broadcasted_constant_or_scalar(inst):
                    continue
                if i in hits:
                    ids.append(i)
                    added_reduce = added_reduce or is_reduction[i]
            for i in ids[1:]:
                merge(ids[0], i)
    order: list[int] = []
    for i in range(n):
        if find(i) not in order:
            order.append(find(i))
    groups = []
    for rep in order:
        members = [roots[i] for i in range(n) if find(i) == rep]
        g_roots = [r for r in members if any(r is x for x in reduce_roots)]
        g_heroes = [h for h in heroes if any(find_hero(r) is h for r in g_roots)]
        g_sides = [r for r in members if not any(r is x for x in reduce_roots)]
        groups.append((g_heroes, g_roots, g_sides))
    return groups
