"""A bounded table of results of a pure function, kept per key (the one copy of the pattern
the indexing maps, the thread maps and the plan keys use).

A compile asks for the same few maps many times over (ResNet-50: 1,929 simplifications of 104
distinct maps); the results are frozen, so every caller can share one. The table is emptied
when it reaches ``limit`` entries, so a long process (a test run, a server) does not grow it
without end. A key that cannot be hashed (a shape built with list fields) is not kept: the
result is made each time.
"""
from __future__ import annotations

from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class BoundedMemo(Generic[V]):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._table: dict[Hashable, V] = {}

    def __len__(self) -> int:
        return len(self._table)

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``make()``, kept."""
        try:
            return self._table[key]
        except KeyError:
            pass
        except TypeError:  # unhashable: not kept
            return make()
        value = make()
        if len(self._table) >= self.limit:
            self._table.clear()
        self._table[key] = value
        return value
