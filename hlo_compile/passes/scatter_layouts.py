"""A scatter's operand in its output's layout, as XLA's layout assignment makes it.

The scatter kernel updates its output in place: the output buffer starts as the operand's
bytes, so both must order their elements alike. HLO allows them to differ (a scatter of an
operand in ``{0,1}`` into an output in ``{1,0}`` means the same values); XLA's layout assignment
then gives the operand the output's layout with a ``copy``. We do the same on a computation
after fusion and before lone instructions are wrapped: a lone scatter reads a ``copy`` of the
operand in its output's layout; a scatter fusion's operand parameter takes the output's layout
and its argument is such a ``copy`` (inside the fusion that parameter is read through its new
layout, so its other readers see the same values). The copies then get kernels of their own.
"""
from __future__ import annotations

from hlo_compile.hlo.ir import HloInstruction
from hlo_compile.hlo.layout import Layout
from hlo_compile.hlo.rewrite import NameScope, Target, computation_of, insert_instructions, module_of, new_instruction


def align_scatter_operand_layouts(target: Target) -> Target:
    """Give every scatter of ``target`` (lone, or the root of a fusion) operands in its
    output's layouts; in place."""
    comp = computation_of(target)
    names: NameScope | None = None
    for inst in list(comp.instructions):
        scatter = inst.fused_computation.root if _is_scatter_fusion(inst) else inst
        if scatter.opcode != "scatter":
            continue
        for k, want in _misaligned(scatter):
            names = names or NameScope.of_instructions(module_of(comp).computations)
            operand = scatter.operands[k]
            if scatter is inst:
                _read_copy(comp, inst, k, want, names)
            elif operand.opcode == "parameter":
                _read_copy(comp, inst, operand.parameter_number, want, names)
                operand.shape = operand.shape.with_layout(want)
                for user in operand.users:
                    user.declared_operand_shapes = [o.shape for o in user.operands]
    return target


def _is_scatter_fusion(inst: HloInstruction) -> bool:
    return inst.opcode == "fusion" and inst.attr("kind", "") != "kCustom"


def _misaligned(scatter: HloInstruction) -> list[tuple[int, Layout]]:
    """``(operand index, the output's layout)`` for each operand whose layout differs, when one
    layout can serve it (an operand given twice for outputs in two layouts is left as it is)."""
    n = (len(scatter.operands) - 1) // 2
    outs = scatter.shape.tuple_shapes if scatter.shape.is_tuple else (scatter.shape,)
    wanted: dict[int, set] = {}
    for k in range(n):
        wanted.setdefault(id(scatter.operands[k]), set()).add(outs[k].layout)
    out = []
    for k in range(n):
        op, want = scatter.operands[k], outs[k].layout
        first = all(scatter.operands[j] is not op for j in range(k))
        if op.shape.layout != want and len(wanted[id(op)]) == 1 and first:
            out.append((k, want))
    return out


def _read_copy(comp, user: HloInstruction, k: int, layout: Layout, names: NameScope) -> None:
    """Make ``user``'s operand ``k`` a copy of itself in ``layout``."""
    value = user.operands[k]
    copy = new_instruction(names.fresh(f"{value.name}.layout"), "copy", value.shape.with_layout(layout), [value],
                           like=user)
    insert_instructions(comp, [copy], before=user)
    user.operands = [copy if i == k else o for i, o in enumerate(user.operands)]
    user.declared_operand_shapes = [o.shape for o in user.operands]
    if all(o is not value for o in user.operands):
        value.users = [u for u in value.users if u is not user]
    copy.users.append(user)
