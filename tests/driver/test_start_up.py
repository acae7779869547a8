"""Start-up of a cold compile (issue 17: the gelu CLI call in ≤ 0.4 s): what it must not load,
and the numpy-free paths it takes instead giving exactly numpy's values.

- A cold ``hlo-compile --emit=ptx`` (no cache) of a module whose constants are plain scalars
  loads neither numpy nor ml_dtypes, the host JIT, the interpreter, the runtime's steps,
  ``importlib.metadata``, cuda-pathfinder (libdevice in a wheel), multiprocessing, the process
  pool nor the emitters it does not use (checked in a fresh process).
- ``literal.scalar_value`` (no numpy) is the value ``parse_literal``'s array holds, and
  ``emit_constant_scalar`` of it is the constant emitted from the numpy scalar.
- libdevice in NVIDIA's wheels is found where cuda-pathfinder finds it, without importing it.
- ``hlo_compile.__version__`` is pyproject's version (the cache keys and ``--version`` read
  the constant instead of ``importlib.metadata``).
"""
from __future__ import annotations

import json
import math
import re
import site
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hlo_compile
from hlo_compile.codegen.elemental.scalar_ops import emit_constant_scalar
from hlo_compile.codegen.analysis.emitter_kind import EmitterKind
from hlo_compile.codegen.emitters import EMITTERS
from hlo_compile.hlo import Shape, parse_module
from hlo_compile.hlo.errors import HloParseError
from hlo_compile.hlo.literal import PLAIN_TYPES, LiteralError, parse_literal, scalar_value, to_f32
from hlo_compile.targets.nvptx import toolkit
from hlo_compile.targets.nvptx.toolkit import ToolkitNotFound, find_libdevice

REPO = Path(__file__).resolve().parents[2]
GELU = REPO / "examples" / "gelu.hlo"

# A loop fusion with scalar constants of several plain types and no transcendental math (so
# its PTX needs no libdevice), in XLA:GPU's style.
SCALE_BIAS = """HloModule scale_bias, entry_computation_layout={(f32[64,32]{1,0}, s32[64,32]{1,0})->f32[64,32]{1,0}}

%fused_scale_bias (p0: f32[64,32], p1: s32[64,32]) -> f32[64,32] {
  %p0 = f32[64,32]{1,0} parameter(0)
  %p1 = s32[64,32]{1,0} parameter(1)
  %scale = f32[] constant(0.044715)
  %scale_b = f32[64,32]{1,0} broadcast(f32[] %scale), dimensions={}
  %bias = f64[] constant(-1.5e-3)
  %bias_f = f32[] convert(f64[] %bias)
  %bias_b = f32[64,32]{1,0} broadcast(f32[] %bias_f), dimensions={}
  %three = s32[] constant(3)
  %three_b = s32[64,32]{1,0} broadcast(s32[] %three), dimensions={}
  %shifted = s32[64,32]{1,0} add(s32[64,32]{1,0} %p1, s32[64,32]{1,0} %three_b)
  %as_f = f32[64,32]{1,0} convert(s32[64,32]{1,0} %shifted)
  %yes = pred[] constant(true)
  %yes_b = pred[64,32]{1,0} broadcast(pred[] %yes), dimensions={}
  %m = f32[64,32]{1,0} multiply(f32[64,32]{1,0} %p0, f32[64,32]{1,0} %scale_b)
  %s = f32[64,32]{1,0} add(f32[64,32]{1,0} %m, f32[64,32]{1,0} %bias_b)
  %t = f32[64,32]{1,0} add(f32[64,32]{1,0} %s, f32[64,32]{1,0} %as_f)
  ROOT %r = f32[64,32]{1,0} select(pred[64,32]{1,0} %yes_b, f32[64,32]{1,0} %t, f32[64,32]{1,0} %p0)
}

ENTRY %main (x: f32[64,32], i: s32[64,32]) -> f32[64,32] {
  %x = f32[64,32]{1,0} parameter(0)
  %i = s32[64,32]{1,0} parameter(1)
  ROOT %fusion = f32[64,32]{1,0} fusion(f32[64,32]{1,0} %x, s32[64,32]{1,0} %i), kind=kLoop, calls=%fused_scale_bias
}
"""

# Modules a cold PTX compile of such a module must not import.
NOT_LOADED = ("numpy", "ml_dtypes", "importlib.metadata", "multiprocessing", "concurrent.futures.process",
              "hlo_compile.targets.host.target", "hlo_compile.targets.host.kernel", "hlo_compile.targets.host.jit",
              "hlo_compile.interpreter", "hlo_compile.runtime.executable", "hlo_compile.runtime.steps",
              *(f"hlo_compile.codegen.emitters.{e}" for e in ("transpose", "reduction", "concatenate", "in_place_dus",
                                                              "scatter", "sort", "gemm")))

_PROBE = """
import json, runpy, sys
sys.argv = ["hlo-compile", *json.loads(sys.argv[1])]
try:
    runpy.run_module("hlo_compile.cli.compile", run_name="__main__")
except SystemExit as e:
    code = e.code
else:
    code = 0
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}))
"""


def _cold_compile_modules(args: list[str]) -> tuple[int, set[str]]:
    """(exit status, the modules loaded) of ``hlo-compile ARGS`` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(args)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["exit"], set(out["modules"])


def _loaded(modules: set[str], name: str) -> bool:
    return name in modules or any(m.startswith(name + ".") for m in modules)


def test_cold_ptx_compile_of_plain_scalar_constants_loads_no_numpy(tmp_path: Path) -> None:
    src = tmp_path / "scale_bias.hlo"
    src.write_text(SCALE_BIAS)
    out = tmp_path / "out.ptx"
    code, modules = _cold_compile_modules([str(src), "--emit=ptx", "--no-cache", "-q", "-o", str(out)])
    assert code in (0, None) and ".entry" in out.read_text()
    assert "llvmlite.binding" in modules and "hlo_compile.hlo.parser" in modules  # (the probe saw the compile)
    assert [m for m in NOT_LOADED if _loaded(modules, m)] == [] and not _loaded(modules, "cuda.pathfinder")


def test_cold_gelu_ptx_compile_loads_no_numpy(tmp_path: Path) -> None:
    try:
        find_libdevice()
    except ToolkitNotFound:
        pytest.skip("libdevice not found (pip install nvidia-nvvm)")
    out = tmp_path / "gelu.ptx"
    code, modules = _cold_compile_modules([str(GELU), "--emit=ptx", "--no-cache", "-q", "-o", str(out)])
    assert code in (0, None) and ".entry" in out.read_text()
    assert [m for m in NOT_LOADED if _loaded(modules, m)] == []
    if toolkit.pathfinder_wheel_libdevice() is not None:  # (else cuda-pathfinder searches Conda, CUDA_HOME...)
        assert not _loaded(modules, "cuda.pathfinder")


def test_array_constants_still_load_numpy(tmp_path: Path) -> None:
    """The laziness is a start-up matter: an array constant is parsed with numpy as before."""
    src = tmp_path / "array.hlo"
    src.write_text(SCALE_BIAS.replace("%scale = f32[] constant(0.044715)\n  %scale_b = f32[64,32]{1,0} broadcast("
                                      "f32[] %scale), dimensions={}",
                                      "%scale = f32[32]{0} constant({" + ", ".join(["0.5"] * 32) + "})\n"
                                      "  %scale_b = f32[64,32]{1,0} broadcast(f32[32]{0} %scale), dimensions={1}"))
    code, modules = _cold_compile_modules([str(src), "--emit=llvm", "--no-cache", "-q", "-o", str(tmp_path / "o.ll")])
    assert code in (0, None) and "numpy" in modules


@pytest.mark.parametrize("kind", list(EMITTERS), ids=str)
def test_every_deferred_emitter_names_a_function_of_its_module(kind: EmitterKind) -> None:
    """An emitter's module loads at its first call; a misspelt name would only fail then."""
    emitter = EMITTERS[kind]
    for fn in (emitter.plan, emitter.emit):
        with pytest.raises(TypeError):  # (the function, called without its arguments; not AttributeError)
            fn()


# ---- numpy-free values equal numpy's ------------------------------------------------------------

_F32_TOKENS = ["0", "-0", "0.5", "1", "-1.25", "0.044715", "0.7978845608", "1e-45", "1.4e-45", "7e-46", "-7e-46",
               "1.1754942e-38", "1.17549435e-38", "3.4028234e38", "3.4028235e38", "3.40282356e38", "-3.4028235e38",
               "16777217", "0.1", "0.2", "0.3", "2.5e-40", "123456789", "inf", "-inf", "nan", "-nan",
               "nan(0x1)", "true", "false", "1e-50", "-1e-50"]
_CASES = ([("f32", t) for t in _F32_TOKENS]
          + [("f64", t) for t in ["0", "-0", "0.1", "1e308", "-1.7976931348623157e308", "5e-324", "inf", "-nan",
                                  "true"]]
          + [("s8", "-128"), ("s8", "127"), ("u8", "255"), ("s16", "-32768"), ("u16", "65535"),
             ("s32", "-2147483648"), ("u32", "4294967295"), ("s64", "-9223372036854775808"),
             ("s64", "18446744073709551615"), ("u64", "18446744073709551615"), ("u64", "-1"), ("s32", "true"),
             ("pred", "true"), ("pred", "false"), ("pred", "1"), ("pred", "0")])


def _bits(x) -> int:
    a = np.asarray(x)
    return int(a.view(np.dtype(f"u{a.dtype.itemsize}"))) if a.dtype.kind in "fc" else int(a)


@pytest.mark.parametrize("etype,token", _CASES)
@pytest.mark.parametrize("form", ["{}", "{{{}}}"])
def test_scalar_value_is_parse_literals_value(etype: str, token: str, form: str) -> None:
    shape = Shape.array(etype, [] if form == "{}" else [1])
    text = form.format(token)
    want = parse_literal(text, shape).reshape(())
    got = scalar_value(text, shape)
    assert type(got) is {"pred": bool, "f32": float, "f64": float}.get(etype, int)
    if etype in ("f32", "f64"):
        assert _bits(np.asarray(got).astype(want.dtype)) == _bits(want)  # NaN payloads and signs too
        if not math.isnan(got):  # the value exactly as the type holds it (f32 rounded), -0 kept
            assert struct.pack("<d", got) == struct.pack("<d", float(want))
    else:
        assert got == want.item()
    # and the emitted constant is the same text as from numpy's scalar
    assert str(emit_constant_scalar(got, etype)) == str(emit_constant_scalar(want, etype))


@pytest.mark.parametrize("etype,text", [("f32", "3.5e38"), ("f32", "-1e39"), ("s8", "128"), ("u32", "-1"),
                                        ("pred", "2"), ("f32", "{1, 2}"), ("f32", "1 2"), ("s32", "1.5")])
def test_scalar_value_refuses_what_parse_literal_refuses(etype: str, text: str) -> None:
    shape = Shape.array(etype, [])
    with pytest.raises(LiteralError) as numpy_error:
        parse_literal(text, shape)
    with pytest.raises(LiteralError) as plain_error:
        scalar_value(text, shape)
    assert str(plain_error.value) == str(numpy_error.value) and plain_error.value.offset == numpy_error.value.offset


def test_scalar_value_declines_other_shapes_and_types() -> None:
    assert scalar_value("{1, 2}", Shape.array("f32", [2])) is None
    assert scalar_value("1", Shape.array("bf16", [])) is None
    assert scalar_value("1", Shape.array("f16", [])) is None
    assert scalar_value("(1, 2)", Shape.array("c64", [])) is None
    assert "bf16" not in PLAIN_TYPES and "f32" in PLAIN_TYPES


def test_to_f32_is_numpys_float32_rounding() -> None:
    rng = np.random.default_rng(17)
    doubles = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-45, 39, 2000),
                              np.nextafter(np.float64(np.finfo(np.float32).max), np.inf, dtype=np.float64)[None]])
    for d in doubles:
        got = to_f32(float(d))
        with np.errstate(over="ignore"):
            want = np.float64(d).astype(np.float32)
        if math.isinf(want):
            assert got is None
        else:
            assert struct.pack("<f", got) == want.tobytes()


def test_out_of_range_f32_scalar_is_a_parse_error_at_its_place() -> None:
    text = GELU.read_text().replace("constant(0.044715)", "constant(3.5e38)")
    with pytest.raises(HloParseError, match="value 3.5e38 is out of range for literal's primitive type F32"):
        parse_module(text)


def test_plain_scalar_constant_keeps_its_numpy_value_on_request() -> None:
    module = parse_module(GELU.read_text())
    coeff = next(i for c in module.computations for i in c.instructions if i.name == "coeff")
    assert coeff.plain_scalar() == float(np.float32(0.044715))
    assert coeff.literal.dtype == np.float32 and coeff.literal == np.float32(0.044715)


def test_version_constant_is_pyprojects() -> None:
    text = (REPO / "pyproject.toml").read_text()
    declared = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M).group(1)
    assert hlo_compile.__version__ == declared


# ---- libdevice found without importing cuda-pathfinder -------------------------------------------

def test_wheel_libdevice_is_what_cuda_pathfinder_finds() -> None:
    pathfinder = pytest.importorskip("cuda.pathfinder")
    got = toolkit.pathfinder_wheel_libdevice()
    if got is None:
        pytest.skip("no NVIDIA wheel with libdevice in site-packages")
    assert got == Path(pathfinder.find_bitcode_lib("device"))


def test_wheel_libdevice_follows_cuda_pathfinders_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cu13 before cuda_nvcc whatever their site-packages, then the site-packages' order."""
    pytest.importorskip("cuda.pathfinder")
    first, second = tmp_path / "site-a", tmp_path / "site-b"
    for root, layout in ((first, "cuda_nvcc"), (second, "cu13"), (first, "cu13")):
        folder = root / "nvidia" / layout / "nvvm" / "libdevice"
        folder.mkdir(parents=True, exist_ok=True)
    (first / "nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc").write_bytes(b"BC")
    (second / "nvidia/cu13/nvvm/libdevice/libdevice.10.bc").write_bytes(b"BC")
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(first), str(second)])
    monkeypatch.setattr(site, "ENABLE_USER_SITE", False)
    for var in ("CONDA_PREFIX", "CUDA_PATH", "CUDA_HOME"):
        monkeypatch.delenv(var, raising=False)
    got = toolkit.pathfinder_wheel_libdevice()
    assert got == (second / "nvidia/cu13/nvvm/libdevice/libdevice.10.bc").resolve()
    try:  # cuda-pathfinder's own search (uncached), where this version has it
        from cuda.pathfinder._static_libs.find_bitcode_lib import locate_bitcode_lib
    except ImportError:
        return
    assert got == Path(locate_bitcode_lib("device").abs_path)
    (second / "nvidia/cu13/nvvm/libdevice/libdevice.10.bc").unlink()
    assert toolkit.pathfinder_wheel_libdevice() == Path(locate_bitcode_lib("device").abs_path) == \
        (first / "nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc").resolve()
