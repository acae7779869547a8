"""The fusion emitters, as one table: ``EMITTERS`` maps an ``EmitterKind`` to how that emitter
plans a fusion and emits the plan.

An emitter is a module (or a package of variants) with a planner ``plan(fusion, analysis,
device, kernel name) -> KernelSpec`` (raising ``Declined`` for a fusion it cannot take: the
loop emitter then runs it) and a kernel emitter ``emit(target, spec) -> ir.Module``; its spec
states the launch and the thread -> data maps (``codegen/kernel.py``). The fusion analysis
names the kind (``codegen/fusion_analysis.py``'s hero rules); ``compiler.plan_fusion`` looks
it up here. Adding an emitter is its module and its entry below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ...hlo import HloInstruction
from ..device_info import DeviceInfo
from ..emitter_kind import EmitterKind
from ..fusion_analysis import FusionAnalysis
from ..kernel import KernelSpec
from ..target import Target
from . import concatenate, gemm, in_place_dus, loop, reduction, scatter, sort, transpose

Planner = Callable[[HloInstruction, FusionAnalysis, DeviceInfo, str], KernelSpec]
KernelEmitter = Callable[[Target, KernelSpec], ir.Module]


@dataclass(frozen=True)
class Emitter:
    """One emitter: its planner and its kernel emitter."""

    plan: Planner
    emit: KernelEmitter


EMITTERS: dict[EmitterKind, Emitter] = {
    EmitterKind.LOOP: Emitter(plan=loop.plan_loop_kernel, emit=loop.emit_loop_kernel),
    EmitterKind.TRANSPOSE: Emitter(plan=transpose.plan_transpose_kernel, emit=transpose.emit_transpose_kernel),
    EmitterKind.REDUCTION: Emitter(plan=reduction.plan_reduction_kernel, emit=reduction.emit_reduction_kernel),
    EmitterKind.CONCATENATE: Emitter(plan=concatenate.plan_concatenate_kernel,
                                     emit=concatenate.emit_concatenate_kernel),
    EmitterKind.IN_PLACE_DUS: Emitter(plan=in_place_dus.plan_in_place_dus_kernel,
                                      emit=in_place_dus.emit_in_place_dus_kernel),
    EmitterKind.SCATTER: Emitter(plan=scatter.plan_scatter_kernel, emit=scatter.emit_scatter_kernel),
    EmitterKind.SORT: Emitter(plan=sort.plan_sort_kernel, emit=sort.emit_sort_kernel),
    EmitterKind.DOT: Emitter(plan=gemm.plan_dot_kernel, emit=gemm.emit_dot_kernel),
    EmitterKind.CONVOLUTION: Emitter(plan=gemm.plan_conv_kernel, emit=gemm.emit_conv_kernel),
}

# the kernel of a fusion whose outputs are all empty: never launched (no kind of its own)
EMPTY_KERNEL = Emitter(plan=loop.plan_empty_kernel, emit=loop.emit_empty_kernel)

__all__ = ["EMITTERS", "EMPTY_KERNEL", "Emitter", "KernelEmitter", "Planner"]
