"""A bounded cache that forgets the least recently used entry when full.

Kairos' caches sit on hot paths (a herd of fires asks the same cron and calendar questions, the
run encoder reuses a template per schedule, spread-out schedules miss), so `get` is two C
calls on a hit and one on a miss: bench/bench_lru.py measures both against a plain dict's.

Safe to share between threads under CPython's GIL, as the compiled crons and calendars are
shared: every step is a single `OrderedDict` operation (keys here are strings, numbers and
tuples of them, whose hashing runs no Python code). A race costs a cache miss, or one entry
beyond the bound until the next `put`; never a wrong value, and never an exception.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar, cast, overload

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_MISSING = object()
"""Not a value anyone keeps: tells a miss from a kept `None` in one dictionary lookup."""


class LruCache(Generic[K, V]):
    __slots__ = ("_entries", "capacity", "peek")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an LRU cache holds at least 1 entry; {capacity} was asked")
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self.peek: Callable[[K], V | None] = self._entries.get
        """The value kept for `key`, else `None`, leaving its recency as it is: one C call,
        for a path that puts again whatever it uses (a fire keeps its new state), where a
        refresh is paid for nothing. A herd asks three caches per fire."""

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        """The value kept for `key` (now the most recently used), else `default`."""
        entries = self._entries
        value = entries.get(key, _MISSING)
        if value is _MISSING:
            return default
        # Not contextlib.suppress: entering a context manager costs more than the lookup.
        try:  # noqa: SIM105
            entries.move_to_end(key)
        except KeyError:
            pass  # evicted by another thread meanwhile: still the value that was kept
        return value

    def put(self, key: K, value: V) -> V:
        """Keep `value` as the most recently used; forget the least recently used when full."""
        entries = self._entries
        entries[key] = value
        try:
            entries.move_to_end(key)
            if len(entries) > self.capacity:
                entries.popitem(last=False)
        except KeyError:
            pass  # emptied by other threads meanwhile: nothing to reorder or evict
        return value

    def setdefault(self, key: K, value: V) -> V:
        """The value kept for `key` (now the most recently used), else `value`, kept now: one
        object for every equal value asked for (`value` is built by the caller either way)."""
        kept = self.get(key, _MISSING)
        return self.put(key, value) if kept is _MISSING else cast(V, kept)

    def pop(self, key: K) -> V | None:
        """Forget `key`; its value, or `None` when it was not kept."""
        return self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
