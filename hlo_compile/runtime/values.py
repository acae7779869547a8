"""Values at run time: a ``Buffer`` for an array, a list of values for a tuple.

A program passes values between its steps without a round trip through numpy; these helpers
move them between the host's logical arrays and a platform's physical buffers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..hlo.errors import HloUnsupportedError
from ..hlo.shape import Shape
from .physical import from_physical, to_physical


@dataclass
class Buffer:
    """A physical buffer holding one array value (``data`` is platform-specific)."""

    shape: Shape
    data: Any


def leaves(value: Any) -> Iterator[Buffer]:
    """The buffers of a value (a ``Buffer`` or nested lists of them)."""
    if isinstance(value, list):
        for v in value:
            yield from leaves(v)
    else:
        yield value


def nest(shape: Shape, flat: list[Buffer]) -> Any:
    """Buffers given depth first (a fusion's output leaves) as the value of ``shape``: nested
    lists for nested tuples (a multi-output fusion whose roots are variadic reduces gives
    ``((f32, s32), (f32, s32))``)."""
    it = iter(flat)

    def build(s: Shape) -> Any:
        return [build(t) for t in s.tuple_shapes] if s.is_tuple else next(it)
    return build(shape)


def upload_value(platform: Any, value: Any, shape: Shape) -> Any:
    """A logical value (nested tuples for a tuple shape) as buffers of ``platform``."""
    if shape.is_tuple:
        return [upload_value(platform, v, s) for v, s in zip(value, shape.tuple_shapes)]
    if not shape.is_array:
        raise HloUnsupportedError(f"values of shape {shape} cannot be passed to a kernel")
    return Buffer(shape, platform.upload(to_physical(np.asarray(value), shape)))


def download_value(platform: Any, value: Any) -> Any:
    """Buffers back as logical numpy arrays, tuples as Python tuples (the interpreter's form)."""
    if isinstance(value, list):
        return tuple(download_value(platform, v) for v in value)
    return from_physical(platform.download(value.data, value.shape), value.shape)


def read_scalar(platform: Any, value: Any) -> Any:
    """A scalar buffer's value on the host (a while's predicate, a conditional's index)."""
    if not isinstance(value, Buffer):
        raise HloUnsupportedError(f"expected a scalar array, got a tuple of {len(value)} values")
    return from_physical(platform.download(value.data, value.shape), value.shape).reshape(-1)[0]


def free_value(platform: Any, value: Any) -> None:
    """Give back every buffer of ``value``."""
    for b in leaves(value):
        platform.free(b.data)
