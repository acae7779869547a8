"""The ``fft`` op through numpy's FFT (``hlo/calls/fft.py`` reads and checks the instruction):
forward transforms unnormalised, inverse ones divided by N, IRFFT's Hermitian input read as
numpy's ``irfftn`` reads it (imaginary parts a real result cannot have are ignored). c64/f32
transforms compute in single precision (numpy ≥ 2 keeps complex64), c128/f64 in double."""
from __future__ import annotations

import numpy as np

from ..hlo.calls.fft import parse_fft
from .numerics import dtype_of
from .registry import op

_NUMPY = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn, "IRFFT": np.fft.irfftn}


@op("fft")
def _fft(ev, inst, ops):
    call = parse_fft(inst)
    x = np.asarray(ops[0])
    axes = tuple(range(x.ndim - call.rank, x.ndim))
    out = _NUMPY[call.fft_type](x, s=list(call.fft_length), axes=axes)
    return np.ascontiguousarray(out.astype(dtype_of(call.output_type), copy=False))
