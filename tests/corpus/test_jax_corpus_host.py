"""The JAX corpus on the host target: every module (both .hlo files of every case) compiles,
runs and matches XLA:CPU's outputs within the case's tolerances; every straight-line module
also runs as one recorded graph (``runtime/graph.py``: captured on all-zero arguments, then
replayed with the case's) and gives the very same bytes as the plain run (floats: up to
the order of atomic additions)."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile.runtime import literals
from hlo_compile.runtime.executable import compile_executable
from hlo_compile.runtime.graph import ModuleGraph, unsupported_reason

from test_jax_corpus import _cases, run_case


def _zeros_like(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_zeros_like(v) for v in value)
    return np.zeros_like(np.asarray(value))


def _on_host(module, args):
    exe = compile_executable(module, "host")
    result = exe.run(args)
    if unsupported_reason(exe) is None:
        with ModuleGraph(exe) as graph:
            graph.run(_zeros_like(args))
            replayed = graph.run(args)
        for i, (a, b) in enumerate(zip(literals.flatten(result), literals.flatten(replayed))):
            assert a.dtype == b.dtype and a.shape == b.shape, f"output {i}: {b.dtype}{b.shape}"
            assert a.tobytes() == b.tobytes() or _reordered_sums(a, b), \
                f"output {i}: the graph replay differs from the plain run"
    return result


def _reordered_sums(a: np.ndarray, b: np.ndarray) -> bool:
    """Float results equal up to the order of atomic additions (scatter-add combines updates
    in whatever order the threads get there, on the host as on a GPU)."""
    if a.dtype.kind != "f":
        return False
    return bool(np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-5, atol=1e-6, equal_nan=True))


# the cases that take 10 s or more on the host (marked slow: ``-m "not slow"`` leaves them out)
SLOW_CASES = frozenset({"large_softmax_f32", "ew_special_f32", "fused_attention_f32"})


def _host_cases() -> list:
    return [pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.slow] if p.values[0] in SLOW_CASES
                         else p.marks) for p in _cases()]


@pytest.mark.parametrize("case,hlo", _host_cases())
def test_jax_case_on_host(corpus, case, hlo):
    if case is None or not (corpus / "jax").is_dir():
        pytest.skip("no JAX corpus")
    result = run_case(corpus / "jax" / case, hlo, run=_on_host)
    assert result.ok, result.report()
