"""``hlo-run`` at scale: the phase a run is in (a live line on a terminal), ``--timeout``,
the verdict on stdout, ``--expected-literals``.

* Phases: ``parse``, ``compile`` (``compile for PLATFORM: STAGE N/M kernels`` as kernels are
  done), ``run on PLATFORM``, ``reference on PLATFORM``, ``compare`` (``expected literals``). On a terminal (stderr a TTY, as hlo-compile's progress line) the
  line ``hlo-run: MODULE: PHASE, 12.3s`` is redrawn every half second from one second into
  the run, and cleared before any other line; elsewhere nothing is drawn.
* ``--timeout SECONDS``: the run is stopped (SIGALRM, between two Python steps of the
  interpreter or between two launches: one long numpy call or kernel finishes first) with
  ``hlo-run: error: timed out after S s in phase PHASE of MODULE`` and exit status 124, as
  timeout(1) exits.
* The verdict (results match / differ / not compared) goes to stdout, and to stderr as well
  when that is another file (``2>log``: the log has it too; one terminal shows it once).
* ``--expected-literals OUT.npz``: stored outputs ``out0, out1, ...`` (XLA's, or an earlier
  ``--output-literals``), compared with the platform's results by the same rule as the
  reference; a different number of outputs, a shape or element type that differs: exit 2.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

import click
import numpy as np

from .common import UserError, stderr_is_tty

PROG = "hlo-run"
EXIT_TIMEOUT = 124
LIVE_AFTER_S = 1.0
REDRAW_S = 0.5


class RunTimeout(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` on the way
    swallows it."""


class Phase:
    """The phase of the run now, and its live line on a terminal."""

    def __init__(self, live: bool | None = None):
        self.live = stderr_is_tty() if live is None else live
        self.module = ""
        self.name = "start"
        self.start = time.perf_counter()
        self.shown = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        if self.live:
            self._thread = threading.Thread(target=self._tick, name="hlo-run-phase", daemon=True)
            self._thread.start()

    def set(self, name: str, module: str | None = None) -> None:
        with self._lock:
            if module is not None:
                self.module = module
            self.name = name
        self.draw()

    def where(self) -> str:
        return f"phase '{self.name}'" + (f" of {self.module}" if self.module else "")

    def draw(self) -> None:
        if not self.live or time.perf_counter() - self.start < LIVE_AFTER_S:
            return
        with self._lock:
            who = f"{self.module}: " if self.module else ""
            click.echo(f"\r\033[K{PROG}: {who}{self.name}, {time.perf_counter() - self.start:.1f}s", err=True,
                       nl=False, color=True)
            self.shown = True

    def clear(self) -> None:
        with self._lock:
            if self.shown:
                click.echo("\r\033[K", err=True, nl=False, color=True)
                self.shown = False

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_S):
            self.draw()

    def close(self) -> None:
        self._stop.set()
        self.clear()


_current = Phase(live=False)


def phase(name: str, module: str | None = None) -> None:
    """Say which phase the run is in now (the live line, the timeout's message)."""
    _current.set(name, module)


def compile_progress(platform: str):
    """A pipeline ``progress(stage, done, total)`` callback that shows, in the phase line,
    ``compile for PLATFORM: STAGE N/M kernels``."""
    def progress(stage: str, done: int, total: int) -> None:
        counts = f" {done}/{total} kernels" if total else ""
        phase(f"compile for {platform}: {stage}{counts}")
    return progress


def clear_line() -> None:
    _current.clear()


@contextmanager
def watching(timeout: float | None):
    """The run's phase line and ``--timeout``: raises ``RunTimeout`` when the time is up."""
    global _current
    _current = Phase()
    alarm = timeout is not None and timeout > 0 and threading.current_thread() is threading.main_thread() \
        and hasattr(signal, "setitimer")
    previous = None
    if alarm:
        def expire(_signum, _frame):
            raise RunTimeout()
        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, float(timeout))
    try:
        yield _current
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        _current.close()


def timeout_message(timeout: float) -> str:
    return f"{PROG}: error: timed out after {timeout:g} s in {_current.where()} (--timeout)"


def _separate_files(a, b) -> bool:
    """Whether ``a`` and ``b`` are different open files (False when either is no file: a
    test runner's buffers, which it shows together)."""
    try:
        return not os.path.samestat(os.fstat(a.fileno()), os.fstat(b.fileno()))
    except (AttributeError, ValueError, OSError):
        return False


def verdict(text: str) -> None:
    """The run's verdict: on stdout, and on stderr too (with the run's other lines) when
    stderr is another file."""
    clear_line()
    click.echo(text)
    if _separate_files(sys.stdout, sys.stderr):
        click.echo(text, err=True)


def load_expected(path: str, leaves: list[np.ndarray]) -> list[np.ndarray]:
    """The stored outputs ``out0, out1, ...`` of ``path``, checked against the results
    ``leaves`` (count, shape; raw ``|V`` bytes re-viewed as the result's dtype)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            names = [k for k in f.files if k.startswith("out") and k[3:].isdigit()]
            stored = {k: f[k] for k in names}
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read expected literals {path}: {e}") from None
    if sorted(int(k[3:]) for k in stored) != list(range(len(stored))) or len(stored) != len(leaves):
        raise UserError(f"--expected-literals {path}: has {len(stored)} outputs "
                        f"({', '.join(sorted(stored, key=lambda k: int(k[3:]))) or 'no out0, out1, ...'}), "
                        f"the module has {len(leaves)}")
    out = []
    for i, got in enumerate(leaves):
        want = stored[f"out{i}"]
        if want.dtype != got.dtype and (want.dtype.kind == "V" or got.dtype.kind == "V" or
                                        got.dtype.kind not in "biufc") and want.dtype.itemsize == got.dtype.itemsize:
            want = want.view(got.dtype)
        if want.dtype != got.dtype or tuple(want.shape) != tuple(got.shape):
            raise UserError(f"--expected-literals {path}: out{i} is {want.dtype.name}{list(want.shape)}, the result "
                            f"is {got.dtype.name}{list(got.shape)}")
        out.append(want)
    return out


def memory_limit(text: str):
    """``--memory-limit``'s value for ``memory_estimate.check_run`` (``UserError`` when bad)."""
    from ..runtime.memory_estimate import parse_limit
    try:
        return parse_limit(text)
    except ValueError as e:
        raise UserError(f"--memory-limit: {e}") from None
