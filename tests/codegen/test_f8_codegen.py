"""codegen/elemental/f8.py: 8-bit float encode/decode in LLVM IR, bit-exact against ml_dtypes.

Each codec is compiled with llvmlite's JIT into a loop over an array: every one of the 256
codes decoded, and f32/f64 values encoded — specials, every code's exact value and the
midpoints between neighbouring codes (the ties of round-to-nearest-even) plus their
neighbours one ulp away, overflow and underflow, and random bit patterns.
"""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest
from llvmlite import binding as llvm
from llvmlite import ir

from hlo_compile.codegen.elemental.f8 import F8_FORMATS, emit_f8_to_f32, emit_to_f8
from hlo_compile.codegen.llvm_types import F32, F64, I8, I64, PTR
from hlo_compile.hlo.dtypes import numpy_dtype

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()

TYPES = sorted(F8_FORMATS)


def _jit_loop(in_type: ir.Type, out_type: ir.Type, body):
    """A compiled ``f(in*, out*, n)`` applying ``body(builder, x) -> y`` to every element."""
    mod = ir.Module("f8")
    mod.triple = llvm.get_process_triple()
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64]), "run")
    entry, loop, done = fn.append_basic_block("entry"), fn.append_basic_block("loop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    x = b.load(b.gep(fn.args[0], [i], source_etype=in_type), typ=in_type)
    b.store(body(b, x), b.gep(fn.args[1], [i], source_etype=out_type))
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_unsigned("<", nxt, fn.args[2]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), target)
    engine.finalize_object()
    cfunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(engine.get_function_address("run"))

    def run(xs: np.ndarray, out_dtype) -> np.ndarray:
        out = np.zeros(xs.shape, out_dtype)
        cfunc(xs.ctypes.data, out.ctypes.data, xs.size)
        return out
    run.engine = engine  # keep the code alive
    return run


def _probe_values(et: str, dtype) -> np.ndarray:
    codes = np.arange(256, dtype=np.uint8).view(numpy_dtype(et)).astype(np.float64)
    finite = np.unique(codes[np.isfinite(codes)])
    mids = (finite[:-1] + finite[1:]) / 2
    big = float(ml_dtypes.finfo(numpy_dtype(et)).max)
    tiny = float(ml_dtypes.finfo(numpy_dtype(et)).smallest_subnormal)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, big * 1.01, big * 1.1, big * 4, 1e30, -1e30,
                tiny / 2, -tiny / 2, tiny / 3, tiny * 0.51, tiny * 1.5, 1e-30, -1e-30]
    vals = np.concatenate([finite, mids, -mids, specials]).astype(dtype)
    neighbours = [np.nextafter(vals, np.inf).astype(dtype), np.nextafter(vals, -np.inf).astype(dtype)]
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(dtype)
    scaled = (rng.standard_normal(20000) * big / 4).astype(dtype)
    return np.concatenate([vals, *neighbours, bits, scaled])


@pytest.mark.parametrize("et", TYPES)
def test_decode_every_code_matches_ml_dtypes(et):
    run = _jit_loop(I8, F32, lambda b, x: emit_f8_to_f32(b, x, et))
    codes = np.arange(256, dtype=np.uint8)
    got = run(codes, np.float32)
    want = codes.view(numpy_dtype(et)).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))  # -0 included


@pytest.mark.parametrize("source", ["f32", "f64"])
@pytest.mark.parametrize("et", TYPES)
def test_encode_matches_ml_dtypes_bit_for_bit(et, source):
    dtype, ty = (np.float32, F32) if source == "f32" else (np.float64, F64)
    run = _jit_loop(ty, I8, lambda b, x: emit_to_f8(b, x, et))
    xs = _probe_values(et, dtype)
    got = run(xs, np.uint8)
    with np.errstate(over="ignore"):
        want = xs.astype(numpy_dtype(et)).view(np.uint8)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(xs[i]), hex(got[i]), hex(want[i])) for i in bad[:8]]


# ---- whole kernels on the host: elementwise f8 arithmetic is bit-exact against the interpreter ----

ELEMENTWISE = """HloModule f8_elementwise
ENTRY e {
  x = T[512] parameter(0)
  y = T[512] parameter(1)
  w = f32[512] parameter(2)
  s = T[512] add(x, y)
  m = T[512] multiply(s, y)
  d = T[512] divide(m, x)
  c = T[] constant(0.3)
  bc = T[512] broadcast(c), dimensions={}
  mx = T[512] maximum(d, bc)
  n = T[512] negate(mx)
  e = T[512] exponential(n)
  wt = T[512] convert(w)
  lt = pred[512] compare(wt, e), direction=LT
  sel = T[512] select(lt, wt, e)
  f = f32[512] convert(sel)
  h = f16[512] convert(sel)
  i = s32[512] convert(sel)
  other = O[512] convert(sel)
  ROOT t = (T[512], f32[512], f16[512], s32[512], O[512], pred[512]) tuple(sel, f, h, i, other, lt)
}
"""


@pytest.mark.parametrize("et", TYPES)
def test_f8_elementwise_kernel_bit_exact_on_host(et):
    import hlo_compile
    from hlo_compile.interpreter import evaluate_module
    from hlo_compile.runtime.executable import compile_executable
    other = "f8e5m2" if et != "f8e5m2" else "f8e4m3fn"
    module = hlo_compile.parse_module(ELEMENTWISE.replace("T[", f"{et}[").replace("O[", f"{other}["))
    rng = np.random.default_rng(1)
    big = float(ml_dtypes.finfo(numpy_dtype(et)).max)
    codes = rng.integers(0, 256, 512, dtype=np.uint8)
    x = codes.view(numpy_dtype(et))
    y = rng.integers(0, 256, 512, dtype=np.uint8).view(numpy_dtype(et))
    w = (rng.standard_normal(512) * big / 8).astype(np.float32)
    args = [x, y, w]
    want = evaluate_module(module, args)
    got = compile_executable(module, "host").run(args)
    for g, e in zip(got, want):
        g, e = np.asarray(g), np.asarray(e)
        assert g.dtype == e.dtype
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32}[e.dtype.itemsize]
        gb, eb = g.view(width), e.view(width)
        nan = np.isnan(e.astype(np.float64)) if e.dtype.kind != "b" and e.dtype.kind != "i" else np.zeros(e.shape, bool)
        assert np.array_equal(np.isnan(g.astype(np.float64)) if nan.any() else nan, nan)
        assert np.array_equal(gb[~nan], eb[~nan]), (e.dtype, np.nonzero(gb != eb)[0][:5])
