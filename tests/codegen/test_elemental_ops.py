"""The scalar elemental emitter against the reference interpreter, JIT-compiled on the host.

Exact (bit-for-bit, any NaN matching any NaN) for integer, bitwise, compare, convert,
rounding, min/max, abs/neg/sign, +-*/ and sqrt; a few ulps for libm functions. f16/bf16 are
checked at the IR level only (x86 lowers them to libcalls MCJIT cannot resolve here).
"""
from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from llvmlite import binding as llvm
from llvmlite import ir

import elemental_harness
from elemental_harness import (MODULE_SEPARATOR, LibmTarget, compile_op, emit_ir, jit, op_module, parse, reference,
                               run_both)
from hlo_compile.codegen.elemental.scalar_ops import (MATH_FUNCTIONS, SCALAR_OPCODES, emit_call_computation,
                                               emit_constant_scalar, emit_scalar_op)
from hlo_compile.codegen.llvm_types import I64, PTR, UnsupportedElementType, compute_type, storage_type
from hlo_compile.hlo.dtypes import numpy_dtype
from hlo_compile.hlo.errors import HloUnsupportedError
from hlo_compile.hlo.opcodes import ELEMENTWISE
from hlo_compile.interpreter import OPS as INTERPRETER_OPS

FLOATS = ["f32", "f64"]
SIGNED = ["s8", "s16", "s32", "s64"]
UNSIGNED = ["u8", "u16", "u32", "u64"]
INTS = SIGNED + UNSIGNED
JIT_TYPES = ["pred"] + INTS + FLOATS
RNG = np.random.default_rng(1234)


# ---- inputs -------------------------------------------------------------------------------

def float_specials(et: str) -> np.ndarray:
    dt = numpy_dtype(et)
    fi = np.finfo(dt)
    tiny_sub = fi.smallest_subnormal
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, tiny_sub, -tiny_sub, fi.tiny - tiny_sub, fi.tiny,
            -fi.tiny, fi.max, -fi.max, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5,
            np.nextafter(dt.type(0.5), dt.type(0)), -np.nextafter(dt.type(0.5), dt.type(0)), 3.0, np.pi, -np.e,
            1e-30, -1e-30, 1e30, 100.0, -100.0, 2.0 ** 31, -(2.0 ** 31), 2.0 ** 31 - 128, 2.0 ** 32, 2.0 ** 63,
            -(2.0 ** 63), 2.0 ** 64, 255.5, 127.9, -128.9, 65535.7, -0.75, 1e10, 4503599627370497.0,
            2.0 ** 24 + 1, 0.1, 7.0, 9.999]
    return np.array(vals, dtype=np.float64).astype(dt)


def int_specials(et: str) -> np.ndarray:
    dt = numpy_dtype(et)
    info = np.iinfo(dt)
    bits = info.bits
    vals = [0, 1, -1, 2, -2, 3, -3, 5, 7, -7, 10, 31, 32, 33, 63, 64, 65, bits - 1, bits, bits + 1, 2 * bits,
            100, -100, 127, 128, 255, 256, 65535, 65536, 2 ** 31 - 1, 2 ** 31, info.min, info.max, info.min + 1,
            info.max - 1, info.max // 2, info.min // 2]
    mask = (1 << bits) - 1
    wrapped = sorted({(v & mask) for v in vals})
    if info.min < 0:
        wrapped = [v - (1 << bits) if v >> (bits - 1) else v for v in wrapped]
    return np.array(wrapped, dtype=object).astype(dt)


def specials(et: str) -> np.ndarray:
    if et == "pred":
        return np.array([False, True])
    return float_specials(et) if et in FLOATS else int_specials(et)


def randoms(et: str, n: int) -> np.ndarray:
    dt = numpy_dtype(et)
    if et == "pred":
        return RNG.integers(0, 2, n).astype(bool)
    if et in FLOATS:
        return (RNG.standard_normal(n) * np.exp(RNG.uniform(-8, 8, n))).astype(dt)
    return RNG.integers(np.iinfo(dt).min, np.iinfo(dt).max, n, dtype=dt, endpoint=True)


def unary_inputs(et: str) -> np.ndarray:
    return np.concatenate([specials(et), randoms(et, 200)])


def binary_inputs(et: str) -> tuple[np.ndarray, np.ndarray]:
    s = specials(et)
    a, b = (np.array(x) for x in zip(*itertools.product(s, s)))
    return np.concatenate([a.astype(s.dtype), randoms(et, 300)]), np.concatenate([b.astype(s.dtype), randoms(et, 300)])


# ---- comparisons --------------------------------------------------------------------------

def assert_exact(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Bit-for-bit, except that any NaN matches any NaN."""
    assert got.dtype == want.dtype, what
    if got.dtype.kind == "f":
        nan = np.isnan(got) & np.isnan(want)
        bad = ~nan & (got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}"))
    else:
        bad = got != want
    idx = np.flatnonzero(bad)
    assert idx.size == 0, f"{what}: {idx.size} mismatches, first at {idx[:5]}: got {got[idx[:5]]}, want {want[idx[:5]]}"


def _ordered(x: np.ndarray) -> np.ndarray:
    k = x.view(f"i{x.itemsize}").astype(object)
    top = 1 << (8 * x.itemsize - 1)
    return np.array([v if v >= 0 else -(v + top) for v in k], dtype=object)


def assert_ulps(got: np.ndarray, want: np.ndarray, max_ulps: int, what: str, inputs=()) -> None:
    assert got.dtype == want.dtype, what
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    idx = np.flatnonzero(nan_g != nan_w)
    assert idx.size == 0, f"{what}: NaN mismatch at {idx[:5]} for inputs {[x[idx[:5]] for x in inputs]}: " \
                          f"got {got[idx[:5]]}, want {want[idx[:5]]}"
    ok = ~nan_g
    dist = np.abs(_ordered(got[ok]) - _ordered(want[ok])).astype(np.float64)
    bad = np.flatnonzero(dist > max_ulps)
    assert bad.size == 0, (f"{what}: {bad.size} values beyond {max_ulps} ulps (max {dist.max()}): inputs "
                           f"{[x[ok][bad[:5]] for x in inputs]}, got {got[ok][bad[:5]]}, want {want[ok][bad[:5]]}")


def check_unary(op: str, et: str, out: str | None = None, attrs: str = "", ulps: int | None = None,
                x: np.ndarray | None = None) -> None:
    x = unary_inputs(et) if x is None else x
    module = op_module(op, [et], out or et, len(x), attrs)
    got, want = run_both(module, x)
    what = f"{op} {et}->{out or et} {attrs}"
    if ulps is None:
        assert_exact(got, want, what)
    else:
        assert_ulps(got, want, ulps, what, (x,))


def check_binary(op: str, et: str, out: str | None = None, attrs: str = "", ulps: int | None = None) -> None:
    a, b = binary_inputs(et)
    module = op_module(op, [et, et], out or et, len(a), attrs)
    got, want = run_both(module, a, b)
    what = f"{op} {et} {attrs}"
    if ulps is None:
        assert_exact(got, want, what)
    else:
        assert_ulps(got, want, ulps, what, (a, b))


# ---- unary ops ----------------------------------------------------------------------------

FLOAT_UNARY_EXACT = ["abs", "negate", "sign", "floor", "ceil", "round-nearest-even", "round-nearest-afz", "sqrt",
                     "rsqrt", "copy", "real", "imag"]
INT_UNARY = ["abs", "negate", "sign", "not", "popcnt", "count-leading-zeros", "copy"]
LIBM_UNARY = ["exponential", "exponential-minus-one", "log", "log-plus-one", "logistic", "sine", "cosine", "tan",
              "tanh", "erf", "cbrt", "asin", "acos", "asinh", "acosh", "atanh", "sinh", "cosh"]


@pytest.mark.parametrize("et", FLOATS)
@pytest.mark.parametrize("op", FLOAT_UNARY_EXACT)
def test_float_unary_exact(op: str, et: str) -> None:
    check_unary(op, et)


@pytest.mark.parametrize("et", FLOATS)
def test_is_finite(et: str) -> None:
    check_unary("is-finite", et, "pred")


@pytest.mark.parametrize("et", INTS)
@pytest.mark.parametrize("op", INT_UNARY)
def test_int_unary(op: str, et: str) -> None:
    check_unary(op, et)


@pytest.mark.parametrize("op", ["not", "copy"])
def test_pred_unary(op: str) -> None:
    check_unary(op, "pred")


@pytest.mark.parametrize("et", FLOATS)
@pytest.mark.parametrize("op", LIBM_UNARY)
def test_libm_unary(op: str, et: str) -> None:
    x = np.concatenate([float_specials(et), RNG.uniform(-12, 12, 300).astype(numpy_dtype(et)),
                        RNG.uniform(-1, 1, 100).astype(numpy_dtype(et))])
    check_unary(op, et, ulps=4, x=x)


@pytest.mark.parametrize("et", FLOATS)
def test_atan(et: str) -> None:
    """``atan`` is no HLO opcode (the parser refuses it) but the interpreter and the emitter
    both register it; build it by renaming a parsed unary op."""
    x = np.concatenate([float_specials(et), RNG.uniform(-50, 50, 200).astype(numpy_dtype(et))])
    module = op_module("tan", [et], et, len(x))
    module.entry.root.opcode = "atan"
    got, want = run_both(module, x)
    assert_ulps(got, want, 2, f"atan {et}", (x,))


# ---- binary ops ---------------------------------------------------------------------------

FLOAT_BINARY_EXACT = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum"]
INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "power", "maximum", "minimum", "and", "or", "xor",
              "shift-left", "shift-right-logical", "shift-right-arithmetic"]
PRED_BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "and", "or", "xor"]


@pytest.mark.parametrize("et", FLOATS)
@pytest.mark.parametrize("op", FLOAT_BINARY_EXACT)
def test_float_binary_exact(op: str, et: str) -> None:
    check_binary(op, et)


@pytest.mark.parametrize("et", FLOATS)
@pytest.mark.parametrize("op", ["power", "atan2"])
def test_float_binary_libm(op: str, et: str) -> None:
    check_binary(op, et, ulps=2)


@pytest.mark.parametrize("et", INTS)
@pytest.mark.parametrize("op", INT_BINARY)
def test_int_binary(op: str, et: str) -> None:
    check_binary(op, et)


@pytest.mark.parametrize("op", PRED_BINARY)
def test_pred_binary(op: str) -> None:
    check_binary(op, "pred")


@pytest.mark.parametrize("et", ["s8", "s16", "s32", "u8", "u16", "u32"])
def test_mulhi(et: str) -> None:
    check_binary("mulhi", et)


@pytest.mark.parametrize("et", ["s64", "u64"])
def test_mulhi_64(et: str) -> None:
    """Host and interpreter against Python's exact integers (numpy has no 128-bit product)."""
    a, b = binary_inputs(et)
    module = op_module("mulhi", [et, et], et, len(a))
    got, interpreted = run_both(module, a, b)
    want = [((int(x) * int(y)) >> 64) & ((1 << 64) - 1) for x, y in zip(a, b)]
    want = np.array(want, dtype=object).astype(np.uint64).view(numpy_dtype(et))
    assert_exact(got, want, f"mulhi {et} (host)")
    assert_exact(interpreted, want, f"mulhi {et} (interpreter)")


def test_integer_division_special_cases() -> None:
    """XLA's rules spelled out: x/0 = -1, x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0."""
    a = np.array([7, -7, -2 ** 31, -2 ** 31, 5], np.int32)
    b = np.array([0, 0, -1, -1, -2], np.int32)
    div = compile_op(op_module("divide", ["s32", "s32"], "s32", 5))(a, b)
    rem = compile_op(op_module("remainder", ["s32", "s32"], "s32", 5))(a, b)
    assert div.tolist() == [-1, -1, -2 ** 31, -2 ** 31, -2]
    assert rem.tolist() == [7, -7, 0, 0, 1]
    u = compile_op(op_module("divide", ["u32", "u32"], "u32", 1))(np.array([9], np.uint32), np.array([0], np.uint32))
    assert u.tolist() == [2 ** 32 - 1]


# ---- sub-byte integers (ml_dtypes int4/uint4 hold the value in a byte's low bits) ----------

SUB_BYTE_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "power", "maximum", "minimum", "and", "or",
                   "xor", "shift-left", "shift-right-logical", "shift-right-arithmetic", "mulhi"]


def _all_values(et: str) -> np.ndarray:
    bits = int(et[1:])
    vals = np.arange(-(1 << (bits - 1)), 1 << (bits - 1)) if et[0] == "s" else np.arange(0, 1 << bits)
    return vals.astype(numpy_dtype(et))


@pytest.mark.parametrize("et", ["s4", "u4"])
@pytest.mark.parametrize("op", SUB_BYTE_BINARY)
def test_sub_byte_binary(op: str, et: str) -> None:
    if op == "divide" and et == "u4":
        pytest.skip("the interpreter cannot divide uint4 (np.iinfo has no ml_dtypes uint4)")
    vals = _all_values(et)
    a, b = (np.array(v, dtype=vals.dtype) for v in zip(*itertools.product(vals, vals)))
    got, want = run_both(op_module(op, [et, et], et, len(a)), a, b)
    assert_exact(got.astype(np.int64), want.astype(np.int64), f"{op} {et}")


@pytest.mark.parametrize("et", ["s4", "u4"])
@pytest.mark.parametrize("op", ["negate", "abs", "sign", "not", "popcnt", "count-leading-zeros"])
def test_sub_byte_unary(op: str, et: str) -> None:
    vals = _all_values(et)
    got = compile_op(op_module(op, [et], et, len(vals)))(vals)
    if op == "not" and et == "u4":  # the interpreter's np.invert on uint4 gives -1 - x; XLA flips 4 bits
        assert got.astype(np.int64).tolist() == [15 - v for v in range(16)]
        return
    assert_exact(got.astype(np.int64), reference(op_module(op, [et], et, len(vals)), vals).astype(np.int64), op)


@pytest.mark.parametrize("et", ["s4", "u4"])
@pytest.mark.parametrize("other", ["pred", "s8", "u8", "s32", "u64", "f32", "f64"])
def test_sub_byte_convert(et: str, other: str) -> None:
    for src, dst, x in [(et, other, _all_values(et)), (other, et, specials(other))]:
        got, want = run_both(op_module("convert", [src], dst, len(x)), x)
        if got.dtype.kind == "f":
            assert_exact(got, want, f"convert {src}->{dst}")
        else:
            assert_exact(got.astype(np.int64), want.astype(np.int64), f"convert {src}->{dst}")


# ---- compare, select, clamp -----------------------------------------------------------------

DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]


@pytest.mark.parametrize("et", JIT_TYPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_compare(direction: str, et: str) -> None:
    check_binary("compare", et, "pred", f"direction={direction}")


@pytest.mark.parametrize("et", FLOATS)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_compare_total_order(direction: str, et: str) -> None:
    check_binary("compare", et, "pred", f"direction={direction}, type=TOTALORDER")


@pytest.mark.parametrize("et,ctype", [("s32", "UNSIGNED"), ("u32", "SIGNED"), ("s8", "SIGNED"), ("u64", "UNSIGNED")])
def test_compare_explicit_type(et: str, ctype: str) -> None:
    check_binary("compare", et, "pred", f"direction=LT, type={ctype}")


@pytest.mark.parametrize("et", JIT_TYPES)
def test_select(et: str) -> None:
    a, b = binary_inputs(et)
    p = RNG.integers(0, 2, len(a)).astype(bool)
    module = op_module("select", ["pred", et, et], et, len(a))
    got, want = run_both(module, p, a, b)
    assert_exact(got, want, f"select {et}")


@pytest.mark.parametrize("et", INTS + FLOATS)
def test_clamp(et: str) -> None:
    s = specials(et)
    lo, x, hi = (np.array(v, dtype=s.dtype) for v in zip(*itertools.product(s[::3], s, s[1::4])))
    module = op_module("clamp", [et, et, et], et, len(x))
    got, want = run_both(module, lo, x, hi)
    assert_exact(got, want, f"clamp {et}")


# ---- conversions ------------------------------------------------------------------------------

@pytest.mark.parametrize("dst", JIT_TYPES)
@pytest.mark.parametrize("src", JIT_TYPES)
def test_convert(src: str, dst: str) -> None:
    check_unary("convert", src, dst)


BITCAST_PAIRS = [("f32", "s32"), ("f32", "u32"), ("s32", "f32"), ("u32", "f32"), ("f64", "s64"), ("u64", "f64"),
                 ("s8", "u8"), ("u16", "s16"), ("s64", "u64"), ("pred", "s8"), ("pred", "u8")]


@pytest.mark.parametrize("src,dst", BITCAST_PAIRS)
def test_bitcast_convert(src: str, dst: str) -> None:
    check_unary("bitcast-convert", src, dst)


def test_bitcast_convert_width_change_is_unsupported() -> None:
    module = op_module("bitcast-convert", ["f32"], "s32", 1)
    module.entry.root.shape = module.entry.root.shape.with_element_type("f64")  # the verifier refuses it
    with pytest.raises(HloUnsupportedError, match="bit width"):
        emit_ir(module)


@pytest.mark.parametrize("et,bits", [("f32", (5, 10)), ("f32", (8, 7)), ("f32", (4, 3)), ("f32", (8, 23)),
                                     ("f32", (5, 2)), ("f64", (8, 23)), ("f64", (5, 10)), ("f64", (11, 7))])
def test_reduce_precision(et: str, bits: tuple[int, int]) -> None:
    x = np.concatenate([float_specials(et), randoms(et, 300),
                        np.array([65504.0, 65519.0, 65520.0, 6.1e-5, 6.0e-5, 1.00048828125, 1.0009765625 * 3],
                                 dtype=numpy_dtype(et))])
    check_unary("reduce-precision", et, attrs=f"exponent_bits={bits[0]}, mantissa_bits={bits[1]}", x=x)


# ---- IR-level checks (all element types, no JIT) ------------------------------------------------

def _ir_cases():
    """(opcode, operand types, result type, attrs) covering every opcode in the table."""
    cases = []
    for et in ["f16", "bf16"] + FLOATS:
        for op in FLOAT_UNARY_EXACT + LIBM_UNARY:
            cases.append((op, [et], et, ""))
        cases.append(("is-finite", [et], "pred", ""))
        cases.append(("reduce-precision", [et], et, "exponent_bits=5, mantissa_bits=2"))
        for op in FLOAT_BINARY_EXACT + ["power", "atan2"]:
            cases.append((op, [et, et], et, ""))
        cases.append(("compare", [et, et], "pred", "direction=LT"))
        cases.append(("compare", [et, et], "pred", "direction=GE, type=TOTALORDER"))
        cases.append(("select", ["pred", et, et], et, ""))
        cases.append(("clamp", [et, et, et], et, ""))
        for dst in JIT_TYPES + ["f16", "bf16"]:
            cases.append(("convert", [et], dst, ""))
            cases.append(("convert", [dst], et, ""))
    cases.append(("bitcast-convert", ["bf16"], "s16", ""))
    cases.append(("bitcast-convert", ["u16"], "f16", ""))
    for et in INTS:
        for op in INT_UNARY:
            cases.append((op, [et], et, ""))
        for op in INT_BINARY + ["mulhi"]:
            cases.append((op, [et, et], et, ""))
        cases.append(("compare", [et, et], "pred", "direction=NE"))
        cases.append(("clamp", [et, et, et], et, ""))
    for et in ["s4", "u4"]:
        for op in SUB_BYTE_BINARY:
            cases.append((op, [et, et], et, ""))
        for other in ["f32", "bf16", "s32", "pred"]:
            cases.append(("convert", [et], other, ""))
            cases.append(("convert", [other], et, ""))
        cases.append(("count-leading-zeros", [et], et, ""))
        cases.append(("popcnt", [et], et, ""))
    unique = []
    for c in cases:
        if c not in unique:
            unique.append(c)
    return unique


IR_CASES = _ir_cases()
FORBIDDEN = re.compile(r"@\"?llvm\.(exp|exp2|exp10|log|log2|log10|sin|cos|tan|tanh|pow|powi|asin|acos|atan|atan2|"
                       r"sinh|cosh|frexp|ldexp)\.")


def test_no_transcendental_intrinsics_and_ir_verifies() -> None:
    """No op emits an LLVM transcendental intrinsic (they abort on NVPTX), and the IR of every
    case, f16/bf16 included, is valid LLVM."""
    covered = set()
    for op, ts, out, attrs in IR_CASES:
        module = op_module(op, ts, out, 4, attrs)
        text = emit_ir(module)
        covered.add(op)
        assert not FORBIDDEN.search(text), f"{op} {ts}->{out} uses a transcendental intrinsic:\n{text}"
        assert " frem " not in text, f"{op} {ts}: frem is inexact on NVPTX"
        llvm.parse_assembly(text).verify()
    assert covered == SCALAR_OPCODES - {"atan"}, SCALAR_OPCODES - covered


@pytest.mark.slow
def test_every_case_lowers_to_ptx(tmp_path: Path) -> None:
    """All IR cases (f16/bf16 included) through the NVPTX backend at O3 for sm_80, in a
    subprocess because LLVM aborts the process on what it cannot select; then ptxas when
    it is installed (``-c``: the libm names stand in for libdevice and stay unresolved)."""
    texts = [emit_ir(op_module(op, ts, out, 4, attrs)) for op, ts, out, attrs in IR_CASES]
    src, ptx = tmp_path / "cases.ll", tmp_path / "cases.ptx"
    src.write_text(MODULE_SEPARATOR.join(texts))
    proc = subprocess.run([sys.executable, elemental_harness.__file__, "sm_80", str(src), str(ptx)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"NVPTX lowering failed ({proc.returncode}):\n{proc.stderr[-3000:]}\n" \
                                 f"reproduce: {sys.executable} {elemental_harness.__file__} sm_80 {src} {ptx}"
    assert ".entry" in ptx.read_text() or ".func" in ptx.read_text()
    if shutil.which("ptxas"):
        cmd = ["ptxas", "-O0", "-c", "-arch=sm_80", str(ptx), "-o", str(tmp_path / "cases.o")]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"ptxas: {proc.stderr[-3000:]}\nreproduce: {' '.join(cmd)}"


def test_bf16_add_is_f32_add_rounded() -> None:
    text = emit_ir(op_module("add", ["bf16", "bf16"], "bf16", 4))
    body = [ln.strip() for ln in text.splitlines() if re.search(r"= (fpext|fadd|fptrunc|fsub|fmul)\b", ln)]
    assert len(body) == 4, body
    assert re.search(r"fpext bfloat .* to float", body[0]) and re.search(r"fpext bfloat .* to float", body[1])
    assert body[2].split("=")[1].split()[0:2] == ["fadd", "float"], body
    assert re.search(r"fptrunc float .* to bfloat", body[3]), body


def test_f16_ops_round_after_every_op() -> None:
    """f16 multiply computes in f32 and rounds back once."""
    text = emit_ir(op_module("multiply", ["f16", "f16"], "f16", 4))
    assert "fmul float" in text and "fptrunc float" in text and "fmul half" not in text


def test_interpreter_elementwise_ops_are_covered() -> None:
    """Every elementwise opcode the interpreter implements for real types has an emitter."""
    missing = {op for op in ELEMENTWISE if op in INTERPRETER_OPS} - SCALAR_OPCODES - {"complex"}
    assert not missing
    assert {"exp", "log", "pow", "atan2", "fmod"} <= MATH_FUNCTIONS


# ---- errors -----------------------------------------------------------------------------------

def test_unknown_opcode_names_opcode_instruction_and_line() -> None:
    module = op_module("stochastic-convert", ["f32", "u32"], "s8", 4)
    with pytest.raises(HloUnsupportedError) as info:
        emit_ir(module)
    msg = str(info.value)
    assert "stochastic-convert" in msg and "'r'" in msg and "line 5" in msg


@pytest.mark.parametrize("op,ts,out", [("add", ["f4e2m1fn", "f4e2m1fn"], "f4e2m1fn"),
                                       ("convert", ["f8e8m0fnu"], "f32"), ("abs", ["f4e2m1fn"], "f4e2m1fn"),
                                       ("multiply", ["f8e8m0fnu", "f8e8m0fnu"], "f8e8m0fnu")])
def test_unsupported_element_types(op: str, ts: list[str], out: str) -> None:
    inst = op_module(op, ts, out, 4).entry.root
    et = next(t for t in ts + [out] if t.startswith(("c", "f8", "f4")))
    b = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f").append_basic_block())
    placeholders = [ir.Constant(ir.IntType(8), 0) for _ in ts]  # never looked at: the type check comes first
    with pytest.raises(UnsupportedElementType, match=f"{op} 'r' at line {3 + len(ts)} on element type {et}"):
        emit_scalar_op(b, LibmTarget(), inst, placeholders)


# ---- constants and scalar computations --------------------------------------------------------

@pytest.mark.parametrize("value,et,text", [
    (-0.0, "f32", "float 0x8000000000000000"), (np.inf, "f32", "float 0x7FF0000000000000"),
    (np.float32(np.nan), "f32", "float 0x7FF8000000000000"), (1.5, "f64", "double 0x3FF8000000000000"),
    (-np.inf, "f64", "double 0xFFF0000000000000"), (1.5, "bf16", "bfloat 0xR3FC0"), (-0.0, "bf16", "bfloat 0xR8000"),
    (np.nan, "bf16", "bfloat 0xR7FC0"), (65504.0, "f16", "half 0xH7BFF"), (-1, "s8", "i8 -1"),
    (np.uint64(2 ** 64 - 1), "u64", "i64 -1"), (200, "u8", "i8 -56"), (True, "pred", "i1 true"),
    (np.bool_(False), "pred", "i1 false"), (0.1, "f32", "float 0x3FB99999A0000000"),
])
def test_emit_constant_scalar(value, et: str, text: str) -> None:
    c = emit_constant_scalar(value, et)
    assert str(c) == text
    assert f"{c.type} {c.get_reference()}" == text
    assert c.type == compute_type(et)


def _call_kernel(comp, arg_types: list[str], out_types: list[str]):
    """JIT ``void kernel(ptr out0.., ptr in0.., i64 n)`` applying ``comp`` elementwise."""
    module = ir.Module("call_test")
    module.triple = llvm.get_process_triple()
    nptr = len(arg_types) + len(out_types)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR] * nptr + [I64]), "kernel")
    outs, ins, n = fn.args[:len(out_types)], fn.args[len(out_types):nptr], fn.args[nptr]
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    args = [b.load(b.gep(p, [i], source_etype=storage_type(t)), typ=storage_type(t)) for p, t in zip(ins, arg_types)]
    results = emit_call_computation(b, LibmTarget(), comp, args)
    for p, t, v in zip(outs, out_types, results):
        b.store(v, b.gep(p, [i], source_etype=storage_type(t)))
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return jit(module, comp.root, nptr), nptr


def test_emit_call_computation_tuple_root() -> None:
    """A variadic reducer's body: (sum, max) with a constant, a nested call and a power."""
    module = parse("""HloModule m
scale {
  v = s32[] parameter(0)
  two = s32[] constant(2)
  ROOT p = s32[] power(v, two)
}
body {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  x = f32[] parameter(2)
  y = s32[] parameter(3)
  half = f32[] constant(0.5)
  xs = f32[] multiply(x, half)
  s = f32[] add(a, xs)
  sq = s32[] call(y), to_apply=scale
  m = s32[] maximum(b, sq)
  t = (f32[], s32[]) tuple(s, m)
  g0 = f32[] get-tuple-element(t), index=0
  g1 = s32[] get-tuple-element(t), index=1
  ROOT r = (f32[], s32[]) tuple(g0, g1)
}
ENTRY e {
  p = f32[] parameter(0)
  ROOT c = f32[] copy(p)
}
""")
    comp = module.computation("body")
    compiled, nptr = _call_kernel(comp, ["f32", "s32", "f32", "s32"], ["f32", "s32"])
    n = 64
    a = RNG.standard_normal(n).astype(np.float32)
    x = RNG.standard_normal(n).astype(np.float32)
    bb = RNG.integers(-50, 50, n).astype(np.int32)
    y = RNG.integers(-10, 10, n).astype(np.int32)
    o0, o1 = np.zeros(n, np.float32), np.zeros(n, np.int32)
    compiled.cfunc(o0.ctypes.data, o1.ctypes.data, a.ctypes.data, bb.ctypes.data, x.ctypes.data, y.ctypes.data, n)
    assert_exact(o0, (a + x * np.float32(0.5)).astype(np.float32), "sum")
    assert_exact(o1, np.maximum(bb, y * y), "max")


def test_scalar_math_calls_go_through_target() -> None:
    target = LibmTarget()
    module = op_module("logistic", ["f32"], "f32", 1)
    inst = module.entry.root
    b = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f").append_basic_block())
    emit_scalar_op(b, target, inst, [ir.Constant(compute_type("f32"), 1.0)])
    assert target.calls == ["expf"]
    assert reference(module, np.array([0.0], np.float32))[0] == np.float32(0.5)
