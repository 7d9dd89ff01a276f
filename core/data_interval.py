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
_LOOK_BACK = (
    timedelta(minutes=2),
    timedelta(hours=2),
    timedelta(days=2),
    timedelta(days=63),
    timedelta(days=2 * 366),
    timedelta(days=41 * 366),
)
"""How far back the previous occurrence is looked for, nearest first. Each step is tried only
when the one before held no occurrence, so the occurrences walked through to reach the last one
before the instant are few (at most about the ratio of two steps)."""


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
    lookup = calendars if schedule.business_day is not None else None
    for back in _LOOK_BACK:
        fire = next_occurrence(schedule, nominal - back - _JUST_BEFORE, lookup)
        if fire is None or fire.nominal >= nominal:
            continue
        last = fire.nominal
        while (following := next_occurrence(schedule, last, lookup)) is not None:
            if following.nominal >= nominal:
                break
            last = following.nominal
        return last
    return None
