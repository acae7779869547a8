"""The GPU machine's check (``bench/device/run.sh``) proven without a GPU: its dry run goes
through every step up to the first call that needs a GPU, so packaging, imports, paths and
test collection fail here, in CI, and not in a session's few minutes of device time."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "device" / "run.sh"
STEPS = ("smoke", "tests", "families", "sanitizer", "libraries", "bench")


def _env(tmp_path: Path) -> dict:
    """run.sh's scratch files (site, compile cache, the smoke PTX) under ``$TMPDIR``: this test's own
    folder, not fixed paths in /tmp that a parallel test or another checkout also writes."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    return dict(os.environ, TMPDIR=str(scratch))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_dry_run_goes_through_every_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(RUN), "--dry-run", "--out", str(out)], cwd=ROOT, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)
    summary = (out / "summary.txt").read_text()
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert "failed: none" in summary
    for step in STEPS:
        assert f"== {step}" in summary, f"step {step} did not run:\n{summary}"
    # each pytest step collects tests; the smoke step compiled gelu for sm_90 and ran it on host
    counts = dict(re.findall(r"-- (\w+): (\d+) tests collected", summary))
    assert set(counts) == {"tests", "families", "sanitizer", "libraries"}, summary
    assert int(counts["families"]) == int(counts["sanitizer"]) >= 15
    assert int(counts["libraries"]) >= 90 and int(counts["tests"]) >= 5
    assert "-- smoke: exit 0" in summary
    assert "results match the interpreter" in (out / "smoke.log").read_text()
    # at most 8 files come back from the GPU machine
    assert len(list(out.iterdir())) <= 8


def test_unknown_arguments_and_steps_are_refused(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(RUN), "--dry-run", "--frobnicate"], cwd=ROOT, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown argument '--frobnicate'" in proc.stderr
    proc = subprocess.run(["bash", str(RUN), "--dry-run", "--steps", "smok", "--out", str(tmp_path)], cwd=ROOT,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "unknown step 'smok'" in (tmp_path / "summary.txt").read_text()
