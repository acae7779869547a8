"""Annotation custom calls (``hlo/calls/annotation.py``: memory placement, layout constraints,
the SPMD partitioner's on one participant) rewritten as the ``copy`` they mean, so the module's
kernels compute through them; in place."""
from __future__ import annotations

from ..hlo.calls.annotation import is_identity_annotation
from ..hlo.collective_groups import world_of
from ..hlo.ir import HloModule

_KEPT = ("metadata", "frontend_attributes")


def rewrite_annotation_calls(module: HloModule) -> HloModule:
    """Every identity annotation custom call of ``module`` becomes ``copy`` of its operand (a
    partitioner annotation on a module whose header names several participants is refused)."""
    participants = world_of(module).size
    for comp in module.computations:
        for inst in comp.instructions:
            if is_identity_annotation(inst, participants):
                inst.opcode = "copy"
                inst.attributes = {n: a for n, a in inst.attributes.items() if n in _KEPT}
    return module
