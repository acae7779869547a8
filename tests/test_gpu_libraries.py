"""NVIDIA's libraries on a real GPU: the library steps of the ``cuda`` platform against the
interpreter, through the very bindings the runtime imports (``runtime/nvidia_bindings.py``).

- cuBLASLt (nvmath-python): every GEMM case of ``test_gemm_calls.py`` (each epilogue we support:
  DEFAULT, BIAS, RELU, BIAS_RELU, GELU, GELU_AUX, BIAS_GELU, BIAS_GELU_AUX; alpha/beta with C;
  batch dims; layouts; bf16/f16; f8 scales and amax) with ``--gemm=library``;
- cuDNN (the cuDNN frontend): forward, backward-input, backward-filter and bias-activation
  convolutions of ``test_conv_calls.py`` with ``--conv=library``;
- cuFFT (nvmath-python): every transform of ``test_fft.py`` in c64 and c128.

Each case also asserts that the library step ran (not the generated fallback): a binding that
did not install on the GPU machine fails here, by name, instead of passing on our kernels.
Every test is marked ``gpu`` and skips, with ``available()``'s reason, where there is no GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

from hlo_compile import parse_module
from hlo_compile.interpreter import evaluate_module
from hlo_compile.options import CompileOptions
from hlo_compile.runtime import compare, literals
from hlo_compile.runtime import cuda as rt
from hlo_compile.runtime.executable import compile_executable
from hlo_compile.runtime.nvidia_bindings import binding_missing

import test_conv_calls as conv_cases
import test_fft as fft_cases
import test_gemm_calls as gemm_cases

pytestmark = pytest.mark.gpu

LIBRARY = CompileOptions(gemm="library", conv="library")


@pytest.fixture(scope="module")
def gpu() -> str:
    ok, why = rt.available()
    if not ok:
        pytest.skip(f"no usable CUDA GPU: {why}")
    return why


def _need(binding: str) -> None:
    why = binding_missing(binding)
    assert why is None, f"{binding}: {why} (was it carried to the GPU machine?)"


def _step_kinds(exe) -> set[str]:
    return {type(step).__name__ for prog in exe.programs.values() for step in prog.steps}


def _run_on_cuda(module, args, step: str) -> list[np.ndarray]:
    """``module`` on the GPU with library calls kept as calls; asserts ``step`` ran."""
    exe = compile_executable(module, "cuda", LIBRARY)
    try:
        kinds = _step_kinds(exe)
        assert step in kinds, f"no {step} step among {sorted(kinds)}: the call was not run by the library"
        return literals.flatten(exe.run(args))
    finally:
        exe.platform.device.close()


# ---- cuBLASLt --------------------------------------------------------------------------------------------
# What cuBLASLt 13 answered CUBLAS_STATUS_NOT_SUPPORTED to on an H200 (the first GPU run): FP8
# E4M3 x E4M3 with an E5M2 D, and the amax of a D that is not FP8 (XLA asks amax only of FP8
# outputs). The step refuses them by name; --gemm=generated runs them.
CUBLASLT_REFUSES = {"f8_old_order_bias", "f8_e5m2_relu_amax_f32"}


@pytest.mark.parametrize("name", sorted(gemm_cases.CASES))
def test_cublaslt_gemm_on_cuda(gpu, name):
    _need("cublasLt")
    case = gemm_cases.CASES[name]
    module = parse_module(gemm_cases.call_text(case), f"{name}.hlo")
    args = gemm_cases.inputs(case, seed=1)
    want = literals.flatten(evaluate_module(module, args))
    if name in CUBLASLT_REFUSES:
        from hlo_compile.hlo.errors import HloUnsupportedError
        with pytest.raises(HloUnsupportedError, match=r"cuBLASLt does not support this GEMM.*--gemm=generated"):
            _run_on_cuda(module, args, "CublasLtMatmul")
        exe = compile_executable(module, "cuda", CompileOptions(gemm="generated"))
        try:
            got = literals.flatten(exe.run(args))
        finally:
            exe.platform.device.close()
    else:
        got = _run_on_cuda(module, args, "CublasLtMatmul")
    if case.workspace and case.whole_tuple:  # the workspace leaf holds whatever cuBLASLt left
        want, got = want[:-1], got[:-1]
    cmp = compare.compare_results(want, got, klass="accumulate")
    assert cmp.ok, f"{name}: {cmp.report()}"


# ---- cuDNN convolutions ----------------------------------------------------------------------------------
CONV_CASES = ([("fwd", n, None) for n in conv_cases.FORWARD_CASES]
              + [("bwd_input", n, None) for n in conv_cases.BACKWARD_CASES]
              + [("bwd_filter", n, None) for n in conv_cases.BACKWARD_CASES]
              + [("bias", "nhwc_3x3_pad", e) for e in conv_cases.EPILOGUES])


@pytest.mark.parametrize("kind,name,epilogue", CONV_CASES,
                         ids=[f"{k}-{n}" + (f"-{e}" if e else "") for k, n, e in CONV_CASES])
def test_cudnn_convolution_on_cuda(gpu, kind, name, epilogue):
    _need("cudnn")
    cv = conv_cases.CONVS[name]
    e = conv_cases.EPILOGUES[epilogue] if epilogue else conv_cases.Epilogue()
    module = parse_module(conv_cases.call_text(kind, cv, e, scratch=64), f"{kind}.hlo")
    args = conv_cases.inputs(module, 0)
    want = conv_cases._leaf(evaluate_module(module, args))
    got = _run_on_cuda(module, args, "CudnnConvolution")[0]
    res_et = (cv.out_et or cv.et) if conv_cases.result_role(kind) == "y" else cv.et
    err = conv_cases.rel_error(got, want)
    assert err <= max(conv_cases.TOLERANCE[res_et], 1e-4), f"{kind}/{name}: cuDNN vs interpreter {err:.3g}"


# ---- cuFFT ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ctype", ["c64", "c128"])
@pytest.mark.parametrize("fft_type,batch,lengths", fft_cases.CASES)
def test_cufft_on_cuda(gpu, fft_type, batch, lengths, ctype):
    _need("cufft")
    text, in_et, in_dims = fft_cases.fft_module(fft_type, ctype, batch, lengths)
    module = parse_module(text)
    x = fft_cases._input(in_et, in_dims, seed=5)
    if fft_type == "IRFFT":  # Hermitian-consistent: the rfft of a real array
        real = fft_cases._input(fft_cases.REAL[ctype], [*batch, *lengths], seed=11)
        x = np.fft.rfftn(real, s=list(lengths), axes=tuple(range(len(batch), real.ndim))).astype(fft_cases.NP[ctype])
    want = fft_cases._reference(x, fft_type, lengths)
    (got,) = _run_on_cuda(module, [x], "CufftStep")
    err = fft_cases._rel(got, want)
    assert err <= 10 * fft_cases.TOL[ctype], f"cuFFT {fft_type} {ctype} {batch}x{lengths}: {err:.3g}"
