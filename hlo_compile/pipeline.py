"""The compilation pipeline as data: an ordered list of named stages (DESIGN §2).

Each stage turns the module into one printable artifact. The driver loop (``run_pipeline``)
alone decides what is printed, dumped or skipped; stages never do I/O. Stages that are not
built yet are listed with the issue that delivers them, so asking for one gives a clear
error instead of silence.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .hlo import HloModule
from .hlo.errors import HloUnsupportedError


@dataclass(frozen=True)
class CompileOptions:
    """Every knob of a compilation in one typed place (its hash can key a cache)."""
    arch: str = "sm_80"
    opt_level: int = 3


@dataclass(frozen=True)
class Stage:
    name: str
    extension: str
    run: Callable[[HloModule, CompileOptions], str] | None
    missing: str = ""  # why the stage is not available


def _hlo(module: HloModule, options: CompileOptions) -> str:
    return module.to_text("long")


def _indexing(module: HloModule, options: CompileOptions) -> str:
    from .indexing.report import indexing_report_text
    return indexing_report_text(module)


def _indexing_json(module: HloModule, options: CompileOptions) -> str:
    from .indexing.report import indexing_report_json
    return json.dumps(indexing_report_json(module), indent=1) + "\n"


_CODEGEN = "code generation (issue 5: loop emitter, LLVM IR, PTX) is not implemented yet"

STAGES: list[Stage] = [
    Stage("hlo", "txt", _hlo),
    Stage("indexing", "txt", _indexing),
    Stage("indexing-json", "json", _indexing_json),
    Stage("fusions", "txt", None, _CODEGEN),
    Stage("llvm", "ll", None, _CODEGEN),
    Stage("llvm-opt", "ll", None, _CODEGEN),
    Stage("ptx", "ptx", None, _CODEGEN),
    Stage("cubin", "cubin", None, _CODEGEN),
]
STAGE_NAMES = [s.name for s in STAGES]


def stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise HloUnsupportedError(f"unknown stage '{name}' (stages: {', '.join(STAGE_NAMES)})")


def safe_file_name(name: str) -> str:
    """A name from HLO text made safe as a file name inside the dump directory."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return cleaned or "_"


@dataclass
class PipelineResult:
    artifacts: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # stage → why


def run_pipeline(module: HloModule, options: CompileOptions, *, emit: str | None = None,
                 dump_to: Path | None = None) -> PipelineResult:
    """Run the stages in order. With ``emit``, stop after that stage (an error if it is not
    available); with ``dump_to``, write every available stage as ``module.<stage>.<ext>``."""
    result = PipelineResult()
    target = stage(emit) if emit else None
    for s in STAGES:
        if s.run is None:
            result.skipped[s.name] = s.missing
            if target is s:
                raise HloUnsupportedError(f"stage '{s.name}' is not available: {s.missing}")
            continue
        if target is not None and dump_to is None and s is not target:
            continue
        result.artifacts[s.name] = s.run(module, options)
        if target is s and dump_to is None:
            break
    if dump_to is not None:
        dump_to.mkdir(parents=True, exist_ok=True)
        for s in STAGES:
            if s.name in result.artifacts:
                (dump_to / f"module.{s.name}.{s.extension}").write_text(result.artifacts[s.name])
        summary = {"module": module.name, "arch": options.arch, "kernels": [],
                   "stages": list(result.artifacts), "skipped_stages": result.skipped}
        (dump_to / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return result
