"""Triangular solves (the ``triangular-solve`` op and XLA:GPU's ``__cublas$triangularSolve`` call)
and the ``cholesky`` op.

Checked (a) the interpreter (``interpreter/triangular_solve.py``) and (b) the host platform,
which runs the lowering (``passes/triangular_solve_lowering.py``: a while loop over rows), against
``np.linalg.solve`` on the explicitly masked matrix in double precision, for every
left_side x lower x transpose_a x unit_diagonal in f32 and c64 with batch dimensions, the
ignored triangle (and the diagonal, for a unit one) full of garbage, NaN included; (c) the
cuBLAS call with non-default layouts and its tuple read whole; (d) two XLA:GPU modules end to
end (``tests/data/triangular_solve``): jax's solve_triangular through ``hlo-run`` against
XLA:CPU's outputs, and XLA's Cholesky expansion (two trsm calls, ADJOINT) on a positive
definite input against ``np.linalg.cholesky`` (and both it and the bare ``cholesky`` op against
XLA:CPU's outputs where the corpus is here); ``hlo-compile --emit ptx`` of them; (e) the
``cholesky`` op, lower and upper, f32/c64/f64/c128, garbage in the ignored triangle and a batch
member that is not positive definite (NaN throughout, as XLA's expander), on the interpreter and
the host against ``np.linalg.cholesky``; (f) what is refused, by name.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hlo_compile import parse_module
from hlo_compile.cli.compile import main as hlo_compile
from hlo_compile.cli.run import main as hlo_run
from hlo_compile.hlo.errors import HloError
from hlo_compile.interpreter import evaluate_module
from hlo_compile.passes import run_passes
from hlo_compile.runtime.executable import compile_executable

DATA = Path(__file__).parents[1] / "data" / "triangular_solve"
CORPUS = Path("/work/xla-gpu-corpus/xla/sm_80")
NP = {"f32": np.float32, "c64": np.complex64, "f64": np.float64, "c128": np.complex128}
TOL = {"f32": 2e-5, "c64": 2e-5, "f64": 1e-12, "c128": 1e-12}
BATCH, K, N = (3, 2), 5, 4
CASES = list(itertools.product((True, False), (True, False), ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"),
                               (False, True)))


def _dims(xs) -> str:
    return ",".join(str(x) for x in xs)


def _b_dims(left_side: bool) -> tuple[int, ...]:
    return BATCH + ((K, N) if left_side else (N, K))


def solve_module(et: str, left_side: bool, lower: bool, transpose: str, unit: bool) -> str:
    a = f"{et}[{_dims(BATCH + (K, K))}]"
    b = f"{et}[{_dims(_b_dims(left_side))}]"
    flags = (f"left_side={str(left_side).lower()}, lower={str(lower).lower()}, "
             f"unit_diagonal={str(unit).lower()}, transpose_a={transpose}")
    return f"""HloModule solve

ENTRY main {{
  a = {a} parameter(0)
  b = {b} parameter(1)
  ROOT x = {b} triangular-solve(a, b), {flags}
}}
"""


def _random(rng, shape, et) -> np.ndarray:
    x = rng.uniform(-1, 1, shape)
    if et.startswith("c"):
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x


def operands(et: str, left_side: bool, lower: bool, unit: bool, seed: int = 0):
    """(a, b, the matrix that is read): a well-conditioned triangle, garbage elsewhere."""
    rng = np.random.default_rng(seed)
    shape = BATCH + (K, K)
    read = 0.3 * _random(rng, shape, et)
    diag = (1.0 + rng.uniform(0, 1, BATCH + (K,))) * np.where(rng.uniform(size=BATCH + (K,)) < 0.5, -1, 1)
    if et.startswith("c"):
        diag = diag * np.exp(1j * rng.uniform(0, 2 * np.pi, diag.shape))
    rows, cols = np.indices((K, K))
    strict = cols < rows if lower else cols > rows
    matrix = np.where(strict, read, 0)
    matrix = matrix + np.eye(K) * (1 if unit else diag[..., None])
    garbage = 1e3 * _random(rng, shape, et)
    garbage[..., 0, K - 1] = garbage[..., K - 1, 0] = np.nan
    a = np.where(strict, read, garbage)
    if not unit:
        a = np.where(rows == cols, diag[..., None] * np.eye(K), a)
    else:
        a = np.where(rows == cols, np.nan, a)
    b = _random(rng, _b_dims(left_side), et)
    return a.astype(NP[et]), b.astype(NP[et]), matrix


def expected(matrix, b, left_side: bool, transpose: str) -> np.ndarray:
    m = matrix.astype(np.complex128 if np.iscomplexobj(matrix) else np.float64)
    if transpose != "NO_TRANSPOSE":
        m = np.swapaxes(m, -1, -2)
    if transpose == "ADJOINT":
        m = np.conj(m)
    if left_side:
        return np.linalg.solve(m, b)
    return np.swapaxes(np.linalg.solve(np.swapaxes(m, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)


def _close(got, want, et: str) -> None:
    got = np.asarray(got)
    assert got.dtype == NP[et]
    assert np.all(np.isfinite(got))
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
    assert err < TOL[et], err


def _case_id(case) -> str:
    left, lower, transpose, unit = case
    return f"{'left' if left else 'right'}-{'lower' if lower else 'upper'}-{transpose}-{'unit' if unit else 'diag'}"


@pytest.mark.parametrize("et", ["f32", "c64", "f64", "c128"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_interpreter(et, case):
    left, lower, transpose, unit = case
    a, b, matrix = operands(et, left, lower, unit)
    got = evaluate_module(parse_module(solve_module(et, *case)), [a, b])
    _close(got, expected(matrix, b, left, transpose), et)


@pytest.mark.parametrize("et", ["f32", "c64"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_host(et, case):
    left, lower, transpose, unit = case
    a, b, matrix = operands(et, left, lower, unit, seed=1)
    module = parse_module(solve_module(et, *case))
    got = compile_executable(module, "host").run([a, b])
    _close(got, expected(matrix, b, left, transpose), et)


@pytest.mark.parametrize("et", ["f64", "c128"])
def test_host_double(et):
    case = (False, False, "ADJOINT", False)
    a, b, matrix = operands(et, False, False, False, seed=2)
    got = compile_executable(parse_module(solve_module(et, *case)), "host").run([a, b])
    _close(got, expected(matrix, b, False, "ADJOINT"), et)


LOOP_MODULE = """HloModule solve_in_loop

body {
  p = (s32[], f32[4,4], f32[4,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[4,4] get-tuple-element(p), index=1
  b = f32[4,2] get-tuple-element(p), index=2
  x = f32[4,2] triangular-solve(a, b), left_side=true, lower=true, unit_diagonal=false, transpose_a=NO_TRANSPOSE
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT t = (s32[], f32[4,4], f32[4,2]) tuple(next, a, x)
}

cond {
  p = (s32[], f32[4,4], f32[4,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(i, two), direction=LT
}

ENTRY main {
  a = f32[4,4] parameter(0)
  b = f32[4,2] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[4,4], f32[4,2]) tuple(zero, a, b)
  loop = (s32[], f32[4,4], f32[4,2]) while(init), condition=cond, body=body
  ROOT x = f32[4,2] get-tuple-element(loop), index=2
}
"""


def test_solve_inside_while_body():
    """Solved twice in a loop body: the lowering's own loop nests inside it."""
    rng = np.random.default_rng(3)
    a = (np.tril(rng.uniform(-0.3, 0.3, (4, 4))) + 2 * np.eye(4)).astype(np.float32)
    b = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
    want = np.linalg.solve(a.astype(np.float64), np.linalg.solve(a.astype(np.float64), b))
    module = parse_module(LOOP_MODULE)
    _close(evaluate_module(module, [a, b]), want, "f32")
    _close(compile_executable(module, "host").run([a, b]), want, "f32")


def test_lowered_module_has_no_solve():
    module = parse_module(solve_module("f32", True, False, "TRANSPOSE", False))
    out = run_passes(module)
    ops = {i.opcode for c in out.computations for i in c.instructions}
    assert "triangular-solve" not in ops and "while" in ops


CALL_MODULE = """HloModule cublas_solve

ENTRY main {
  a = c64[2,4,4]{1,2,0} parameter(0)
  b = c64[2,3,4]{2,1,0} parameter(1)
  solve = (c64[2,3,4]{1,2,0}, s8[0]{0}) custom-call(a, b), custom_call_target="__cublas$triangularSolve", backend_config={"left_side":false,"lower":false,"unit_diagonal":false,"transpose_a":"ADJOINT"}
  x = c64[2,3,4]{1,2,0} get-tuple-element(solve), index=0
  y = c64[2,3,4]{2,1,0} copy(x)
  ROOT out = ((c64[2,3,4]{1,2,0}, s8[0]{0}), c64[2,3,4]{2,1,0}) tuple(solve, y)
}
"""


def test_cublas_call_layouts_and_whole_tuple():
    rng = np.random.default_rng(5)
    a = (_random(rng, (2, 4, 4), "c64") + 3 * np.eye(4)).astype(np.complex64)
    a[:, 2, 0] = np.nan                                   # below the diagonal: not read (upper)
    b = _random(rng, (2, 3, 4), "c64").astype(np.complex64)
    matrix = np.triu(np.nan_to_num(a).astype(np.complex128))
    want = expected(matrix, b, False, "ADJOINT")
    module = parse_module(CALL_MODULE)
    (x_i, ws_i), y_i = evaluate_module(module, [a, b])
    (x_h, ws_h), y_h = compile_executable(module, "host").run([a, b])
    for got in (x_i, y_i, x_h, y_h):
        _close(got, want, "c64")
    assert np.asarray(ws_i).shape == (0,) and np.asarray(ws_h).shape == (0,)


def test_refused_by_name():
    bad = solve_module("f32", True, True, "NO_TRANSPOSE", False).replace("transpose_a=NO_TRANSPOSE",
                                                                          "transpose_a=TRANSPOSE_INVALID")
    module = parse_module(bad)
    with pytest.raises(HloError, match="transpose_a"):
        run_passes(module)
    with pytest.raises(HloError, match="transpose_a"):
        evaluate_module(module, [np.zeros(BATCH + (K, K), np.float32), np.zeros(_b_dims(True), np.float32)])
    half = parse_module(solve_module("f32", True, True, "NO_TRANSPOSE", False).replace("f32", "f16"))
    with pytest.raises(HloError, match="f16"):
        run_passes(half)


# ---- cholesky ----------------------------------------------------------------------------------

def cholesky_module(et: str, lower: bool) -> str:
    shape = f"{et}[{_dims(BATCH + (K, K))}]"
    return f"""HloModule chol

ENTRY main {{
  a = {shape} parameter(0)
  ROOT l = {shape} cholesky(a), lower={str(lower).lower()}
}}
"""


def cholesky_operand(et: str, lower: bool, seed: int = 0):
    """(a, the Hermitian positive definite matrix it stands for): garbage in the other
    triangle; the last matrix of the batch is not positive definite."""
    rng = np.random.default_rng(seed)
    g = _random(rng, BATCH + (K, K), et)
    spd = g @ np.conj(np.swapaxes(g, -1, -2)) + K * np.eye(K)
    spd[-1, -1] -= 10 * K * np.eye(K)
    rows, cols = np.indices((K, K))
    other = cols > rows if lower else cols < rows
    garbage = 1e3 * _random(rng, spd.shape, et)
    garbage[..., 0, K - 1] = garbage[..., K - 1, 0] = np.nan
    return np.where(other, garbage, spd).astype(NP[et]), spd


@pytest.mark.parametrize("et", ["f32", "c64", "f64", "c128"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("where", ["interpreter", "host"])
def test_cholesky(et, lower, where):
    a, spd = cholesky_operand(et, lower)
    module = parse_module(cholesky_module(et, lower))
    got = evaluate_module(module, [a]) if where == "interpreter" else compile_executable(module, "host").run([a])
    got = np.asarray(got)
    assert got.dtype == NP[et]
    assert np.all(np.isnan(got[-1, -1]))                 # not positive definite: NaN throughout
    want = np.linalg.cholesky(spd.reshape(-1, K, K)[:-1])
    if not lower:
        want = np.conj(np.swapaxes(want, -1, -2))
    flat = got.reshape(-1, K, K)[:-1]
    err = np.max(np.abs(flat - want)) / np.max(np.abs(want))
    assert err < TOL[et], err


# ---- XLA:GPU modules ---------------------------------------------------------------------------

def test_jax_solve_triangular_module_host():
    d = DATA / "TriangularSolve"
    r = CliRunner().invoke(hlo_run, [str(d / "optimized_gpu.hlo"), "--platform=host", "--reference=none",
                                     "--input-literals", str(d / "inputs.npz"),
                                     "--expected-literals", str(d / "outputs_cpu.npz")])
    assert r.exit_code == 0, r.output


def test_cholesky_module_host_positive_definite():
    """XLA's Cholesky expansion: unblocked loops on the diagonal blocks, trsm calls (right side,
    ADJOINT, layouts {1,2,0}) for the panels; on an SPD input the lower triangle is L."""
    module = parse_module((DATA / "MetadataWithCholesky" / "optimized_gpu.hlo").read_text())
    rng = np.random.default_rng(0)
    g = rng.standard_normal((1, 291, 291))
    spd = (g @ np.swapaxes(g, 1, 2) / 291 + np.eye(291)).astype(np.float32)
    got = compile_executable(module, "host").run([spd])
    got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got)
    want = np.linalg.cholesky(spd.astype(np.float64))
    assert np.max(np.abs(np.tril(got[0]) - want[0])) < 1e-5
    assert not np.any(np.triu(got[0], 1))


@pytest.mark.skipif(not (CORPUS / "xla_test__MetadataWithCholesky").is_dir(), reason="no XLA:GPU corpus here")
@pytest.mark.parametrize("form", ["optimized_gpu", "unoptimized"])
def test_cholesky_module_against_xla_cpu(form):
    """XLA:CPU's outputs for this (not positive definite) input are NaN throughout; the
    unoptimized module is the ``cholesky`` op itself."""
    d = CORPUS / "xla_test__MetadataWithCholesky"
    r = CliRunner().invoke(hlo_run, [str(DATA / "MetadataWithCholesky" / f"{form}.hlo"), "--platform=host",
                                     "--reference=none",
                                     "--input-literals", str(d / "inputs.npz"),
                                     "--expected-literals", str(d / "outputs_cpu.npz")])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("name", ["TriangularSolve/optimized_gpu", "MetadataWithCholesky/optimized_gpu",
                                  "MetadataWithCholesky/unoptimized"])
def test_compile_to_ptx(name, tmp_path):
    r = CliRunner().invoke(hlo_compile, [str(DATA / f"{name}.hlo"), "--emit", "ptx",
                                         "-o", str(tmp_path / "out.ptx")])
    assert r.exit_code == 0, r.output
    assert ".entry" in (tmp_path / "out.ptx").read_text()
