"""The dump directory (``--dump-to DIR``, ``XLA_FLAGS=--xla_dump_to=DIR``) under XLA's names.

Every file of module number N is ``module_NNNN.<module>.<suffix>``, e.g.
``module_0000.gelu.before_optimizations.txt`` (the input),
``module_0000.gelu.sm_8.0_gpu_after_optimizations.txt`` (after our passes),
``module_0000.gelu.ir-no-opt.ll``, ``module_0000.gelu.ptx``; per kernel
``module_0000.gelu.<kernel>.ir-no-opt.ll``. Names are sanitised to ``[A-Za-z0-9._-]``, never
leave the directory and never collide (``DumpWriter``). ``DumpDirectory`` is one run's
directory: the modules of that run and the ``summary.json`` over them. Only the pipeline's
driver loop writes here (DESIGN §2).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from ..hlo.errors import HloUnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from ..hlo import HloModule

BEFORE_OPTIMIZATIONS = "before_optimizations.txt"
SUMMARY = "summary.json"


def safe_file_name(name: str) -> str:
    """A name from HLO text made safe as a file name inside the dump directory."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return cleaned or "_"


def xla_arch_name(arch: str) -> str:
    """``sm_90`` → ``sm_9.0``, ``sm_90a`` → ``sm_9.0a``: the compute capability as XLA writes it
    in ``..._gpu_after_optimizations.txt``."""
    m = re.fullmatch(r"sm_(\d+)(\d)([a-z]?)", arch)
    return f"sm_{m.group(1)}.{m.group(2)}{m.group(3)}" if m else safe_file_name(arch)


class DumpWriter:
    """Writes one module's files into a dump directory under XLA's names.

    ``module_NNNN.<module>.`` prefixes every file (the module name is dropped, as XLA does,
    when a name would pass 255 characters); per-kernel files add ``<kernel>.``. Every name is
    sanitised, stays inside the directory, and a name already written by this writer gets a
    ``-2``, ``-3``... before its suffix instead of overwriting the first file."""

    MAX_NAME = 255

    def __init__(self, root: Path, module_name: str, index: int = 0, arch: str = "sm_80"):
        self.root = root
        self.index = index
        self.arch = arch
        self.module = safe_file_name(module_name) if module_name else ""
        self.written: dict[str, Path] = {}

    def file_name(self, suffix: str, kernel: str | None = None) -> str:
        suffix = suffix.replace("{arch}", xla_arch_name(self.arch))
        parts = [f"module_{self.index:04d}"]
        if self.module:
            parts.append(self.module)
        if kernel is not None:
            parts.append(safe_file_name(kernel))
        name = ".".join(parts + [suffix])
        if len(name) > self.MAX_NAME and self.module:
            name = ".".join([parts[0]] + parts[2:] + [suffix])
        if len(name) > self.MAX_NAME:  # a kernel name of hundreds of characters: keep it unique
            digest = hashlib.sha1(name.encode()).hexdigest()[:12]
            name = name[:self.MAX_NAME - len(suffix) - 14] + "." + digest + "." + suffix
        return safe_file_name(name)

    def write(self, suffix: str, data: str | bytes | Iterable[str], kernel: str | None = None) -> Path:
        """Write ``data`` as the file of ``suffix`` (and ``kernel``); text given in pieces
        (``stages.StreamedText.chunks``) is written as each is made, into a temporary file
        renamed into place at the end: a failure leaves no file."""
        name = self.file_name(suffix, kernel)
        suffix = suffix.replace("{arch}", xla_arch_name(self.arch))
        if name in self.written:
            stem, n = name[:len(name) - len(suffix) - 1], 2
            while f"{stem}-{n}.{suffix}" in self.written:
                n += 1
            name = f"{stem}-{n}.{suffix}"
        path = (self.root / name).resolve()
        if path.parent != self.root.resolve():  # never outside the dump directory
            raise HloUnsupportedError(f"refusing to write {name!r} outside {self.root}")
        if isinstance(data, bytes):
            path.write_bytes(data)
        elif isinstance(data, str):
            path.write_text(data)
        else:
            _write_pieces(path, data)
        self.written[name] = path
        return path


def _write_pieces(path: Path, pieces: Iterable[str]) -> None:
    """``path.write_text("".join(pieces))`` without holding the whole text."""
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        with open(tmp, "w") as f:  # (as ``Path.write_text``: the same encoding and newlines)
            for piece in pieces:
                f.write(piece)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class DumpDirectory:
    """One run's dump directory: a writer per module, and ``summary.json`` over the modules
    summarised so far (the summary itself for one module, ``{"modules": [...]}`` for more)."""

    def __init__(self, root: Path):
        self.root = root
        self.summaries: list[dict] = []

    def module(self, module: HloModule, index: int, arch: str) -> DumpWriter:
        """A writer for module number ``index``, its input already written."""
        self.root.mkdir(parents=True, exist_ok=True)
        writer = DumpWriter(self.root, module.name, index, arch)
        writer.write(BEFORE_OPTIMIZATIONS, module.to_text("long"))
        return writer

    def add_summary(self, writer: DumpWriter, summary: dict) -> None:
        text = json.dumps(summary, indent=1) + "\n"
        writer.write(SUMMARY, text)
        self.summaries.append(summary)
        whole = summary if len(self.summaries) == 1 else {"modules": self.summaries}
        (self.root / SUMMARY).write_text(json.dumps(whole, indent=1) + "\n")


def as_dump_directory(dump_to: Path | DumpDirectory | None) -> DumpDirectory | None:
    if dump_to is None or isinstance(dump_to, DumpDirectory):
        return dump_to
    return DumpDirectory(Path(dump_to))
