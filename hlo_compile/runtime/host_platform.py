"""The ``host`` platform: kernels JIT-compiled for this CPU (``targets/host/``) on numpy buffers.

Every emitter runs here without a GPU: the same ``KernelPlan`` that gives the PTX is emitted
for the host target, and a launch runs the grid's blocks on a pool of OS threads.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from ..codegen.compiler import KernelPlan, ModulePlan
from ..hlo.shape import Shape
from ..options import CompileOptions
from ..driver.stages import Stage, StageEnv, StageOutput
from ..targets.host import compile_host_kernel
from .physical import buffer_bytes, storage_dtype
from .platform import KERNELS, Platform


class HostPlatform(Platform):
    name = "host"

    def compile_options(self, options: CompileOptions) -> CompileOptions:
        """The host has no NVIDIA library: every library call is lowered to our kernels."""
        return dataclasses.replace(options, gemm="generated", conv="generated")

    def kernel_stage(self) -> Stage:
        return Stage(KERNELS, ("fusions",), self.compile_kernels, uses_env=True,
                     description="every kernel emitted for the host target and JIT-compiled")

    def compile_kernels(self, options: CompileOptions, plan: ModulePlan, env: StageEnv | None = None) -> StageOutput:
        kernels, seconds = {}, {}
        compiled: dict[str, Any] = {}  # kernel name → its code: a reused kernel is compiled once
        owners = {k.kernel_name: k for k in plan.unique_kernels}
        for p in plan.kernels:
            if p.kernel_name not in compiled:
                t0 = time.perf_counter()
                compiled[p.kernel_name] = self.compile(owners[p.kernel_name], options.dot_tensor_cores)
                seconds[p.kernel_name] = time.perf_counter() - t0
                if env is not None:
                    env.report(KERNELS, len(compiled), len(owners))
            kernels[p.fusion.name] = compiled[p.kernel_name]
        return StageOutput(kernels, kernel_seconds=seconds)

    def compile(self, plan: KernelPlan, tensor_cores: bool = False) -> Any:
        """``plan``'s kernel JIT-compiled (``tensor_cores``: ``CompileOptions.dot_tensor_cores``,
        the warp MMA emulated as the GPU would run it)."""
        return compile_host_kernel(plan.emit, plan.kernel_name, tensor_cores=tensor_cores)

    def compile_all(self, plans: Sequence[KernelPlan], tensor_cores: bool = False) -> dict[str, Any]:
        """Compiled kernels by fusion name (a kernel several fusions launch, compiled once)."""
        owners = {p.kernel_name: p for p in plans if p.reuses is None}
        code = {name: self.compile(p, tensor_cores) for name, p in owners.items()}
        return {p.fusion.name: code[p.kernel_name] for p in plans}

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
        # bytes, as the device copies them: a bitcast may give the two buffers other types
        np.copyto(dst.view(np.uint8), src.view(np.uint8))

    def write(self, data: Any, physical: np.ndarray) -> None:
        np.copyto(data, physical.reshape(data.shape))

    def build_graph(self, ops: Sequence[Any]) -> Any:
        """The recorded list itself: replayed in order (the same kernels and buffers)."""
        return list(ops)

    def launch_graph(self, graph: Any) -> None:
        self.replay(graph)
