"""SPMD runs of an executable: R x P participants, each with its own buffers, in one process.

One executable is compiled (its kernels and constants are shared: constants are never
written); each participant runs ENTRY's program in its own thread with ``SpmdResources``
naming it, so the collective steps (``collective_steps.py``) know who they run for and reach
the ``Communicator``. The host's communicator (``HostCommunicator``) is a rendezvous of all
participants keyed by each one's count of collectives (program order, never ``channel_id``);
only one participant runs at a time (a baton lock, released while waiting), so kernel launches
never overlap. A participant that fails fails the others; participants that wait forever on
each other are an error, never a hang (running them: ``spmd_run.py``). cuda: one process per GPU through NCCL
(``nccl_comm.py``).
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from ..hlo.collective_groups import World
from ..hlo.errors import HloError
from .steps import Resources


class PeerFailed(HloError):
    """Raised in a waiting participant when another failed."""


class Communicator(ABC):
    """How one participant reaches the others. Two implementations: ``HostCommunicator``
    (every participant in this process; the collective steps exchange host arrays through
    ``all_values`` and compute XLA's results themselves) and ``nccl_comm.NcclCommunicator``
    (``on_device``: one process per GPU; the steps hand it their buffers, ``collective``)."""

    on_device = False

    @abstractmethod
    def all_values(self, me: int, seq: int, value: Any, what: str) -> list[Any]:
        """Every participant's ``value`` for collective number ``seq``, by flattened id."""

    @abstractmethod
    def send(self, key: tuple, value: Any) -> None:
        """Post ``value`` for the receiver of ``key``."""

    @abstractmethod
    def recv(self, me: int, key: tuple, what: str) -> Any:
        """The value posted for ``key`` (waits for it)."""

    def collective(self, inst: Any, opcode: str, platform: Any, operands: list[Any], shapes: list[Any]) -> list[Any]:
        """(``on_device`` communicators) the result buffers of a collective on my operands."""
        raise NotImplementedError

    def finished(self, me: int) -> None:
        """Participant ``me`` ran to its end."""

    def failed(self, error: BaseException) -> None:
        """A participant failed: the others stop waiting."""


class HostCommunicator(Communicator):
    """Every participant's contribution to the n-th collective, by flattened id."""

    def __init__(self, world: World):
        self.world = world
        self.baton = threading.Lock()
        self._cond = threading.Condition(self.baton)
        self._slots: dict[int, dict[int, Any]] = {}
        self._left: dict[int, int] = {}
        self._mail: dict[tuple, list[Any]] = {}
        self._waiters: dict[int, Callable[[], bool]] = {}
        self._finished: set[int] = set()
        self.error: BaseException | None = None

    def _wait(self, me: int, ready: Callable[[], bool], what: str) -> None:
        self._waiters[me] = ready
        self._cond.notify_all()
        try:
            while not ready():
                if self.error is not None:
                    raise PeerFailed(f"another participant failed: {self.error}")
                stuck = len(self._waiters) + len(self._finished) == self.world.size
                if stuck and not any(r() for r in self._waiters.values()):
                    raise HloError(f"participants wait for each other forever at {what}: they do not run the "
                                   "same collectives")
                self._cond.wait(timeout=60)
        finally:
            del self._waiters[me]

    def all_values(self, me: int, seq: int, value: Any, what: str) -> list[Any]:
        n = self.world.size
        if n == 1:
            return [value]
        slot = self._slots.setdefault(seq, {})
        slot[me] = value
        self._cond.notify_all()
        self._wait(me, lambda: len(slot) == n, what)
        values = [slot[k] for k in range(n)]
        self._left[seq] = self._left.get(seq, n) - 1
        if not self._left[seq]:
            del self._slots[seq], self._left[seq]
        return values

    def send(self, key: tuple, value: Any) -> None:
        self._mail.setdefault(key, []).append(value)
        self._cond.notify_all()

    def recv(self, me: int, key: tuple, what: str) -> Any:
        self._wait(me, lambda: bool(self._mail.get(key)), what)
        return self._mail[key].pop(0)

    def finished(self, me: int) -> None:
        self._finished.add(me)
        self._cond.notify_all()

    def failed(self, error: BaseException) -> None:
        self.error = self.error or error
        self._cond.notify_all()


@dataclass
class SpmdResources(Resources):
    """``Resources`` of one participant: who it is and how it reaches the others."""

    world: World = field(default_factory=World)
    me: int = 0
    communicator: Any = None
    seq: int = 0

    @property
    def replica(self) -> int:
        return self.world.ids(self.me)[0]

    @property
    def partition(self) -> int:
        return self.world.ids(self.me)[1]

    def all_values(self, value: Any, what: str) -> list[Any]:
        """Every participant's ``value`` for my next collective."""
        seq, self.seq = self.seq, self.seq + 1
        return self.communicator.all_values(self.me, seq, value, what)


def participant_of(resources: Resources) -> SpmdResources:
    """The participant a run is for (a plain run: the only one)."""
    if isinstance(resources, SpmdResources):
        return resources
    world = World()
    return SpmdResources(resources.kernels, resources.constants, world, 0, HostCommunicator(world))
