"""Module → kernel plans: which fusion becomes which kernel, with which emitter and launch.

``plan_module`` runs the passes (calls inlined, lone instructions wrapped as fusions) on a
copy of the module, analyses every fusion
of the ENTRY computation (hero, emitter choice), partitions it and fixes its launch
configuration. A ``KernelPlan`` can then emit its kernel for any target (``plan.emit``): the
same plan gives the NVPTX module and the host module.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ..hlo import HloInstruction, HloModule
from ..hlo.errors import HloUnsupportedError
from ..hlo.tiling import physical_size
from ..options import CompileOptions
from ..passes import run_passes
from .device_info import DeviceInfo, device_for_arch
from .emitters.loop import LoopKernelSpec, emit_loop_kernel, output_leaves
from .fusion_analysis import FusionAnalysis, analyze_fusion
from .kernel_builder import index_type_for
from .launch import loop_fusion_config, thread_to_output_map
from .partitioner import fusion_roots, partition
from .target import LaunchDims, Target


@dataclass
class KernelPlan:
    fusion: HloInstruction
    kernel_name: str
    analysis: FusionAnalysis
    spec: LoopKernelSpec

    @property
    def launch(self) -> LaunchDims:
        return self.spec.launch

    def emit(self, target: Target) -> ir.Module:
        return emit_loop_kernel(target, self.spec)

    @property
    def emitter(self) -> Callable[[Target], ir.Module]:
        return self.emit


@dataclass
class ModulePlan:
    module: HloModule          # after the passes
    device: DeviceInfo
    kernels: list[KernelPlan]

    def kernel_for(self, fusion: HloInstruction) -> KernelPlan:
        for k in self.kernels:
            if k.fusion is fusion:
                return k
        raise KeyError(fusion.name)


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


def _index_type(fusion: HloInstruction, launch: LaunchDims, unroll: int) -> ir.IntType:
    sizes = [launch.num_blocks * launch.num_threads * unroll]
    for op in fusion.operands:
        if op.shape.is_array:
            sizes.append(physical_size(op.shape))
    for _, shape in output_leaves(fusion):
        sizes.append(physical_size(shape))
    for inst in fusion.fused_computation.instructions:
        if inst.shape.is_array:
            n = 1
            for d in inst.shape.dimensions:
                n *= d
            sizes.append(n)
    return index_type_for(max(sizes) + 1)


def plan_fusion(fusion: HloInstruction, device: DeviceInfo, kernel_name: str) -> KernelPlan:
    analysis = analyze_fusion(fusion, device)
    if analysis.emitter != "loop":
        where = f" (line {fusion.location.line})" if fusion.location else ""
        raise HloUnsupportedError(f"fusion '%{fusion.name}'{where}: {analysis.reason}")
    config = loop_fusion_config(analysis, device)
    leaves = output_leaves(fusion)
    thread_map = thread_to_output_map(leaves[0][1], config)
    part = partition(fusion.fused_computation)
    root_maps = {}
    for r in fusion_roots(fusion.fused_computation):
        shape = r.shape.tuple_shapes[0] if r.shape.is_tuple else r.shape
        if tuple(shape.dimensions) != tuple(leaves[0][1].dimensions) or shape.layout != leaves[0][1].layout:
            root_maps[r.name] = thread_to_output_map(shape, config)
    spec = LoopKernelSpec(kernel_name, fusion, part, thread_map, root_maps, config.launch, config.unroll_factor,
                          _index_type(fusion, config.launch, config.unroll_factor))
    return KernelPlan(fusion, kernel_name, analysis, spec)


def plan_module(module: HloModule, options: CompileOptions) -> ModulePlan:
    device = device_for_arch(options.arch)
    wrapped = run_passes(module)
    taken: set[str] = set()
    kernels = [plan_fusion(inst, device, kernel_symbol(inst.name, taken))
               for inst in wrapped.entry.instructions if inst.opcode == "fusion"]
    return ModulePlan(wrapped, device, kernels)
