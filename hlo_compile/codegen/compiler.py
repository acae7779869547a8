"""Module → kernel plans: which fusion becomes which kernel, with which emitter and launch.

``plan_module`` runs the passes (calls inlined, lone instructions wrapped as fusions) on a
copy of the module, analyses every fusion of the ENTRY computation and of the computations
that while and conditional run (hero, emitter choice), partitions it and fixes its launch
configuration: kernels of loop bodies are planned once, at compile time. A ``KernelPlan`` can then emit its kernel for any target (``plan.emit``): the
same plan gives the NVPTX module and the host module.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Protocol

from llvmlite import ir

from ..hlo import HloComputation, HloInstruction, HloModule
from ..hlo.errors import HloUnsupportedError
from ..options import CompileOptions
from ..passes import run_passes
from ..passes.prepare_control_flow import executed_computations
from .device_info import DeviceInfo, device_for_arch
from .fusion_analysis import FusionAnalysis, analyze_fusion
from .target import LaunchDims, Target


class KernelSpec(Protocol):
    """What an emitter's plan for one fusion provides (``emitters/loop.py``'s
    ``LoopKernelSpec`` is the model)."""

    launch: LaunchDims

    def emit(self, target: Target) -> ir.Module: ...

    def report_lines(self) -> list[str]: ...

    def summary_fields(self) -> dict: ...

    # optional: ``output_initialized_from = {output leaf: fusion operand}`` for kernels that
    # update an operand in place; the runtime copies the operand into that output first.


# emitter name → "module:function" planning a fusion: (fusion, analysis, device, kernel name)
# → KernelSpec. An emitter whose module is not there yet is simply not available.
EMITTER_PLANNERS = {
    "loop": "hlo_compile.codegen.emitters.loop:plan_loop_kernel",
    "transpose": "hlo_compile.codegen.emitters.transpose:plan_transpose_kernel",
    "reduction": "hlo_compile.codegen.emitters.reduction:plan_reduction_kernel",
    "concatenate": "hlo_compile.codegen.emitters.concatenate:plan_concatenate_kernel",
    "in-place-dus": "hlo_compile.codegen.emitters.in_place_dus:plan_in_place_dus_kernel",
    "scatter": "hlo_compile.codegen.emitters.scatter:plan_scatter_kernel",
    "sort": "hlo_compile.codegen.emitters.sort:plan_sort_kernel",
    "dot": "hlo_compile.codegen.emitters.dot:plan_dot_kernel",
}


@lru_cache(maxsize=None)
def _planner(emitter: str) -> Callable | None:
    spec = EMITTER_PLANNERS.get(emitter)
    if spec is None:
        return None
    module_name, fn = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            return None
        raise
    return getattr(module, fn)


def available_emitters() -> frozenset[str]:
    return frozenset(e for e in EMITTER_PLANNERS if _planner(e) is not None)


@dataclass
class KernelPlan:
    fusion: HloInstruction
    kernel_name: str
    analysis: FusionAnalysis
    spec: KernelSpec

    @property
    def launch(self) -> LaunchDims:
        return self.spec.launch

    def emit(self, target: Target) -> ir.Module:
        return self.spec.emit(target)


@dataclass
class ModulePlan:
    module: HloModule          # after the passes
    device: DeviceInfo
    kernels: list[KernelPlan]  # ENTRY's fusions, then those of each computation in ``computations[1:]``
    # the computations the runtime runs as thunk sequences: ENTRY, then those that while and
    # conditional run (transitively), each once
    computations: list[HloComputation] = field(default_factory=list)
    _by_fusion: dict[int, KernelPlan] = field(default_factory=dict, repr=False)

    def kernel_for(self, fusion: HloInstruction) -> KernelPlan:
        k = self._by_fusion.get(id(fusion))
        if k is None or k.fusion is not fusion:
            self._by_fusion = {id(p.fusion): p for p in self.kernels}
            k = self._by_fusion.get(id(fusion))
            if k is None:
                raise KeyError(fusion.name)
        return k


def _reserved_symbols() -> frozenset[str]:
    """Names a kernel must not take: the host target links libm and libc by name, so a
    fusion called ``sinh`` or ``free`` would shadow the function its kernel calls."""
    from .elemental_ops import MATH_FUNCTIONS
    names = set(MATH_FUNCTIONS) | {"sqrt", "fabs", "floor", "ceil", "rint", "round", "trunc", "hypot", "exp2",
                                   "log2", "log10", "erfc", "malloc", "free", "aligned_alloc", "memcpy",
                                   "memset", "memmove", "abort", "exit", "printf", "main"}
    return frozenset(names | {n + "f" for n in names})


def kernel_symbol(name: str, taken: set[str]) -> str:
    """A PTX-safe, unique kernel name for a fusion (``fusion.3`` → ``fusion_3``)."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "kernel"
    if not re.match(r"[A-Za-z]", base) or base in _reserved_symbols() or base.startswith("__") \
            or base.startswith("llvm"):
        base = "k_" + base
    sym, n = base, 1
    while sym in taken:
        n += 1
        sym = f"{base}_{n}"
    taken.add(sym)
    return sym


def plan_fusion(fusion: HloInstruction, device: DeviceInfo, kernel_name: str) -> KernelPlan:
    analysis = analyze_fusion(fusion, device, available=available_emitters())
    planner = _planner(analysis.emitter) if analysis.emitter else None
    if planner is None:
        where = f" (line {fusion.location.line})" if fusion.location else ""
        raise HloUnsupportedError(f"fusion '%{fusion.name}'{where}: {analysis.reason}")
    return KernelPlan(fusion, kernel_name, analysis, planner(fusion, analysis, device, kernel_name))


def prepare_module(module: HloModule, options: CompileOptions) -> HloModule:
    """The module after the passes and the code generator's own rewrites (a copy)."""
    from .tree_reduction import rewrite_tree_reductions
    device = device_for_arch(options.arch)
    return run_passes(module, before_fusion=[lambda m: rewrite_tree_reductions(m, device)])


def plan_module(module: HloModule, options: CompileOptions) -> ModulePlan:
    device = device_for_arch(options.arch)
    wrapped = prepare_module(module, options)
    computations = executed_computations(wrapped)
    taken: set[str] = set()
    kernels = [plan_fusion(inst, device, kernel_symbol(inst.name, taken))
               for comp in computations for inst in comp.instructions if inst.opcode == "fusion"]
    return ModulePlan(wrapped, device, kernels, computations)
