"""The host target: kernels written once against the target interface, run on the CPU.

Serial path (no sync), coroutine path (barriers, shuffles, shared memory), divergence
errors, the soft-float conversion helpers, and the target's own checks.
"""
from __future__ import annotations

import math
import threading
import time

import ml_dtypes
import numpy as np
import pytest
from llvmlite import ir

import host_kernels as hk
from hlo_compile.codegen.llvm_types import BFLOAT, F16, F32, F64, I32
from hlo_compile.codegen.target import KernelParam, LaunchDims
from hlo_compile.targets.host import HostKernelError, NeedsSync, compile_host_kernel
from hlo_compile.targets.host.symbols import UnresolvedSymbolError
from hlo_compile.targets.host.target import HostTarget

RNG = np.random.default_rng(1234)


def launch_with_deadline(kernel, dims: LaunchDims, buffers, seconds: float = 20.0) -> None:
    """Launch on a daemon thread so that a hang fails the test instead of the whole run."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            kernel.launch(dims, buffers)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - re-raised on the test thread
            outcome.append(e)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(seconds)
    assert outcome, f"launch of {kernel.name} did not return within {seconds} s"
    if outcome[0] is not None:
        raise outcome[0]


# ---- serial path ----------------------------------------------------------------------------
def test_elementwise_serial_matches_numpy():
    n = 1 << 20
    k = compile_host_kernel(hk.elementwise_kernel(n), "elementwise")
    assert not k.uses_sync and "tanhf" in k.llvm_ir
    a = RNG.standard_normal(n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    k.launch(LaunchDims((n // 256, 1, 1), (256, 1, 1)), [a, b, out])
    np.testing.assert_allclose(out, np.tanh(a) + b * np.exp(-a), rtol=2e-6, atol=2e-6)


def test_early_ret_serial_leaves_tail_untouched():
    n = 1000
    k = compile_host_kernel(hk.bounded_scale_kernel(n), "bounded_scale")
    a = RNG.standard_normal(1024).astype(np.float32)
    out = np.full(1024, -7.0, np.float32)
    k.launch(LaunchDims((4, 1, 1), (256, 1, 1)), [a, out])
    np.testing.assert_array_equal(out[:n], 2 * a[:n])
    assert (out[n:] == -7.0).all()


def test_ids_3d_grid_serial_and_coro():
    dims = LaunchDims((3, 2, 2), (32, 4, 1))  # a 2-D block, grid y and z > 1
    total = dims.num_blocks * dims.num_threads
    for sync in (False, True):
        k = compile_host_kernel(hk.ids_kernel(sync), "ids")
        assert k.uses_sync is sync
        out = np.full(total, -1, np.int32)
        k.launch(dims, [out])
        np.testing.assert_array_equal(out, np.arange(total, dtype=np.int32))
    k = compile_host_kernel(hk.ids_kernel(True), "ids")
    dims = LaunchDims((2, 1, 3), (4, 4, 4))  # a 3-D block through shared memory
    out = np.full(dims.num_blocks * dims.num_threads, -1, np.int32)
    k.launch(dims, [out])
    np.testing.assert_array_equal(out, np.arange(out.size, dtype=np.int32))


def test_multi_worker_launch_matches_single():
    n = 1 << 16
    k = compile_host_kernel(hk.bounded_scale_kernel(n), "bounded_scale")
    a = RNG.standard_normal(n).astype(np.float32)
    outs = []
    for workers in (1, 3):
        k.max_workers = workers
        out = np.zeros(n, np.float32)
        k.launch(LaunchDims((n // 128, 1, 1), (128, 1, 1)), [a, out])
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], 2 * a)


# ---- coroutine path -------------------------------------------------------------------------
@pytest.mark.parametrize("rows,cols", [(1024, 1024), (70, 45)])
def test_transpose_shared_memory_barrier(rows, cols):
    k = compile_host_kernel(hk.transpose_kernel(rows, cols), "transpose")
    assert k.uses_sync and k.static_shared_bytes == 32 * 33 * 4
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    y = np.zeros((cols, rows), np.float32)
    dims = LaunchDims((-(-cols // 32), -(-rows // 32), 1), (32, 8, 1))
    for workers in (1, 2):
        k.max_workers = workers
        y[:] = 0
        launch_with_deadline(k, dims, [x, y])
        np.testing.assert_array_equal(y, x.T)


def test_row_sum_shuffles_shared_memory_barrier():
    rows, cols = 1024, 1024
    k = compile_host_kernel(hk.row_sum_kernel(cols), "row_sum")
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros(rows, np.float32)
    launch_with_deadline(k, LaunchDims((rows, 1, 1), (256, 1, 1)), [x, out])
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-3)


def test_barrier_inside_loop_and_ret_after_it():
    n, block = 1000, 256
    k = compile_host_kernel(hk.block_scan_kernel(n, block), "block_scan")
    x = RNG.integers(-100, 100, n).astype(np.int32)
    out = np.full(n + 24, 99, np.int32)
    launch_with_deadline(k, LaunchDims((-(-n // block), 1, 1), (block, 1, 1)), [x, out])
    expect = np.concatenate([np.cumsum(x[i:i + block]) for i in range(0, n, block)])
    np.testing.assert_array_equal(out[:n], expect)
    assert (out[n:] == 99).all()


def test_shuffle_lanes_follow_linear_thread_ids():
    dims = LaunchDims((1, 1, 1), (16, 4, 1))  # a warp spans two rows of the block
    k = compile_host_kernel(hk.lane_shuffle_kernel(mask=16, down=3), "lanes")
    out = np.full(dims.num_threads * 2, -1, np.int32)
    launch_with_deadline(k, dims, [out])
    ltid = np.arange(dims.num_threads)
    np.testing.assert_array_equal(out[0::2], ltid ^ 16)
    lane = ltid % 32
    np.testing.assert_array_equal(out[1::2], np.where(lane + 3 < 32, ltid + 3, ltid))


def test_partial_warp_shuffle_keeps_own_value_past_the_block():
    dims = LaunchDims((1, 1, 1), (40, 1, 1))  # warp 1 has 8 lanes
    k = compile_host_kernel(hk.lane_shuffle_kernel(mask=1, down=4), "lanes")
    out = np.full(80, -1, np.int32)
    launch_with_deadline(k, dims, [out])
    ltid = np.arange(40)
    np.testing.assert_array_equal(out[0::2], ltid ^ 1)
    np.testing.assert_array_equal(out[1::2], np.where((ltid % 32 + 4 < 32) & (ltid + 4 < 40), ltid + 4, ltid))


def test_static_and_dynamic_shared_memory():
    k = compile_host_kernel(hk.dynamic_shared_kernel(), "dyn_smem")
    assert k.static_shared_bytes == 32 + 1024  # 20 bytes rounded to 16, then 256 i32
    n = 256
    out = np.zeros(n, np.int32)
    launch_with_deadline(k, LaunchDims((2, 1, 1), (n, 1, 1), shared_bytes=4 * n), [out])
    mirror = n - 1 - np.arange(n)
    np.testing.assert_array_equal(out, mirror * 3 + np.where(mirror < 5, 3 * mirror, 0))


def test_large_coroutine_frame_falls_back_and_grows_slot():
    values = 150  # 600 bytes of live floats: more than the first frame slot
    k = compile_host_kernel(hk.frame_heavy_kernel(values), "frame_heavy")
    x = RNG.standard_normal(64 * values).astype(np.float32)
    for _ in range(2):
        out = np.zeros_like(x)
        launch_with_deadline(k, LaunchDims((1, 1, 1), (64, 1, 1)), [x, out])
        np.testing.assert_array_equal(out, x + 1)
    assert k._frame_slot >= values * 4


# ---- divergence -----------------------------------------------------------------------------
@pytest.mark.parametrize("case,code,words", [
    ("barrier_in_if", 2, "already exited"),
    ("ret_before_barrier", 2, "already exited"),
    ("two_barriers", 1, "different barriers"),
    ("shuffle_vs_barrier", 3, "diverge at a shuffle"),
])
def test_divergence_is_reported(case, code, words):
    k = compile_host_kernel(hk.divergent_kernel(case), case)
    out = np.zeros(64, np.int32)
    start = time.perf_counter()
    with pytest.raises(HostKernelError) as err:
        launch_with_deadline(k, LaunchDims((2, 1, 1), (32, 1, 1)), [out])
    assert time.perf_counter() - start < 5
    assert err.value.code == code and err.value.kernel == case and err.value.block == (0, 0, 0)
    assert words in str(err.value) and case in str(err.value) and "block (0, 0, 0)" in str(err.value)
    # the kernel stays usable (no leaked state): a second launch reports the same
    with pytest.raises(HostKernelError):
        launch_with_deadline(k, LaunchDims((1, 1, 1), (32, 1, 1)), [out])


# ---- soft-float helpers -----------------------------------------------------------------------
def _special_f32() -> np.ndarray:
    """Random bit patterns plus ties, near-ties, subnormals, NaNs and infinities."""
    base = RNG.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    parts = [base,
             (base & np.uint32(0xFFFFE000)) | np.uint32(0x1000),   # f16 ties (normal range)
             (base & np.uint32(0xFFFF0000)) | np.uint32(0x8000),   # bf16 ties
             (base & np.uint32(0xFFFF0000)) | np.uint32(0x7FFF),
             (base & np.uint32(0x807FFFFF)) | np.uint32(0x38000000),  # around f16's subnormals
             base & np.uint32(0x807FFFFF),                          # f32 subnormals
             np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000, 0xFFFFFFFF,
                       0x7FA00000, 0x477FEFFF, 0x477FF000, 0x7F7F7FFF, 0x7F7F8000, 0x33000000,
                       0x33000001, 0x387FC000], dtype=np.uint32)]
    return np.concatenate(parts).view(np.float32)


def _special_f64() -> np.ndarray:
    bits = RNG.integers(0, 2**64, 200_000, dtype=np.uint64, endpoint=False)
    scaled = RNG.standard_normal(200_000) * 2.0 ** RNG.integers(-30, 20, 200_000)
    with np.errstate(all="ignore"):  # some scaled values overflow f16: those become inf/nan
        f16 = scaled.astype(np.float16)
        ties = f16.astype(np.float64) + np.spacing(f16).astype(np.float64) / 2  # exact f16 ties
    bf = scaled.astype(np.float32).astype(ml_dtypes.bfloat16)
    next_bf = (bf.view(np.uint16) + np.uint16(1)).view(ml_dtypes.bfloat16).astype(np.float64)
    ulp = next_bf - bf.astype(np.float64)
    bties = bf.astype(np.float64) + ulp / 2  # exact bf16 ties; just above them, ml_dtypes rounds twice
    return np.concatenate([bits.view(np.float64), scaled, ties, bties, bties + ulp * 2.0 ** -30,
                           bties - ulp * 2.0 ** -30,
                           np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 65520.0, 65519.99])])


def _f64_to_bf16_single_rounding(d: np.ndarray) -> np.ndarray:
    """Correctly rounded f64 -> bf16 bits: round to odd into f32, then ml_dtypes' RNE.

    ml_dtypes itself goes through f32 with two round-to-nearest steps, which LLVM's fptrunc
    (one rounding) does not.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        f = d.astype(np.float32)
    exact = f.astype(np.float64) == d
    toward_zero = np.where(np.abs(f.astype(np.float64)) > np.abs(d), np.nextafter(f, np.float32(0)), f)
    bits = toward_zero.view(np.uint32) | np.where(exact | np.isnan(d), 0, 1).astype(np.uint32)
    f = np.where(exact | np.isnan(d), f, bits.view(np.float32))
    return f.astype(ml_dtypes.bfloat16).view(np.uint16)


CONVERSIONS = [  # (helper, src type, dst type, numpy src dtype, numpy reference producing dst bits)
    ("__truncsfhf2", F32, F16, np.float32, lambda x: x.astype(np.float16).view(np.uint16)),
    ("__truncdfhf2", F64, F16, np.float64, lambda x: x.astype(np.float16).view(np.uint16)),
    ("__truncsfbf2", F32, BFLOAT, np.float32, lambda x: x.astype(ml_dtypes.bfloat16).view(np.uint16)),
    ("__truncdfbf2", F64, BFLOAT, np.float64, _f64_to_bf16_single_rounding),
    ("__extendhfsf2", F16, F32, np.uint16, lambda x: x.view(np.float16).astype(np.float32).view(np.uint32)),
]


def _convert(kernel, src: np.ndarray, out_dtype) -> np.ndarray:
    n = src.size
    pad = -n % 256
    src = np.concatenate([src, np.zeros(pad, src.dtype)])
    out = np.zeros(src.size, out_dtype)
    kernel.launch(LaunchDims((src.size // 256, 1, 1), (256, 1, 1)), [src, out])
    return out[:n]


@pytest.mark.parametrize("helper,src_t,dst_t,np_src,reference", CONVERSIONS, ids=[c[0] for c in CONVERSIONS])
@pytest.mark.parametrize("how", ["call", "generic-cpu"])
def test_softfloat_helpers_bit_exact(helper, src_t, dst_t, np_src, reference, how):
    """Called directly on the host CPU, and reached as LLVM's libcall for fptrunc/fpext on a
    CPU without F16C/AVX512-BF16 (where LLVM emits exactly these calls)."""
    if np_src is np.uint16:
        src = np.arange(65536, dtype=np.uint16)
    else:
        src = _special_f32() if np_src is np.float32 else _special_f64()
    out_dtype = np.uint32 if dst_t is F32 else np.uint16
    if how == "call":
        k = compile_host_kernel(hk.conversion_kernel(src_t, dst_t, helper), "convert")
    else:
        k = compile_host_kernel(hk.conversion_kernel(src_t, dst_t), "convert", cpu="x86-64")
    with np.errstate(all="ignore"):
        expect = reference(src)
    got = _convert(k, src, out_dtype)
    bad = np.flatnonzero(got != expect)
    assert src.size >= 65536
    assert bad.size == 0, (f"{bad.size} mismatches, e.g. input bits {src.view(np.uint8).reshape(src.size, -1)[bad[0]]}"
                           f" -> {got[bad[0]]:#x}, expected {expect[bad[0]]:#x}")


def test_f64_to_bf16_rounds_once_unlike_ml_dtypes():
    d = np.array([1 + 2.0 ** -8 + 2.0 ** -30])
    k = compile_host_kernel(hk.conversion_kernel(F64, BFLOAT), "convert")
    got = _convert(k, d, np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    assert got[0] == 1 + 2.0 ** -7                       # one rounding: up
    assert d.astype(ml_dtypes.bfloat16).astype(np.float64)[0] == 1.0  # ml_dtypes: via f32, a tie


# ---- target checks --------------------------------------------------------------------------
def _one_kernel_builder(target: HostTarget):
    m = target.new_module("m")
    k = target.begin_kernel(m, "k", [KernelParam("p")])
    return m, k.builder


def test_unknown_math_name_raises_value_error():
    t = HostTarget("serial")
    _, b = _one_kernel_builder(t)
    x = ir.Constant(F32, 1.0)
    with pytest.raises(ValueError, match="frobnicate"):
        t.math(b, "frobnicate", [x])
    with pytest.raises(ValueError):
        t.math(b, "exp", [x, x])
    with pytest.raises(ValueError):
        t.math(b, "exp", [ir.Constant(F16, 1.0)])
    assert t.math(b, "pow", [x, x]).callee.name == "powf"
    assert t.math(b, "atan2", [ir.Constant(F64, 1.0)] * 2).callee.name == "atan2"


def test_serial_mode_rejects_sync():
    t = HostTarget("serial")
    _, b = _one_kernel_builder(t)
    with pytest.raises(NeedsSync):
        t.barrier(b)
    with pytest.raises(NeedsSync):
        t.shfl_down(b, ir.Constant(I32, 1), 1)
    with pytest.raises(ValueError):
        HostTarget("threads")


BINARY = ("pow", "atan2", "fmod", "hypot")


def test_all_math_functions_compile_and_run():
    names = ["exp", "expm1", "log", "log1p", "sin", "cos", "tan", "tanh", "erf", "atan", "asin", "acos",
             "asinh", "acosh", "atanh", "sinh", "cosh", "cbrt", "exp2", "log2", "log10", "rsqrt",
             "pow", "atan2", "fmod", "hypot"]

    def emit(t):
        m = t.new_module("all_math")
        k = t.begin_kernel(m, "all_math", [KernelParam("x"), KernelParam("out", readonly=False)])
        b = k.builder
        for ty, off in ((F32, 0), (F64, 1)):
            x = b.load(b.gep(k.args[0], [ir.Constant(I32, off)], source_etype=F64), typ=F64)
            x = b.fptrunc(x, ty) if ty is F32 else x
            for j, name in enumerate(names):
                args = [x, x] if name in BINARY else [x]
                r = t.math(b, name, args)
                r = b.fpext(r, F64) if ty is F32 else r
                b.store(r, b.gep(k.args[1], [ir.Constant(I32, off * len(names) + j)], source_etype=F64))
        t.end_kernel(b)
        return m

    k = compile_host_kernel(emit, "all_math")
    x = np.array([0.5, 0.5])
    out = np.zeros(2 * len(names))
    k.launch(LaunchDims((1, 1, 1), (1, 1, 1)), [x, out])
    for j, name in enumerate(names):
        if name == "acosh":  # outside its domain at 0.5
            assert np.isnan(out[j]) and np.isnan(out[len(names) + j])
            continue
        if name == "rsqrt":
            expect = 1 / math.sqrt(0.5)
        elif name in BINARY:
            expect = getattr(math, name)(0.5, 0.5)
        else:
            expect = getattr(math, name)(0.5)
        assert out[len(names) + j] == pytest.approx(expect, rel=1e-15, abs=1e-15), name
        assert out[j] == pytest.approx(expect, rel=1e-6, abs=1e-7), name


def test_unresolved_external_is_an_error_not_a_crash():
    def emit(t):
        m = t.new_module("bad")
        k = t.begin_kernel(m, "bad", [])
        fn = ir.Function(m, ir.FunctionType(ir.VoidType(), []), "hlo_no_such_function_anywhere")
        k.builder.call(fn, [])
        t.end_kernel(k.builder)
        return m

    with pytest.raises(UnresolvedSymbolError, match="hlo_no_such_function_anywhere"):
        compile_host_kernel(emit, "bad")


def test_launch_checks_buffers_and_dims():
    k = compile_host_kernel(hk.bounded_scale_kernel(16), "bounded_scale")
    a = np.zeros(16, np.float32)
    with pytest.raises(ValueError, match="takes 2 buffers"):
        k.launch(LaunchDims((1, 1, 1), (16, 1, 1)), [a])
    with pytest.raises(ValueError, match="C-contiguous"):
        k.launch(LaunchDims((1, 1, 1), (16, 1, 1)), [np.zeros(32, np.float32)[::2], a])
    with pytest.raises(ValueError, match="aligned"):
        k.launch(LaunchDims((1, 1, 1), (8, 1, 1)), [np.zeros(17, np.float32)[1:], a])
    with pytest.raises(ValueError, match="1024"):
        k.launch(LaunchDims((1, 1, 1), (64, 32, 1)), [a, a])


def test_compiled_code_is_cached():
    k1 = compile_host_kernel(hk.transpose_kernel(64, 64), "transpose")
    start = time.perf_counter()
    k2 = compile_host_kernel(hk.transpose_kernel(64, 64), "transpose")
    assert time.perf_counter() - start < 0.05
    assert k1._code is k2._code


# ---- the same kernels through NVPTX -----------------------------------------------------------
@pytest.mark.parametrize("emit,name,ptx_has", [
    (hk.transpose_kernel(64, 64), "transpose", "bar.sync"),
    (hk.row_sum_kernel(256), "row_sum", "shfl.sync.bfly"),
    (hk.block_scan_kernel(100, 128), "block_scan", "bar.sync"),
    (hk.dynamic_shared_kernel(), "dyn_smem", ".extern .shared"),
])
def test_kernels_are_written_once_for_both_targets(emit, name, ptx_has):
    nvptx = pytest.importorskip("hlo_compile.targets.nvptx")
    result = nvptx.compile_to_ptx(emit(nvptx.NvptxTarget("sm_80")), "sm_80", [name])
    assert ptx_has in result.ptx
