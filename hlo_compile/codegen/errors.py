"""Errors raised by code generation and by the external tools it drives.

Both derive from ``HloError`` so the CLI reports them as a message and exit status 2, never
as a traceback.
"""
from __future__ import annotations

from ..hlo.errors import HloError, HloUnsupportedError
from ..hlo.ir import HloInstruction


class CodegenError(HloError):
    """LLVM rejected what we built (verifier, linker, a construct the backend cannot lower)."""


class ToolError(HloError):
    """An external tool (ptxas, the CUDA JIT) failed; the message carries the tool's own output
    and, in ``reproduce``, a command line that repeats the failure."""

    def __init__(self, message: str, tool_output: str = "", reproduce: str = ""):
        super().__init__(message)
        self.tool_output = tool_output
        self.reproduce = reproduce


class WorkerError(HloError):
    """A worker process of ``-j N`` died before it returned its kernel (killed by a signal: the
    system's out-of-memory killer, a user's kill): nothing about the input, the compile may be
    run again with fewer jobs."""

    @classmethod
    def lost(cls, jobs: int) -> "WorkerError":
        return cls(f"a worker process of -j {jobs} died before it finished (killed by a signal, e.g. when "
                   "memory ran out); run again, with -j 1 to compile in this process alone")


def unsupported(inst: HloInstruction, what: str) -> HloUnsupportedError:
    """The error for an instruction code generation cannot emit, naming it and its line."""
    where = f" at line {inst.location.line}" if getattr(inst, "location", None) else ""
    return HloUnsupportedError(f"{what}: {inst.opcode} '%{inst.name}'{where}")
