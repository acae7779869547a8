"""The ``fft`` instruction read once: its type, lengths, batch and the shape rules XLA's shape
inference applies, so the interpreter and the runtime check and read it the same way.

XLA's four types transform the innermost ``len(fft_length)`` (1 to 3) dimensions:

- ``FFT``/``IFFT``: c64/c128 to the same type, operand and result innermost dims ``fft_length``;
- ``RFFT``: f32/f64 to c64/c128, operand ``fft_length``, result's last dim ``fft_length[-1] // 2 + 1``;
- ``IRFFT``: c64/c128 to f32/f64, operand's last dim ``fft_length[-1] // 2 + 1``, result ``fft_length``.

The inverse types are divided by ``N = prod(fft_length)`` (numpy's ``norm="backward"``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import HloUnsupportedError, HloVerifyError
from ..ir import HloInstruction

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
_COMPLEX_OF = {"f32": "c64", "f64": "c128"}
_REAL_OF = {v: k for k, v in _COMPLEX_OF.items()}


@dataclass(frozen=True)
class FftCall:
    fft_type: str                  # FFT, IFFT, RFFT, IRFFT
    fft_length: tuple[int, ...]    # the transform's logical lengths (innermost dims)
    batch: int                     # product of the outer dimensions
    input_type: str                # operand element type
    output_type: str               # result element type

    @property
    def rank(self) -> int:
        return len(self.fft_length)

    @property
    def inverse(self) -> bool:
        return self.fft_type in ("IFFT", "IRFFT")

    @property
    def scale(self) -> float:
        """What the unnormalised transform is multiplied by (1/N for the inverse types)."""
        return 1.0 / math.prod(self.fft_length) if self.inverse else 1.0

    @property
    def double(self) -> bool:
        return self.input_type in ("f64", "c128")


def operand_dims(fft_type: str, fft_length: list[int]) -> list[int]:
    """The innermost operand dimensions ``fft_type`` needs for ``fft_length``."""
    if fft_type == "IRFFT":
        return list(fft_length[:-1]) + [fft_length[-1] // 2 + 1]
    return list(fft_length)


def result_dims(fft_type: str, fft_length: list[int]) -> list[int]:
    if fft_type == "RFFT":
        return list(fft_length[:-1]) + [fft_length[-1] // 2 + 1]
    return list(fft_length)


def result_type(fft_type: str, operand_type: str) -> str | None:
    """The result's element type for an operand of ``operand_type`` (None: not a valid operand)."""
    if fft_type in ("FFT", "IFFT"):
        return operand_type if operand_type in _REAL_OF else None
    if fft_type == "RFFT":
        return _COMPLEX_OF.get(operand_type)
    return _REAL_OF.get(operand_type)


def parse_fft(inst: HloInstruction) -> FftCall:
    """Read and check ``inst`` (an ``fft``) as XLA's shape inference does; an instruction whose
    shapes disagree with its type and lengths is an ``HloVerifyError`` naming it."""
    fft_type = str(inst.attr("fft_type", "FFT"))
    fft_length = [int(n) for n in inst.attr("fft_length", [])]
    where = f" (line {inst.location.line})" if inst.location else ""
    name = f"fft '%{inst.name}'{where}"
    if fft_type not in FFT_TYPES:
        raise HloUnsupportedError(f"{name}: fft_type {fft_type} is not one of {', '.join(FFT_TYPES)}", inst.location)
    if not 1 <= len(fft_length) <= 3 or min(fft_length) < 1:
        raise HloVerifyError(f"{name}: fft_length must be 1 to 3 positive lengths, is {fft_length}", inst.location)
    operand = inst.operands[0].shape
    rank = len(fft_length)
    if not operand.is_array or len(operand.dimensions) < rank:
        raise HloVerifyError(f"{name}: the operand {operand} has fewer than {rank} dimensions", inst.location)
    want_in = operand_dims(fft_type, fft_length)
    lengths = "{" + ",".join(map(str, fft_length)) + "}"
    if list(operand.dimensions[-rank:]) != want_in:
        raise HloVerifyError(f"{name}: {fft_type} with fft_length={lengths} needs innermost operand dimensions "
                             f"{want_in}, the operand is {operand}", inst.location)
    out_type = result_type(fft_type, operand.element_type)
    want_out = list(operand.dimensions[:-rank]) + result_dims(fft_type, fft_length)
    if out_type is None:
        raise HloVerifyError(f"{name}: {fft_type} does not take {operand.element_type} operands", inst.location)
    if inst.shape.element_type != out_type or list(inst.shape.dimensions) != want_out:
        raise HloVerifyError(f"{name}: {fft_type} of {operand} gives {out_type}{want_out}, the instruction "
                             f"declares {inst.shape}", inst.location)
    return FftCall(fft_type, tuple(fft_length), math.prod(operand.dimensions[:-rank]), operand.element_type,
                   out_type)
