"""``python -m bench``: the CPU suite in --quick mode runs and writes well-formed JSON, and the
GPU suite without a GPU says why in one line and exits 0."""
from __future__ import annotations

import json
import numbers
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `bench` is a package of the repository, not installed
    sys.path.insert(0, str(REPO))


def _bench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


@pytest.mark.long
def test_cpu_suite_quick_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = _bench("--suite", "cpu", "--quick", "--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["quick"] is True and "versions" in report and _is_number(report["seconds"])
    cpu = report["suites"]["cpu"]
    assert cpu["ran"] is True
    assert {"parse", "compile", "pass scaling", "interpreter", "host"} <= set(cpu["sections"])
    assert [r["extra"]["ratio_to_1x"] for r in cpu["sections"]["pass scaling"]["rows"]][0] == 1.0
    for name, sec in cpu["sections"].items():
        assert "error" not in sec, f"{name}: {sec['error']}"
        assert _is_number(sec["seconds"])
        if sec.get("skipped"):  # no corpus here: parse and interpreter skip cleanly; --quick: no XLA
            assert name in ("parse", "interpreter", "compile vs XLA") and sec["rows"] == []
            continue
        assert sec["rows"], name
        for row in sec["rows"]:
            assert isinstance(row["name"], str) and isinstance(row["unit"], str)
            assert _is_number(row["value"]) and row["value"] >= 0, (name, row)
            assert isinstance(row["extra"], dict)
    compile_rows = cpu["sections"]["compile"]["rows"]
    assert any(r["name"].startswith("generated") for r in compile_rows)
    for r in compile_rows:
        assert all(_is_number(v) for v in r["extra"]["stage_seconds"].values())
    assert not cpu["sections"]["host"]["errors"], cpu["sections"]["host"]["errors"]


def test_gpu_suite_without_gpu_skips():
    from hlo_compile.runtime import cuda
    ok, why = cuda.available()
    if ok:
        pytest.skip("a GPU is here: the GPU suite would run")
    proc = _bench("--suite", "gpu", "--no-xla", timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    skip_lines = [line for line in proc.stdout.splitlines() if line.startswith("gpu suite skipped: no GPU")]
    assert len(skip_lines) == 1, proc.stdout


def test_modules_get_their_intended_emitters():
    from bench import catalog
    from hlo_compile.codegen.compiler import plan_module
    from hlo_compile.options import CompileOptions
    assert {m.file for m in catalog.MODULES} == {p.name for p in catalog.MODULES_DIR.glob("*.hlo")}
    for bm in catalog.MODULES:
        _, module = catalog.load(bm)
        assert catalog.check_emitters(bm, plan_module(module, CompileOptions(arch="sm_90"))) is None, bm.name
