"""PTX → cubin with NVIDIA's ``ptxas``, and the per-kernel resources its ``-v`` report gives.

A failure raises ``ToolError`` carrying ptxas's own output and a command that reproduces it;
the PTX of a failed run is kept on disk for that command (successful runs leave nothing).
"""
from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ...codegen.errors import ToolError
from .toolkit import ToolkitNotFound, find_ptxas

TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one entry function."""

    registers: int = 0
    spill_stores_bytes: int = 0
    spill_loads_bytes: int = 0
    shared_bytes: int = 0  # static shared memory (dynamic shared memory is chosen at launch)
    stack_frame_bytes: int = 0
    barriers: int = 0


@dataclass
class PtxasResult:
    cubin: bytes
    kernels: dict[str, KernelResources] = field(default_factory=dict)
    log: str = ""  # ptxas's stdout and stderr


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FIELDS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads_bytes": re.compile(r"(\d+) bytes spill loads"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "stack_frame_bytes": re.compile(r"(\d+) bytes stack frame"),
    "barriers": re.compile(r"used (\d+) barriers"),
}


def parse_resource_usage(log: str) -> dict[str, KernelResources]:
    """Per entry function, the numbers in a ``ptxas -v`` log (fields it omits stay 0).

    The report is line based: "Compiling entry function 'k'" or "Function properties for k"
    names the function the following lines describe.
    """
    entries: set[str] = set()
    values: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            entries.add(current)
            continue
        m = _PROPERTIES.search(line)
        if m:
            current = m.group(1)
            continue
        if current is None:
            continue
        for name, pattern in _FIELDS.items():
            m = pattern.search(line)
            if m:
                values.setdefault(current, {})[name] = int(m.group(1))
    return {name: KernelResources(**values.get(name, {})) for name in sorted(entries)}


def run_ptxas(ptx: str, arch: str, ptxas: Path | None = None) -> PtxasResult:
    """Assemble ``ptx`` for ``arch`` (``sm_90``...) into a cubin."""
    if ptxas is None:
        ptxas = find_ptxas()
        if ptxas is None:
            raise ToolkitNotFound("ptxas not found: `pip install nvidia-cuda-nvcc`, or set CUDA_HOME "
                                  "to a CUDA toolkit, or put ptxas on PATH")
    workdir = Path(tempfile.mkdtemp(prefix="hlo-compile-ptxas-"))
    source = workdir / "kernel.ptx"
    output = workdir / "kernel.cubin"
    source.write_text(ptx)
    cmd = [str(ptxas), f"-arch={arch}", "-v", str(source), "-o", str(output)]
    reproduce = shlex.join([str(ptxas), f"-arch={arch}", "-v", str(source), "-o", "/dev/null"])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise ToolError(f"ptxas did not finish in {TIMEOUT_SECONDS} s\nreproduce with: {reproduce}",
                        reproduce=reproduce) from None
    except OSError as e:
        raise ToolError(f"could not run ptxas ({ptxas}): {e}", reproduce=reproduce) from None
    log = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        output.unlink(missing_ok=True)
        raise ToolError(
            f"ptxas failed for {arch} (exit status {proc.returncode}):\n{log}\n"
            f"the PTX is kept; reproduce with: {reproduce}",
            tool_output=log, reproduce=reproduce)
    cubin = output.read_bytes()
    source.unlink()
    output.unlink()
    workdir.rmdir()
    return PtxasResult(cubin=cubin, kernels=parse_resource_usage(log), log=log)
