"""The ``fft`` instruction at run time: a step, not a kernel (XLA runs it as an FFT thunk).

- ``host``: the operand is downloaded, transformed with numpy's FFT in its own precision
  (c64/f32 single, c128/f64 double) and the result uploaded into a fresh buffer.
- ``cuda``: cuFFT through ``nvmath.bindings.cufft`` (the ``[cuda]`` extra): one plan per step
  (``cufftMakePlanMany64`` on the basic contiguous layout, batch = the outer dimensions), C2C/Z2Z
  forward or inverse, R2C/D2Z, C2R/Z2D; a C2R reads a copy of its operand (cuFFT overwrites the
  input of a multi-dimensional C2R); the inverse types are then scaled by 1/N through cuBLAS
  ``*scal`` (cuFFT's inverse is unnormalised; XLA scales the same way). Needs the default
  (row-major) layout on both sides; refused by name otherwise, or when the bindings are missing.
  NOT yet run on a GPU: written from the cuFFT and nvmath documentation only.

Both read the instruction through ``hlo/calls/fft.py`` (XLA's shape rules, checked at build time).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..hlo import HloInstruction
from ..hlo.dtypes import numpy_dtype
from ..hlo.errors import HloUnsupportedError
from ..hlo.calls.fft import FftCall, parse_fft
from ..hlo.shape import Shape
from .nvidia_bindings import require_binding
from .steps import Frame, Step
from .values import Buffer, download_value, upload_value

_NUMPY = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn, "IRFFT": np.fft.irfftn}

# cufftType and the exec function, by (fft_type, double precision)
_CUFFT = {("FFT", False): (0x29, "exec_c2c"), ("IFFT", False): (0x29, "exec_c2c"),
          ("RFFT", False): (0x2A, "exec_r2c"), ("IRFFT", False): (0x2C, "exec_c2r"),
          ("FFT", True): (0x69, "exec_z2z"), ("IFFT", True): (0x69, "exec_z2z"),
          ("RFFT", True): (0x6A, "exec_d2z"), ("IRFFT", True): (0x6C, "exec_z2d")}
CUFFT_FORWARD, CUFFT_INVERSE = -1, 1
# the cuBLAS scal that multiplies the result by a real scale, by result element type
_SCAL = {"c64": ("csscal_64", np.float32), "c128": ("zdscal_64", np.float64),
         "f32": ("sscal_64", np.float32), "f64": ("dscal_64", np.float64)}


def host_fft(x: np.ndarray, call: FftCall) -> np.ndarray:
    """XLA's fft of logical array ``x`` with numpy, in the precision of its type."""
    axes = tuple(range(x.ndim - call.rank, x.ndim))
    out = _NUMPY[call.fft_type](x, s=list(call.fft_length), axes=axes)
    return np.ascontiguousarray(out.astype(numpy_dtype(call.output_type), copy=False))


class HostFft(Step):
    """fft on the host: download, numpy, upload."""

    def __init__(self, inst: HloInstruction):
        super().__init__(inst)
        self.call = parse_fft(inst)

    def run(self, platform: Any, frame: Frame) -> None:
        x = download_value(platform, frame.values[self.inst.operands[0]])
        value = upload_value(platform, host_fft(x, self.call), self.inst.shape)
        frame.own(value)
        frame.values[self.inst] = value


def _row_major(shape: Shape) -> bool:
    layout = shape.layout
    if layout is None:
        return True
    rank = len(shape.dimensions)
    return list(layout.minor_to_major) == list(range(rank - 1, -1, -1)) and not layout.tiles


class CufftStep(Step):
    """fft on cuda through cuFFT (one plan, made on first run and kept)."""

    def __init__(self, inst: HloInstruction):
        super().__init__(inst)
        self.call = parse_fft(inst)
        for what, shape in (("operand", inst.operands[0].shape), ("result", inst.shape)):
            if not _row_major(shape):
                raise HloUnsupportedError(f"fft '%{inst.name}': cuFFT needs the default row-major layout, the "
                                          f"{what} is {shape}", inst.location)
        self.cufft_type, self.exec_name = _CUFFT[(self.call.fft_type, self.call.double)]
        self.plan: int | None = None
        self._blas: int | None = None

    def _plan(self, cufft: Any) -> int:
        if self.plan is None:
            plan = cufft.create()
            # inembed/onembed NULL: the basic layout, contiguous transforms one after the other
            cufft.make_plan_many64(plan, self.call.rank, list(self.call.fft_length), 0, 1, 0, 0, 1, 0,
                                   self.cufft_type, self.call.batch)
            self.plan = plan
        return self.plan

    def run(self, platform: Any, frame: Frame) -> None:
        inst, call = self.inst, self.call
        cufft = require_binding("cufft", inst)
        src = frame.values[inst.operands[0]]
        out = Buffer(inst.shape, platform.allocate(inst.shape))
        frame.own(out)
        frame.values[inst] = out
        if call.batch == 0:
            return
        scratch = None
        data = src.data
        if call.fft_type == "IRFFT":  # cuFFT's C2R may overwrite its input
            scratch = platform.allocate(src.shape)
            platform.copy(scratch, src.data, src.shape)
            data = scratch
        try:
            plan = self._plan(cufft)
            args = [plan, int(data), int(out.data)]
            if self.exec_name in ("exec_c2c", "exec_z2z"):
                args.append(CUFFT_INVERSE if call.inverse else CUFFT_FORWARD)
            getattr(cufft, self.exec_name)(*args)
            if call.inverse:
                self._scale(out, inst)
            platform.synchronize()
        finally:
            if scratch is not None:
                platform.synchronize()
                platform.free(scratch)

    def _scale(self, out: Buffer, inst: HloInstruction) -> None:
        """Multiply the result by 1/N in place (cuBLAS scal on the legacy stream)."""
        cublas = require_binding("cublas", inst)
        if self._blas is None:
            self._blas = cublas.create()
        name, dtype = _SCAL[self.call.output_type]
        alpha = np.array([self.call.scale], dtype=dtype)
        getattr(cublas, name)(self._blas, out.shape.element_count(), alpha.ctypes.data, int(out.data), 1)


def fft_step(inst: HloInstruction, builder: Any) -> Step:
    """The step of ``inst`` for the builder's platform (``builder``: the ``ProgramBuilder``)."""
    if builder.platform_name == "cuda":
        return CufftStep(inst)
    return HostFft(inst)
