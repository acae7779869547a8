"""An executable module: its plan, its kernels compiled for a platform, and its programs.

Buffer assignment gives every array value one physical buffer; ``bitcast`` and
``get-tuple-element`` alias their operand's buffer and ``tuple`` groups buffers, so they cost
nothing at run time. Each computation the module runs is a program of steps (``program.py``,
``steps.py``, ``control_flow.py``): parameters and constants are uploaded, each fusion is one
kernel launch (an in-place scatter or dynamic-update-slice writes into its operand's buffer
when the plan donated it, ``KernelPlan.donated``, and into a copy of it otherwise), ``while``
and ``conditional`` run on the host side. ``call``s were inlined by the passes. Ops without a
step (custom-call, collectives, ...) are refused by name, instruction and line.

``compile_executable`` builds one through the pipeline's driver loop (``run_pipeline``): the
same stages as ``hlo-compile``, each run once, then the platform's own (``Platform.
kernel_stage``: the host JIT, or loading the PTX on the GPU), so that dumps and stage timings
come from the one place. Platforms: ``host`` and ``cuda`` (``make_platform``); the numpy
interpreter needs no executable.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..codegen.compiler import ModulePlan
from ..driver.dump import DumpDirectory
from ..hlo import HloInstruction, HloModule
from ..hlo.errors import HloUnsupportedError
from ..hlo.shape import Shape
from ..options import CompileOptions
from ..driver.pipeline import PipelineResult, run_pipeline
from ..driver.stages import Stage, StageOutput
from .cuda_platform import CudaPlatform
from .host_platform import HostPlatform
from .platform import KERNELS, Platform
from .program import ComputationProgram, build_programs
from .steps import ConstantPool, Resources
from .values import Buffer, download_value, free_value, upload_value

__all__ = ["Buffer", "CudaPlatform", "Executable", "HostPlatform", "Platform", "compile_executable",
           "make_platform"]

PROGRAMS = "programs"  # the stage that builds the programs (before the kernels: errors come first)


@dataclass
class Executable:
    plan: ModulePlan
    platform: Platform
    kernels: dict[str, Any] = field(default_factory=dict)  # fusion name → compiled kernel
    compile_seconds: float = 0.0
    # id(computation) → its program: ENTRY and what while/conditional run
    programs: dict[int, ComputationProgram] = field(default_factory=dict)
    constants: ConstantPool = field(default_factory=ConstantPool)
    pipeline: PipelineResult | None = None  # the stages that built it: timings, dump notes

    @property
    def module(self) -> HloModule:
        return self.plan.module

    @property
    def _constants(self) -> ConstantPool:  # the older name, still read by tests
        return self.constants

    def resources(self) -> Resources:
        return Resources(self.kernels, self.constants)

    def run(self, args: Sequence[Any]) -> Any:
        """Run with logical numpy arguments (nested tuples for tuple parameters); returns
        the result in the same form as the interpreter."""
        p = self.platform
        params = self.upload_arguments(args, p)
        result, owned = self.run_entry(p, params)
        p.synchronize()
        out = download_value(p, result)
        for data in owned.values():
            p.free(data)
        for v in params:
            free_value(p, v)
        return out

    def build_programs(self) -> None:
        """A program for every computation the module runs (raises for what we cannot run,
        naming the instruction and its line)."""
        self.programs = build_programs(self.plan, self.platform.name)

    def upload_arguments(self, args: Sequence[Any], platform: Platform | None = None) -> list[Any]:
        """ENTRY's parameters as buffers of ``platform`` (default: the executable's), in order."""
        params = sorted(self.module.entry.parameters, key=lambda inst: inst.parameter_number)
        return [upload_value(platform or self.platform, args[inst.parameter_number], inst.shape)
                for inst in params]

    def run_entry(self, platform: Platform, params: Sequence[Any]) -> tuple[Any, dict[int, Any]]:
        """ENTRY's program on ``platform`` (the executable's, or one recording for a graph):
        (the result's buffers, those of them this run allocated)."""
        entry = self.module.entry
        if id(entry) not in self.programs:
            self.build_programs()
        return self.programs[id(entry)].run(platform, self.resources(), params)

    def upload_value(self, value: Any, shape: Shape) -> Any:
        return upload_value(self.platform, value, shape)

    def download(self, value: Any) -> Any:
        """Buffers back as the interpreter's logical form."""
        return download_value(self.platform, value)

    def constant(self, inst: HloInstruction) -> Any:
        """A constant's buffer(s), uploaded on first use and shared by every later use."""
        return self.constants.get(self.platform, inst)


def make_platform(name: str) -> Platform:
    if name == "host":
        return HostPlatform()
    if name == "cuda":
        return CudaPlatform()
    raise HloUnsupportedError(f"unknown platform '{name}' (platforms: host, cuda, interpreter)")


def programs_stage(platform: Platform) -> Stage:
    def build(options: CompileOptions, plan: ModulePlan) -> StageOutput:
        return StageOutput(build_programs(plan, platform.name))
    return Stage(PROGRAMS, ("fusions",), build, description="a program of steps per computation the module runs")


def compile_executable(module: HloModule, platform: str | Platform, options: CompileOptions | None = None, *,
                       dump_to: Path | DumpDirectory | None = None, module_index: int = 0,
                       cache: Any = None, progress: Any = None) -> Executable:
    """Plan, emit and compile every kernel of ``module`` for ``platform`` (a name or a
    platform object), through the pipeline's stages; with ``dump_to``, dump them as
    ``hlo-compile --dump-to`` does (module number ``module_index``); with ``cache`` (a
    ``KernelCache``), per-kernel stages read and write their entries there; ``progress`` is
    ``run_pipeline``'s (``progress(stage, done, total)`` as kernels are done)."""
    t0 = time.perf_counter()
    p = make_platform(platform) if isinstance(platform, str) else platform
    options = p.compile_options(options or CompileOptions())
    result = run_pipeline(module, options, dump_to=dump_to, module_index=module_index,
                          then=[programs_stage(p), p.kernel_stage()], cache=cache, progress=progress)
    return Executable(result.plan, p, result.values[KERNELS], compile_seconds=time.perf_counter() - t0,
                      programs=result.values[PROGRAMS], pipeline=result)
