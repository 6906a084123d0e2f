"""A small thread-safe map that keeps its most recently used entries: the server's per-process caches of values
that never go stale (a query's vector, a stored memory's rendered line)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most ``keep`` entries; a lookup or a store makes an entry the newest, the oldest goes first."""

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError("an Lru keeps at least one entry")
        self.keep = keep
        self._values: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> V:
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.keep:
                self._values.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._values)
