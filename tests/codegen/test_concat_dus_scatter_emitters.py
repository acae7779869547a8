"""The concatenate, in-place dynamic-update-slice and scatter emitters: XLA's emitter test
corpus and hand-written scatters (colliding indices, atomics, CAS loops, 16-bit words, out of
bounds windows) on the host against the interpreter, the JAX scatter case against XLA's
outputs, ptxas acceptance of the atomics and CAS loops, and the summary's emitter names."""
from __future__ import annotations

import json
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from codegen_helpers import load_fusion_test, run_on_host
from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.options import CompileOptions
from hlo_compile.driver.pipeline import run_pipeline

XLA = Path("xla/repo/xla")
CORPUS_DIRS = {"concatenate": XLA / "codegen/emitters/tests/concatenate",
               "in-place-dus": XLA / "codegen/emitters/tests/dynamic_update_slice",
               "scatter": XLA / "backends/gpu/codegen/emitters/tests/scatter"}
# corpus files we do not emit with the named emitter, and why
REFUSED: dict[str, str] = {}


def _corpus_files(corpus: Path) -> list[tuple[str, Path]]:
    out = []
    for emitter, d in CORPUS_DIRS.items():
        out += [(emitter, p) for p in sorted((corpus / d).glob("*.hlo"))]
    if not out:
        pytest.skip("XLA emitter tests not in the corpus")
    return out


def _kernels(module):
    return plan_module(module, CompileOptions()).kernels


def test_corpus_on_host(corpus):
    failures, checked = [], 0
    for emitter, path in _corpus_files(corpus):
        if path.name in REFUSED:
            continue
        module = load_fusion_test(path)
        emitters = [k.analysis.emitter for k in _kernels(module)]
        assert emitters[-1] == emitter, (path.name, emitters)  # the test's fusion is the last kernel
        ok, report = run_on_host(module)
        checked += 1
        if not ok:
            failures.append(f"{path.name}: {report}")
    assert checked >= 30 and not failures, "\n".join(failures)


# ---- hand-written scatters -------------------------------------------------------------------
def _scatter_module(et: str, combiner: str, *, n: int = 64, rows: int = 8, cols: int = 3, unique: bool = False,
                    window_rows: int | None = None) -> str:
    """``operand[rows, cols]``, ``indices s32[n, 1]``, updates ``[n, cols]`` (inserted dim 0), or
    windows of ``window_rows`` rows (``[n, window_rows, cols]``, nothing inserted)."""
    if window_rows is None:
        upd, uwd, inserted = f"{et}[{n},{cols}]", "{1}", "{0}"
    else:
        upd, uwd, inserted = f"{et}[{n},{window_rows},{cols}]", "{1,2}", "{}"
    return f"""HloModule m
combine {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT c = {et}[] {combiner}(a, b)
}}
ENTRY e {{
  operand = {et}[{rows},{cols}] parameter(0)
  indices = s32[{n},1] parameter(1)
  updates = {upd} parameter(2)
  ROOT s = {et}[{rows},{cols}] scatter(operand, indices, updates), update_window_dims={uwd},
      inserted_window_dims={inserted}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1,
      unique_indices={"true" if unique else "false"}, to_apply=combine
}}
"""


def _args(et: str, module_text: str, indices, seed: int = 0, lo: int = -4, hi: int = 5):
    """Small integers as values (exact in every type, so the combining order does not matter)."""
    module = parse_module(module_text)
    rng = np.random.default_rng(seed)
    dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32, "f64": np.float64,
             "s32": np.int32, "u32": np.uint32, "s8": np.int8, "s64": np.int64}[et]
    shapes = [p.shape.dimensions for p in module.entry.parameters]
    operand = rng.integers(lo, hi, shapes[0]).astype(dtype)
    updates = rng.integers(lo, hi, shapes[2]).astype(dtype)
    return module, [operand, np.asarray(indices, np.int32).reshape(shapes[1]), updates]


def _colliding(n: int, rows: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, rows, n)


def _combine_of(module) -> str:
    return _kernels(module)[-1].spec.combine


@pytest.mark.parametrize("et,combiner,combine", [
    ("f32", "add", "atomicrmw fadd"),
    ("s32", "add", "atomicrmw add"),
    ("f64", "add", "atomicrmw fadd"),
    ("s32", "maximum", "atomicrmw max"),
    ("u32", "minimum", "atomicrmw umin"),
    ("f32", "maximum", "cas"),          # NaN-propagating max: CAS loop running the combiner
    ("f32", "multiply", "cas"),
    ("s32", "multiply", "cas"),
    ("bf16", "add", "cas"),             # 16-bit: CAS on the enclosing 32-bit word
    ("f16", "maximum", "cas"),
    ("s8", "add", "cas"),
    ("s64", "add", "atomicrmw add"),
])
def test_scatter_colliding_indices(et, combiner, combine):
    lo, hi = (0, 5) if et == "u32" else ((-2, 3) if combiner == "multiply" else (-4, 5))
    text = _scatter_module(et, combiner, n=200)
    module, args = _args(et, text, _colliding(200, 8), lo=lo, hi=hi)
    assert _combine_of(module) == combine
    ok, report = run_on_host(module, args=args)
    assert ok, report


def test_scatter_out_of_bounds_windows_are_skipped():
    # windows of 3 rows in 10 rows: starts 0..7 are in bounds, -1, 8, 9 and 100 are skipped whole
    text = _scatter_module("f32", "add", n=8, rows=10, cols=5, window_rows=3)
    module, args = _args("f32", text, [-1, 0, 7, 8, 9, 100, 3, 7])
    ok, report = run_on_host(module, args=args)
    assert ok, report
    from hlo_compile.runtime.executable import compile_executable
    got = np.asarray(compile_executable(module, "host").run(args))
    expected = args[0].copy()
    for i, start in enumerate([-1, 0, 7, 8, 9, 100, 3, 7]):
        if 0 <= start <= 7:
            expected[start:start + 3] += args[2][i]
    np.testing.assert_array_equal(got, expected)


def test_scatter_unique_indices_stores():
    text = _scatter_module("f32", "multiply", n=8, unique=True)
    module, args = _args("f32", text, np.random.default_rng(3).permutation(8))
    assert _combine_of(module) == "store"
    ok, report = run_on_host(module, args=args)
    assert ok, report


SCATTER_BATCHED = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  operand = f32[2,5,3] parameter(0)
  indices = s32[2,4,1] parameter(1)
  updates = f32[2,4,3] parameter(2)
  ROOT s = f32[2,5,3] scatter(operand, indices, updates), update_window_dims={2}, inserted_window_dims={1},
      scatter_dims_to_operand_dims={1}, index_vector_dim=2, input_batching_dims={0},
      scatter_indices_batching_dims={0}, to_apply=add
}
"""

SCATTER_2D_INDEX = """HloModule m
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] add(a, b)
}
ENTRY e {
  operand = s32[6,7,4] parameter(0)
  indices = s32[2,10] parameter(1)
  updates = s32[10,2,4] parameter(2)
  ROOT s = s32[6,7,4] scatter(operand, indices, updates), update_window_dims={1,2}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0,1}, index_vector_dim=0, indices_are_sorted=true, to_apply=add
}
"""


def test_scatter_batching_dims():
    module = parse_module(SCATTER_BATCHED)
    rng = np.random.default_rng(0)
    args = [rng.integers(-4, 5, (2, 5, 3)).astype(np.float32), rng.integers(0, 5, (2, 4, 1)).astype(np.int32),
            rng.integers(-4, 5, (2, 4, 3)).astype(np.float32)]
    ok, report = run_on_host(module, args=args)
    assert ok, report


def test_scatter_index_vector_dim_first_and_partial_out_of_bounds():
    module = parse_module(SCATTER_2D_INDEX)
    rng = np.random.default_rng(0)
    # column windows of 2 in 7: start 6 and -1 are out of bounds in dim 1 only
    idx = np.stack([rng.integers(0, 6, 10), np.array([0, 5, 6, -1, 3, 3, 3, 1, 2, 5])]).astype(np.int32)
    args = [rng.integers(-4, 5, (6, 7, 4)).astype(np.int32), idx, rng.integers(-4, 5, (10, 2, 4)).astype(np.int32)]
    ok, report = run_on_host(module, args=args)
    assert ok, report


VARIADIC_NOT_UNIQUE = """HloModule m
argmax {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  v = f32[] select(gt, a, b)
  k = s32[] select(gt, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}
ENTRY e {
  o1 = f32[10] parameter(0)
  o2 = s32[10] parameter(1)
  idx = s32[4,1] parameter(2)
  upd1 = f32[4] parameter(3)
  upd2 = s32[4] parameter(4)
  ROOT s = (f32[10], s32[10]) scatter(o1, o2, idx, upd1, upd2), update_window_dims={}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=argmax
}
"""


def test_variadic_scatter_with_repeated_indices_is_refused():
    with pytest.raises(HloUnsupportedError, match="scatter '%s'.*unique_indices"):
        _kernels(parse_module(VARIADIC_NOT_UNIQUE))


# ---- JAX corpus ---------------------------------------------------------------------------------
@pytest.mark.parametrize("hlo", ["unoptimized.hlo", "optimized_cpu.hlo"])
def test_jax_scatter_add(corpus, hlo):
    from test_jax_corpus import run_case
    from hlo_compile.runtime.executable import compile_executable
    case = corpus / "jax" / "sc_scatter_add_f32"
    if not (case / hlo).is_file():
        pytest.skip("sc_scatter_add_f32 not in the corpus")
    result = run_case(case, hlo, run=lambda m, a: compile_executable(m, "host").run(a))
    assert result.ok, result.report()


# ---- ptxas --------------------------------------------------------------------------------------
CONCAT = """HloModule m
fused {
  a = f32[64,100] parameter(0)
  b = f32[64,28] parameter(1)
  c = f32[64,128] concatenate(a, b), dimensions={1}
  d = f32[64,128] parameter(2)
  ROOT r = f32[64,128] add(c, d)
}
ENTRY e {
  p0 = f32[64,100] parameter(0)
  p1 = f32[64,28] parameter(1)
  p2 = f32[64,128] parameter(2)
  ROOT f = f32[64,128] fusion(p0, p1, p2), kind=kLoop, calls=fused
}
"""

DUS = """HloModule m
fused {
  in = bf16[40,30] parameter(0)
  upd = bf16[5,6] parameter(1)
  i0 = s32[] parameter(2)
  i1 = s32[] parameter(3)
  ROOT r = bf16[40,30] dynamic-update-slice(in, upd, i0, i1)
}
ENTRY e {
  p0 = bf16[40,30] parameter(0)
  p1 = bf16[5,6] parameter(1)
  p2 = s32[] parameter(2)
  p3 = s32[] parameter(3)
  ROOT f = bf16[40,30] fusion(p0, p1, p2, p3), kind=kLoop, calls=fused
}
"""


def _ptx_modules():
    texts = {f"scatter_{et}_{c}": _scatter_module(et, c, n=40)
             for et, c in [("f32", "add"), ("s32", "maximum"), ("f32", "multiply"), ("bf16", "add"),
                           ("f16", "maximum"), ("s8", "add"), ("f64", "add"), ("f64", "multiply"),
                           ("u32", "minimum")]}
    texts["scatter_unique"] = _scatter_module("f32", "add", n=8, unique=True)
    texts["concat"] = CONCAT
    texts["dus"] = DUS
    return texts


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_accepts(arch):
    from hlo_compile.targets.nvptx.ptxas import run_ptxas
    from hlo_compile.targets.nvptx.toolkit import find_ptxas
    if find_ptxas() is None:
        pytest.skip("ptxas not found (pip install nvidia-cuda-nvcc)")
    for name, text in _ptx_modules().items():
        ptx = run_pipeline(parse_module(text), CompileOptions(arch=arch), emit="ptx").artifacts["ptx"]
        if name.startswith("scatter_") and name != "scatter_unique":
            assert "atom." in ptx, name
        if "multiply" in name or "bf16" in name or "s8" in name or "f16" in name:
            assert re.search(r"atom\.[a-z.]*cas\.b(32|64)", ptx), name
        out = run_ptxas(ptx, arch)
        assert out.cubin and out.kernels, name


def test_ptx_uses_native_atomics():
    ptx = run_pipeline(parse_module(_scatter_module("f32", "add")), CompileOptions(arch="sm_80"),
                       emit="ptx").artifacts["ptx"]
    assert re.search(r"atom\.[a-z.]*global\.add\.f32", ptx) and ".cas" not in ptx


# ---- summary.json ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,text,emitter", [
    ("scatter", _scatter_module("f32", "add"), "scatter"),
    ("concat", CONCAT, "concatenate"),
    ("dus", DUS, "in-place-dus"),
])
def test_summary_names_the_emitter(tmp_path, name, text, emitter):
    run_pipeline(parse_module(text), CompileOptions(), dump_to=tmp_path)
    kernels = json.loads((tmp_path / "summary.json").read_text())["kernels"]
    assert kernels[-1]["emitter"] == emitter, kernels
    if emitter == "concatenate":
        assert kernels[-1]["grid"] == [50, 1, 1] and kernels[-1]["block"] == [128, 1, 1]  # 64x100 elements
    if emitter == "in-place-dus":
        assert kernels[-1]["block"] == [30, 1, 1] and kernels[-1]["grid"] == [1, 1, 1]   # the 5x6 update
