"""Mutations of HLO text (truncations, deleted, inserted and swapped characters) for checking
that the parser answers every input with a module or an HloError (never another exception,
never a hang). Shared by the CI test and the benchmark-sized run in bench/parse.py."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Iterator

import hlo_compile
from hlo_compile import HloError

_INSERTS = list("{}()[],=%:;\"'/*-<>#?") + ["ROOT ", "ENTRY ", " f32[", "{...}", "\n", "nan(0x", "T(", "S("]


def mutate(text: str, rng: random.Random) -> str:
    if not text:
        return text
    kind = rng.randrange(4)
    i = rng.randrange(len(text))
    if kind == 0:
        return text[:i]
    if kind == 1:
        j = min(len(text), i + rng.randint(1, 8))
        return text[:i] + text[j:]
    if kind == 2:
        return text[:i] + rng.choice(_INSERTS) + text[i:]
    j = rng.randrange(len(text))
    chars = list(text)
    chars[i], chars[j] = chars[j], chars[i]
    return "".join(chars)


def mutations(files: list[Path], count: int, seed: int = 0) -> Iterator[tuple[str, str]]:
    rng = random.Random(seed)
    texts = [(f.name, f.read_text()) for f in files]
    for _ in range(count):
        name, text = rng.choice(texts)
        yield name, mutate(text, rng)


def check(text: str, name: str) -> str | None:
    """None if the parser behaved (module or HloError), else a description of the failure."""
    try:
        hlo_compile.parse_modules(text, name)
    except HloError:
        return None
    except Exception as e:  # noqa: BLE001 - this is what we look for
        return f"{name}: {type(e).__name__}: {e}"
    return None
