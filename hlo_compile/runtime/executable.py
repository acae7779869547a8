"""An executable module: buffer assignment plus a sequence of thunks, run on a platform.

Buffer assignment gives every array value of the ENTRY computation one physical buffer;
``bitcast`` and ``get-tuple-element`` alias their operand's buffer and ``tuple`` groups
buffers, so they cost nothing at run time. The thunk sequence is the ENTRY computation in
order: parameters and constants are uploaded, each fusion is one kernel launch (an in-place
scatter or dynamic-update-slice writes into its operand's buffer when the plan donated it,
``KernelPlan.donated``, and into a copy of it otherwise). ``while`` and
``conditional`` run on the host side: their condition, body and branch computations are
thunk sequences of their own, planned and compiled with ENTRY's (``runtime/control_flow.py``).
``call``s were inlined by the passes. Ops without a kernel (custom-call, collectives, ...) are
not supported yet and are reported by name, instruction and line.

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

from .control_flow import ComputationProgram, leaves


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

    def copy(self, dst: Any, src: Any, shape: Shape) -> None:
        """Copy a whole buffer of ``shape`` (device to device)."""
        raise NotImplementedError

    def synchronize(self) -> None:
        pass

    def write(self, data: Any, physical: np.ndarray) -> None:
        """Overwrite an existing buffer with host bytes (a graph's parameters between runs)."""
        raise NotImplementedError

    def build_graph(self, ops: Sequence[Any]) -> Any:
        """One replayable object for recorded launches and copies (``runtime/graph.py``)."""
        raise NotImplementedError(f"platform '{self.name}' has no graphs")

    def launch_graph(self, graph: Any) -> None:
        raise NotImplementedError(f"platform '{self.name}' has no graphs")

    def replay(self, ops: Sequence[Any]) -> None:
        """Issue recorded launches and copies (``runtime/graph.py``'s ``GraphOp``s) in order."""
        for op in ops:
            if op.kind == "launch":
                self.launch(op.kernel, op.plan, op.buffers)
            else:
                self.copy(*op.buffers, op.shape)

    def destroy_graph(self, graph: Any) -> None:
        pass

    def free(self, data: Any) -> None:
        """Give a buffer's memory back (buffers with a ``free`` method: device memory)."""
        release = getattr(data, "free", None)
        if release is not None:
            release()


class HostPlatform(Platform):
    name = "host"

    def compile(self, plan: KernelPlan) -> Any:
        from ..targets.host import compile_host_kernel
        return compile_host_kernel(plan.emit, plan.kernel_name)

    def upload(self, physical: np.ndarray) -> Any:
        return physical

    def allocate(self, shape: Shape) -> Any:
        dtype = storage_dtype(shape.element_type)
        n = buffer_bytes(shape) // dtype.itemsize
        # 16 bytes of slack: a 32-bit compare-and-swap on the last narrow element (scatter of
        # bf16/s8) touches the rest of its aligned word, as CUDA's 256-byte allocations allow
        return np.zeros(n + 16 // dtype.itemsize + 1, dtype=dtype)[:n]

    def download(self, data: Any, shape: Shape) -> np.ndarray:
        return data.view(storage_dtype(shape.element_type))

    def launch(self, kernel: Any, plan: KernelPlan, buffers: Sequence[Any]) -> None:
        kernel.launch(plan.launch, list(buffers))

    def copy(self, dst: Any, src: Any, shape: Shape) -> None:
        np.copyto(dst, src)

    def write(self, data: Any, physical: np.ndarray) -> None:
        np.copyto(data, physical.reshape(data.shape))

    def build_graph(self, ops: Sequence[Any]) -> Any:
        """The recorded list itself: replayed in order (the same kernels and buffers)."""
        return list(ops)

    def launch_graph(self, graph: Any) -> None:
        self.replay(graph)


@dataclass
class Executable:
    plan: ModulePlan
    platform: Platform
    kernels: dict[str, Any] = field(default_factory=dict)  # fusion name → compiled kernel
    compile_seconds: float = 0.0
    # id(computation) → its thunk sequence: ENTRY and what while/conditional run
    programs: dict[int, ComputationProgram] = field(default_factory=dict)
    _constants: dict[int, Any] = field(default_factory=dict, repr=False)

    @property
    def module(self) -> HloModule:
        return self.plan.module

    def run(self, args: Sequence[Any]) -> Any:
        """Run with logical numpy arguments (nested tuples for tuple parameters); returns
        the result in the same form as the interpreter."""
        p = self.platform
        entry = self.module.entry
        if id(entry) not in self.programs:
            self.build_programs()
        params: dict[int, Any] = {}
        for inst in entry.parameters:
            params[inst.parameter_number] = self._upload_value(args[inst.parameter_number], inst.shape)
        result, owned = self.programs[id(entry)].run(params)
        p.synchronize()
        out = self._download_value(result)
        for data in owned.values():
            p.free(data)
        for v in params.values():
            for b in leaves(v):
                p.free(b.data)
        return out

    def build_programs(self) -> None:
        """A thunk sequence for every computation the module runs (raises for what we cannot
        run, naming the instruction and its line)."""
        comps = self.plan.computations or [self.module.entry]
        self.programs = {id(c): ComputationProgram(self, c) for c in comps}

    def constant(self, inst: HloInstruction) -> Any:
        """A constant's buffer(s), uploaded on first use and shared by every later use."""
        v = self._constants.get(id(inst))
        if v is None:
            v = self._constants[id(inst)] = self._upload_value(inst.literal, inst.shape)
        return v

    def read_scalar(self, value: Any) -> Any:
        """A scalar buffer's value on the host (a while's predicate, a conditional's index)."""
        if not isinstance(value, Buffer):
            raise HloUnsupportedError(f"expected a scalar array, got a tuple of {len(value)} values")
        return from_physical(self.platform.download(value.data, value.shape), value.shape).reshape(-1)[0]

    def _launch(self, inst: HloInstruction, values: dict) -> Any:
        plan = self.plan.kernel_for(inst)
        from ..codegen.emitters.loop import output_leaves
        ins = []
        for op in inst.operands:
            v = values[op]
            if not isinstance(v, Buffer):
                raise HloUnsupportedError(f"fusion '%{inst.name}' takes a tuple operand '%{op.name}': not supported")
            ins.append(v.data)
        # kernels that update an operand in place (scatter, dynamic-update-slice): when the
        # plan donated the operand's buffer (it is dead after this kernel, XLA's aliasing) it
        # *is* the output; otherwise the output is a fresh buffer starting as a copy of it
        donated = plan.donated
        outs = [Buffer(shape, ins[donated[i]] if i in donated else self.platform.allocate(shape))
                for i, (_, shape) in enumerate(output_leaves(inst))]
        for out_index, operand_index in plan.in_place_operands.items():
            if out_index not in donated:
                self.platform.copy(outs[out_index].data, ins[operand_index], outs[out_index].shape)
        if plan.launch.num_blocks > 0:
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
    exe = Executable(plan, p)
    exe.build_programs()
    exe.kernels.update(p.compile_all(plan.kernels))
    exe.compile_seconds = time.perf_counter() - t0
    return exe
