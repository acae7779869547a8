"""Our own real-model corpus (tests/data/models, made by tests/support/make_model_corpus.py):
small real models written with flax, optax, stax, jax.nn, jax.random, jax.scipy and lax
control flow. Both HLO forms of every case (what JAX hands to a compiler, and XLA:CPU's
optimized module) run on the interpreter and on the host target and must match XLA:CPU's
outputs within the case's tolerances (integers and pred exactly, NaNs in the same places)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import hlo_compile
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime.executable import compile_executable

DATA = Path(__file__).resolve().parents[1] / "data" / "models"
FORMS = ("unoptimized.hlo", "optimized_cpu.hlo")
PLATFORMS = ("interpreter", "host")
# the cases that take 10 s or more on the host (marked slow: ``-m "not slow"`` leaves them out)
SLOW_ON_HOST = frozenset({"flax_transformer_lm_adamw", "lax_associative_scan_ssm", "stax_resnet_adam",
                          "wavenet_dilated_conv1d", "random_threefry_sampling", "moe_top2_router",
                          "flax_cnn_batchnorm_sgd"})


def _case_names() -> list[str]:
    if not DATA.is_dir():
        return []
    return sorted(p.name for p in DATA.iterdir() if (p / "case.json").is_file())


def _params() -> list:
    names = _case_names()
    if not names:
        return [pytest.param(None, None, None, id="no-model-corpus")]
    return [pytest.param(n, form, platform, id=f"{n}/{form}/{platform}",
                         marks=[pytest.mark.slow] if platform == "host" and n in SLOW_ON_HOST else [])
            for n in names for form in FORMS for platform in PLATFORMS]


def _run(module, args, platform: str):
    if platform == "interpreter":
        return evaluate_module(module, args)
    return compile_executable(module, platform, CompileOptions()).run(args)


def run_model_case(case_dir: Path, form: str, platform: str, run=None) -> compare.Comparison:
    """The case's module on ``platform`` (or through ``run(module, args)``) against XLA:CPU."""
    info = json.loads((case_dir / "case.json").read_text())
    path = case_dir / form
    module = hlo_compile.parse_module(path.read_text(), str(path))
    args = literals.load_inputs(case_dir / "inputs.npz", module)
    actual = literals.flatten(run(module, args) if run is not None else _run(module, args, platform))
    expected = literals.load_outputs(case_dir / info.get("outputs_file", "outputs.npz"))
    tolerances = [(o["rtol"], o["atol"]) for o in info["outputs"]]
    result = compare.compare_results(expected, actual, tolerances=tolerances, klass="model")
    for leaf, o, a in zip(result.leaves, info["outputs"], actual):
        want = o["dtype"]
        got = _HLO_NAMES.get(np.asarray(a).dtype.name, np.asarray(a).dtype.name)
        if got != want:
            leaf.ok = False
            leaf.message = (leaf.message + "; " if leaf.message else "") + f"dtype {got}, expected {want}"
    return result


_HLO_NAMES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int32": "s32",
              "int64": "s64", "int8": "s8", "int16": "s16", "uint8": "u8", "uint16": "u16", "uint32": "u32",
              "uint64": "u64", "bool": "pred"}


def _failures(result: compare.Comparison) -> str:
    """The report of the failing outputs only (model cases have dozens of outputs)."""
    parts = [result.message] if result.message else []
    parts += [leaf.report() for leaf in result.leaves if not leaf.ok]
    return "\n".join(parts)


@pytest.mark.parametrize("case,form,platform", _params())
def test_model_case(case, form, platform):
    if case is None:
        pytest.skip(f"no model corpus at {DATA}")
    result = run_model_case(DATA / case, form, platform)
    assert result.ok, f"{case}/{form} on {platform}:\n{_failures(result)}"


def test_index_lists_every_case():
    if not DATA.is_dir():
        pytest.skip(f"no model corpus at {DATA}")
    index = json.loads((DATA / "index.json").read_text())
    assert sorted(e["name"] for e in index) == _case_names()
