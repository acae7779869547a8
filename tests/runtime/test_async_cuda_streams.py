"""Async pairs on the cuda platform (runtime/cuda_platform.py): each start's work on a side
stream of its own, ordered by events only, so the main queue's work between start and done
overlaps it. No GPU here: a fake driver (test_cuda_runtime's) logs every stream, event,
launch and free, and these tests check the order XLA's schedule needs: the side stream waits
for the main queue's event before its first launch, the done event is recorded after its last,
the main queue waits for it at the done (never the host), streams are reused, and a buffer the
side work may read is freed only once that work is known complete."""
from __future__ import annotations

import enum

import pytest

from hlo_compile.hlo import parse_module
from hlo_compile.runtime import cuda as rt
from test_cuda_runtime import _AnyKernelDriver

NOT_READY = 600


class _EventFlags(enum.IntEnum):
    CU_EVENT_DEFAULT = 0
    CU_EVENT_DISABLE_TIMING = 2


class StreamDriver(_AnyKernelDriver):
    """Logs ("launch", kernel, stream), ("record", event, stream), ("wait", stream, event),
    ("free", ptr), ("sync",), ("query", event, done); events complete only at a context
    synchronisation or when a test says so (``complete``)."""

    CUevent_flags = _EventFlags

    def __init__(self):
        super().__init__()
        self.log: list[tuple] = []
        self.stream_flags: dict[str, int] = {}
        self.events: set[str] = set()
        self.complete: set[str] = set()
        self.n_events = 0

    def cuStreamCreate(self, flags):
        handle = f"stream{len(self.stream_flags)}"
        self.stream_flags[handle] = int(flags)
        self.streams.add(handle)
        return 0, handle

    def cuEventCreate(self, flags):
        assert int(flags) == _EventFlags.CU_EVENT_DISABLE_TIMING
        handle = f"event{self.n_events}"
        self.n_events += 1
        self.events.add(handle)
        return 0, handle

    def cuEventRecord(self, event, stream):
        assert event in self.events
        self.log.append(("record", event, stream))
        return (0,)

    def cuStreamWaitEvent(self, stream, event, flags):
        assert event in self.events and flags == 0
        self.log.append(("wait", stream, event))
        return (0,)

    def cuEventQuery(self, event):
        done = event in self.complete
        self.log.append(("query", event, done))
        return (0 if done else NOT_READY,)

    def cuEventDestroy(self, event):
        self.events.remove(event)
        return (0,)

    def cuCtxSynchronize(self):
        self.log.append(("sync",))
        self.complete |= self.events
        return (0,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        self.log.append(("launch", f.split(":", 1)[1], stream))
        return super().cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra)

    def cuMemFree(self, ptr):
        self.log.append(("free", int(ptr)))
        return super().cuMemFree(ptr)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> StreamDriver:
    fake = StreamDriver()
    monkeypatch.setattr(rt, "driver_module", lambda: fake)
    return fake


ONE_PAIR = """HloModule one_pair

wrapped {
  p = f32[1024]{0} parameter(0)
  e = f32[1024]{0} exponential(p)
  b = f32[1024]{0} opt-barrier(e)
  ROOT n = f32[1024]{0} negate(b)
}

ENTRY main {
  x = f32[1024]{0} parameter(0)
  as = ((f32[1024]{0}), f32[1024]{0}, s32[]) async-start(x), calls=wrapped
  m = f32[1024]{0} multiply(x, x)
  ad = f32[1024]{0} async-done(as)
  ROOT r = (f32[1024]{0}, f32[1024]{0}) tuple(ad, m)
}
"""


def _kernel_of(exe, name: str) -> str:
    return next(p.kernel_name for p in exe.plan.kernels if p.fusion.name == name)


def _at(log: list[tuple], entry: tuple) -> int:
    return log.index(entry)


def test_side_stream_event_order_and_frees_after_done(driver: StreamDriver):
    import numpy as np

    from hlo_compile.runtime.executable import compile_executable
    exe = compile_executable(parse_module(ONE_PAIR), "cuda")
    try:
        e_kernel, n_kernel, m_kernel = (_kernel_of(exe, n) for n in ("e", "n", "m"))
        exe.run([np.ones(1024, np.float32)])
        log = driver.log
        (side,) = [s for s, f in driver.stream_flags.items() if f == 1]  # CU_STREAM_NON_BLOCKING
        records = [e for e in log if e[0] == "record"]
        ready, done = records[0][1], records[1][1]
        assert records[0] == ("record", ready, 0)  # the main queue (legacy stream) so far
        assert records[1] == ("record", done, side)
        order = [_at(log, ("wait", side, ready)), _at(log, ("launch", e_kernel, side)),
                 _at(log, ("launch", n_kernel, side)), _at(log, records[1]), _at(log, ("launch", m_kernel, 0)),
                 _at(log, ("wait", 0, done)), _at(log, ("sync",))]
        assert order == sorted(order), log
        # the host never waits for the side stream before the end of the run
        assert [e for e in log[:order[-1]] if e[0] == "sync"] == []
        # e's buffer (freed by the wrapped program, inside the region) is freed after the sync
        frees = [i for i, e in enumerate(log) if e[0] == "free"]
        assert frees and min(frees) > order[-1], log
        # a second run reuses the side stream; its events are released
        driver.log.clear()
        exe.run([np.ones(1024, np.float32)])
        assert len(driver.stream_flags) == 1 and ("wait", side, ready) not in driver.log
        assert any(e[:2] == ("launch", e_kernel) and e[2] == side for e in driver.log)
        assert not driver.events
    finally:
        exe.platform.device.close()
    assert not driver.streams and not driver.memory


TWO_PAIRS = ONE_PAIR.replace("""  ad = f32[1024]{0} async-done(as)
  ROOT r = (f32[1024]{0}, f32[1024]{0}) tuple(ad, m)""", """\
  as2 = ((f32[1024]{0}), f32[1024]{0}, s32[]) async-start(m), calls=wrapped
  ad = f32[1024]{0} async-done(as)
  ad2 = f32[1024]{0} async-done(as2)
  ROOT r = (f32[1024]{0}, f32[1024]{0}, f32[1024]{0}) tuple(ad, m, ad2)""")


def test_overlapping_pairs_take_two_streams_and_keep_them(driver: StreamDriver):
    import numpy as np

    from hlo_compile.runtime.executable import compile_executable
    exe = compile_executable(parse_module(TWO_PAIRS), "cuda")
    try:
        for _ in range(3):
            exe.run([np.ones(1024, np.float32)])
        sides = sorted(s for s, f in driver.stream_flags.items() if f == 1)
        assert len(sides) == 2 == len(driver.stream_flags)
        waits_on_main = [e for e in driver.log if e[0] == "wait" and e[1] == 0]
        assert len(waits_on_main) == 2 * 3  # one per done, per run
    finally:
        exe.platform.device.close()


def test_platform_regions_directly(driver: StreamDriver):
    """Nested regions, a done that waits for every unwaited region (a start whose value
    crossed a loop), frees held until every done event has completed."""
    from hlo_compile.runtime.cuda_platform import CudaPlatform
    p = CudaPlatform()
    try:
        outer = p.async_begin()
        inner = p.async_begin()
        assert p._queue is inner.stream and inner.outer is outer.stream
        buf = p.device.alloc(64)
        ptr = buf.ptr
        p.free(buf)
        p.async_end(inner)
        assert p._queue is outer.stream
        with pytest.raises(RuntimeError):
            p.async_end(inner)
        p.async_end(outer)
        assert p._queue is None and ("free", ptr) not in driver.log
        p.async_wait(None)  # both: the main queue waits on each done event
        waits = [e for e in driver.log if e[0] == "wait" and e[1] == 0]
        assert {w[2] for w in waits} == {inner.done.handle, outer.done.handle}
        assert ("free", ptr) not in driver.log  # not complete yet
        driver.complete.add(inner.done.handle)
        p.async_wait(None)
        assert ("free", ptr) not in driver.log  # the outer region may still read it
        driver.complete.add(outer.done.handle)
        p.async_wait(None)
        assert ("free", ptr) in driver.log and not p._unfinished
        assert len(p._idle_streams) == 2
        again = p.async_begin()
        assert again.stream in (inner.stream, outer.stream) and len(driver.stream_flags) == 2
        p.async_end(again)
        p.synchronize()
        assert not p._unfinished and again.stream in p._idle_streams
        free_now = p.device.alloc(64)
        fptr = free_now.ptr
        p.free(free_now)  # no side work: freed at once
        assert driver.log[-1] == ("free", fptr)
    finally:
        p.device.close()
