"""The layout ``xla_gpu_dump.py`` writes, read by the corpus check and the parity bench alike:
``<group>/<arch>/<case>/`` folders, each holding ``case.json``."""
from __future__ import annotations

from pathlib import Path


def find_cases(paths: list[str] | list[Path]) -> list[Path]:
    """Case folders (holding ``case.json``) under ``paths``, sorted, each once; a path that
    is itself a case folder is taken as it is."""
    out: list[Path] = []
    for p in paths:
        root = Path(p)
        if (root / "case.json").is_file():
            out.append(root)
        elif root.is_dir():
            out.extend(sorted(c.parent for c in root.rglob("case.json")))
    return list(dict.fromkeys(out))


def group_of(case: Path) -> str:
    """The group a case belongs to (jax, programs, spmd4, xla-cublas, ...): the folder above
    its arch's."""
    return case.parent.parent.name
