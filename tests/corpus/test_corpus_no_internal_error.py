"""No module of the shared corpus makes the compiler fail internally (issue 15).

Every ``.hlo`` under the corpus goes through what ``hlo-compile FILE --emit=ptx`` runs (with
``--split-input-file`` where the file has ``// -----`` separators), in process: reading, passes,
fusion planning, indexing, LLVM IR, O3 and PTX. An ``HloError`` (the CLI's exit 2 with a
``file:line:col: error:`` message: a parse error, an unsupported op refused by name) and a
``UserError`` (an empty file) are fine; any other exception is the "unexpected failure ... this
is a bug in hlo-compile" of the CLI, and fails the test with the file and the traceback's end.

One test per file (``test_corpus_file_compiles_or_refuses[<path under the corpus>]``), largest
first, so that pytest-xdist spreads them over its workers: together about two minutes of one
core, a third of it the six ~170 KB Llama benchmark modules (10-15 s each).

Files over ``SIZE_LIMIT`` bytes are left to ``test_large_corpus_compiles_or_refuses``: the big
real models (ResNet-50, the fp8 Llamas, MaxText, MobileNet, the 1.8 MB slow-compile loop, Llama
3.1 8B) take from seconds to more than a minute each. ``HLO_CORPUS_LARGE=1`` runs them too (the
10 files over the limit took 2.6 min on two loaded cores; none failed internally). Modules are
``.hlo`` (and ``.txt``, none in the corpus today).
"""
from __future__ import annotations

import os
import traceback
from pathlib import Path

import pytest

from hlo_compile.cli.common import UserError, read_modules
from hlo_compile.hlo import HloError
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline

from conftest import corpus_root

SIZE_LIMIT = 250_000  # bytes; see the module docstring


def _compile(path: Path) -> None:
    split = "\n// -----" in path.read_text(errors="replace")
    options = CompileOptions()
    for i, module in enumerate(read_modules(str(path), split, False)):
        run_pipeline(module, options, emit="ptx", dump_to=None, module_index=i)


def _failure(path: Path) -> str | None:
    try:
        _compile(path)
    except (HloError, UserError):
        return None  # refused with a message: exit 2, as the contract allows
    except Exception as e:  # noqa: BLE001 - every other exception is the failure this test looks for
        where = " / ".join(line.strip() for line in traceback.format_exc().splitlines()[-5:-1])
        return f"{path}: {type(e).__name__}: {e} [{where}]"
    return None


def _modules(corpus: Path, large: bool) -> list[Path]:
    files = sorted(p for ext in ("*.hlo", "*.txt") for p in corpus.rglob(ext))
    return [p for p in files if (p.stat().st_size > SIZE_LIMIT) == large]


def _check(files: list[Path]) -> None:
    failures = [f for f in map(_failure, files) if f is not None]
    assert not failures, f"{len(failures)} of {len(files)} corpus files fail internally:\n" + "\n".join(failures)


def _params() -> list:
    """One parameter per corpus file under ``SIZE_LIMIT``, the largest first (the long ones start
    early instead of ending the run), named by its path under the corpus."""
    root = corpus_root()
    if root is None:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.slow)]
    files = sorted(_modules(root, large=False), key=lambda p: (-p.stat().st_size, p))
    if not files:
        return [pytest.param(None, id="empty-corpus", marks=pytest.mark.slow)]
    return [pytest.param(p, id=p.relative_to(root).as_posix(), marks=pytest.mark.slow) for p in files]


@pytest.mark.parametrize("path", _params())
def test_corpus_file_compiles_or_refuses(corpus: Path, path: Path | None):
    if path is None:
        pytest.fail(f"no .hlo file under {corpus}")
    _check([path])


@pytest.mark.skipif(os.environ.get("HLO_CORPUS_LARGE") != "1", reason="set HLO_CORPUS_LARGE=1 (minutes)")
def test_large_corpus_compiles_or_refuses(corpus: Path):
    files = _modules(corpus, large=True)
    if not files:
        pytest.skip(f"no module over {SIZE_LIMIT} bytes under {corpus}")
    _check(files)
