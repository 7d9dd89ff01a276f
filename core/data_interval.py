"""The period a run is for: from the schedule's previous nominal instant to its own.

A daily report that runs late after a failover, or again in a backfill, must process the day it
was scheduled for, not the day it ran. Every run therefore carries its data interval, worked out
from the definition that owed it and the run's nominal instant alone, so it is the same however
late, on whichever executor and however often the run happens:

- **end** is the run's nominal instant (a re-run's is the occurrence it re-runs);
- **start** is the schedule's previous nominal instant: the occurrence of its trigger just
  before, on the schedule's clock, so a daily New York job's interval across the fall-back
  night is 25 hours and across the spring-forward night 23;
- calendars move when a run happens, not what it is for: a rolled or deferred run keeps its
  nominal interval, and an occurrence a holiday skipped still ends the interval before the next
  one (that period was deliberately not run). `business_day` triggers are different: the
  calendars define their occurrences, so the previous one is the previous month's business day;
- the **first** occurrence (none before it within the schedule's bounds) starts its interval at
  `start_at` when the schedule has one before it, else at its own instant (an empty interval);
  a one-shot `at` schedule is always its own first.

Pure: `now` is not needed, and calendars come in through the lookup the caller holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from kairos.core.calendar_rules import CalendarLookup, next_occurrence
from kairos.core.schedule import Schedule

_JUST_BEFORE = timedelta(microseconds=1)
_JUST_AFTER = timedelta(microseconds=1)
_LOOK_BACK = (
    timedelta(minutes=2),
    timedelta(hours=2),
    timedelta(days=2),
    timedelta(days=63),
    timedelta(days=2 * 366),
    timedelta(days=41 * 366),
)
"""How far back the previous occurrence is looked for, nearest first: the first step that holds
one bounds the search, which then halves its way to the last one (`_last_before`)."""


_WALK = 8
"""Steps taken one occurrence at a time before `_last_before` starts halving."""


@dataclass(frozen=True, slots=True)
class DataInterval:
    """The period a run is for: `start` (included) to `end` (excluded), both UTC."""

    start: datetime
    end: datetime


def data_interval(
    schedule: Schedule, nominal: datetime, calendars: CalendarLookup | None = None
) -> DataInterval:
    """The data interval of the run of `schedule` at `nominal` (see the module's rules)."""
    previous = previous_occurrence(schedule, nominal, calendars)
    if previous is not None:
        return DataInterval(previous, nominal)
    start = schedule.start_at
    if start is not None and start < nominal:
        return DataInterval(start, nominal)
    return DataInterval(nominal, nominal)


def previous_occurrence(
    schedule: Schedule, nominal: datetime, calendars: CalendarLookup | None = None
) -> datetime | None:
    """The schedule's last occurrence strictly before `nominal`, within its bounds; calendars
    count only for `business_day` triggers. `None` when there is none."""
    if schedule.at is not None:
        return None
    if schedule.every is not None and schedule.business_day is None:
        return _previous_every(schedule, nominal)
    lookup = calendars if schedule.business_day is not None else None
    nearer = nominal
    for back in _LOOK_BACK:
        fire = next_occurrence(schedule, nominal - back - _JUST_BEFORE, lookup)
        if fire is not None and fire.nominal < nominal:
            return _last_before(schedule, fire.nominal, nearer, lookup)
        nearer = nominal - back  # nothing from here to `nominal`
    return None


def latest_occurrence(
    schedule: Schedule, at: datetime, calendars: CalendarLookup | None = None
) -> datetime | None:
    """The schedule's latest occurrence at or before `at` (a one-shot's own, once past): the
    period a schedule is in."""
    if schedule.at is not None:
        return schedule.at if schedule.at <= at else None
    return previous_occurrence(schedule, at + _JUST_AFTER, calendars)


def _previous_every(schedule: Schedule, nominal: datetime) -> datetime | None:
    start, every = schedule.start_at, schedule.every
    assert start is not None and every is not None  # the model requires start_at with every
    if nominal <= start:
        return None
    last = start + ((nominal - start - _JUST_BEFORE) // every) * every
    end = schedule.end_at
    if end is not None and last > end:
        last = start + ((end - start) // every) * every
    return last


def _last_before(
    schedule: Schedule, known: datetime, bound: datetime, lookup: CalendarLookup | None
) -> datetime:
    """The last occurrence before `bound`, given one (`known`) before it: a few steps forward
    (the span usually holds one or two), then halving the span after the latest known one, so a
    dense trigger (every minute of a business day) costs a few dozen lookups, not one per
    occurrence in the span."""
    steps = 0
    while True:
        following = next_occurrence(schedule, known, lookup)
        if following is None or following.nominal >= bound:
            return known
        steps += 1
        if steps <= _WALK:
            known = following.nominal
            continue
        middle = following.nominal + (bound - following.nominal) / 2
        found = next_occurrence(schedule, middle - _JUST_BEFORE, lookup)
        if found is not None and found.nominal < bound:
            known = found.nominal
        else:
            bound = middle  # none from the middle on: the last is before it
