"""Our interpreter (and host runtime) on SPMD modules that XLA:CPU compiled and ran through JAX
(tests/data/spmd/, made by tests/support/jax_spmd_corpus.py): every participant's outputs
equal XLA's for psum/pmax/pmin, all_gather, psum_scatter, all_to_all, ppermute (full ring and
partial: zeros where no source), axis_index, 2-D meshes (iota groups) and a GSPMD matmul."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.hlo.collective_groups import world_of
from hlo_compile.interpreter.evaluator import evaluate_spmd
from hlo_compile.runtime import literals

DATA = Path(__file__).parents[1] / "data" / "spmd"
CASES = sorted(p.stem for p in DATA.glob("*.hlo"))


def load(name: str):
    module = parse_module((DATA / f"{name}.hlo").read_text())
    world = world_of(module)
    args = [literals.load_inputs(DATA / f"{name}.npz", module, participant=k) for k in range(world.size)]
    with np.load(DATA / f"{name}.npz") as f:
        expected = [[f[f"p{k}.out{j}"] for j in range(len([x for x in f.files if x.startswith(f"p{k}.out")]))]
                    for k in range(world.size)]
    return module, world, args, expected


def check(expected, results):
    for k, (want, got) in enumerate(zip(expected, results)):
        got = literals.flatten(got)
        assert len(got) == len(want), k
        for w, g in zip(want, got):
            assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"participant {k}")


def test_corpus_is_there_and_small():
    assert len(CASES) >= 15
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 2 * 1024 * 1024


@pytest.mark.parametrize("name", CASES)
def test_interpreter_matches_xla_for_every_participant(name):
    module, world, args, expected = load(name)
    assert world.size == 8
    check(expected, evaluate_spmd(module, lambda k: args[k], world))


@pytest.mark.parametrize("name", CASES)
def test_host_matches_xla_for_every_participant(name):
    from hlo_compile.runtime.spmd_run import compile_spmd
    module, world, args, expected = load(name)
    check(expected, compile_spmd(module, "host", world)(args))
