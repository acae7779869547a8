"""Complex elements in scatter without unique indices, and in sort, on the host against the
interpreter.

Scatter (``codegen/emitters/scatter.py``): a complex add combiner is two float atomic adds,
one per part (the parts of a sum are independent, so no update is lost: it is a float atomic
add's contract, order aside); any other combiner on c64 runs in a compare-and-swap loop on the
64-bit word holding the whole (real, imag) pair; c128 with a combiner other than add would
need a 128-bit CAS and is refused by name. Many updates collide on few rows, out-of-bounds
indices included.

Sort: a complex value only moves with its key; the comparator decides (here on f32 keys, or
on the real parts of c64 keys); both the bitonic and the rank kernels, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime.executable import compile_executable

from codegen_helpers import emit_stage, filecheck
from test_sort_emitter import _sort_module, assert_host_matches_interpreter

NP = {"c64": np.complex64, "c128": np.complex128}
EPS = {"c64": float(np.finfo(np.float32).eps), "c128": float(np.finfo(np.float64).eps)}


def _combiner(ct: str, op: str) -> str:
    return f"comb {{\n  a = {ct}[] parameter(0)\n  b = {ct}[] parameter(1)\n  ROOT s = {ct}[] {op}(a, b)\n}}\n"


def _scatter_module(ct: str, op: str, rows: int = 16, cols: int = 8, n: int = 500) -> str:
    return f"""HloModule s

{_combiner(ct, op)}
ENTRY main {{
  op = {ct}[{rows},{cols}] parameter(0)
  idx = s32[{n},1] parameter(1)
  upd = {ct}[{n},{cols}] parameter(2)
  ROOT r = {ct}[{rows},{cols}] scatter(op, idx, upd), update_window_dims={{1}}, inserted_window_dims={{0}},
      scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=comb
}}
"""


def _cx(rng, shape, ct, center=0.0, scale=1.0):
    return (center + scale * (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape))).astype(NP[ct])


def _host_and_interpreter(text: str, args: list) -> tuple[np.ndarray, np.ndarray]:
    module = parse_module(text)
    want = np.asarray(evaluate_module(module, args))
    got = compile_executable(module, "host").run(args)
    return np.asarray(got[0] if isinstance(got, (list, tuple)) else got), want


@pytest.mark.parametrize("ct", ["c64", "c128"])
def test_scatter_add_colliding_indices(ct):
    rng = np.random.default_rng(1)
    idx = rng.integers(-2, 18, (500, 1)).astype(np.int32)     # ~31 updates per row, some out of bounds
    args = [_cx(rng, (16, 8), ct), idx, _cx(rng, (500, 8), ct)]
    got, want = _host_and_interpreter(_scatter_module(ct, "add"), args)
    assert got.dtype == want.dtype
    # sums of ~31 terms of magnitude <= 1.5, in any order
    assert np.max(np.abs(got - want)) <= 64 * EPS[ct]
    untouched = ~np.isin(np.arange(16), idx)
    assert np.array_equal(got[untouched], args[0][untouched])


@pytest.mark.parametrize("op", ["multiply", "subtract"])
def test_scatter_c64_cas_combiner(op):
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 4, (300, 1)).astype(np.int32)       # 75 updates per row
    upd = _cx(rng, (300, 8), "c64", center=1.0, scale=0.02) if op == "multiply" else _cx(rng, (300, 8), "c64")
    args = [_cx(rng, (4, 8), "c64"), idx, upd]
    got, want = _host_and_interpreter(_scatter_module("c64", op, rows=4, n=300), args)
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1)) <= 256 * EPS["c64"]


def test_scatter_c128_non_add_refused_by_name():
    module = parse_module(_scatter_module("c128", "multiply"))
    with pytest.raises(HloUnsupportedError) as info:
        compile_executable(module, "host")
    assert "scatter '%r'" in str(info.value) and "128-bit compare-and-swap" in str(info.value)


def test_scatter_complex_ir(tmp_path):
    """filecheck: an add is two part atomics; a c64 multiply one 64-bit cmpxchg."""
    ir_add = emit_stage(_scatter_module("c64", "add"), "llvm")
    filecheck(ir_add, """
CHECK: getelementptr inbounds { float, float }, ptr {{.*}}, i32 0, i32 0
CHECK: atomicrmw fadd ptr {{.*}}, float {{.*}} monotonic
CHECK: getelementptr inbounds { float, float }, ptr {{.*}}, i32 0, i32 1
CHECK: atomicrmw fadd ptr {{.*}}, float {{.*}} monotonic
""", tmp_path)
    ir_mul = emit_stage(_scatter_module("c64", "multiply"), "llvm")
    filecheck(ir_mul, """
CHECK: load atomic i64, ptr {{.*}} monotonic, align 8
CHECK: cas.loop:
CHECK: cmpxchg ptr {{.*}}, i64 {{.*}}, i64 {{.*}} monotonic monotonic
""", tmp_path)


# ---- sort --------------------------------------------------------------------------------------------

KEY_LT_F32_C64 = """lt {
  a0 = f32[] parameter(0)
  b0 = f32[] parameter(1)
  a1 = c64[] parameter(2)
  b1 = c64[] parameter(3)
  ROOT r = pred[] compare(a0, b0), direction=LT, type=TOTALORDER
}
"""

REAL_LT_C64 = """lt {
  a0 = c64[] parameter(0)
  b0 = c64[] parameter(1)
  ra = f32[] real(a0)
  rb = f32[] real(b0)
  ROOT r = pred[] compare(ra, rb), direction=LT
}
"""


def _algorithm(text: str) -> str:
    (kernel,) = plan_module(parse_module(text), CompileOptions()).kernels
    return kernel.spec.summary_fields()["algorithm"]


@pytest.mark.parametrize("shape,algorithm", [("4,64", "bitonic"), ("2,8192", "rank")])
def test_sort_f32_keys_c64_values(shape, algorithm):
    rng = np.random.default_rng(3)
    dims = tuple(int(d) for d in shape.split(","))
    keys = rng.integers(0, 9, dims).astype(np.float32)       # many equal keys: stability shows
    keys.reshape(-1)[:4] = [np.nan, -0.0, 0.0, np.inf]
    values = _cx(rng, dims, "c64")
    values.reshape(-1)[:2] = [complex(np.nan, -0.0), complex(-np.inf, np.nan)]
    text = _sort_module(shape, 1, KEY_LT_F32_C64, ["f32", "c64"])
    assert _algorithm(text) == algorithm
    assert_host_matches_interpreter(text, [keys, values])


@pytest.mark.parametrize("shape,algorithm", [("3,100", "bitonic"), ("5000", "rank")])
def test_sort_c64_by_real_part(shape, algorithm):
    rng = np.random.default_rng(4)
    dims = tuple(int(d) for d in shape.split(","))
    x = _cx(rng, dims, "c64")
    x.real = np.round(x.real * 4) / 4                         # ties on the real part keep input order
    text = _sort_module(shape, len(dims) - 1, REAL_LT_C64, ["c64"])
    assert _algorithm(text) == algorithm
    assert_host_matches_interpreter(text, [x])
    got = np.asarray(evaluate_module(parse_module(text), [x]))
    assert (np.diff(got.real, axis=-1) >= 0).all()
