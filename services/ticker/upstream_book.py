"""The definitions of the schedules a ticker's schedules wait for, and the runs' upstream periods.

A run of a schedule naming upstream schedules carries the periods it waits for, resolved when it
is fired from each upstream's definition as its own ticker holds it (`kairos.core.upstream_wait
.resolve`). An upstream may live on any partition of the schedules topic, so the book reads the
partition of each upstream named (`ScheduleReader.read_partition_of`: the tickers' verdicts
applied, a refused change never counts) and keeps every definition read:

- the first time an upstream is asked for, its partition is read at once, so a run is never
  fired with a definition nobody read (the ticker prepares runs ahead, in idle time, so this is
  rarely in the fire itself);
- after that a thread of the book reads each asked partition again every `REFRESH_S`, and
  answers come from memory: a new grant, a deleted upstream or a changed trigger counts within
  that much;
- a partition that cannot be read leaves what was read before; an upstream never read is
  answered `Unreadable`, and its runs end with that reason (re-run them once it is readable).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from kairos.core.errors import KairosError
from kairos.core.firing import Decision, ScheduleState
from kairos.core.schedule import Schedule
from kairos.core.upstream_wait import Unreadable, UpstreamPeriod, resolve

logger = logging.getLogger(__name__)

REFRESH_S = 30.0
"""How often the partitions of the upstreams asked for are read again."""

PartitionOf = Callable[[str], Mapping[str, Schedule]]
"""The schedules of the partition holding a schedule id, as their tickers hold them; raises
`KairosError` when the topic cannot be read."""


class UpstreamBook:
    """Upstream definitions, read a partition at a time, kept fresh by a thread of its own."""

    def __init__(self, partition_of: PartitionOf, refresh_s: float = REFRESH_S) -> None:
        self._partition_of = partition_of
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._known: dict[str, Schedule | None] = {}
        self._asked: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def upstream_periods(
        self, decision: Decision, state: ScheduleState
    ) -> Sequence[UpstreamPeriod]:
        """What the decision's run waits for (an `UpstreamResolver`)."""
        schedule = state.schedule
        run = (decision.nominal, schedule.zone)
        return [
            resolve(schedule.owner, upstream, self.definition(upstream.schedule), run,
                    state.calendars)
            for upstream in schedule.upstream
        ]  # fmt: skip

    def definition(self, schedule_id: str) -> Schedule | Unreadable | None:
        """The upstream's definition (`None`: no such schedule), from memory once read."""
        with self._lock:
            if schedule_id in self._asked:
                return self._known.get(schedule_id)
        try:
            self._read(schedule_id)
        except KairosError as error:
            logger.warning("upstream schedule %s could not be read: %s", schedule_id, error)
            return Unreadable(str(error))
        with self._lock:
            self._asked.add(schedule_id)
            return self._known.get(schedule_id)

    def start(self) -> None:
        """Read the asked partitions again every `refresh_s`, until `close`."""
        self._thread = threading.Thread(target=self._refresh, name="upstream-book", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _read(self, schedule_id: str) -> set[str]:
        """Read the schedule's partition; the ids it holds (a deleted one is not among them)."""
        schedules = self._partition_of(schedule_id)
        with self._lock:
            # Only the upstreams asked for are kept: a partition may hold a million schedules.
            for wanted in self._asked | {schedule_id}:
                if wanted in schedules:
                    self._known[wanted] = schedules[wanted]
            if schedule_id not in schedules:
                self._known[schedule_id] = None
        return set(schedules)

    def _refresh(self) -> None:
        while not self._stop.wait(self._refresh_s):
            with self._lock:
                asked = sorted(self._asked)
            read: set[str] = set()
            for schedule_id in asked:
                if schedule_id in read:
                    continue  # its partition was read this round
                try:
                    read |= self._read(schedule_id)
                except KairosError as error:
                    logger.warning("upstream schedules not read again: %s", error)
                    break
