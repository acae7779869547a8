"""XLA:GPU's own optimized modules (issue 28): the committed subset of the corpus that
``bench/xla_gpu_corpus/make.py`` regenerates (``tests/data/xla_gpu/<group>/<arch>/<case>``, made
by ``python -m bench.xla_gpu_corpus.subset``), each checked as ``python -m bench --xla-gpu-corpus``
checks the whole corpus, through the installed commands: ``hlo-compile --emit cubin`` (PTX
only where no ptxas is installed) exits 0, and ``hlo-run`` on the host and on the interpreter,
with XLA:CPU's inputs, gives XLA:CPU's outputs within each output's tolerance."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.xla_gpu_corpus import check
from bench.xla_gpu_corpus.layout import find_cases, group_of

DATA = Path(__file__).resolve().parents[1] / "data" / "xla_gpu"
PLATFORMS = ["host", "interpreter"]


def _cases() -> list[Path]:
    return find_cases([DATA]) if DATA.is_dir() else []


def test_subset_is_there_and_covers_the_groups():
    cases = _cases()
    assert len(cases) >= 20, f"only {len(cases)} committed XLA:GPU cases under {DATA}"
    groups = {group_of(c) for c in cases}
    for wanted in ("jax", "models", "xla", "programs", "spmd"):
        assert any(g.startswith(wanted) for g in groups), f"no {wanted} case in {sorted(groups)}"
    archs = {json.loads((c / "case.json").read_text())["arch_requested"] for c in cases}
    assert archs == {"sm_80", "sm_90"}
    assert any(g.endswith("-cublas") for g in groups)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: f"{c.parent.parent.name}-{c.parent.name}-{c.name}")
def test_xla_gpu_module_compiles_and_matches_xla(case: Path):
    ns = argparse.Namespace(platforms=PLATFORMS, compile_timeout=300.0, run_timeout=600.0)
    result = check.check_case(case, group_of(case), ns, check.has_ptxas())
    bad = {k: f"{s.status}: {s.message}" for k, s in result.steps.items() if s.status != "ok"}
    assert not bad, bad


def test_mismatch_is_reported_not_passed(tmp_path: Path):
    """The comparison fails a result that differs beyond the tolerance (and names the output)."""
    import numpy as np
    e, a = tmp_path / "e.npz", tmp_path / "a.npz"
    np.savez(e, out0=np.ones(4, np.float32), out1=np.arange(3))
    np.savez(a, out0=np.array([1, 1, 1, 1.01], np.float32), out1=np.arange(3))
    assert check.compare_outputs(e, a, [(1e-4, 1e-4, "f32"), (None, None, "s64")]).startswith("out0: 1/4")
    assert check.compare_outputs(e, a, [(0.1, 0.1, "f32"), (None, None, "s64")]) == ""
    np.savez(a, out0=np.ones(4, np.float32))
    assert "not written" in check.compare_outputs(e, a, [])
