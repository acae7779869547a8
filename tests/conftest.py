"""Shared test fixtures: where the shared corpus lives (tests skip cleanly without it)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The tests mirror the package's tree (tests/hlo, tests/codegen, ...) but share one flat
# namespace of module names: a test may import another's cases (``from test_jax_corpus import
# run_case``) and the helpers at this level (``codegen_helpers``), wherever each lives. pytest
# puts a test file's own folder on sys.path only when it imports it, so every folder goes on it
# here, before any test module is imported (test file names are unique across folders).
TEST_FOLDERS = sorted(p for p in Path(__file__).resolve().parent.iterdir()
                      if p.is_dir() and p.name not in ("data", "support", "__pycache__"))
for _folder in [Path(__file__).resolve().parent, *TEST_FOLDERS]:
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


def corpus_root() -> Path | None:
    """``$HLO_CORPUS`` or ``../shared/corpus`` next to the repository; None if absent."""
    env = os.environ.get("HLO_CORPUS")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "corpus")
    for c in candidates:
        if c.is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def corpus() -> Path:
    root = corpus_root()
    if root is None:
        pytest.skip("shared corpus not found (set HLO_CORPUS or place it at ../shared/corpus)")
    return root


@pytest.fixture(scope="session")
def gpu() -> str:
    """Skips the test (with the driver's reason) unless a CUDA device can be used; the
    driver's description of the device otherwise. For the ``gpu``-marked tests."""
    from hlo_compile.runtime import cuda as rt
    ok, why = rt.available()
    if not ok:
        pytest.skip(f"no usable CUDA GPU: {why}")
    return why


@pytest.fixture(autouse=True)
def _compile_cache_in_tmp(tmp_path_factory, monkeypatch):
    """The compile cache of every test in a temporary folder of its own (each test starts
    cold), never the user's home."""
    monkeypatch.setenv("HLO_COMPILE_CACHE_DIR", str(tmp_path_factory.mktemp("hlo-compile-cache")))


def pytest_collection_modifyitems(config, items):
    """The ``slow`` tests first, then the ``long`` ones (a stable sort; the same order on every
    xdist worker): under ``-n``, they start early on different workers instead of one of them
    ending the run alone (``test_mypy``, collected last, was the run's last 40 s on one core)."""
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, item.get_closest_marker("long") is None))
