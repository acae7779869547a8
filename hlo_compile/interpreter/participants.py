"""The participants of an SPMD run of the interpreter, and how they meet at a collective.

A module runs as R x P participants (``collective_groups.World``). Each runs the whole module
in its own Python thread with its own ``Evaluator``; a collective is a rendezvous of *all*
participants (every participant of an SPMD program executes every collective, in the same
program order), keyed by the participant's own count of collectives so far: the n-th
collective of one participant meets the n-th of every other, never by ``channel_id`` (JAX
gives every collective ``channel_id=1``). Each participant then picks its group's values out of
what everybody contributed. ``send``/``recv`` meet through a mailbox keyed by channel and
(source, target) instead, as they are not global.

Only one participant runs at a time (a baton lock, released while waiting): runs are
reproducible and numpy's error state stays per thread. A participant that fails makes every
waiting one fail too; one that finishes while others still wait at a collective means the
participants disagree on their collectives (different control flow), an error, never a hang.
With one participant no thread is started.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from ..hlo.collective_groups import World
from ..hlo.errors import HloError


class PeerFailed(HloError):
    """Raised in a waiting participant when another failed (the first error is reported)."""


class Rendezvous:
    """Where the participants of one run meet."""

    def __init__(self, world: World):
        self.world = world
        self.baton = threading.Lock()
        self.cond = threading.Condition(self.baton)
        self._slots: dict[int, dict[int, Any]] = {}
        self._reads: dict[int, int] = {}
        self._mail: dict[tuple, list[Any]] = {}
        self._finished: set[int] = set()
        self._waiters: dict[int, Callable[[], bool]] = {}
        self.error: BaseException | None = None

    def _wait(self, me: int, ready: Callable[[], bool], what: str) -> None:
        self._waiters[me] = ready
        self.cond.notify_all()
        try:
            while not ready():
                if self.error is not None:
                    raise PeerFailed(f"another participant failed: {self.error}")
                if len(self._waiters) + len(self._finished) == self.world.size and not any(
                        r() for r in self._waiters.values()):
                    raise HloError(f"every participant waits or has finished at {what}: the participants do "
                                   "not execute the same collectives")
                self.cond.wait(timeout=60)
        finally:
            del self._waiters[me]

    def exchange(self, seq: int, me: int, value: Any, what: str) -> list[Any]:
        """Contribute ``value`` to collective number ``seq``; every participant's, by id."""
        n = self.world.size
        if n == 1:
            return [value]
        slot = self._slots.setdefault(seq, {})
        slot[me] = value
        self.cond.notify_all()
        self._wait(me, lambda: len(slot) == n, what)
        out = [slot[i] for i in range(n)]
        self._reads[seq] = self._reads.get(seq, 0) + 1
        if self._reads[seq] == n:
            del self._slots[seq], self._reads[seq]
        return out

    def post(self, key: tuple, value: Any) -> None:
        self._mail.setdefault(key, []).append(value)
        self.cond.notify_all()

    def take(self, me: int, key: tuple, what: str) -> Any:
        self._wait(me, lambda: bool(self._mail.get(key)), what)
        return self._mail[key].pop(0)

    def finish(self, me: int) -> None:
        self._finished.add(me)
        self.cond.notify_all()

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.cond.notify_all()


class Participant:
    """One participant: its flattened id, its replica and partition, its collective count."""

    def __init__(self, world: World, me: int, rendezvous: Rendezvous):
        self.world, self.me, self.rendezvous = world, me, rendezvous
        self.replica, self.partition = world.ids(me)
        self.seq = 0

    def exchange(self, value: Any, what: str) -> list[Any]:
        seq, self.seq = self.seq, self.seq + 1
        return self.rendezvous.exchange(seq, self.me, value, what)


def single_participant() -> Participant:
    world = World()
    return Participant(world, 0, Rendezvous(world))


def run_participants(world: World, body: Callable[[Participant], Any]) -> list[Any]:
    """``body(participant)`` for every participant, each in its own thread (none for one);
    the results by flattened id. The first error (not a peer's echo of it) is raised."""
    rv = Rendezvous(world)
    parts = [Participant(world, k, rv) for k in range(world.size)]
    if world.size == 1:
        return [body(parts[0])]
    results: list[Any] = [None] * world.size
    errors: list[BaseException] = []

    def run(p: Participant) -> None:
        with rv.baton:
            try:
                results[p.me] = body(p)
                rv.finish(p.me)
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                errors.append(e)
                rv.fail(e)

    threads = [threading.Thread(target=run, args=(p,), name=f"participant-{p.me}", daemon=True) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        first = next((e for e in errors if not isinstance(e, PeerFailed)), errors[0])
        raise first
    return results


