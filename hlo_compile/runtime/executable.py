"""An executable module: buffer assignment plus a sequence of thunks, run on a platform.

Buffer assignment gives every array value of the ENTRY computation one physical buffer;
``bitcast`` and ``get-tuple-element`` alias their operand's buffer and ``tuple`` groups
buffers, so they cost nothing at run time. The thunk sequence is the ENTRY computation in
order: parameters and constants are uploaded, each fusion is one kernel launch. Control flow
(while, conditional, call) and ops without a kernel (custom-call, collectives, ...) are not
supported yet and are reported by name, instruction and line.

Platforms: ``host`` (the host target's JIT kernels on numpy buffers) and ``cuda`` (PTX
loaded through ``runtime/cuda.py``). The numpy interpreter needs no executable.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from ..hlo import HloInstruction, HloModule
from ..hlo.errors import HloUnsupportedError
from ..hlo.shape import Shape
from ..codegen.compiler import KernelPlan, ModulePlan, plan_module
from ..options import CompileOptions
from .physical import buffer_bytes, from_physical, storage_dtype, to_physical

_ALIASING = ("bitcast", "get-tuple-element", "tuple")


def _unsupported(inst: HloInstruction, platform: str) -> HloUnsupportedError:
    where = f" (line {inst.location.line})" if inst.location else ""
    return HloUnsupportedError(f"platform '{platform}' cannot run {inst.opcode} '%{inst.name}'{where}: "
                               f"only fusions, parameters, constants, bitcasts and tuples are supported so far")


@dataclass
class Buffer:
    """A physical buffer holding one array value (``data`` is platform-specific)."""

    shape: Shape
    data: Any


class Platform:
    """What the executable needs from a place to run: memory and launches."""

    name = "?"

    def compile(self, plan: KernelPlan) -> Any:
        raise NotImplementedError

    def compile_all(self, plans: Sequence[KernelPlan]) -> dict[str, Any]:
        """Compiled kernels by fusion name (platforms that build one module override this)."""
        return {p.fusion.name: self.compile(p) for p in plans}

    def upload(self, physical: np.ndarray) -> Any:
        raise NotImplementedError

    def allocate(self, shape: Shape) -> Any:
        raise NotImplementedError

    def download(self, data: Any, shape: Shape) -> np.ndarray:
        raise NotImplementedError

    def launch(self, kernel: Any, plan: KernelPlan, buffers: Sequence[Any]) -> None:
        raise NotImplementedError

    def synchronize(self) -> None:
        pass


class HostPlatform(Platform):
    name = "host"

    def compile(self, plan: KernelPlan) -> Any:
        from ..targets.host import compile_host_kernel
        return compile_host_kernel(plan.emit, plan.kernel_name)

    def upload(self, physical: np.ndarray) -> Any:
        return physical

    def allocate(self, shape: Shape) -> Any:
        return np.zeros(buffer_bytes(shape) // storage_dtype(shape.element_type).itemsize,
                        dtype=storage_dtype(shape.element_type))

    def download(self, data: Any, shape: Shape) -> np.ndarray:
        return data.view(storage_dtype(shape.element_type))

    def launch(self, kernel: Any, plan: KernelPlan, buffers: Sequence[Any]) -> None:
        kernel.launch(plan.launch, list(buffers))


@dataclass
class Executable:
    plan: ModulePlan
    platform: Platform
    kernels: dict[str, Any] = field(default_factory=dict)  # fusion name → compiled kernel
    compile_seconds: float = 0.0

    @property
    def module(self) -> HloModule:
        return self.plan.module

    def run(self, args: Sequence[Any]) -> Any:
        """Run with logical numpy arguments (nested tuples for tuple parameters); returns
        the result in the same form as the interpreter."""
        p = self.platform
        values: dict[HloInstruction, Any] = {}
        for inst in self.module.entry.instructions:
            if inst.opcode == "parameter":
                values[inst] = self._upload_value(args[inst.parameter_number], inst.shape)
            elif inst.opcode == "constant":
                values[inst] = self._upload_value(inst.literal, inst.shape)
            elif inst.opcode == "bitcast":
                src = values[inst.operands[0]]
                values[inst] = Buffer(inst.shape, src.data)
            elif inst.opcode == "get-tuple-element":
                values[inst] = values[inst.operands[0]][inst.tuple_index]
            elif inst.opcode == "tuple":
                values[inst] = [values[o] for o in inst.operands]
            elif inst.opcode == "fusion":
                values[inst] = self._launch(inst, values)
            else:
                raise _unsupported(inst, p.name)
        p.synchronize()
        return self._download_value(values[self.module.entry.root])

    def _launch(self, inst: HloInstruction, values: dict) -> Any:
        plan = self.plan.kernel_for(inst)
        from ..codegen.emitters.loop import output_leaves
        ins = []
        for op in inst.operands:
            v = values[op]
            if not isinstance(v, Buffer):
                raise HloUnsupportedError(f"fusion '%{inst.name}' takes a tuple operand '%{op.name}': not supported")
            ins.append(v.data)
        outs = [Buffer(shape, self.platform.allocate(shape)) for _, shape in output_leaves(inst)]
        self.platform.launch(self.kernels[inst.name], plan, ins + [b.data for b in outs])
        if inst.shape.is_tuple:
            return outs
        return outs[0]

    def _upload_value(self, value: Any, shape: Shape) -> Any:
        if shape.is_tuple:
            return [self._upload_value(v, s) for v, s in zip(value, shape.tuple_shapes)]
        if not shape.is_array:
            raise HloUnsupportedError(f"values of shape {shape} cannot be passed to a kernel")
        return Buffer(shape, self.platform.upload(to_physical(np.asarray(value), shape)))

    def _download_value(self, v: Any) -> Any:
        if isinstance(v, list):
            return tuple(self._download_value(x) for x in v)
        return from_physical(self.platform.download(v.data, v.shape), v.shape)


def _check_supported(module: HloModule, platform: str) -> None:
    for inst in module.entry.instructions:
        if inst.opcode not in ("parameter", "constant", "fusion", *_ALIASING):
            raise _unsupported(inst, platform)


def make_platform(name: str, options: CompileOptions) -> Platform:
    if name == "host":
        return HostPlatform()
    if name == "cuda":
        from .cuda_platform import CudaPlatform
        return CudaPlatform(options)
    raise HloUnsupportedError(f"unknown platform '{name}' (platforms: host, cuda, interpreter)")


def compile_executable(module: HloModule, platform: str, options: CompileOptions | None = None) -> Executable:
    """Plan, emit and compile every kernel of ``module`` for ``platform``."""
    options = options or CompileOptions()
    t0 = time.perf_counter()
    p = make_platform(platform, options)
    if platform == "cuda":  # launch heuristics and PTX for the GPU that is there
        options = replace(options, arch=p.arch)
        p.options = options
    plan = plan_module(module, options)
    _check_supported(plan.module, platform)
    exe = Executable(plan, p)
    exe.kernels.update(p.compile_all(plan.kernels))
    exe.compile_seconds = time.perf_counter() - t0
    return exe
