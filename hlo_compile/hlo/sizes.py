"""Sizes of shapes in bytes, XLA's limits on them, and the memory this machine has free.

XLA keeps dimension sizes in ``int64`` and refuses a shape whose size in bytes does not fit
one (``ShapeUtil::ValidateShape``); the parser applies the same two limits, so that a shape
such as ``f32[1000000000000000000000000000000]`` is an error at its place in the text rather
than an overflow somewhere later. Runners compare what a module needs (inputs, outputs,
temporaries) with ``available_memory()`` before they allocate anything.
"""
from __future__ import annotations

import os

from .element_types import element_type

INT64_MAX = 2**63 - 1


def element_bytes(etype: str) -> int:
    """Bytes one element takes in memory (sub-byte types take a whole byte, as XLA's
    unpacked layout does; token and opaque take none)."""
    bits = element_type(etype).bits
    return (bits + 7) // 8


def dims_error(dims: tuple[int, ...], etype: str) -> str | None:
    """Why an array of ``etype`` with ``dims`` breaks XLA's limits, or None. Negative entries
    (unbounded ``?``) are left out."""
    for d in dims:
        if d > INT64_MAX:
            return f"dimension size {d} is larger than XLA's limit of {INT64_MAX} (a 64-bit signed integer)"
    count = 1
    for d in dims:
        if d > 0:
            count *= d
    size = count * element_bytes(etype)
    if size > INT64_MAX:
        return (f"shape {etype}[{','.join(str(d) for d in dims)}] takes {size} bytes, more than XLA's "
                f"limit of {INT64_MAX} bytes")
    return None


def shape_bytes(shape) -> int:
    """Bytes of every array leaf of ``shape`` (a ``Shape``) together, in logical order."""
    if shape.is_tuple:
        return sum(shape_bytes(s) for s in shape.tuple_shapes)
    if not shape.is_array:
        return 0
    count = 1
    for d in shape.dimensions:
        count *= max(d, 0)
    return count * element_bytes(shape.element_type)


def available_memory() -> int | None:
    """Bytes of host memory a new allocation can get now (``MemAvailable`` on Linux), or None
    when the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def format_bytes(n: int) -> str:
    """``n`` bytes for a person: ``745.1 GiB``, ``12 B``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
