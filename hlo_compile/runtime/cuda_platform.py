"""The ``cuda`` platform: the module's PTX (the pipeline's ``ptx`` stage, for the arch of the
GPU that is there) loaded once through our thin driver layer (``runtime/cuda.py``); buffers
live on the device. cuda-python itself is imported by ``runtime/cuda.py`` only when used."""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import numpy as np

from ..codegen.compiler import KernelPlan, ModulePlan
from ..hlo.errors import HloUnsupportedError
from ..hlo.shape import Shape
from ..options import CompileOptions
from ..stages import Stage, StageOutput
from .cuda import CudaDevice, available
from .physical import buffer_bytes, storage_dtype
from .platform import KERNELS, Platform


class CudaPlatform(Platform):
    name = "cuda"

    def __init__(self) -> None:
        ok, why = available()
        if not ok:
            raise HloUnsupportedError(f"platform 'cuda' is not available here: {why}")
        self.device = CudaDevice()
        self.arch = self.device.arch
        self.module = None
        self.ptx = ""
        self.stream = None  # created for the first graph
        self.notes: list[str] = []  # what the platform decided for the user (printed by hlo-run)
        self._queue = None  # where launches and copies go: None, the legacy stream (synchronous
        # copies), or the stream a graph is being captured on

    def compile_options(self, options: CompileOptions) -> CompileOptions:
        """Launch heuristics and PTX for the GPU that is there; library calls whose library
        cannot run here are generated instead (said in ``notes``)."""
        from .library_steps import library_unavailable
        changes: dict[str, str] = {"arch": self.arch}
        for flag, families in (("gemm", ("gemm",)), ("conv", ("conv", "fmha"))):
            why = [w for w in (library_unavailable(f) for f in families) if w]
            if getattr(options, flag) == "library" and why:
                changes[flag] = "generated"
                self.notes.append(f"--{flag}=library unavailable ({why[0]}): library calls compiled by our emitters")
        return dataclasses.replace(options, **changes)

    def kernel_stage(self) -> Stage:
        return Stage(KERNELS, ("fusions", "ptx"), self.load_kernels,
                     description="the module's PTX loaded (JIT-compiled by the driver) on the GPU")

    def load_kernels(self, options: CompileOptions, plan: ModulePlan, ptx: str) -> StageOutput:
        t0 = time.perf_counter()
        self.ptx = ptx
        self.module = self.device.load_module(ptx)
        kernels = {p.fusion.name: self.module.function(p.kernel_name) for p in plan.kernels}
        return StageOutput(kernels, seconds={"cuda-load": time.perf_counter() - t0})

    def upload(self, physical: np.ndarray) -> Any:
        return self.device.to_device(np.ascontiguousarray(physical))

    def allocate(self, shape: Shape) -> Any:
        return self.device.alloc(buffer_bytes(shape))

    def download(self, data: Any, shape: Shape) -> np.ndarray:
        out = np.empty(buffer_bytes(shape) // storage_dtype(shape.element_type).itemsize,
                       dtype=storage_dtype(shape.element_type))
        return self.device.copy_to_host(data, out)

    def launch(self, kernel: Any, plan: KernelPlan, buffers: Sequence[Any]) -> None:
        l = plan.launch
        self.device.launch(kernel, l.grid, l.block, list(buffers), shared_bytes=l.shared_bytes,
                           stream=self._queue or 0)

    def copy(self, dst: Any, src: Any, shape: Shape) -> None:
        self.device.copy_device_to_device(dst, src, buffer_bytes(shape), stream=self._queue)

    def synchronize(self) -> None:
        self.device.synchronize()

    def write(self, data: Any, physical: np.ndarray) -> None:
        self.device.copy_into(data, physical)

    def build_graph(self, ops: Sequence[Any]) -> Any:
        """Stream capture of the recorded launches and copies, on a stream of our own (the
        legacy stream cannot be captured)."""
        if self.stream is None:
            self.stream = self.device.create_stream()

        def enqueue(stream) -> None:
            self._queue = stream
            try:
                self.replay(ops)
            finally:
                self._queue = None
        return self.device.capture_graph(self.stream, enqueue)

    def launch_graph(self, graph: Any) -> None:
        graph.launch(self.stream)

    def destroy_graph(self, graph: Any) -> None:
        graph.destroy()
