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
from hlo_compile.runtime.executable import compile_executable
from hlo_compile.runtime.nvidia_bindings import binding_missing

import test_conv_calls as conv_cases
import test_fft as fft_cases
import test_gemm_calls as gemm_cases

pytestmark = pytest.mark.gpu

LIBRARY = CompileOptions(gemm="library", conv="library")


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
@pytest.mark.parametrize("name", sorted(gemm_cases.CASES))
def test_cublaslt_gemm_on_cuda(gpu, name):
    """cuBLASLt where it takes the call; what it refused on the first GPU run (FP8 E4M3 x E4M3
    into E5M2, amax of a non-FP8 D: hlo/calls/library_limits.py) is lowered to our kernels instead."""
    from hlo_compile.hlo.calls.library_limits import library_refusal
    _need("cublasLt")
    case = gemm_cases.CASES[name]
    module = parse_module(gemm_cases.call_text(case), f"{name}.hlo")
    (call,) = [i for i in module.entry.instructions if i.opcode == "custom-call"]
    args = gemm_cases.inputs(case, seed=1)
    want = literals.flatten(evaluate_module(module, args))
    exe = compile_executable(module, "cuda", LIBRARY)
    try:
        kinds = _step_kinds(exe)
        assert ("CublasLtMatmul" in kinds) == (library_refusal(call) is None), sorted(kinds)
        got = literals.flatten(exe.run(args))
    finally:
        exe.platform.device.close()
    if case.workspace and case.whole_tuple:  # the workspace leaf holds whatever cuBLASLt left
        want, got = want[:-1], got[:-1]
    cmp = compare.compare_results(want, got, klass="accumulate")
    assert cmp.ok, f"{name}: {cmp.report()}"


# ---- cuDNN convolutions ----------------------------------------------------------------------------------
# What XLA's layout assignment gives cuDNN: NHWC activations with KRSC filters (labels o01i).
KRSC = {
    "nhwc_krsc_3x3": conv_cases.Conv("b01f_o01i->b01f", 2, 16, 24, (10, 10), (3, 3), pad=((1, 1), (1, 1))),
    "nhwc_krsc_stride_dilated": conv_cases.Conv("b01f_o01i->b01f", 2, 8, 16, (13, 11), (3, 3), stride=(2, 2),
                                                pad=((2, 2), (2, 2)), dil=(2, 2)),
    "nwc_krsc_1d": conv_cases.Conv("b0f_o0i->b0f", 3, 12, 20, (50,), (5,), stride=(2,), pad=((2, 2),)),
    "ndhwc_krsc_3d": conv_cases.Conv("b012f_o012i->b012f", 2, 8, 16, (6, 7, 5), (3, 3, 3),
                                     pad=((1, 1), (1, 1), (1, 1))),
    "nhwc_krsc_grouped": conv_cases.Conv("b01f_o01i->b01f", 2, 32, 64, (8, 8), (3, 3), stride=(2, 2),
                                         pad=((1, 1), (1, 1)), groups=2),
}
CONVS = {**conv_cases.CONVS, **KRSC}
CONV_CASES = ([(k, n, None) for k in ("fwd", "bwd_input", "bwd_filter")
               for n in conv_cases.FORWARD_CASES + sorted(KRSC) if k == "fwd" or n in conv_cases.BACKWARD_CASES + sorted(KRSC)]
              + [("bias", "nhwc_3x3_pad", e) for e in conv_cases.EPILOGUES]
              + [("bias", "nhwc_krsc_3x3", e) for e in ("bias", "relu", "side_input_unused")])


@pytest.mark.parametrize("kind,name,epilogue", CONV_CASES,
                         ids=[f"{k}-{n}" + (f"-{e}" if e else "") for k, n, e in CONV_CASES])
def test_cudnn_convolution_on_cuda(gpu, kind, name, epilogue):
    """cuDNN where it takes the call; elsewhere (hlo/calls/library_limits.py: HWIO filters, scales,
    activations) the call is lowered to our kernels on the GPU: right either way."""
    from hlo_compile.hlo.calls.library_limits import library_refusal
    _need("cudnn")
    cv = CONVS[name]
    e = conv_cases.EPILOGUES[epilogue] if epilogue else conv_cases.Epilogue()
    module = parse_module(conv_cases.call_text(kind, cv, e, scratch=64), f"{kind}.hlo")
    (call,) = [i for i in module.entry.instructions if i.opcode == "custom-call"]
    refusal = library_refusal(call)
    args = conv_cases.inputs(module, 0)
    want = conv_cases._leaf(evaluate_module(module, args))
    exe = compile_executable(module, "cuda", LIBRARY)
    try:
        kinds = _step_kinds(exe)
        assert ("CudnnConvolution" in kinds) == (refusal is None), f"steps {sorted(kinds)}, refusal {refusal}"
        got = literals.flatten(exe.run(args))[0]
    finally:
        exe.platform.device.close()
    res_et = (cv.out_et or cv.et) if conv_cases.result_role(kind) == "y" else cv.et
    err = conv_cases.rel_error(got, want)
    print(f"{kind}/{name}: {'ours (' + refusal + ')' if refusal else 'cuDNN'}: relative error {err:.3g}")
    assert err <= max(conv_cases.TOLERANCE[res_et], 1e-5), f"{kind}/{name}: vs interpreter {err:.3g}"


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
