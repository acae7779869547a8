"""The one interface of a place an executable runs (DESIGN §4): memory, copies, launches.

A thin runtime, as tinygrad's: a platform uploads, allocates, downloads, copies, launches,
synchronises and frees; the executable's steps (``steps.py``, ``control_flow.py``) call
nothing else. Where replayable graphs exist (cuda) a platform builds and launches them; the
host replays the recorded list. A platform also names the pipeline stages that end
compilation for it (``kernel_stage``: JIT the kernels on the host, load the PTX on a GPU)
and the options it needs (``compile_options``: the arch of the GPU that is there), so that
the pipeline's one driver loop builds kernels for every platform.

Implementations: ``host_platform.HostPlatform`` and ``cuda_platform.CudaPlatform``; the
interpreter runs the module itself and needs no platform.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from ..codegen.compiler import KernelPlan
from ..hlo.shape import Shape
from ..options import CompileOptions
from ..driver.stages import Stage

KERNELS = "kernels"  # the name of the stage whose artifact is {fusion name: compiled kernel}


class Platform(ABC):
    """Where an executable runs."""

    name = "?"

    # ---- compilation ------------------------------------------------------------------------
    def compile_options(self, options: CompileOptions) -> CompileOptions:
        """The options to compile for this platform (a new value; the default: unchanged)."""
        return options

    def kernel_stage(self) -> Stage:
        """The stage after the pipeline's own, named ``KERNELS``, whose artifact is every
        kernel compiled for this platform, by fusion name."""
        raise NotImplementedError(f"platform '{self.name}' compiles no kernels")

    # ---- memory -----------------------------------------------------------------------------
    @abstractmethod
    def upload(self, physical: np.ndarray) -> Any:
        """A new buffer holding these host bytes."""

    @abstractmethod
    def allocate(self, shape: Shape) -> Any:
        """A new buffer for a value of ``shape`` (its physical size)."""

    @abstractmethod
    def download(self, data: Any, shape: Shape) -> np.ndarray:
        """A buffer's bytes on the host, as the storage dtype of ``shape``."""

    @abstractmethod
    def write(self, data: Any, physical: np.ndarray) -> None:
        """Overwrite an existing buffer with host bytes (a graph's parameters between runs)."""

    def free(self, data: Any) -> None:
        """Give a buffer's memory back (buffers with a ``free`` method: device memory)."""
        release = getattr(data, "free", None)
        if release is not None:
            release()

    # ---- work -------------------------------------------------------------------------------
    @abstractmethod
    def copy(self, dst: Any, src: Any, shape: Shape) -> None:
        """Copy a whole buffer of ``shape`` (device to device)."""

    @abstractmethod
    def launch(self, kernel: Any, plan: KernelPlan, buffers: Sequence[Any]) -> None:
        """Run ``kernel`` over ``plan.launch``'s grid with these buffers as its arguments."""

    def synchronize(self) -> None:
        """Wait for the work queued so far."""

    # ---- async pairs (async_steps.py) ---------------------------------------------------------
    def async_begin(self) -> Any:
        """Work issued from now until ``async_end`` runs beside the main queue, after what was
        queued so far (cuda: a stream of its own waiting on an event); a handle for
        ``async_wait``. The default (host): synchronous, no handle."""
        return None

    def async_end(self, handle: Any) -> None:
        """Issue on the main queue again."""

    def async_wait(self, handle: Any) -> None:
        """The main queue waits for the work between ``async_begin`` and ``async_end``."""

    # ---- graphs -----------------------------------------------------------------------------
    def build_graph(self, ops: Sequence[Any]) -> Any:
        """One replayable object for recorded launches and copies (``runtime/graph.py``)."""
        raise NotImplementedError(f"platform '{self.name}' has no graphs")

    def launch_graph(self, graph: Any) -> None:
        raise NotImplementedError(f"platform '{self.name}' has no graphs")

    def destroy_graph(self, graph: Any) -> None:
        pass

    def replay(self, ops: Sequence[Any]) -> None:
        """Issue recorded launches and copies (``runtime/graph.py``'s ``GraphOp``s) in order."""
        for op in ops:
            op.issue(self)
