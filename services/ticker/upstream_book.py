"""The definitions of the schedules a ticker's schedules wait for, and the runs' upstream periods.

A run of a schedule naming upstream schedules carries the periods it waits for, resolved when it
is fired from each upstream's definition as its own ticker holds it (`kairos.core.upstream_wait
.resolve`). An upstream may live on any partition of the schedules topic, so the book reads the
partitions holding the upstreams named (`ScheduleReader.read_partition_of`: the tickers'
verdicts applied, a refused change never counts) and keeps the definitions of those upstreams:

- an upstream is first read on the book's thread, as soon as the ticker prepares a fire of a
  schedule naming it ahead of its instant (`expect`, which never blocks): the ticker's loop,
  which fires every team's runs, does not wait for another partition's read, however many
  upstreams a team names;
- an upstream asked for at the fire before that read is answered from a read of its partition
  made in the last `RECENT_S` (so many new upstreams on one partition cost one read), or from
  one made then, on the loop (a fire decided at once, with no time ahead; a read is bounded by
  the reader's timeout, `UPSTREAM_READ_TIMEOUT_S`);
- after that the thread reads each partition holding upstreams asked for in the last
  `FORGET_S` again every `REFRESH_S`, one read a partition however many upstreams it holds, and
  answers come from memory: a new grant, a deleted upstream or a changed trigger counts within
  that much;
- a read that fails keeps what was read before; an upstream never read is answered
  `Unreadable`, and its runs end with that reason (re-run them once it is readable). Nothing a
  read or a resolution raises reaches the fire: a downstream schedule is never quarantined for
  its upstream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kairos.core.firing import Decision, ScheduleState
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import Upstream
from kairos.core.upstream_wait import Resolution, Unreadable, UpstreamPeriod, resolve
from kairos.streams.kafka.partitioner import partition_for

logger = logging.getLogger(__name__)

REFRESH_S = 30.0
"""How often the partitions of the upstreams asked for are read again."""
RECENT_S = 5.0
"""How long a partition's read answers upstreams first asked for after it."""
FORGET_S = 600.0
"""An upstream no run asked for in this long is no longer read (its schedules changed)."""


@dataclass(frozen=True)
class PartitionRead:
    """A read of one partition of the schedules topic: its number and schedules, as held."""

    partition: int
    schedules: Mapping[str, Schedule]
    partitions: int
    """The topic's partition count, which places ids not read yet."""


PartitionOf = Callable[[str], PartitionRead]
"""Reads the partition holding a schedule id; raises when it cannot be read or trusted."""


class UpstreamBook:
    """Upstream definitions, read a partition at a time, kept fresh by a thread of its own."""

    def __init__(
        self,
        partition_of: PartitionOf,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
        placement: Callable[[str, int], int] = partition_for,
    ) -> None:
        self._partition_of = partition_of
        self._placement = placement
        self._partitions: int | None = None
        self._refresh_s = refresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, Schedule | None] = {}
        self._asked: dict[str, float] = {}
        """Upstream id -> when a run last asked for it."""
        self._recent: dict[int, tuple[float, PartitionRead]] = {}
        self._partition: dict[str, int] = {}
        self._expected: set[str] = set()
        """Upstreams a fire prepared ahead names, not read yet: the thread reads them."""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def expect(self, schedule: Schedule) -> None:
        """`schedule` fires soon: have its upstreams read on the book's thread (never blocks)."""
        now = self._clock()
        with self._lock:
            for upstream in schedule.upstream:
                self._asked[upstream.schedule] = now
                if upstream.schedule not in self._known:
                    self._expected.add(upstream.schedule)
            if self._expected:
                self._wake.set()

    def read_expected(self) -> None:
        """Read the partitions of the upstreams expected and not known yet (the thread's work)."""
        with self._lock:
            expected, self._expected = self._expected, set()
        for schedule_id in sorted(expected):
            self.definition(schedule_id)  # ids of a partition read just before cost no read

    def upstream_periods(
        self, decision: Decision, state: ScheduleState
    ) -> Sequence[UpstreamPeriod]:
        """What the decision's run waits for (an `UpstreamResolver`); never raises."""
        return [self._period(upstream, decision, state) for upstream in state.schedule.upstream]

    def _period(
        self, upstream: Upstream, decision: Decision, state: ScheduleState
    ) -> UpstreamPeriod:
        schedule = state.schedule
        try:
            definition = self.definition(upstream.schedule)
            run = (decision.nominal, schedule.zone)
            return resolve(schedule.owner, upstream, definition, run, state.calendars)
        except Exception as error:
            # Another team's definition must not poison this one: the run ends with the reason.
            logger.exception("upstream %s of %s not resolved", upstream.schedule, schedule.id)
            reason = f"upstream schedule {upstream.schedule} could not be resolved: {error!r}"
            return UpstreamPeriod(
                upstream.schedule, upstream.match, Resolution.REFUSED, None, reason
            )

    def definition(self, schedule_id: str) -> Schedule | Unreadable | None:
        """The upstream's definition (`None`: no such schedule), from memory once read."""
        now = self._clock()
        with self._lock:
            self._asked[schedule_id] = now
            if schedule_id in self._known:
                return self._known[schedule_id]
            partition = self._partition.get(schedule_id)
            if partition is None and self._partitions is not None:
                partition = self._placement(schedule_id, self._partitions)
            recent = self._recent.get(partition) if partition is not None else None
            if recent is not None and now - recent[0] < RECENT_S:
                return self._learn(schedule_id, recent[1])
        try:
            read = self._partition_of(schedule_id)
        except Exception as error:
            logger.warning("upstream schedule %s could not be read: %s", schedule_id, error)
            return Unreadable(str(error))
        with self._lock:
            self._recent[read.partition] = (now, read)
            self._partitions = read.partitions
            return self._learn(schedule_id, read)

    def _learn(self, schedule_id: str, read: PartitionRead) -> Schedule | None:
        """Keep what `read` says of an asked upstream (the lock held)."""
        self._partition[schedule_id] = read.partition
        found = read.schedules.get(schedule_id)
        self._known[schedule_id] = found
        return found

    def start(self) -> None:
        """Read the expected upstreams as they come, and the asked partitions again every
        `refresh_s`, until `close`."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="upstream-book", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _serve(self) -> None:
        refresh_at = time.monotonic() + self._refresh_s
        while not self._stop.is_set():
            self._wake.wait(max(0.0, refresh_at - time.monotonic()))
            self._wake.clear()
            if self._stop.is_set():
                return
            self.read_expected()
            if time.monotonic() >= refresh_at:
                self._refresh()
                refresh_at = time.monotonic() + self._refresh_s

    def _refresh(self) -> None:
        for schedule_id in self._one_id_per_partition():
            try:
                read = self._partition_of(schedule_id)
            except Exception as error:
                logger.warning("upstream schedules not read again: %s", error)
                continue
            with self._lock:
                for asked, partition in list(self._partition.items()):
                    if partition == read.partition:
                        self._known[asked] = read.schedules.get(asked)

    def _one_id_per_partition(self) -> list[str]:
        """Forget the upstreams not asked for lately; one asked id of each partition left."""
        now = self._clock()
        with self._lock:
            for schedule_id, asked_at in list(self._asked.items()):
                if now - asked_at > FORGET_S:
                    del self._asked[schedule_id]
                    self._known.pop(schedule_id, None)
                    self._partition.pop(schedule_id, None)
            self._recent = {p: r for p, r in self._recent.items() if now - r[0] < RECENT_S}
            chosen: dict[int, str] = {}
            for schedule_id, partition in self._partition.items():
                chosen.setdefault(partition, schedule_id)
            return list(chosen.values())
