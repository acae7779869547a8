"""A whole module as one graph of launches (``hlo-run --use-cuda-graph``).

Running a module the plain way costs one Python round trip and one driver call per kernel
(and per copy that starts an in-place kernel); for modules of many small kernels that host
work, not the GPU, sets the time. A graph removes it: the module's work is captured once and
replayed with a single ``cuGraphLaunch``, as XLA's command buffers do.

How (``ModuleGraph``):

1. *Record.* ENTRY's program runs once with a ``_Recorder`` as its platform (it wraps the
   real one; ``Executable.run_entry`` takes the platform to run on): buffers are really allocated (and constants uploaded) but launches and copies are
   only written down, and nothing is freed. The result is the list of operations with the
   very buffers they touch; every buffer stays alive as long as the graph (static buffer
   assignment, no reuse between values: the price of a fixed graph).
2. *Capture.* The platform turns that list into a graph (``Platform.build_graph``): on
   ``cuda`` a stream capture of the launches and device-to-device copies on a stream of our
   own, with no allocation or synchronous copy inside the capture; on ``host`` the list itself
   (replayed in order), so the whole mechanism is tested without a GPU.
3. *Replay.* Each run writes the arguments into the parameters' buffers (the same addresses
   the graph holds), launches the graph, waits, and downloads the result.

Only straight-line modules are captured: a ``while`` or ``conditional`` in ENTRY needs the
host between kernels (its predicate is read back), so ``unsupported_reason`` names it and the
caller runs plain launches instead (XLA would use conditional graph nodes; not done here).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..codegen.compiler import KernelPlan
from ..hlo.shape import Shape
from .literals import flatten
from .physical import to_physical
from .platform import Platform
from .values import free_value, leaves

HOST_CONTROL_FLOW = ("while", "conditional")


@dataclass(frozen=True)
class GraphOp:
    """One recorded operation: a kernel launch or a whole-buffer device-to-device copy."""

    kind: str                 # "launch" or "copy"
    kernel: Any = None        # launch: the compiled kernel
    plan: Any = None          # launch: its KernelPlan (launch dimensions, shared memory)
    buffers: tuple = ()       # launch: kernel arguments; copy: (dst, src)
    shape: Any = None         # copy: the buffer's shape

    def issue(self, platform: Platform) -> None:
        """Queue this operation on ``platform`` (a replay)."""
        if self.kind == "launch":
            platform.launch(self.kernel, self.plan, self.buffers)
        else:
            platform.copy(*self.buffers, self.shape)


class _Recorder(Platform):
    """The platform, except that launches and copies are written down instead of run and that
    nothing is freed (the graph keeps every buffer it touches)."""

    def __init__(self, real: Platform):
        self.real = real
        self.name = real.name
        self.ops: list[GraphOp] = []
        self.kept: list[Any] = []

    def allocate(self, shape: Shape) -> Any:
        data = self.real.allocate(shape)
        self.kept.append(data)
        return data

    def upload(self, physical: np.ndarray) -> Any:
        return self.real.upload(physical)

    def launch(self, kernel: Any, plan: KernelPlan, buffers: Sequence[Any]) -> None:
        self.ops.append(GraphOp("launch", kernel, plan, tuple(buffers)))

    def copy(self, dst: Any, src: Any, shape: Shape) -> None:
        self.ops.append(GraphOp("copy", buffers=(dst, src), shape=shape))

    def free(self, data: Any) -> None:
        pass  # still used by the graph: released with it

    def download(self, data: Any, shape: Shape) -> np.ndarray:
        raise RuntimeError("nothing may be read back while a graph is recorded")

    def write(self, data: Any, physical: np.ndarray) -> None:
        raise RuntimeError("nothing may be written while a graph is recorded")


def unsupported_reason(exe: Any) -> str | None:
    """Why ``exe``'s module cannot be one graph (None when it can)."""
    for inst in exe.module.entry.instructions:
        if inst.opcode in HOST_CONTROL_FLOW:
            where = f" at line {inst.location.line}" if inst.location else ""
            return (f"{inst.opcode} '%{inst.name}'{where} reads its predicate back on the host "
                    "between kernels")
        if inst.opcode == "fft":
            where = f" at line {inst.location.line}" if inst.location else ""
            return f"fft '%{inst.name}'{where} runs as a step of its own (cuFFT, or numpy on the host), not in a graph"
    return None


class ModuleGraph:
    """``exe``'s ENTRY computation recorded once and replayed as one graph per run."""

    def __init__(self, exe: Any):
        why = unsupported_reason(exe)
        if why:
            raise ValueError(f"module '{exe.module.name}' cannot run as one graph: {why}")
        self.exe = exe
        self.platform = exe.platform
        self.graph: Any = None
        self.ops: list[GraphOp] = []
        self._params: list[Any] = []
        self._result: Any = None
        self._kept: list[Any] = []

    @property
    def kernel_launches(self) -> int:
        return sum(op.kind == "launch" for op in self.ops)

    @property
    def copies(self) -> int:
        return sum(op.kind == "copy" for op in self.ops)

    def describe(self) -> str:
        nodes = getattr(self.graph, "node_count", None)
        node_text = f", {nodes} graph nodes" if nodes is not None else ""
        return (f"one graph of {self.kernel_launches} kernel launch(es) and {self.copies} copy(ies)"
                f"{node_text}, {len(self._kept)} buffers held")

    def run(self, args: Sequence[Any]) -> Any:
        """Results in the interpreter's form, like ``Executable.run``; the first call records
        and captures the graph with these arguments' shapes."""
        exe, p = self.exe, self.platform
        if self.graph is None:
            self._capture(args)
        else:
            for value, arg in zip(self._params, args):
                self._write(value, arg)
        p.launch_graph(self.graph)
        p.synchronize()
        return exe.download(self._result)

    def close(self) -> None:
        """Destroy the graph and free every buffer it held."""
        if self.graph is not None:
            self.platform.destroy_graph(self.graph)
            self.graph = None
        for data in self._kept:
            self.platform.free(data)
        for v in self._params:
            free_value(self.platform, v)
        self._kept, self._params = [], []

    def __enter__(self) -> ModuleGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _capture(self, args: Sequence[Any]) -> None:
        self._params = self.exe.upload_arguments(args, self.platform)
        recorder = _Recorder(self.platform)
        result, _owned = self.exe.run_entry(recorder, self._params)  # owned ⊆ recorder.kept
        self._result, self._kept, self.ops = result, recorder.kept, recorder.ops
        self.graph = self.platform.build_graph(self.ops)

    def _write(self, value: Any, arg: Any) -> None:
        """The argument's bytes into the parameter's existing buffer(s), leaf by leaf."""
        for b, a in zip(leaves(value), flatten(arg)):
            self.platform.write(b.data, to_physical(a, b.shape))
