"""The JAX corpus on the host target: every module (both .hlo files of every case) compiles,
runs and matches XLA:CPU's outputs within the case's tolerances."""
from __future__ import annotations

import pytest

from hlo_compile.runtime.executable import compile_executable

from test_jax_corpus import _cases, run_case


def _on_host(module, args):
    return compile_executable(module, "host").run(args)


@pytest.mark.parametrize("case,hlo", _cases())
def test_jax_case_on_host(corpus, case, hlo):
    if case is None or not (corpus / "jax").is_dir():
        pytest.skip("no JAX corpus")
    result = run_case(corpus / "jax" / case, hlo, run=_on_host)
    assert result.ok, result.report()
