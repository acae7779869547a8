"""Guard zones around the host platform's buffers while the fuzzer runs a module.

A kernel that writes past its buffer corrupts the heap: the process dies later, somewhere
else, or a later result is wrong, and neither reproduces reliably (nothing a shrinker can
work with). Inside ``guarded()`` every buffer the host platform allocates or uploads sits
between two zones filled with a canary byte, checked after every kernel launch: a write
outside a buffer raises ``OutOfBoundsWrite`` naming the kernel, at once and every time. Reads
outside a buffer see the canary, so they give the same wrong values on every run.

The platform class is patched only for the duration of the ``with`` block.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np

GUARD = 4096        # bytes on each side
SLACK = 16          # the platform's own slack after a buffer (aligned-word atomics may touch it)
CANARY = 0xA5


class OutOfBoundsWrite(RuntimeError):
    """A kernel wrote outside the buffers it was given."""


class _Zones:
    def __init__(self) -> None:
        self.live: list[tuple[np.ndarray, int, str]] = []

    def buffer(self, nbytes: int, dtype: np.dtype, what: str) -> np.ndarray:
        raw = np.full(GUARD + nbytes + SLACK + GUARD, CANARY, np.uint8)
        raw[GUARD:GUARD + nbytes + SLACK] = 0
        self.live.append((raw, nbytes, what))
        return raw[GUARD:GUARD + nbytes].view(dtype)

    def check(self, kernel: str) -> None:
        for raw, nbytes, what in self.live:
            before = np.flatnonzero(raw[:GUARD] != CANARY)
            after = np.flatnonzero(raw[GUARD + nbytes + SLACK:] != CANARY)
            if before.size or after.size:
                where = (f"{GUARD - int(before[0])} bytes before" if before.size else
                         f"{int(after[0]) + SLACK} bytes after the end of")
                # restore the canary so one bad write is reported once
                raw[:GUARD] = CANARY
                raw[GUARD + nbytes + SLACK:] = CANARY
                raise OutOfBoundsWrite(f"kernel {kernel} wrote {where} a buffer of {what} ({nbytes} bytes)")


@contextmanager
def guarded() -> Iterator[None]:
    """Run the host platform with guard zones around every buffer (see the module doc)."""
    from ..runtime import executable
    from ..runtime.physical import buffer_bytes, storage_dtype
    cls = executable.HostPlatform
    zones = _Zones()
    saved = {k: cls.__dict__[k] for k in ("allocate", "upload", "launch") if k in cls.__dict__}
    launch = saved["launch"]

    def allocate(self, shape):
        dtype = storage_dtype(shape.element_type)
        nbytes = buffer_bytes(shape)
        return zones.buffer(nbytes, dtype, shape.to_text())[:nbytes // dtype.itemsize]

    def upload(self, physical):
        physical = np.ascontiguousarray(physical)
        buf = zones.buffer(physical.nbytes, physical.dtype, f"an input {physical.dtype}{list(physical.shape)}")
        buf = buf.reshape(physical.shape)
        np.copyto(buf, physical)
        return buf

    def guarded_launch(self, kernel, plan, buffers):
        launch(self, kernel, plan, buffers)
        zones.check(plan.kernel_name)

    cls.allocate, cls.upload, cls.launch = allocate, upload, guarded_launch
    try:
        yield
    finally:
        for k in ("allocate", "upload", "launch"):
            if k in saved:
                setattr(cls, k, saved[k])
            else:
                delattr(cls, k)
