"""The linter and the type checker pass: ``ruff check`` on the package, the benchmarks and the
tests, ``mypy`` on the package (both configured in pyproject.toml). Skipped only where the tool
is not installed (``pip install ".[test]"`` installs both)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_ruff():
    proc = _run("ruff", "check", "--no-cache", "hlo_compile", "bench", "tests", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.long
def test_mypy(tmp_path):
    # the cache in the test's own folder: nothing written into the checkout, no two runs sharing one
    proc = _run("mypy", "--cache-dir", str(tmp_path / "mypy-cache"), "hlo_compile", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
