"""The ``cuda`` platform: the module's PTX (the pipeline's ``ptx`` stage, for the arch of the
GPU that is there) loaded once through our thin driver layer (``runtime/cuda.py``); buffers
live on the device. cuda-python itself is imported by ``runtime/cuda.py`` only when used.

Async pairs (``async_steps.py``): the work between ``async_begin`` and ``async_end`` goes on a
side stream of its own (non-blocking, so nothing but events orders it against the main
queue), after an event recorded on the main queue; ``async_end`` records a done event on the
side stream, and ``async_wait`` (the ``-done``) makes the main queue wait for it on the GPU:
the host never blocks, so the main queue's work issued between start and done overlaps the
side stream's, as XLA scheduled. A side stream goes back to a pool once the main queue waits
for it (work queued on it later is ordered after its old work anyway). A buffer freed while
side work may still read it (inside a region, or while a region is unfinished) is freed only
once every region's done event has completed (``cuEventQuery``) or at ``synchronize``.
A download inside a region first waits for the side stream (the legacy stream's synchronous
copy would not), and an upload there waits for the legacy stream's copy."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..codegen.compiler import KernelPlan, ModulePlan
from ..hlo.errors import HloUnsupportedError
from ..hlo.shape import Shape
from ..options import CompileOptions
from ..driver.stages import Stage, StageOutput
from .cuda import CudaDevice, CudaEvent, CudaStream, available
from .physical import buffer_bytes, storage_dtype
from .platform import KERNELS, Platform


@dataclass
class AsyncRegion:
    """One async start's side work: its stream, the queue it was issued from, its done event."""

    stream: CudaStream
    outer: Any  # the main queue at the start (None: the legacy stream)
    done: CudaEvent | None = None
    waited: bool = False


# the library-call families (hlo/calls/library_targets.py), each with the CompileOptions field that
# keeps its calls library calls
_FAMILY_FLAGS = (("gemm", "gemm"), ("conv", "conv"), ("fmha", "fmha"))


def cuda_compile_options(options: CompileOptions, arch: str, notes: list[str] | None = None) -> CompileOptions:
    """``options`` for a GPU of ``arch`` in this process (``CudaPlatform.compile_options``,
    also made without a platform: ``spmd_run`` compiles once for the GPU processes it starts)."""
    from .library_steps import library_unavailable
    changes: dict[str, str] = {"arch": arch}
    # each family on its own: attention having no library step must not take convolutions
    # off cuDNN (the first GPU run found every cuDNN convolution generated for that reason)
    for family, flag in _FAMILY_FLAGS:
        why = library_unavailable(family)
        if getattr(options, flag) != "library" or not why or options.conv == "generated" and flag == "fmha":
            continue
        changes[flag] = "generated"
        # attention has no library step at all (the README says so): no note on every run
        if notes is not None and family != "fmha":
            notes.append(f"--{flag}=library unavailable ({why}): {family} calls compiled by our emitters")
    return dataclasses.replace(options, **changes)


class CudaPlatform(Platform):
    name = "cuda"

    def __init__(self, ordinal: int = 0) -> None:
        ok, why = available(ordinal)
        if not ok:
            raise HloUnsupportedError(f"platform 'cuda' is not available here: {why}")
        self.device = CudaDevice(ordinal)
        self.arch = self.device.arch
        self.module = None
        self.ptx = ""
        self.stream = None  # created for the first graph
        self.notes: list[str] = []  # what the platform decided for the user (printed by hlo-run)
        self._queue = None  # where launches and copies go: None, the legacy stream (synchronous
        # copies), the stream a graph is being captured on, or an async region's side stream
        self._open: list[AsyncRegion] = []  # regions being issued (nested: innermost last)
        self._unfinished: list[AsyncRegion] = []  # ended, their done event not known complete
        self._idle_streams: list[CudaStream] = []  # side streams the main queue has waited for
        self._deferred_frees: list[Any] = []  # buffers side work may still read

    def compile_options(self, options: CompileOptions) -> CompileOptions:
        """Launch heuristics and PTX for the GPU that is there; library calls whose library
        cannot run here are generated instead (said in ``notes``)."""
        return cuda_compile_options(options, self.arch, self.notes)

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
        buf = self.device.to_device(np.ascontiguousarray(physical))
        if self._open:  # the side stream is not ordered after the legacy stream's copy
            self.device.synchronize()
        return buf

    def allocate(self, shape: Shape) -> Any:
        return self.device.alloc(buffer_bytes(shape))

    def download(self, data: Any, shape: Shape) -> np.ndarray:
        out = np.empty(buffer_bytes(shape) // storage_dtype(shape.element_type).itemsize,
                       dtype=storage_dtype(shape.element_type))
        if self._open:  # the value may come from work queued on the side stream
            self._open[-1].stream.synchronize()
        return self.device.copy_to_host(data, out)

    def launch(self, kernel: Any, plan: KernelPlan, buffers: Sequence[Any]) -> None:
        grid = plan.launch
        self.device.launch(kernel, grid.grid, grid.block, list(buffers), shared_bytes=grid.shared_bytes,
                           stream=self._queue or 0)

    def copy(self, dst: Any, src: Any, shape: Shape) -> None:
        self.device.copy_device_to_device(dst, src, buffer_bytes(shape), stream=self._queue)

    def synchronize(self) -> None:
        self.device.synchronize()
        for region in self._unfinished:
            self._finish(region)
        self._unfinished = []
        self._release_deferred()

    def write(self, data: Any, physical: np.ndarray) -> None:
        self.device.copy_into(data, physical)
        if self._open:
            self.device.synchronize()

    def free(self, data: Any) -> None:
        if self._open or self._unfinished:
            self._deferred_frees.append(data)
        else:
            super().free(data)

    def nccl_stream(self) -> int:
        """The handle of the queue work is issued on now, as NCCL takes it (0: the legacy stream)."""
        return int(self._queue.handle) if self._queue is not None else 0

    # ---- async pairs ----------------------------------------------------------------------------
    def async_begin(self) -> AsyncRegion:
        outer = self._queue
        stream = self._idle_streams.pop() if self._idle_streams else self.device.create_stream(non_blocking=True)
        ready = self.device.create_event()
        ready.record(outer)  # what the main queue has issued so far...
        self.device.wait_event(stream, ready)  # ...comes before the side work
        ready.destroy()  # released by the driver once recorded work completes
        region = AsyncRegion(stream, outer)
        self._open.append(region)
        self._queue = stream
        return region

    def async_end(self, handle: Any) -> None:
        region = handle
        if not self._open or self._open[-1] is not region:
            raise RuntimeError("async_end of a region that is not the innermost open one")
        region.done = self.device.create_event()
        region.done.record(region.stream)
        self._open.pop()
        self._queue = region.outer
        self._unfinished.append(region)

    def async_wait(self, handle: Any) -> None:
        """The main queue waits for ``handle``'s done event (None: for every region not waited
        for yet: a start whose value crossed a loop or a tuple)."""
        regions = [handle] if handle is not None else [r for r in self._unfinished if not r.waited]
        for region in regions:
            if region.waited or region.done is None:
                continue
            self.device.wait_event(self._queue, region.done)
            region.waited = True
            self._idle_streams.append(region.stream)
        still = []
        for region in self._unfinished:
            if region.waited and region.done.query():
                self._finish(region)
            else:
                still.append(region)
        self._unfinished = still
        self._release_deferred()

    def _finish(self, region: AsyncRegion) -> None:
        if not region.waited:  # never waited for (synchronize covers it): its stream is free again
            region.waited = True
            self._idle_streams.append(region.stream)
        if region.done is not None:
            region.done.destroy()

    def _release_deferred(self) -> None:
        if self._open or self._unfinished:
            return
        frees, self._deferred_frees = self._deferred_frees, []
        for data in frees:
            super().free(data)

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
