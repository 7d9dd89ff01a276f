"""Which upstream period a waiting run waits for, worked out apart for the audit, by brute force.

`kairos.core.dependencies` tells executors and `kairos apply` which period of an upstream a run
waits for; the audit must not share that code, or both could be wrong together and agree. So
this module reads the rules (docs/defaults.md) literally, walking the upstream's occurrences one
at a time with `kairos.core.calendar.next_fire` (`kairos.core.calendar_rules.next_occurrence`
for a `business_day` trigger, whose occurrences its calendars make), from a bounded look-back:

- `latest_before`: the last occurrence at or before the run's nominal instant;
- `same_instant`: the run's nominal instant, when the upstream has an occurrence there;
- `same_local_date`: the last occurrence whose instant, read on the downstream's clock, falls on
  the run's local date (it may be after the run).

Occurrences are the upstream trigger's within its `start_at`/`end_at`: calendars move and skip
runs, not periods (except a `business_day` trigger's). What the walk cannot settle within its
bounds (`LOOK_BACKS`, `MOST_STEPS`) it says is undecided, never "none": the audit then judges
nothing about that upstream.

Pure: no clock and no I/O; calendars come in through the lookup the caller holds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from kairos.core.calendar import Fire, next_fire
from kairos.core.calendar_rules import CalendarLookup, next_occurrence
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import DEFAULT_UPSTREAM_WAIT, PeriodMatch

LOOK_BACKS = (
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=8),
    timedelta(days=32),
    timedelta(days=367),
)
"""How far before a run `latest_before` looks for the upstream's last occurrence, nearest
first: the first span holding one is walked occurrence by occurrence (a dense upstream costs
one short span, a weekly one a week, a yearly one a year). An upstream quiet for more than the
last one, a year, before the run is not judged."""

MOST_STEPS = 200_000
"""Occurrences walked for one period before the walk gives up (undecided): every 5 seconds for
the two days a `same_local_date` walk covers, far denser than any upstream worth waiting for."""

_LOCAL_DAY_REACH = timedelta(days=2)
"""How far on either side of a run its local date can reach: a local day is at most 26 hours
long and holds the run, so 2 days on either side hold all of it."""

_TICK = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class RunWaiting:
    """What a fired run waits for, as its `RunRequested` says (the definition that fired it)."""

    upstream: tuple[tuple[str, str], ...]
    """(upstream schedule id, its `PeriodMatch` as written), in the order named."""
    wait: timedelta
    """`upstream_wait`: how long after its nominal instant the run may wait."""
    timeout: str
    """`upstream_timeout` as written: `fail` or `skip`."""
    timezone: str | None = None
    """The downstream's zone, whose local date `same_local_date` reads (`None`: not recorded)."""
    fired_periods: tuple[datetime | None, ...] = ()
    """The period of each upstream as the ticker that fired the run resolved it (`None`: it
    named none), in the order of `upstream`; empty when the record does not carry them. Shown
    beside the audit's own when they differ, never used in its place."""


def run_waiting(
    upstream: Sequence[dict[str, Any]],
    wait_ms: int | None,
    timeout: str,
    timezone: str | None,
) -> RunWaiting | None:
    """The waiting fields of a `RunRequested` record, or `None` when it waits for nothing."""
    if not upstream:
        return None
    named = tuple((str(entry["schedule_id"]), str(entry["match"])) for entry in upstream)
    wait = DEFAULT_UPSTREAM_WAIT if wait_ms is None else timedelta(milliseconds=wait_ms)
    fired = tuple(entry.get("period_at") for entry in upstream)
    return RunWaiting(named, wait, timeout, timezone, fired)


@dataclass(frozen=True, slots=True)
class PeriodAnswer:
    """The upstream period (its nominal instant, UTC) a run waits for.

    `period` is `None` with `undecided` `None` when the rule names none (the run is to be
    skipped); with `undecided` set, the walk could not tell within its bounds, and says why.
    """

    period: datetime | None
    undecided: str | None = None


def brute_upstream_period(
    upstream: Schedule,
    match: PeriodMatch,
    nominal: datetime,
    zone: ZoneInfo,
    calendars: CalendarLookup | None = None,
) -> PeriodAnswer:
    """The period of `upstream` the run at `nominal` waits for under `match`; `zone` is the
    downstream's clock (for `same_local_date`)."""
    if nominal.utcoffset() is None:
        raise ValueError(f"{nominal.isoformat()} is naive; pass an aware instant")
    nominal = nominal.astimezone(UTC)
    try:
        if match is PeriodMatch.SAME_INSTANT:
            walked = list(_occurrences(upstream, nominal - _TICK, nominal, calendars))
            return PeriodAnswer(nominal if nominal in walked else None)
        if match is PeriodMatch.SAME_LOCAL_DATE:
            return PeriodAnswer(_same_local_date(upstream, nominal, zone, calendars))
        return _latest_before(upstream, nominal, calendars)
    except _TooDenseError:
        return PeriodAnswer(None, f"more than {MOST_STEPS} occurrences to walk")


def _latest_before(
    upstream: Schedule, nominal: datetime, calendars: CalendarLookup | None
) -> PeriodAnswer:
    for back in LOOK_BACKS:
        found = None
        for instant in _occurrences(upstream, nominal - back, nominal, calendars):
            found = instant
        if found is not None:
            return PeriodAnswer(found)
        if _begins_after(upstream, nominal - back):
            return PeriodAnswer(None)  # nothing can come before the span: proven none
    return PeriodAnswer(None, f"no occurrence within {LOOK_BACKS[-1].days} days before the run")


def _begins_after(upstream: Schedule, instant: datetime) -> bool:
    """Whether the upstream has no occurrence at or before `instant` (its bounds say so)."""
    start, at = upstream.start_at, upstream.at
    return (start is not None and start > instant) or (at is not None and at > instant)


def _same_local_date(
    upstream: Schedule, nominal: datetime, zone: ZoneInfo, calendars: CalendarLookup | None
) -> datetime | None:
    day = nominal.astimezone(zone).date()
    found = None
    walk = _occurrences(upstream, nominal - _LOCAL_DAY_REACH, nominal + _LOCAL_DAY_REACH, calendars)
    for instant in walk:
        if instant.astimezone(zone).date() == day:
            found = instant
    return found


class _TooDenseError(Exception):
    """More than `MOST_STEPS` occurrences in one walk."""


def _occurrences(
    upstream: Schedule, after: datetime, until: datetime, calendars: CalendarLookup | None
) -> Iterator[datetime]:
    """Every occurrence with `after < nominal <= until`, one at a time, in order."""
    fire = _next(upstream, after, calendars)
    steps = 0
    while fire is not None and fire.nominal <= until:
        steps += 1
        if steps > MOST_STEPS:
            raise _TooDenseError
        yield fire.nominal
        fire = _next(upstream, fire.nominal, calendars)


def _next(upstream: Schedule, after: datetime, calendars: CalendarLookup | None) -> Fire | None:
    if upstream.business_day is not None:
        return next_occurrence(upstream, after, calendars)
    return next_fire(upstream, after)
