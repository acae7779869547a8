"""Logical numpy arrays ↔ physical buffers laid out as a shape's layout says (tiles included).

A physical buffer is a flat array of ``physical_size(shape)`` elements of the storage dtype;
tile padding is zero. ``pred`` is one byte per element (0 or 1); sub-byte integers take one
byte each (sign- or zero-extended), which is how our kernels load and store them.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..hlo.dtypes import numpy_dtype
from ..hlo.shape import Shape
from ..hlo.tiling import physical_permutation, physical_size

_SUB_BYTE = {"s1": np.int8, "s2": np.int8, "s4": np.int8, "u1": np.uint8, "u2": np.uint8, "u4": np.uint8}


def storage_dtype(et: str) -> np.dtype:
    if et in _SUB_BYTE:
        return np.dtype(_SUB_BYTE[et])
    return np.dtype(numpy_dtype(et))


@lru_cache(maxsize=256)
def permutation(shape: Shape) -> np.ndarray | None:
    """Physical position of each row-major logical element; None when it is the identity."""
    if shape.has_default_layout() and physical_size(shape) == _count(shape):
        return None  # row-major, untiled, unpadded: known without building it (seconds for 1e8 elements)
    perm = physical_permutation(shape)
    if len(perm) == physical_size(shape) and np.array_equal(perm, np.arange(len(perm))):
        return None
    return perm


def to_physical(value: np.ndarray, shape: Shape) -> np.ndarray:
    """A flat, C-contiguous buffer holding ``value`` in ``shape``'s physical layout."""
    et = shape.element_type
    flat = np.ascontiguousarray(np.asarray(value).reshape(-1)).astype(storage_dtype(et), copy=False)
    perm = permutation(shape)
    if perm is None:
        return np.array(flat, copy=True)
    out = np.zeros(physical_size(shape), dtype=storage_dtype(et))
    out[perm] = flat
    return out


def from_physical(buffer: np.ndarray, shape: Shape) -> np.ndarray:
    """The logical array (numpy dtype of the element type) stored in a physical buffer."""
    et = shape.element_type
    perm = permutation(shape)
    flat = buffer if perm is None else buffer[perm]
    flat = flat[:_count(shape)]
    return flat.astype(numpy_dtype(et), copy=True).reshape(tuple(shape.dimensions))


def _count(shape: Shape) -> int:
    n = 1
    for d in shape.dimensions:
        n *= d
    return n


def buffer_bytes(shape: Shape) -> int:
    return physical_size(shape) * storage_dtype(shape.element_type).itemsize
