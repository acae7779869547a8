"""XLA's ``TopK`` custom calls (XLA:CPU's, and XLA:GPU's ``__gpu$TopK``) as the ``topk``
instruction our sort emitter implements.

XLA:CPU writes ``lax.top_k`` as ``(T[..,k], s32[..,k]) custom-call(x), custom_call_target="TopK",
called_computations={cmp}``. XLA's TopK rewriter only forms that call from a sort whose
comparator orders values largest first, and XLA:CPU's runtime then ignores the comparator: it
always returns the ``k`` largest values along the minor dimension (NaN first, ties by lower
index), and so does a comparator with ``direction=LT`` (checked against XLA:CPU). That is
exactly ``topk(x), k=K, largest=true``, which the sort emitter implements. XLA:GPU's TopK
rewriter forms ``__gpu$TopK`` (typed FFI) from the same sorts, with the same operand and result
tuple, for its TopK kernel: the same function (checked against XLA:CPU's ``lax.top_k`` outputs on
XLA:GPU's module of it).
"""
from __future__ import annotations

from hlo_compile.hlo.attributes import Attribute
from hlo_compile.hlo.ir import HloInstruction, HloModule

TOPK_TARGETS = frozenset({"TopK", "__cpu$TopK", "xla.cpu.topk", "__gpu$TopK"})
_KEPT = ("metadata", "frontend_attributes")  # api_version, called_computations: the call's, dropped


def _as_topk(inst: HloInstruction) -> None:
    if inst.opcode != "custom-call" or inst.attr("custom_call_target", None) not in TOPK_TARGETS:
        return
    shape = inst.shape
    if len(inst.operands) != 1 or not shape.is_tuple or len(shape.tuple_shapes) != 2:
        return  # not XLA's form: stays a custom call, which code generation refuses by name
    k = shape.tuple_shapes[0].dimensions[-1] if shape.tuple_shapes[0].rank else 1
    kept = {n: a for n, a in inst.attributes.items() if n in _KEPT}
    inst.opcode = "topk"
    inst.attributes = {"k": Attribute("k", str(k), k), "largest": Attribute("largest", "true", True), **kept}


def rewrite_topk_custom_calls(module: HloModule) -> HloModule:
    """Turn every ``TopK`` custom call of every computation into ``topk``; in place."""
    for comp in module.computations:
        for inst in comp.instructions:
            _as_topk(inst)
    return module
