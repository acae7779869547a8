"""The ``cuda`` platform of an executable: every kernel of a module in one PTX module, loaded
once through our thin driver layer (``runtime/cuda.py``); buffers live on the device."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..hlo.errors import HloUnsupportedError
from ..hlo.shape import Shape
from ..options import CompileOptions
from .executable import Platform
from .physical import buffer_bytes, storage_dtype


class CudaPlatform(Platform):
    name = "cuda"

    def __init__(self, options: CompileOptions):
        from .cuda import CudaDevice, available
        ok, why = available()
        if not ok:
            raise HloUnsupportedError(f"platform 'cuda' is not available here: {why}")
        self.device = CudaDevice()
        self.arch = self.device.arch
        self.options = options
        self.module = None
        self.ptx = ""
        self.stream = None  # created for the first graph
        self._queue = None  # where launches and copies go: None, the legacy stream (synchronous
        # copies), or the stream a graph is being captured on

    def compile_all(self, plans: Sequence[Any]) -> dict[str, Any]:
        from ..targets.linking import link_kernel_modules
        from ..targets.nvptx import NvptxTarget, compile_to_ptx
        target = NvptxTarget(self.options.arch)
        target.dot_tensor_cores = self.options.dot_tensor_cores
        linked = link_kernel_modules(target, "module", [p.emit(target) for p in plans])
        result = compile_to_ptx(linked, self.options.arch, [p.kernel_name for p in plans],
                                opt_level=self.options.opt_level)
        self.ptx = result.ptx
        self.module = self.device.load_module(result.ptx)
        return {p.fusion.name: self.module.function(p.kernel_name) for p in plans}

    def upload(self, physical: np.ndarray) -> Any:
        return self.device.to_device(np.ascontiguousarray(physical))

    def allocate(self, shape: Shape) -> Any:
        return self.device.alloc(buffer_bytes(shape))

    def download(self, data: Any, shape: Shape) -> np.ndarray:
        out = np.empty(buffer_bytes(shape) // storage_dtype(shape.element_type).itemsize,
                       dtype=storage_dtype(shape.element_type))
        return self.device.copy_to_host(data, out)

    def launch(self, kernel: Any, plan: Any, buffers: Sequence[Any]) -> None:
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
