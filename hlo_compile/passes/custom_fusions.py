"""XLA:GPU's ``kind=kCustom`` fusions made into what our emitters compile.

A Triton, cuDNN or custom-kernel fusion (``fusion_backend_config.kind`` = ``__triton_gemm``,
``__triton_nested_gemm_fusion``, ``__triton``, ``__triton_softmax``, ``__triton_collective``,
``__cudnn$fusion``, ``__custom_fusion``) computes exactly its called computation; the config
only says how XLA generates code (notes/xla-gpu-calls.md §4-5). So:

- a fusion our emitters compile as one kernel stays a fusion (a GEMM with its prologue and
  epilogue, an elementwise or reduction fusion): ``codegen/fusion_analysis.py`` reports XLA's
  kind and config beside the emitter we use;
- a fusion that would not be one good kernel for us becomes a ``call`` of its computation,
  which call inlining flattens and our fusion pass re-fuses: Triton's block-level fusions of a
  normalization "diamond" (a reduction whose result is broadcast back and combined with its
  input: our loop emitter would recompute the reduction for every element), computations
  with more than one dot or convolution, ``__custom_fusion`` (address computations around a
  library call, CUTLASS GEMMs) and ``__triton_collective``;
- nested ``kCustom`` fusions (the older ``__triton_nested_gemm_fusion`` form outlines each dot
  operand's producers into a nested ``block_fusion``) are inlined into their parent first;
- operand-less scratch custom-calls (``__nop``, ``__custom_kernel_fusion$workspace``:
  uninitialised workspace buffers) become zeros of their shape.
"""
from __future__ import annotations

from ..hlo import HloComputation, HloInstruction, HloModule
from ..hlo.attributes import Attribute
from ..hlo.backend_config import fusion_backend_config
from ..hlo.library_targets import SCRATCH_TARGETS
from ..hlo.rewrite import NameScope, insert_instructions, new_instruction
from ..hlo.shape import Shape
from .inline_calls import inline_calls

CUSTOM_FUSION_KINDS = frozenset({"__triton_gemm", "__triton_nested_gemm_fusion", "__triton", "__triton_softmax",
                                 "__triton_collective", "__cudnn$fusion", "__custom_fusion"})
# kinds whose computation we always flatten and re-fuse
_ALWAYS_INLINED = frozenset({"__custom_fusion", "__triton_collective"})
# ops a value passes through on its way to a root without changing which kernel computes it
_PASS_THROUGH = frozenset({"bitcast", "reshape", "convert", "copy", "negate", "abs", "tuple", "get-tuple-element"})
_KEPT_ATTRIBUTES = ("metadata", "frontend_attributes")


def custom_fusion_kind(inst: HloInstruction) -> str:
    """The ``fusion_backend_config.kind`` of a ``kCustom`` fusion ("" for any other instruction)."""
    if inst.opcode != "fusion" or inst.attr("kind", None) != "kCustom":
        return ""
    return str(fusion_backend_config(inst).get("kind", ""))


def lower_custom_fusions(module: HloModule) -> HloModule:
    """Rewrite the ``kCustom`` fusions of every computation as the module docstring says; in place."""
    for comp in list(module.computations):
        _replace_scratch_calls(comp)
    for comp in list(module.computations):
        for inst in list(comp.instructions):
            kind = custom_fusion_kind(inst)
            if kind not in CUSTOM_FUSION_KINDS:
                continue
            body = inst.attr("calls")
            _inline_nested_fusions(body)
            if kind in _ALWAYS_INLINED or not _one_kernel(body):
                _as_call(inst)
    return module


def _replace_scratch_calls(comp: HloComputation) -> None:
    scratch = [i for i in comp.instructions
               if i.opcode == "custom-call" and not i.operands and i.shape.is_array
               and i.attr("custom_call_target", None) in SCRATCH_TARGETS]
    if not scratch:
        return
    names = NameScope.of_instructions([comp])
    for inst in scratch:
        zero = new_instruction(names.fresh(f"{inst.name}.zero"), "constant", Shape(inst.shape.element_type, ()),
                               like=inst, literal_text="0")
        insert_instructions(comp, [zero], before=inst)
        inst.opcode = "broadcast"
        inst.operands = [zero]
        inst.declared_operand_shapes = [zero.shape]
        inst.attributes = {"dimensions": Attribute("dimensions", "{}", ())}
    comp.rebuild_users()


def _inline_nested_fusions(body: HloComputation) -> None:
    nested = [i for i in body.instructions if custom_fusion_kind(i) in CUSTOM_FUSION_KINDS]
    for inst in nested:
        _inline_nested_fusions(inst.attr("calls"))
        _as_call(inst)
    if nested:
        inline_calls(body)


def _as_call(fusion: HloInstruction) -> None:
    body = fusion.attr("calls")
    kept = {n: a for n, a in fusion.attributes.items() if n in _KEPT_ATTRIBUTES}
    fusion.opcode = "call"
    fusion.attributes = {"to_apply": Attribute("to_apply", f"%{body.name}", body), **kept}


def _one_kernel(body: HloComputation) -> bool:
    """Whether our emitters compute ``body`` well as one kernel: at most one dot or
    convolution, and every reduction feeds a root directly (a reduction hero), none is
    broadcast back into the rest of the computation."""
    if sum(i.opcode in ("dot", "convolution") for i in body.instructions) > 1:
        return False
    if any(i.opcode in ("custom-call", "fusion", "call") for i in body.instructions):
        return False
    near_roots = _near_roots(body.root)
    return all(i in near_roots for i in body.instructions if i.opcode in ("reduce", "reduce-window", "sort"))


def _near_roots(root: HloInstruction) -> set[HloInstruction]:
    """``root`` and what reaches it only through ops that do not change the kernel (tuple,
    bitcast, convert...)."""
    seen, todo = set(), [root]
    while todo:
        inst = todo.pop()
        if inst in seen:
            continue
        seen.add(inst)
        if inst.opcode in _PASS_THROUGH:
            todo.extend(inst.operands)
    return seen
