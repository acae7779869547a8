"""The ``fft`` op: XLA's four types over 1 to 3 innermost dimensions, with a batch, in c64/c128.

Checked (a) the interpreter against a float64/complex128 numpy reference (written here from the
DFT's definition for 1-D, numpy's double-precision FFT beyond), (b) against XLA:CPU through
``shared/tools/xla_ref.py`` where jax is importable, (c) the host platform (a runtime step,
not a kernel) against the interpreter, through ``hlo-run --platform=host`` too, (d) shapes that
disagree with the type and lengths refused by name, (e) ``hlo-compile`` reporting the fft as a
library row instead of refusing it, and (f) an FNO-style spectral layer (rfft → complex
multiply by weights → irfft) end to end.
"""
from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest
from click.testing import CliRunner
from xla_reference import xla_ref_module as _xla_ref

from hlo_compile import parse_module
from hlo_compile.cli.compile import main as hlo_compile
from hlo_compile.cli.run import main as hlo_run
from hlo_compile.hlo.errors import HloError
from hlo_compile.interpreter import evaluate_module
from hlo_compile.runtime.executable import compile_executable

REAL = {"c64": "f32", "c128": "f64"}
NP = {"c64": np.complex64, "c128": np.complex128, "f32": np.float32, "f64": np.float64}
# max |got - want| / max |want|: a few ulps times log2(N) of the transform's precision
TOL = {"c64": 2e-6, "c128": 1e-14}


def _dims(xs) -> str:
    return ",".join(str(x) for x in xs)


def fft_module(fft_type: str, ctype: str, batch: tuple[int, ...], lengths: tuple[int, ...]) -> tuple[str, str, list]:
    """(HLO text, operand element type, operand dims) of a module whose ROOT is one fft."""
    rtype = REAL[ctype]
    if fft_type == "IRFFT":
        in_dims = [*batch, *lengths[:-1], lengths[-1] // 2 + 1]
        out_et, in_et = rtype, ctype
    elif fft_type == "RFFT":
        in_dims = [*batch, *lengths]
        out_et, in_et = ctype, rtype
    else:
        in_dims = [*batch, *lengths]
        out_et, in_et = ctype, ctype
    out_dims = [*batch, *lengths] if fft_type != "RFFT" else [*batch, *lengths[:-1], lengths[-1] // 2 + 1]
    root = f"{out_et}[{_dims(out_dims)}] fft(p), fft_type={fft_type}, fft_length={{{_dims(lengths)}}}"
    text = (f"HloModule fft_{fft_type.lower()}\n\nENTRY main {{\n  p = {in_et}[{_dims(in_dims)}] parameter(0)\n"
            f"  ROOT f = {root}\n}}\n")
    return text, in_et, in_dims


def _input(et: str, dims, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(dims)
    if et in ("c64", "c128"):
        x = x + 1j * rng.standard_normal(dims)
    return x.astype(NP[et])


def _reference(x: np.ndarray, fft_type: str, lengths) -> np.ndarray:
    """The transform in double precision; a 1-D complex FFT straight from the DFT's definition."""
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    x = x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)
    if fft_type in ("FFT", "IFFT") and len(lengths) == 1:
        n = lengths[0]
        k = np.arange(n)
        sign = -1 if fft_type == "FFT" else 1
        w = np.exp(sign * 2j * np.pi * np.outer(k, k) / n)
        out = x @ w.T
        return out / n if fft_type == "IFFT" else out
    fn = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn, "IRFFT": np.fft.irfftn}[fft_type]
    return fn(x, s=list(lengths), axes=axes)


def _rel(got, want) -> float:
    got, want = np.asarray(got), np.asarray(want)
    return float(np.max(np.abs(got.astype(want.dtype) - want)) / max(np.max(np.abs(want)), 1e-300))


CASES = [
    ("FFT", (3,), (16,)), ("FFT", (2, 2), (8, 6)), ("FFT", (2,), (4, 5, 6)),
    ("IFFT", (5,), (12,)), ("IFFT", (), (6, 8)), ("IFFT", (2,), (3, 4, 5)),
    ("RFFT", (4,), (16,)), ("RFFT", (3,), (6, 10)), ("RFFT", (2,), (4, 6, 8)), ("RFFT", (2,), (7,)),
    ("IRFFT", (4,), (16,)), ("IRFFT", (3,), (6, 10)), ("IRFFT", (2,), (4, 6, 8)), ("IRFFT", (3,), (9,)),
]


@pytest.mark.parametrize("ctype", ["c64", "c128"])
@pytest.mark.parametrize("fft_type,batch,lengths", CASES)
def test_interpreter_and_host_match_reference(fft_type, batch, lengths, ctype):
    text, in_et, in_dims = fft_module(fft_type, ctype, batch, lengths)
    module = parse_module(text)
    x = _input(in_et, in_dims, seed=len(in_dims) * 7 + len(fft_type))
    if fft_type == "IRFFT":  # a Hermitian-consistent input: the rfft of a real array
        real = _input(REAL[ctype], [*batch, *lengths], seed=11)
        x = np.fft.rfftn(real, s=list(lengths), axes=tuple(range(len(batch), real.ndim))).astype(NP[ctype])
    want = _reference(x, fft_type, lengths)
    got = evaluate_module(module, [x])
    out_et = REAL[ctype] if fft_type == "IRFFT" else ctype
    assert got.dtype == NP[out_et] and got.shape == want.shape
    err = _rel(got, want)
    assert err <= TOL[ctype], f"interpreter {err:.3g}"
    host = compile_executable(module, "host").run([x])
    host = host[0] if isinstance(host, (list, tuple)) else host
    assert np.asarray(host).dtype == NP[out_et]
    assert _rel(host, want) <= TOL[ctype]




@pytest.mark.parametrize("ctype", ["c64", "c128"])
@pytest.mark.parametrize("fft_type,batch,lengths", [CASES[0], CASES[2], CASES[4], CASES[7], CASES[9], CASES[11],
                                                    CASES[12], CASES[13]])
def test_matches_xla_cpu(fft_type, batch, lengths, ctype):
    ref = _xla_ref()
    if ref is None:
        pytest.skip("jax or shared/tools/xla_ref.py is not available")
    import jax
    text, in_et, in_dims = fft_module(fft_type, ctype, batch, lengths)
    x = _input(in_et, in_dims, seed=5)  # IRFFT: any complex input, XLA reads it as Hermitian the same way
    with jax.enable_x64(ctype == "c128"):
        (xla,) = ref.run_hlo_text(text, [x])
    got = evaluate_module(parse_module(text), [x])
    assert np.asarray(xla).dtype == got.dtype
    assert _rel(got, np.asarray(xla).astype(np.complex128 if np.iscomplexobj(xla) else np.float64)) <= 4 * TOL[ctype]


@pytest.mark.parametrize("line,why", [
    ("ROOT f = c64[4,8] fft(p), fft_type=FFT, fft_length={16}", "innermost operand dimensions"),
    ("ROOT f = c64[4,5] fft(p), fft_type=RFFT, fft_length={8}", "RFFT does not take c64"),
    ("ROOT f = c64[4,4] fft(p), fft_type=FFT, fft_length={8}", "declares"),
    ("ROOT f = f32[4,8] fft(p), fft_type=IRFFT, fft_length={8}", "innermost operand dimensions"),
])
def test_inconsistent_shapes_refused_by_name(line, why):
    text = f"HloModule bad\n\nENTRY main {{\n  p = c64[4,8] parameter(0)\n  {line}\n}}\n"
    try:
        module = parse_module(text)
    except HloError as e:  # the verifier may refuse it first
        assert "f" in str(e)
        return
    with pytest.raises(HloError, match=why) as info:
        evaluate_module(module, [_input("c64", [4, 8], 0)])
    assert "'%f'" in str(info.value) and "line 5" in str(info.value)


def test_ifft_of_fft_is_identity_and_irfft_of_rfft_with_real_kernels():
    """FFT then IFFT returns the input; real kernels around RFFT/IRFFT run on the host between the steps."""
    text = """HloModule roundtrip

ENTRY main {
  x = f32[3,32] parameter(0)
  two = f32[] constant(2)
  b = f32[3,32] broadcast(two), dimensions={}
  y = f32[3,32] multiply(x, b)
  r = c64[3,17] fft(y), fft_type=RFFT, fft_length={32}
  back = f32[3,32] fft(r), fft_type=IRFFT, fft_length={32}
  ROOT z = f32[3,32] subtract(back, x)
}
"""
    module = parse_module(text)
    x = _input("f32", [3, 32], 4)
    host = compile_executable(module, "host").run([x])
    host = host[0] if isinstance(host, (list, tuple)) else host
    np.testing.assert_allclose(host, x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(evaluate_module(module, [x]), host, rtol=1e-6, atol=1e-6)


def test_hlo_run_host_end_to_end(tmp_path):
    text, _, _ = fft_module("FFT", "c64", (2, 3), (4, 8))
    path = tmp_path / "fft.hlo"
    path.write_text(text)
    r = CliRunner().invoke(hlo_run, [str(path), "--platform=host", "--seed=3"])
    assert r.exit_code == 0, r.output
    assert "results match" in r.output


def test_hlo_compile_reports_a_library_row(tmp_path):
    text, _, _ = fft_module("RFFT", "c64", (4,), (16,))
    path = tmp_path / "rfft.hlo"
    path.write_text(text)
    r = CliRunner().invoke(hlo_compile, [str(path), "--emit=fusions"])
    assert r.exit_code == 0, r.output
    assert "fft %f -> library cufft (RFFT)" in r.output
    r = CliRunner().invoke(hlo_compile, [str(path), "--dump-to", str(tmp_path / "dump")])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "dump" / "summary.json").read_text())["kernels"]
    assert [(k["fusion"], k["emitter"], k["library"]) for k in rows] == [("f", "library", "cufft")]


def test_cuda_step_refuses_without_bindings_or_with_a_non_default_layout(monkeypatch):
    from hlo_compile.runtime import fft_steps, nvidia_bindings
    text = ("HloModule m\n\nENTRY main {\n  p = c64[8,4]{0,1} parameter(0)\n"
            "  ROOT f = c64[8,4]{0,1} fft(p), fft_type=FFT, fft_length={4}\n}\n")
    inst = parse_module(text).entry.root
    with pytest.raises(HloError, match="row-major layout"):
        fft_steps.CufftStep(inst)
    text, _, _ = fft_module("IFFT", "c64", (2,), (8,))
    step = fft_steps.CufftStep(parse_module(text).entry.root)
    monkeypatch.setitem(nvidia_bindings.BINDINGS, "cufft",
                        nvidia_bindings.Binding("no_such_module_xyz.cufft", "nvmath-python", "cuFFT"))

    class _Platform:
        def allocate(self, shape):
            return 0

    from hlo_compile.runtime.steps import Frame, Resources
    from hlo_compile.runtime.values import Buffer
    frame = Frame(Resources({}, None), [])
    frame.values[step.inst.operands[0]] = Buffer(step.inst.operands[0].shape, 0)
    with pytest.raises(HloError, match="cuFFT bindings are not installed"):
        step.run(_Platform(), frame)


class _FakeCufft:
    """Records the cuFFT calls a step makes (the bindings' signatures)."""

    def __init__(self):
        self.calls = []

    def create(self):
        self.calls.append(("create",))
        return 77

    def make_plan_many64(self, *args):
        self.calls.append(("make_plan_many64", *args))
        return 0

    def __getattr__(self, name):
        if name.startswith("exec_"):
            return lambda *args: self.calls.append((name, *args))
        raise AttributeError(name)


class _FakeCublas:
    def __init__(self):
        self.calls = []

    def create(self):
        return 5

    def __getattr__(self, name):
        if not name.endswith("scal_64"):
            raise AttributeError(name)
        scalar = ctypes.c_double if name[0] in "dz" else ctypes.c_float

        def scal(handle, n, alpha, x, incx):
            self.calls.append((name, n, scalar.from_address(alpha).value, x, incx))
        return scal


@pytest.mark.parametrize("fft_type,lengths,batch,ctype", [("IFFT", (8, 6), 3, "c64"), ("IRFFT", (16,), 4, "c64"),
                                                          ("RFFT", (4, 4, 4), 2, "c64"), ("FFT", (10,), 2, "c128")])
def test_cuda_step_wiring_against_recording_bindings(monkeypatch, fft_type, lengths, batch, ctype):
    """The plan (rank, lengths, type, batch), the exec function and direction, the C2R input copy and
    the 1/N scale of the inverse types, against stand-ins of the bindings (no GPU here)."""
    from hlo_compile.runtime import fft_steps
    text, _, _ = fft_module(fft_type, ctype, (batch,), lengths)
    step = fft_steps.CufftStep(parse_module(text).entry.root)
    cufft, cublas = _FakeCufft(), _FakeCublas()
    monkeypatch.setattr(fft_steps, "require_binding", lambda name, inst: {"cufft": cufft, "cublas": cublas}[name])

    class _Platform:
        def __init__(self):
            self.log = []
            self.next = 1000

        def allocate(self, shape):
            self.next += 1000
            self.log.append(("allocate", self.next))
            return self.next

        def copy(self, dst, src, shape):
            self.log.append(("copy", dst, src))

        def free(self, data):
            self.log.append(("free", data))

        def synchronize(self):
            pass

    from hlo_compile.runtime.steps import Frame, Resources
    from hlo_compile.runtime.values import Buffer
    platform = _Platform()
    frame = Frame(Resources({}, None), [])
    frame.values[step.inst.operands[0]] = Buffer(step.inst.operands[0].shape, 500)
    step.run(platform, frame)
    types = {("FFT", "c64"): 0x29, ("IFFT", "c64"): 0x29, ("RFFT", "c64"): 0x2A, ("IRFFT", "c64"): 0x2C,
             ("FFT", "c128"): 0x69}
    assert cufft.calls[1] == ("make_plan_many64", 77, len(lengths), list(lengths), 0, 1, 0, 0, 1, 0,
                              types[(fft_type, ctype)], batch)
    out = frame.values[step.inst].data
    exec_call = cufft.calls[2]
    if fft_type == "IRFFT":
        scratch = platform.log[1][1]
        assert platform.log[2] == ("copy", scratch, 500) and ("free", scratch) in platform.log
        assert exec_call == ("exec_c2r", 77, scratch, out)
    elif fft_type == "RFFT":
        assert exec_call == ("exec_r2c", 77, 500, out)
    else:
        name = "exec_c2c" if ctype == "c64" else "exec_z2z"
        assert exec_call == (name, 77, 500, out, 1 if fft_type == "IFFT" else -1)
    n = int(np.prod(lengths))
    if fft_type == "IFFT":
        assert cublas.calls == [("csscal_64", batch * n, pytest.approx(1 / n), out, 1)]
    elif fft_type == "IRFFT":
        assert cublas.calls == [("sscal_64", batch * n, pytest.approx(1 / n), out, 1)]
    else:
        assert cublas.calls == []
    # a second run reuses the plan
    step.run(platform, frame)
    assert [c[0] for c in cufft.calls].count("make_plan_many64") == 1


FNO_LAYER = """HloModule fno_spectral

add {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ROOT s = c64[] add(a, b)
}

ENTRY main {
  x = f32[2,4,64] parameter(0)
  w = c64[4,6,12] parameter(1)
  xf = c64[2,4,33] fft(x), fft_type=RFFT, fft_length={64}
  low = c64[2,4,12] slice(xf), slice={[0:2], [0:4], [0:12]}
  lb = c64[2,4,6,12] broadcast(low), dimensions={0,1,3}
  wb = c64[2,4,6,12] broadcast(w), dimensions={1,2,3}
  prod = c64[2,4,6,12] multiply(lb, wb)
  zero = c64[] constant((0, 0))
  mixed = c64[2,6,12] reduce(prod, zero), dimensions={1}, to_apply=add
  full = c64[2,6,33] pad(mixed, zero), padding=0_0x0_0x0_21
  y = f32[2,6,64] fft(full), fft_type=IRFFT, fft_length={64}
  bias = f32[2,6,64] parameter(2)
  ROOT out = f32[2,6,64] add(y, bias)
}
"""


def test_fno_spectral_layer_end_to_end():
    """An FNO spectral layer as JAX writes it: rfft over the grid, the lowest 12 modes mixed across
    channels by complex weights (multiply + reduce-add of c64), zero-padded back, irfft, bias.
    Host (fft steps around complex kernels) = interpreter = a float64 numpy reference (and XLA:CPU)."""
    module = parse_module(FNO_LAYER)
    x = _input("f32", [2, 4, 64], 1)
    w = (_input("f32", [4, 6, 12], 2) + 1j * _input("f32", [4, 6, 12], 3)).astype(np.complex64) / 4
    bias = _input("f32", [2, 6, 64], 4)
    xf = np.fft.rfft(x.astype(np.float64), axis=-1)[:, :, :12]
    mixed = np.einsum("bik,iok->bok", xf, w.astype(np.complex128))
    want = np.fft.irfft(np.pad(mixed, ((0, 0), (0, 0), (0, 21))), n=64, axis=-1) + bias
    interp = evaluate_module(module, [x, w, bias])
    host = compile_executable(module, "host").run([x, w, bias])
    host = host[0] if isinstance(host, (list, tuple)) else host
    assert _rel(interp, want) <= 1e-5 and _rel(host, want) <= 1e-5
    np.testing.assert_allclose(host, interp, rtol=1e-5, atol=1e-5)
    ref = _xla_ref()
    if ref is not None:
        (xla,) = ref.run_hlo_text(FNO_LAYER, [x, w, bias])
        assert _rel(np.asarray(xla), want) <= 1e-5
