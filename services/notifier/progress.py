"""What the notifier has read and not yet done, and whose turn it is on each route.

At least once: a record's offset is committed only once every delivery of its notices is done
(delivered, or dead-lettered and reported to the team), so a notifier killed mid-batch leaves
them to the next one, which delivers them again with the same idempotency keys. A route serves
`per_route` deliveries at a time, so one slow or failing receiver holds only its own team's
notices while every other route goes on.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from kairos.core.notifications import Notice, Route


@dataclass(frozen=True)
class Source:
    """Where a notice was read, and the record itself (a dead letter copies it)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class Delivery:
    notice: Notice
    route: Route
    source: Source
    tries: int = 0

    @property
    def lane(self) -> tuple[str, str]:
        return self.notice.team, self.route.name


@dataclass
class Pending:
    """Per partition: the next offset to read, and for each open offset the routes its notice
    is still owed to. Routes, not a count: a delivery of a partition that was revoked and
    assigned again may end after the record was read anew, and ending a route twice must not
    end another route's delivery."""

    _next: dict[tuple[str, int], int] = field(default_factory=dict)
    _open: dict[tuple[str, int], dict[int, set[str]]] = field(default_factory=dict)

    def read(self, source: Source, routes: set[str]) -> None:
        where = (source.topic, source.partition)
        self._next[where] = source.offset + 1
        if routes:
            self._open.setdefault(where, {})[source.offset] = set(routes)

    def owes(self, source: Source, route: str) -> bool:
        waiting = self._open.get((source.topic, source.partition), {})
        return route in waiting.get(source.offset, ())

    def done(self, source: Source, route: str) -> None:
        waiting = self._open.get((source.topic, source.partition))
        if waiting is None or source.offset not in waiting:
            return  # its partition was revoked meanwhile: another notifier owns it now
        waiting[source.offset].discard(route)
        if not waiting[source.offset]:
            del waiting[source.offset]

    def committable(self, only: Iterable[tuple[str, int]] | None = None) -> list[TopicPartition]:
        """The offsets that may be committed: below the first record not done."""
        chosen = self._next if only is None else {w: self._next[w] for w in only if w in self._next}
        return [
            TopicPartition(topic, partition, min(self._open.get((topic, partition)) or [following]))
            for (topic, partition), following in chosen.items()
        ]

    def forget(self, partitions: Iterable[tuple[str, int]]) -> None:
        for where in partitions:
            self._next.pop(where, None)
            self._open.pop(where, None)

    def count(self) -> int:
        return sum(len(offsets) for offsets in self._open.values())


@dataclass
class Lanes:
    """At most `per_route` deliveries of one route at a time; the others wait their turn."""

    per_route: int
    _busy: Counter[tuple[str, str]] = field(default_factory=Counter)
    _waiting: dict[tuple[str, str], deque[Delivery]] = field(default_factory=dict)

    def enter(self, delivery: Delivery) -> bool:
        """True: it may go now; False: it waits, and `leave` hands it on later."""
        if self._busy[delivery.lane] < self.per_route:
            self._busy[delivery.lane] += 1
            return True
        self._waiting.setdefault(delivery.lane, deque()).append(delivery)
        return False

    def leave(self, delivery: Delivery) -> Delivery | None:
        """Free the delivery's place; the next waiting on its route, which takes it, if any."""
        waiting = self._waiting.get(delivery.lane)
        if waiting:
            following = waiting.popleft()
            if not waiting:
                del self._waiting[delivery.lane]
            return following
        self._busy[delivery.lane] -= 1
        return None
