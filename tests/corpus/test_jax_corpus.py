"""Acceptance: every JAX corpus case, every .hlo of the case, through the interpreter matches
XLA:CPU's outputs within the case's tolerances."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import hlo_compile
from hlo_compile.interpreter import evaluate_module
from hlo_compile.runtime import compare, literals

REPO = Path(__file__).resolve().parents[2]


def _jax_dir() -> Path | None:
    env = os.environ.get("HLO_CORPUS")
    for c in ([Path(env)] if env else []) + [REPO.parent / "shared" / "corpus"]:
        if (c / "jax").is_dir():
            return c / "jax"
    return None


def _cases() -> list:
    root = _jax_dir()
    if root is None:
        return [pytest.param(None, None, id="no-corpus")]
    out = []
    for case in sorted(p for p in root.iterdir() if (p / "case.json").is_file()):
        for hlo in sorted(case.glob("*.hlo")):
            out.append(pytest.param(case.name, hlo.name, id=f"{case.name}/{hlo.name}"))
    return out


def run_case(case_dir: Path, hlo_name: str, run=None) -> compare.Comparison:
    """The case's module run by ``run(module, args)`` (default: the interpreter) compared
    with XLA's outputs within the case's tolerances."""
    info = json.loads((case_dir / "case.json").read_text())
    path = case_dir / hlo_name
    module = hlo_compile.parse_module(path.read_text(), str(path))
    args = literals.load_inputs(case_dir / "inputs.npz", module)
    leaves = literals.flatten((run or evaluate_module)(module, args))
    stride = info.get("output_sample_stride")
    if stride:
        leaves = [np.asarray(a).reshape(-1)[::stride] for a in leaves]
    expected = literals.load_outputs(case_dir / info.get("outputs_file", "outputs.npz"))
    tolerances = [(o.get("rtol"), o.get("atol")) for o in info["outputs"]]
    return compare.compare_results(expected, leaves, tolerances=tolerances)


@pytest.mark.parametrize("case,hlo", _cases())
def test_jax_case(corpus, case, hlo):
    if case is None or not (corpus / "jax").is_dir():
        pytest.skip("no JAX corpus")
    result = run_case(corpus / "jax" / case, hlo)
    assert result.ok, result.report()
