"""The fusion emitters, as one table: ``EMITTERS`` maps an ``EmitterKind`` to how that emitter
plans a fusion and emits the plan.

An emitter is a module (or a package of variants) with a planner ``plan(fusion, analysis,
device, kernel name) -> KernelSpec`` (raising ``Declined`` for a fusion it cannot take: the
loop emitter then runs it) and a kernel emitter ``emit(target, spec) -> ir.Module``; its spec
states the launch and the thread -> data maps (``codegen/kernel.py``). The fusion analysis
names the kind (``codegen/analysis/fusion_analysis.py``'s hero rules); ``compiler.plan_fusion`` looks
it up here. Adding an emitter is its module and its entry below.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from llvmlite import ir

from ...hlo import HloInstruction
from ...gpu.device_info import DeviceInfo
from ..analysis.emitter_kind import EmitterKind
from ..analysis.fusion_analysis import FusionAnalysis
from ..kernel import KernelSpec
from ..target import Target
from . import loop

Planner = Callable[[HloInstruction, FusionAnalysis, DeviceInfo, str], KernelSpec]
KernelEmitter = Callable[[Target, KernelSpec], ir.Module]


@dataclass(frozen=True)
class Emitter:
    """One emitter: its planner and its kernel emitter."""

    plan: Planner
    emit: KernelEmitter


def _module(name: str) -> ModuleType:
    """The emitter module ``name``, imported now (the imports are written out, so that the
    import-structure test sees them)."""
    if name == "transpose":
        from . import transpose as module
    elif name == "reduction":
        from . import reduction as module
    elif name == "concatenate":
        from . import concatenate as module
    elif name == "in_place_dus":
        from . import in_place_dus as module
    elif name == "scatter":
        from . import scatter as module
    elif name == "sort":
        from . import sort as module
    elif name == "gemm":
        from . import gemm as module
    elif name == "block_level":
        from . import block_level as module
    else:
        raise KeyError(f"no emitter module {name!r}")
    return module


def _deferred(module: str, name: str) -> Callable:
    """``<module>.<name>``, its module imported at the first call: an emitter (and what only
    it uses) loads when a fusion first needs it, not when the compiler starts (~30 ms of a
    cold compile's start-up: issue 17). The loop emitter, which every compile uses, is
    imported as usual."""
    def call(*args):
        return getattr(_module(module), name)(*args)
    call.__name__ = call.__qualname__ = name
    return call


def _entry(module: str, plan: str, emit: str) -> Emitter:
    return Emitter(plan=_deferred(module, plan), emit=_deferred(module, emit))


EMITTERS: dict[EmitterKind, Emitter] = {
    EmitterKind.LOOP: Emitter(plan=loop.plan_loop_kernel, emit=loop.emit_loop_kernel),
    EmitterKind.TRANSPOSE: _entry("transpose", "plan_transpose_kernel", "emit_transpose_kernel"),
    EmitterKind.REDUCTION: _entry("reduction", "plan_reduction_kernel", "emit_reduction_kernel"),
    EmitterKind.CONCATENATE: _entry("concatenate", "plan_concatenate_kernel", "emit_concatenate_kernel"),
    EmitterKind.IN_PLACE_DUS: _entry("in_place_dus", "plan_in_place_dus_kernel", "emit_in_place_dus_kernel"),
    EmitterKind.SCATTER: _entry("scatter", "plan_scatter_kernel", "emit_scatter_kernel"),
    EmitterKind.SORT: _entry("sort", "plan_sort_kernel", "emit_sort_kernel"),
    EmitterKind.DOT: _entry("gemm", "plan_dot_kernel", "emit_dot_kernel"),
    EmitterKind.CONVOLUTION: _entry("gemm", "plan_conv_kernel", "emit_conv_kernel"),
    EmitterKind.TRITON: _entry("block_level", "plan_block_level_kernel", "emit_block_level_kernel"),
}

# the kernel of a fusion whose outputs are all empty: never launched (no kind of its own)
EMPTY_KERNEL = Emitter(plan=loop.plan_empty_kernel, emit=loop.emit_empty_kernel)

__all__ = ["EMITTERS", "EMPTY_KERNEL", "Emitter", "KernelEmitter", "Planner"]
