"""Complex element types (c64, c128) in code generation: every complex elementwise op and the
emitters that move or combine complex values, on the host target against the interpreter.

Values are literal structs ``{float, float}`` / ``{double, double}`` (``codegen/elemental/complex_ops.py``),
stored interleaved as XLA stores them. Tolerances are in units of the component type's epsilon:
add/subtract/negate/real/imag/complex/convert/select and the data-movement emitters are exact;
multiply and the libm-based ops are within a few ulps of numpy (XLA's formulas, not numpy's).
A filecheck test pins the IR of a complex multiply.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.codegen.compiler import plan_module, prepare_module
from hlo_compile.hlo.errors import HloError
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime.executable import compile_executable
from hlo_compile.targets.host import HostTarget

from codegen_helpers import emit_stage, filecheck
from complex_grid import binary_grid, corners, random_values

REAL = {"c64": "f32", "c128": "f64"}
NP = {"c64": np.complex64, "c128": np.complex128, "f32": np.float32, "f64": np.float64}
EPS = {"c64": float(np.finfo(np.float32).eps), "c128": float(np.finfo(np.float64).eps)}


def _input(et: str, dims, seed: int, scale: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-scale, scale, dims)
    if et in NP and np.dtype(NP[et]).kind == "c":
        x = x + 1j * rng.uniform(-scale, scale, dims)
    return x.astype(NP[et])


def _run_both(text: str, args: list) -> tuple[np.ndarray, np.ndarray]:
    module = parse_module(text)
    want = evaluate_module(module, args)
    got = compile_executable(module, "host").run(args)
    got = got[0] if isinstance(got, (list, tuple)) and not isinstance(want, tuple) else got
    return np.asarray(got), np.asarray(want)


def _err_ulps(got: np.ndarray, want: np.ndarray, ct: str) -> float:
    """max |got - want| / (eps * max(|want|, 1)), elementwise, in the component's epsilon."""
    assert got.dtype == want.dtype and got.shape == want.shape
    both_nan = np.isnan(got) & np.isnan(want) if got.dtype.kind != "c" else \
        (np.isnan(got.real) & np.isnan(want.real)) | (np.isnan(got.imag) & np.isnan(want.imag))
    with np.errstate(invalid="ignore"):
        diff = np.abs(got.astype(np.complex128) - want.astype(np.complex128))
    scale = np.maximum(np.abs(want.astype(np.complex128)), 1.0)
    same = both_nan | (got == want)   # equal infinities too
    return float(np.max(np.where(same, 0.0, diff / scale)) / EPS[ct])


UNARY = {  # opcode -> ulps allowed (of max(|result|, 1))
    "negate": 0, "exponential": 8, "exponential-minus-one": 8, "log": 8, "log-plus-one": 8, "sqrt": 8,
    "rsqrt": 8, "tanh": 16, "sine": 8, "cosine": 8, "sign": 4,
}
TO_REAL = {"abs": 4, "real": 0, "imag": 0}
BINARY = {"add": 0, "subtract": 0, "multiply": 4, "divide": 8, "power": 64}


@pytest.mark.parametrize("ct", ["c64", "c128"])
@pytest.mark.parametrize("op", sorted(UNARY) + sorted(TO_REAL))
def test_unary_ops_on_host_match_interpreter(op, ct):
    rt = REAL[ct] if op in TO_REAL else ct
    text = f"HloModule u\n\nENTRY main {{\n  a = {ct}[257] parameter(0)\n  ROOT r = {rt}[257] {op}(a)\n}}\n"
    x = _input(ct, [257], seed=3)
    x[:4] = [0, 1e-30, -3.0, 1j * 40]   # zero, tiny, negative real axis, large imaginary part
    got, want = _run_both(text, [x])
    tol = {**UNARY, **TO_REAL}[op]
    assert _err_ulps(got, want, ct) <= tol, op


@pytest.mark.parametrize("ct", ["c64", "c128"])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_on_host_match_interpreter(op, ct):
    text = (f"HloModule b\n\nENTRY main {{\n  a = {ct}[300] parameter(0)\n  b = {ct}[300] parameter(1)\n"
            f"  ROOT r = {ct}[300] {op}(a, b)\n}}\n")
    x, y = _input(ct, [300], 1), _input(ct, [300], 2)
    if op == "power":
        x, y = x, y * 0.5
    got, want = _run_both(text, [x, y])
    assert _err_ulps(got, want, ct) <= BINARY[op], op
    if op in ("add", "subtract"):
        assert np.array_equal(got, want)


def test_divide_corner_cases_follow_xla():
    """XLA's complex divide: x/0 is inf-signed (not NaN) for a non-NaN numerator, inf/finite is
    inf, finite/inf is 0 (numpy gives NaN for several of these)."""
    text = ("HloModule d\n\nENTRY main {\n  a = c64[4] parameter(0)\n  b = c64[4] parameter(1)\n"
            "  ROOT r = c64[4] divide(a, b)\n}\n")
    inf = np.float32(np.inf)
    a = np.array([1 + 1j, complex(inf, 0), 1 + 2j, 3 - 1j], np.complex64)
    b = np.array([0, 2 + 1j, complex(inf, 1), 1 + 1j], np.complex64)
    got = compile_executable(parse_module(text), "host").run([a, b])
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert np.isinf(got[0].real) and np.isinf(got[0].imag)
    assert np.isinf(got[1].real)
    assert got[2] == 0
    np.testing.assert_allclose(got[3], (3 - 1j) / (1 + 1j), rtol=1e-6)


def test_abs_does_not_overflow():
    text = "HloModule a\n\nENTRY main {\n  a = c64[2] parameter(0)\n  ROOT r = f32[2] abs(a)\n}\n"
    x = np.array([2e38 + 2e38j, 3e-39 + 4e-39j], np.complex64)   # |re|^2 overflows f32, |z| does not
    got, want = _run_both(text, [x])
    assert np.isfinite(got[0]) and abs(got[0] / np.float32(2.8284271e38) - 1) < 1e-6
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_complex_convert_compare_select_constant():
    """complex(re, im), convert c64<->c128 and f32->c64, compare EQ/NE, select and a complex
    constant in one kernel (bit-exact)."""
    text = """HloModule mix

ENTRY main {
  re = f32[33] parameter(0)
  im = f32[33] parameter(1)
  w = c128[33] parameter(2)
  z = c64[33] complex(re, im)
  wz = c64[33] convert(w)
  eq = pred[33] compare(z, wz), direction=EQ
  ne = pred[33] compare(z, wz), direction=NE
  k = c64[] constant((1.5, -2.25))
  kb = c64[33] broadcast(k), dimensions={}
  fr = c64[33] convert(re)
  s = c64[33] select(eq, kb, fr)
  up = c128[33] convert(s)
  ROOT t = (pred[33], pred[33], c128[33]) tuple(eq, ne, up)
}
"""
    re_, im_ = _input("f32", [33], 4), _input("f32", [33], 5)
    w = (re_ + 1j * im_).astype(np.complex128)
    w[::3] += 1   # some unequal
    got, want = _run_both(text, [re_, im_, w])
    for g, e in zip(got, want):
        assert np.array_equal(np.asarray(g), np.asarray(e))
    assert np.asarray(want[0]).any() and not np.asarray(want[0]).all()


EMITTER_CASES = {
    "reduce_add_row": ("""HloModule r
add {
  x = CT[] parameter(0)
  y = CT[] parameter(1)
  ROOT s = CT[] add(x, y)
}
ENTRY main {
  a = CT[16,1000] parameter(0)
  z = CT[] constant((0, 0))
  ROOT r = CT[16] reduce(a, z), dimensions={1}, to_apply=add
}
""", [[16, 1000]]),
    "reduce_mul_column": ("""HloModule r
mul {
  x = CT[] parameter(0)
  y = CT[] parameter(1)
  ROOT s = CT[] multiply(x, y)
}
ENTRY main {
  a = CT[8,130] parameter(0)
  z = CT[] constant((1, 0))
  ROOT r = CT[130] reduce(a, z), dimensions={0}, to_apply=mul
}
""", [[8, 130]]),
    "transpose": ("""HloModule t
ENTRY main {
  a = CT[64,96] parameter(0)
  ROOT t = CT[96,64] transpose(a), dimensions={1,0}
}
""", [[64, 96]]),
    "concatenate": ("""HloModule c
ENTRY main {
  a = CT[10,7] parameter(0)
  b = CT[10,5] parameter(1)
  ROOT c = CT[10,12] concatenate(a, b), dimensions={1}
}
""", [[10, 7], [10, 5]]),
    "dot": ("""HloModule d
ENTRY main {
  a = CT[12,20] parameter(0)
  b = CT[20,9] parameter(1)
  ROOT d = CT[12,9] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""", [[12, 20], [20, 9]]),
    "slice_pad_reverse": ("""HloModule s
ENTRY main {
  a = CT[20,9] parameter(0)
  s = CT[10,9] slice(a), slice={[2:12], [0:9]}
  r = CT[10,9] reverse(s), dimensions={0}
  z = CT[] constant((0, 1))
  ROOT p = CT[12,11] pad(r, z), padding=1_1x1_1
}
""", [[20, 9]]),
    "dynamic_update_slice": ("""HloModule u
ENTRY main {
  a = CT[20,8] parameter(0)
  u = CT[4,8] parameter(1)
  i = s32[] constant(3)
  j = s32[] constant(0)
  ROOT d = CT[20,8] dynamic-update-slice(a, u, i, j)
}
""", [[20, 8], [4, 8]]),
}
# how close each must be (ulps of max(|x|, 1)); sums and products reassociate
EMITTER_TOL = {"reduce_add_row": 64, "reduce_mul_column": 64, "dot": 64}


@pytest.mark.parametrize("ct", ["c64", "c128"])
@pytest.mark.parametrize("case", sorted(EMITTER_CASES))
def test_emitters_on_host_match_interpreter(case, ct):
    text, dims = EMITTER_CASES[case]
    text = text.replace("CT", ct)
    scale = 1.05 if case == "reduce_mul_column" else 2.0
    args = [_input(ct, d, seed=i + 7, scale=scale) for i, d in enumerate(dims)]
    got, want = _run_both(text, args)
    tol = EMITTER_TOL.get(case, 0)
    err = _err_ulps(got, want, ct)
    assert err <= tol, f"{case}: {err:.3g} ulps"
    if tol == 0:
        assert np.array_equal(got, want)


def test_unsupported_complex_ops_are_refused_by_name():
    text = ("HloModule x\n\nENTRY main {\n  a = c64[8] parameter(0)\n  b = c64[8] parameter(1)\n"
            "  ROOT r = c64[8] remainder(a, b)\n}\n")
    module = parse_module(text)
    with pytest.raises(HloError, match=r"remainder 'r' at line 6 on complex values"):
        compile_executable(module, "host")


# ---- XLA's corner cases: host = interpreter on the grid of tests/complex_grid.py ----------------------
#
# Both compute XLA's formulas (codegen/elemental/complex_ops.py, interpreter/complex_math.py), so NaN and infinity
# positions and the signs of zeros must be identical and finite parts within the bound below, in ulps of
# max(|re|, |im|, 1) of the interpreter's result (the formulas add O(1) terms: cosh, 1 + exp, log|q|).
# What differs is the last bits of the float functions: the host calls glibc's libm, the interpreter
# numpy, whose f32 exp/log/sin/cos are its own SIMD routines (c128: both glibc, measured 0 ulps).
# On the GPU the kernels call libdevice (__nv_expf, __nv_sinf, ... 1-4 ulps each by NVIDIA's tables,
# __nv_powf/__nv_atan2f the widest), so a device result may be a few ulps further from the
# interpreter than these host bounds; power's q = c t + d log|z| amplifies them through cos/sin.
CORNER_ULPS = {  # op -> (c64, c128) bound; measured host max: c64 <= 2 but logistic 3.2, power 8.3; c128 0
    "abs": (2, 2), "sign": (2, 2), "negate": (0, 0), "exponential": (4, 2), "exponential-minus-one": (4, 2),
    "log": (4, 2), "log-plus-one": (4, 2), "sqrt": (4, 2), "rsqrt": (4, 2), "sine": (4, 2), "cosine": (4, 2),
    "tan": (4, 2), "tanh": (4, 2), "logistic": (8, 2), "add": (0, 0), "subtract": (0, 0), "multiply": (0, 0),
    "divide": (2, 2), "power": (16, 4), "atan2": (4, 2), "maximum": (0, 0), "minimum": (0, 0),
}
CORNER_UNARY = ["abs", "sign", "negate", "exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt",
                "rsqrt", "sine", "cosine", "tan", "tanh", "logistic"]
CORNER_BINARY = ["add", "subtract", "multiply", "divide", "power", "atan2", "maximum", "minimum"]


def _corner_mismatches(got: np.ndarray, want: np.ndarray, ct: str, ulps: float,
                       free_zero_sign: np.ndarray | None = None) -> list[str]:
    """What differs beyond the bound: NaN or infinity positions, zero signs, finite parts (in ulps)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    gs, ws = ([got.real, got.imag], [want.real, want.imag]) if got.dtype.kind == "c" else ([got], [want])
    scale = np.maximum.reduce([np.where(np.isfinite(w), np.abs(w), 0) for w in ws] + [np.ones(want.shape)])
    out = []
    for name, g, w in zip(("re", "im"), gs, ws):
        with np.errstate(invalid="ignore", over="ignore"):
            nan = np.isnan(g) != np.isnan(w)
            inf = (np.isinf(g) | np.isinf(w)) & (g != w) & ~np.isnan(g) & ~np.isnan(w)
            zero = (g == 0) & (w == 0) & (np.signbit(g) != np.signbit(w))
            if free_zero_sign is not None:
                zero &= ~free_zero_sign
            finite = np.isfinite(g) & np.isfinite(w)
            err = np.where(finite, np.abs(g.astype(np.float64) - w) / scale, 0) / EPS[ct]
        for what, bad in (("NaN position", nan), ("infinity", inf), ("zero sign", zero), ("ulps", err > ulps)):
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                out.append(f"{name} {what} at {i} ({int(bad.sum())} in all): got {g[i]!r}, want {w[i]!r}"
                           + (f", {err[i]:.3g} ulps" if what == "ulps" else ""))
    return out


@pytest.mark.parametrize("ct", ["c64", "c128"])
@pytest.mark.parametrize("op", CORNER_UNARY)
def test_unary_corner_grid_host_equals_interpreter(op, ct):
    x = np.concatenate([corners(ct), random_values(ct)])
    rt = REAL[ct] if op == "abs" else ct
    text = f"HloModule u\n\nENTRY main {{\n  a = {ct}[{x.size}] parameter(0)\n  ROOT r = {rt}[{x.size}] {op}(a)\n}}\n"
    with np.errstate(all="ignore"):
        got, want = _run_both(text, [x])
    ulps = CORNER_ULPS[op][ct == "c128"] * _condition(op, x)
    bad = _corner_mismatches(got, want, ct, ulps)
    assert not bad, (op, ct, bad)


def _condition(op: str, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray | float:
    """How much an ulp of the inputs of ``op``'s formula moves its result, where that exceeds 1:
    the host's libm and numpy's (SIMD, e.g. AVX-512) exp/log/sin/cos each round within an ulp,
    and an ill-conditioned formula carries that difference out. logistic(z) = 1/(1 + e^-z): by
    |e^-z| / |1 + e^-z| (2.76 ulps of c128 seen at a condition of 3.2 on an AVX-512 machine);
    power a^b: by the size of the angle and log it exponentiates, |b| (|log|a|| + |arg a|)
    (1,020 ulps of c64 at an angle of 998 radians)."""
    with np.errstate(all="ignore"):
        a128 = a.astype(np.complex128)
        if op == "logistic":
            e = np.exp(-a128)
            cond = np.abs(e) / np.abs(1 + e)
        elif op == "power":
            cond = np.abs(b.astype(np.complex128)) * (np.abs(np.log(np.abs(a128))) + np.abs(np.angle(a128)))
        else:
            return 1.0
    return np.where(np.isfinite(cond), np.maximum(cond, 1.0), 1.0)


@pytest.mark.parametrize("ct", ["c64", "c128"])
@pytest.mark.parametrize("op", CORNER_BINARY)
def test_binary_corner_grid_host_equals_interpreter(op, ct):
    a, b = binary_grid(ct)
    text = (f"HloModule b\n\nENTRY main {{\n  a = {ct}[{a.size}] parameter(0)\n  b = {ct}[{a.size}] parameter(1)\n"
            f"  ROOT r = {ct}[{a.size}] {op}(a, b)\n}}\n")
    with np.errstate(all="ignore"):
        got, want = _run_both(text, [a, b])
    # power: a zero from an underflowed |z|^c e^(-d t) takes the sign of cos/sin of q = c t + d log|z|,
    # which for a huge exponent is the libm's argument reduction of a huge number, not XLA's formula
    free = (np.abs(b.real) >= 1e30) | (np.abs(b.imag) >= 1e30) if op == "power" else None
    bad = _corner_mismatches(got, want, ct, CORNER_ULPS[op][ct == "c128"] * _condition(op, a, b), free)
    assert not bad, (op, ct, bad)


@pytest.mark.parametrize("ct", ["c64", "c128"])
@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
def test_compare_corner_grid_host_equals_interpreter(direction, ct):
    a, b = binary_grid(ct)
    a, b = np.concatenate([a, a]), np.concatenate([b, a])    # equal pairs too
    text = (f"HloModule c\n\nENTRY main {{\n  a = {ct}[{a.size}] parameter(0)\n  b = {ct}[{a.size}] parameter(1)\n"
            f"  ROOT r = pred[{a.size}] compare(a, b), direction={direction}\n}}\n")
    got, want = _run_both(text, [a, b])
    assert got.dtype == bool and np.array_equal(got, want)
    assert want.any() and not want.all()


def test_filecheck_complex_multiply_ir():
    """The IR of a c64 multiply: struct loads and store in the kernel; (ac - bd, ad + bc) from the parts."""
    text = ("HloModule m\n\nENTRY main {\n  a = c64[16] parameter(0)\n  b = c64[16] parameter(1)\n"
            "  ROOT r = c64[16] multiply(a, b)\n}\n")
    o = CompileOptions()
    plan = plan_module(prepare_module(parse_module(text), o), o)
    ir_text = "\n".join(str(k.emit(HostTarget())) for k in plan.kernels)
    checks = [  # the kernel: both operands loaded and the result stored as structs
        r"load \{float, float\}, ptr",
        r"load \{float, float\}, ptr",
        r"store \{float, float\} %\S+, ptr",
        # the element's function: the parts, (ac - bd, ad + bc), the struct rebuilt
        r"define internal \{float, float\}",
        r"(%\S+) = extractvalue \{float, float\} (%\S+), 0",
        r"(%\S+) = extractvalue \{float, float\} (%\S+), 1",
        r"(%\S+) = extractvalue \{float, float\} (%\S+), 0",
        r"(%\S+) = extractvalue \{float, float\} (%\S+), 1",
        r"fmul float",
        r"fmul float",
        r"fsub float",
        r"fmul float",
        r"fmul float",
        r"fadd float",
        r"insertvalue \{float, float\} zeroinitializer, float %\S+, 0",
        r"insertvalue \{float, float\} %\S+, float %\S+, 1",
        r"ret \{float, float\}",
    ]
    pos = 0
    for check in checks:
        m = re.compile(check).search(ir_text, pos)
        assert m is not None, f"CHECK not found after offset {pos}: {check}\n--- IR ---\n{ir_text}"
        pos = m.end()


def test_filecheck_complex_compare_lt_ir(tmp_path):
    """The IR of a c64 compare LT: both structs loaded, XLA's lexicographic order from the parts
    (re_a == re_b and im_a < im_b) or re_a < re_b in ordered compares (false on NaN), the pred stored
    as one byte."""
    text = ("HloModule m\n\nENTRY main {\n  a = c64[16] parameter(0)\n  b = c64[16] parameter(1)\n"
            "  ROOT r = pred[16] compare(a, b), direction=LT\n}\n")
    filecheck(emit_stage(text, "llvm"), """
CHECK:      define ptx_kernel void @r(
CHECK:      [[A:%[^ ]+]] = load { float, float }, ptr
CHECK:      [[B:%[^ ]+]] = load { float, float }, ptr
CHECK:      [[LT:%[^ ]+]] = call i1 @r_r(ptr {{.*}}, { float, float } [[A]], { float, float } [[B]])
CHECK:      [[BYTE:%[^ ]+]] = zext i1 [[LT]] to i8
CHECK:      store i8 [[BYTE]], ptr
CHECK:      define internal i1 @r_r(ptr {{.*}}, { float, float } [[X:%[^ ,)]+]], { float, float } [[Y:%[^ ,)]+]])
CHECK:      [[XR:%[^ ]+]] = extractvalue { float, float } [[X]], 0
CHECK-NEXT: [[YR:%[^ ]+]] = extractvalue { float, float } [[Y]], 0
CHECK-NEXT: [[SAME:%[^ ]+]] = fcmp oeq float [[XR]], [[YR]]
CHECK-NEXT: [[XI:%[^ ]+]] = extractvalue { float, float } [[X]], 1
CHECK-NEXT: [[YI:%[^ ]+]] = extractvalue { float, float } [[Y]], 1
CHECK-NEXT: [[IMLT:%[^ ]+]] = fcmp olt float [[XI]], [[YI]]
CHECK-NEXT: [[TIE:%[^ ]+]] = and i1 [[SAME]], [[IMLT]]
CHECK-NEXT: [[XR2:%[^ ]+]] = extractvalue { float, float } [[X]], 0
CHECK-NEXT: [[YR2:%[^ ]+]] = extractvalue { float, float } [[Y]], 0
CHECK-NEXT: [[RELT:%[^ ]+]] = fcmp olt float [[XR2]], [[YR2]]
CHECK-NEXT: [[R:%[^ ]+]] = or i1 [[TIE]], [[RELT]]
CHECK-NEXT: ret i1 [[R]]
""", tmp_path)


def test_scatter_c128_multiply_is_refused_by_name():
    """c128 with a combiner other than add would need a 128-bit CAS: refused naming the scatter (complex
    add and any c64 combiner run: tests/codegen/test_complex_scatter_sort.py)."""
    text = """HloModule s
mul {
  x = c128[] parameter(0)
  y = c128[] parameter(1)
  ROOT s = c128[] multiply(x, y)
}
ENTRY main {
  a = c128[10,4] parameter(0)
  i = s32[6,1] parameter(1)
  u = c128[6,4] parameter(2)
  ROOT r = c128[10,4] scatter(a, i, u), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=mul
}
"""
    with pytest.raises(HloError, match=r"scatter '%r'.*c128 elements.*128-bit compare-and-swap"):
        compile_executable(parse_module(text), "host")
