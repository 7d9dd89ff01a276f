"""The order a schedule with `roll` decides its occurrences in: the instant each one fires at.

A roll moves an occurrence to the same wall time on another day, so occurrences stop firing in
the order of their nominal instants: Saturday 17:00 rolled to Monday runs after Monday's own
09:00, and with `previous_business_day` Saturday 09:00 runs on Friday, before Friday's 17:00.
One cursor in nominal order held every later occurrence behind a rolled one (Monday's 09:00
decided at 17:00, and skipped by `misfire: skip`).

So such a state writes its undecided occurrences down as the cursor (`next_nominal`: every
occurrence from it on) and the heads of the stretches it parked (`waiting`: the first undecided
occurrence of each, the rest of that stretch undecided too); every other occurrence before the
cursor is decided. A stretch is a local day, or the part of one before or after the clock goes
back: its occurrences all roll to one business day at wall times that only increase, so each
stretch fires in its own order (the hour a clock repeats would not), and the next occurrence to
decide is whichever of the heads and the cursor fires first. The cursor's stretch is parked,
and the cursor moves on to the next one, while that one could fire first: before the earliest
fire among the heads and the cursor. The bound is the start of the day its first occurrence
rolls to; a roll keeps days in order (a later day never rolls to an earlier business day), so
no later stretch fires before it.

Parking changes how the undecided occurrences are written down, never which are undecided, so a
calendar change can make an occurrence fire elsewhere but never decides one twice or drops one.
Pure, like the rest of `kairos.core`.
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

from kairos.core.calendar import transition_instant
from kairos.core.calendar_rules import (
    CalendarLookup,
    Verdict,
    fire_instant,
    next_occurrence,
    roll_target,
)
from kairos.core.calendar_windows import resolve_wall_time
from kairos.core.schedule import Schedule


@dataclass(frozen=True, slots=True)
class Candidate:
    """An undecided occurrence that may be decided next: its calendars' verdict and its fire
    instant (jitter included)."""

    nominal: datetime
    verdict: Verdict
    fire_at: datetime

    @property
    def key(self) -> tuple[datetime, datetime]:
        """Fire first; of two firing together, the earlier occurrence first."""
        return self.fire_at, self.nominal


@dataclass(frozen=True, slots=True)
class RolledOrder:
    """A rolled state's undecided occurrences, parked as far as they must be, and the one that
    fires first (`None` when nothing is left)."""

    cursor: datetime | None
    waiting: tuple[datetime, ...]
    first: Candidate | None


def rolled_order(
    schedule_id: str,
    schedule: Schedule,
    cursor: datetime | None,
    waiting: tuple[datetime, ...],
    calendars: CalendarLookup | None,
) -> RolledOrder:
    """Park the cursor's stretch while the next one could fire first; the first to fire then."""
    heads = [_candidate(schedule_id, schedule, head, calendars) for head in waiting]
    current = None if cursor is None else _candidate(schedule_id, schedule, cursor, calendars)
    while current is not None:
        best = min([*heads, current], key=lambda candidate: candidate.key)
        following = _first_of_next_stretch(schedule, current.nominal, calendars)
        if following is None or _day_start(schedule, following, calendars) >= best.fire_at:
            break
        heads.append(current)
        current = _candidate(schedule_id, schedule, following, calendars)
    everyone = heads if current is None else [*heads, current]
    first = min(everyone, key=lambda candidate: candidate.key) if everyone else None
    return RolledOrder(
        None if current is None else current.nominal,
        tuple(head.nominal for head in heads),
        first,
    )


def after_deciding(
    schedule: Schedule,
    cursor: datetime | None,
    waiting: tuple[datetime, ...],
    decided: datetime,
    calendars: CalendarLookup | None,
) -> tuple[datetime | None, tuple[datetime, ...]]:
    """The cursor and the heads once the occurrence at `decided` (the cursor or a head) is."""
    if decided == cursor:
        following = next_occurrence(schedule, decided, calendars)
        return (None if following is None else following.nominal), waiting
    rest = [head for head in waiting if head != decided]
    following = next_occurrence(schedule, decided, calendars)
    if following is not None and following.nominal < _stretch_end(schedule, decided):
        insort(rest, following.nominal)
    return cursor, tuple(rest)


def _candidate(
    schedule_id: str, schedule: Schedule, nominal: datetime, calendars: CalendarLookup | None
) -> Candidate:
    verdict, fire_at = fire_instant(schedule_id, schedule, nominal, calendars)
    return Candidate(nominal, verdict, fire_at)


def _first_of_next_stretch(
    schedule: Schedule, nominal: datetime, calendars: CalendarLookup | None
) -> datetime | None:
    end = _stretch_end(schedule, nominal)
    following = next_occurrence(schedule, end - timedelta(microseconds=1), calendars)
    return None if following is None else following.nominal


def _stretch_end(schedule: Schedule, nominal: datetime) -> datetime:
    """Where the stretch of `nominal` ends: the next local midnight, or the instant the clock
    goes back before it (after which wall times begin again from the repeated hour)."""
    zone = schedule.zone
    local = nominal.astimezone(zone)
    midnight = resolve_wall_time(datetime.combine(local.date() + timedelta(days=1), time()), zone)
    offset = local.utcoffset()
    later = midnight.astimezone(zone).utcoffset()
    if offset is None or later is None or later >= offset:
        return midnight
    back = transition_instant(zone, int(nominal.timestamp()), int(midnight.timestamp()))
    return datetime.fromtimestamp(back, UTC)


def _day_start(schedule: Schedule, nominal: datetime, calendars: CalendarLookup | None) -> datetime:
    """The start of the day the occurrence at `nominal` rolls to (its own day when it stays):
    nothing of its day or a later one fires before it (jitter only adds)."""
    target = roll_target(schedule, nominal, calendars)
    day = min(nominal, target).astimezone(schedule.zone).date()
    return resolve_wall_time(datetime.combine(day, time()), schedule.zone)
