"""Custom calls that only annotate a value: the identity on it.

XLA's front ends write them before optimization (``notes/xla-async-spmd.md`` §1.3):

- memory placement: ``MoveToHost``/``MoveToDevice`` (activation offloading), ``PinToDevice``,
  ``annotate_device_placement``: XLA's host offloader removes them and only changes where the
  buffer lives, so a runner that keeps everything on the device computes the same values;
- ``LayoutConstraint``: the result's layout is the declared one (a copy when it differs);
- the SPMD partitioner's ``Sharding``, ``SPMDFullToShardShape``, ``SPMDShardToFullShape``: on one
  participant the partitioner removes them; on several, XLA would split the module into
  per-device programs, which is not done here, so they are refused there.

Kept in the front end so the interpreter and the rewrite before code generation agree.
"""
from __future__ import annotations

from ..errors import HloUnsupportedError
from ..ir import HloInstruction

PLACEMENT_TARGETS = frozenset({"MoveToHost", "MoveToDevice", "PinToDevice", "annotate_device_placement",
                               "LayoutConstraint"})
PARTITIONER_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})
ANNOTATION_TARGETS = PLACEMENT_TARGETS | PARTITIONER_TARGETS


def is_identity_annotation(inst: HloInstruction, participants: int) -> bool:
    """Whether ``inst`` is an annotation custom call that means its one operand (same dimensions
    and element type) when the module runs on ``participants``; a partitioner annotation on
    several participants is refused (``HloUnsupportedError`` naming it and its line)."""
    if inst.opcode != "custom-call" or inst.attr("custom_call_target", None) not in ANNOTATION_TARGETS:
        return False
    if len(inst.operands) != 1 or not inst.shape.is_array or not inst.operands[0].shape.is_array:
        return False
    src, dst = inst.operands[0].shape, inst.shape
    if src.dimensions != dst.dimensions or src.element_type != dst.element_type:
        return False
    target = inst.attr("custom_call_target")
    if target in PARTITIONER_TARGETS and participants > 1:
        line = f" (line {inst.location.line})" if inst.location else ""
        raise HloUnsupportedError(
            f"custom-call '%{inst.name}'{line} ({target}) is an annotation of XLA's SPMD partitioner: this module "
            f"is from before partitioning and runs on {participants} participants, where XLA would split it into "
            "per-device programs, which is not done here; give the module XLA writes after optimizations "
            "(--xla_dump_to), or run it on one participant", inst.location)
    return True
