"""The schedules as their tickers hold them: what every reader of the schedules topic shows.

The latest record of a key is not always the ticker's verdict: a team may publish a change it may
not make (a signed ticker refuses it, then restores the key), and a change may still wait for its
ticker. Readers therefore fold each partition as its ticker did, from the ticker's own records:

- A change a ticker refused is skipped: its dead letter names its offset (`REFUSED_CHANGES`).
  So is the ticker's restoration after it, which restates what is held (`is_restoration`).
- A change before the offset the tickers' group committed for the partition was judged: not
  refused, it was taken.
- A change at or past that offset is not judged yet. Where the partition is judged in signed
  mode it is not shown, since its ticker may refuse it: it is counted as awaiting its ticker,
  and the schedule shown is the one held. Elsewhere (open mode, or no ticker committed yet) it is
  shown, marked pending: an open ticker takes every valid change (bar one marked for a version
  left since, which it refuses and restores).

A schedule's `offset` is the offset of the change that produced it, as the ticker's
`ScheduleState.version` is: what a conditional change names (`IF_VERSION_HEADER`).

Dead letters are read only when a partition holds a restoration: a ticker restores every key it
refuses a change of, in the transaction that dead-letters the change, so without one there is no
refusal to skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from kairos.core.schedule import Schedule
from kairos.streams.kafka.ownership import NOT_JUDGED, Judged, Ownership
from kairos.streams.wire.schedule_events import ScheduleDeleted, ScheduleUpserted, is_restoration


@dataclass(frozen=True)
class StoredSchedule:
    """A schedule as its ticker holds it, with the metadata of the change that made it so."""

    schedule: Schedule
    change: str
    """That change's kind, for the audit: upserted, paused, resumed (unknown if newer)."""
    event_id: uuid.UUID
    revision: int
    changed_by: str
    """Who the change says made it: self-asserted."""
    changed_at: datetime
    reason: str | None
    partition: int
    offset: int
    """The schedules offset of that change: the version the ticker holds it at."""
    signed_by: str | None = None
    """The team whose signature a signed ticker verified on that change (`Judged`)."""
    pending: bool = False
    """That change is not judged yet (open mode, or no ticker committed): taken once read."""

    @property
    def id(self) -> str:
        return self.schedule.id


@dataclass(frozen=True)
class FoldedRecord:
    """One valid definition record of the schedules topic, as a reader met it."""

    change: ScheduleUpserted | ScheduleDeleted
    restores: bool
    """It bears the ticker's restoration mark (`RESTORES_HEADER`)."""
    team: str | None
    """The team its `kairos-team` header names, verified or not."""


RefusedOffsets = Collection[tuple[int, int]]
"""(partition, offset) of every change a ticker refused."""


class HeldSchedules:
    """Folds definition records, each partition's in topic order, into what the tickers hold."""

    def __init__(self, judged: Mapping[int, Judged]) -> None:
        self._judged = judged
        self.schedules: dict[str, StoredSchedule] = {}
        self.awaiting: dict[str, list[int]] = {}
        """Per schedule id, the offsets of changes its signed ticker has not judged yet."""

    def fold(self, records: list[FoldedRecord], refused: Callable[[], RefusedOffsets]) -> None:
        """Fold `records`; `refused` is called once, and only when a record is a restoration."""
        skipped: RefusedOffsets = (
            refused() if any(record.restores for record in records) else frozenset()
        )
        for record in records:
            change = record.change
            if (change.partition, change.offset) not in skipped:
                self._add(record)

    def _add(self, record: FoldedRecord) -> None:
        change = record.change
        held = self.schedules.get(change.schedule_id)
        if is_restoration(record.restores, change, None if held is None else held.schedule):
            return
        judged = self._judged.get(change.partition, NOT_JUDGED)
        taken = judged.committed_offset is not None and change.offset < judged.committed_offset
        if not taken and judged.mode is Ownership.SIGNED:
            self.awaiting.setdefault(change.schedule_id, []).append(change.offset)
            return
        if isinstance(change, ScheduleDeleted):
            self.schedules.pop(change.schedule_id, None)
            return
        self.schedules[change.schedule_id] = StoredSchedule(
            schedule=change.schedule,
            change=change.change,
            event_id=change.event_id,
            revision=change.revision,
            changed_by=change.changed_by,
            changed_at=change.changed_at,
            reason=change.reason,
            partition=change.partition,
            offset=change.offset,
            signed_by=judged.verified_team(change.offset, record.team),
            pending=not taken,
        )
