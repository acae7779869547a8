"""PTX → cubin with NVIDIA's ``ptxas``, and the per-kernel resources its ``-v`` report gives.

A failure raises ``ToolError`` whose message is short: ptxas's errors, the one kernel they are
about (with its own ``ptxas info`` lines; a module's other kernels, hundreds of lines, are left
out) and a command that reproduces it; ``tool_output`` keeps ptxas's whole output. The
temporary folder ptxas runs in is removed whatever happens.
"""
from __future__ import annotations

import re
import shlex
import shutil
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


_INFO = re.compile(r"^ptxas info\b")
_COMPILING = re.compile(r"Compiling entry function '([^']+)'")
_NAMED = re.compile(r"(?:[Ee]ntry function|[Ff]unction) '([^']+)'")
_LINE = re.compile(r", line (\d+);")
_DEFINITION = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$.]+)", re.M)
MAX_DIAGNOSTIC_LINES = 12


def _kernel_at_line(ptx: str, line: int) -> str | None:
    """The ``.entry``/``.func`` whose definition comes last before PTX line ``line`` (1-based)."""
    name, at, number = None, 0, 1
    for m in _DEFINITION.finditer(ptx):
        number += ptx.count("\n", at, m.start())
        at = m.start()
        if number > line:
            break
        name = m.group(1)
    return name


def failure_summary(log: str, ptx: str) -> tuple[list[str], str | None]:
    """(lines worth printing, failing kernel or None) from a failed ``ptxas -v`` run: every
    line that is not part of a ``ptxas info`` report (errors, warnings, fatal), at most
    ``MAX_DIAGNOSTIC_LINES``, then the info lines of the kernel the first error names (by
    name, or by the PTX line it points at), if any."""
    diagnostics: list[str] = []
    in_info = False
    for line in log.splitlines():
        if _INFO.match(line):
            in_info = True
        elif not (in_info and line[:1].isspace()):  # an info report's indented continuation
            in_info = False
            if line.strip():
                diagnostics.append(line)
    kernel = None
    for line in diagnostics:
        m = _NAMED.search(line)
        if m:
            kernel = m.group(1)
            break
        m = _LINE.search(line)
        if m:
            kernel = _kernel_at_line(ptx, int(m.group(1)))
            if kernel is not None:
                break
    out = diagnostics[:MAX_DIAGNOSTIC_LINES]
    if len(diagnostics) > MAX_DIAGNOSTIC_LINES:
        out.append(f"... ({len(diagnostics) - MAX_DIAGNOSTIC_LINES} more lines)")
    if kernel is not None:
        current = None
        for line in log.splitlines():
            m = _COMPILING.search(line)
            if m:
                current = m.group(1)
            if current == kernel and (_INFO.match(line) or line[:1].isspace()) and "Compile time" not in line:
                out.append(line)
    return out, kernel


def run_ptxas(ptx: str, arch: str, ptxas: Path | None = None) -> PtxasResult:
    """Assemble ``ptx`` for ``arch`` (``sm_90``...) into a cubin."""
    if ptxas is None:
        ptxas = find_ptxas()
        if ptxas is None:
            raise ToolkitNotFound("ptxas not found: `pip install nvidia-cuda-nvcc`, or set CUDA_HOME "
                                  "to a CUDA toolkit, or put ptxas on PATH")
    # the PTX does not outlive this call: the command to rerun ptxas names a file the user
    # writes with --emit=ptx
    reproduce = shlex.join([str(ptxas), f"-arch={arch}", "-v", "kernel.ptx", "-o", "/dev/null"])
    how = (f"reproduce with: hlo-compile MODULE --emit=ptx --arch={arch} -o kernel.ptx && {reproduce}")
    workdir = Path(tempfile.mkdtemp(prefix="hlo-compile-ptxas-"))
    try:
        source = workdir / "kernel.ptx"
        output = workdir / "kernel.cubin"
        source.write_text(ptx)
        cmd = [str(ptxas), f"-arch={arch}", "-v", str(source), "-o", str(output)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise ToolError(f"ptxas did not finish in {TIMEOUT_SECONDS} s\n{how}", reproduce=reproduce) from None
        except OSError as e:
            raise ToolError(f"could not run ptxas ({ptxas}): {e}", reproduce=reproduce) from None
        log = (proc.stdout + proc.stderr).strip().replace(str(source), "kernel.ptx")
        if proc.returncode != 0:
            lines, kernel = failure_summary(log, ptx)
            where = f" in kernel '{kernel}'" if kernel else ""
            error = ToolError("\n".join([f"ptxas failed for {arch} (exit status {proc.returncode}){where}:",
                                          *lines, how]),
                              tool_output=log, reproduce=reproduce)
            error.kernel = kernel
            raise error
        cubin = output.read_bytes()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return PtxasResult(cubin=cubin, kernels=parse_resource_usage(log), log=log)
