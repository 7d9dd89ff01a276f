"""What a schedule's calendars make it owe over a window, worked out by brute force.

The ticker applies the calendar rules incrementally (`kairos.core.calendar_rules`,
`kairos.core.fire_order`, the re-derivation of a `business_day` month in `ScheduleState`); the
audit and the property tests must not repeat that code, or both could be wrong together and
agree. So this module states the same rules (docs/defaults.md, "Business calendars") the plain
way, occurrence by occurrence over a sequence of calendar versions (`Era`), each version in
force from the instant the broker appended it until the next:

- An occurrence is decided at the first instant the calendars then in force put it at or
  before: at its place under a version, or at the version's start when that version put it in
  the past. Its place: its nominal instant (skipped before `pause_until`); with `exclude` a
  holiday skips it (decided there);
  with `roll` a day that is not a business day moves it to the same wall time on the nearest
  business day in the roll's direction within 14 days, or skips it; a blackout window holding
  where it runs skips it or (`defer`) moves it to where the windows holding it end, unless the
  next occurrence is before that end (coalesced, a skip).
- A `business_day` month runs on one day: the n-th business day of the month by the version in
  force when the month's day is first worked out (the creation, or the decision before it).
  Each later version moves the day when its day is still after the latest change of the named
  calendars there then (a deleted one cannot date it: with one gone, the day moves only later);
  a version that puts it in the past leaves it. A month whose n-th business day does not exist
  then owes nothing. The day is fixed once its first time is decided, through a pause and
  resume or an edit (a later version of the definition runs the begun month on that day).

Brute force is fine here: a window is hours to weeks, a business week is checked day by day.
Cron and interval arithmetic (`next_fire`, `parse_cron`), wall times across DST
(`resolve_wall_time`) and what a calendar holds (`window_at`) are the shared primitives it
builds on; the rules above are its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from kairos.core.business_calendar import BusinessCalendar
from kairos.core.calendar import jitter_offset, next_fire
from kairos.core.calendar_versions import CalendarChange
from kairos.core.calendar_windows import resolve_wall_time
from kairos.core.cron import parse_cron
from kairos.core.misfire import MISFIRE_GRACE
from kairos.core.schedule import MisfirePolicy, Schedule
from kairos.core.schedule_calendars import BlackoutAction, RollPolicy

ROLL_REACH_DAYS = 14
"""How far a roll looks for a business day (docs/defaults.md)."""
_DEFAULT_WEEK = frozenset({"MON", "TUE", "WED", "THU", "FRI"})
_WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_LONGEST_BLACKOUT_CHAIN = 16
BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)

Calendars = Mapping[str, BusinessCalendar | None]


@dataclass(frozen=True, slots=True)
class Era:
    """The calendars in force from `since` (a change's append instant) until the next era."""

    since: datetime
    calendars: Calendars


@dataclass(frozen=True, slots=True)
class OwedRun:
    """An occurrence the calendars leave owed, decided at `at` (jitter included) by a ticker
    that is up: fired, or `skipped` (by a calendar, `calendar_skipped`, or as missed)."""

    nominal: datetime
    skipped: bool
    at: datetime
    calendar_skipped: bool | None = False
    """`None`: too close to a calendar change to tell (see `kairos.core.audit_calendars`)."""


def calendar_eras(changes: Iterable[CalendarChange]) -> list[Era]:
    """The eras a calendars topic's changes that count make, in order, the first from the
    beginning of time (no calendar published)."""
    eras = [Era(BEGINNING, {})]
    for change in sorted(changes, key=lambda change: change.changed_at):
        version = change.in_force()
        calendar = None if version is None else version.calendar
        calendars = {**eras[-1].calendars, change.calendar_id: calendar}
        if change.changed_at <= eras[-1].since:
            eras[-1] = Era(eras[-1].since, calendars)
        else:
            eras.append(Era(change.changed_at, calendars))
    return eras


def owed_runs(
    schedule_id: str, schedule: Schedule, eras: Sequence[Era], start: datetime, end: datetime
) -> list[OwedRun]:
    """Every occurrence owed from `start` (the schedule in force from then on) that a ticker
    that is up decides before `end`, in the order decided. `eras` are in order, the first in
    force at `start`."""
    horizon = end + timedelta(days=ROLL_REACH_DAYS + 1)
    runs = owed_between(schedule_id, schedule, eras, start, horizon)
    return sorted((run for run in runs if run.at < end), key=lambda run: (run.at, run.nominal))


def owed_between(
    schedule_id: str,
    schedule: Schedule,
    eras: Sequence[Era],
    start: datetime,
    until: datetime,
    *,
    created: datetime | None = None,
    decided_day: datetime | None = None,
) -> list[OwedRun]:
    """Every occurrence owed from `start` whose nominal instant is before `until`, wherever
    and whenever the calendars run it, in nominal order. `created`: when the schedule came to
    owe them (nothing is decided before), `start` unless given. `decided_day`: the last
    occurrence an earlier `business_day` version of the schedule decided; its month keeps its
    day."""
    since = start if created is None else created
    if schedule.business_day is not None:
        return list(_business_day_runs(schedule_id, schedule, eras, (start, until), decided_day))
    runs = []
    for nominal, following in _pairs(_nominals(schedule, start, until)):
        if nominal >= until:
            break
        runs.append(_decided(schedule_id, schedule, nominal, following, eras=eras, start=since))
    return runs


def _nominals(schedule: Schedule, start: datetime, until: datetime) -> Iterator[datetime]:
    """The trigger's instants from `start`, up to the first at or after `until`."""
    fire = next_fire(schedule, start - timedelta(microseconds=1))
    while fire is not None:
        yield fire.nominal
        if fire.nominal >= until:
            return
        fire = next_fire(schedule, fire.nominal)


def _pairs(instants: Iterator[datetime]) -> Iterator[tuple[datetime, datetime | None]]:
    previous = next(instants, None)
    for instant in instants:
        assert previous is not None
        yield previous, instant
        previous = instant
    if previous is not None:
        yield previous, None


def _decided(
    schedule_id: str,
    schedule: Schedule,
    nominal: datetime,
    following: datetime | None,
    *,
    eras: Sequence[Era],
    start: datetime,
) -> OwedRun:
    jitter = jitter_offset(schedule_id, schedule, nominal)
    for index, era in enumerate(eras):
        place, skipped = _place(schedule, nominal, following, era.calendars)
        due = place + jitter
        at = max(due, era.since, start)
        if index + 1 < len(eras) and at >= eras[index + 1].since:
            continue
        late_from = due
        if place != nominal and not skipped:
            # Moved into the past by a change of its calendars: late from the change on.
            late_from = max(due, _changed_at(schedule, eras, index) or due)
        missed = schedule.misfire is MisfirePolicy.SKIP and at - late_from > MISFIRE_GRACE
        return OwedRun(nominal, skipped or missed, at, calendar_skipped=skipped)
    raise AssertionError("the last era decides every occurrence")


def _changed_at(schedule: Schedule, eras: Sequence[Era], index: int) -> datetime | None:
    """When the calendars the schedule names, as era `index` has them, were last changed
    (`None`: none of them is there)."""
    latest: datetime | None = None
    for calendar_id in (*schedule.exclude, *schedule.blackout):
        calendar = eras[index].calendars.get(calendar_id)
        since = eras[index].since
        for earlier in reversed(eras[:index]):
            if calendar is None or earlier.calendars.get(calendar_id) is not calendar:
                break
            since = earlier.since
        if calendar is not None:
            latest = since if latest is None else max(latest, since)
    return latest


def _place(
    schedule: Schedule, nominal: datetime, following: datetime | None, calendars: Calendars
) -> tuple[datetime, bool]:
    """Where one version of the calendars puts the occurrence, and whether it skips it."""
    if schedule.pause_until is not None and nominal < schedule.pause_until:
        return nominal, True
    zone = schedule.zone
    local = nominal.astimezone(zone)
    runs_at = nominal
    named = [calendars.get(calendar_id) for calendar_id in schedule.exclude]
    if schedule.roll is None:
        if any(_holiday(calendar, local.date()) for calendar in named):
            return nominal, True
    elif not _business(named, local.date()):
        step = 1 if schedule.roll is RollPolicy.NEXT_BUSINESS_DAY else -1
        days = (local.date() + timedelta(days=step * k) for k in range(1, ROLL_REACH_DAYS + 1))
        target = next((day for day in days if _business(named, day)), None)
        if target is None:
            return nominal, True
        runs_at = resolve_wall_time(datetime.combine(target, local.time()), zone)
    return _blackout(schedule, nominal, runs_at, following, calendars)


def _blackout(
    schedule: Schedule,
    nominal: datetime,
    runs_at: datetime,
    following: datetime | None,
    calendars: Calendars,
) -> tuple[datetime, bool]:
    windows = [calendars.get(calendar_id) for calendar_id in schedule.blackout]
    ends = [w.end for c in windows if c is not None and (w := c.window_at(runs_at)) is not None]
    if not ends:
        return runs_at, False
    if schedule.blackout_action is BlackoutAction.SKIP:
        return nominal, True
    end = max(ends)
    for _ in range(_LONGEST_BLACKOUT_CHAIN):
        later = [w.end for c in windows if c is not None and (w := c.window_at(end)) is not None]
        if not later or max(later) <= end:
            break
        end = max(later)
    if following is not None and following < end:
        return nominal, True
    return end, False


def _holiday(calendar: BusinessCalendar | None, day: date) -> bool:
    return calendar is not None and any(holiday.date == day for holiday in calendar.holidays)


def _business(named: Sequence[BusinessCalendar | None], day: date) -> bool:
    weekday = _WEEKDAYS[day.weekday()]
    for calendar in named:
        week = _DEFAULT_WEEK if calendar is None else {str(d) for d in calendar.business_days}
        if weekday not in week or _holiday(calendar, day):
            return False
    return True


def _business_day_runs(
    schedule_id: str,
    schedule: Schedule,
    eras: Sequence[Era],
    window: tuple[datetime, datetime],
    decided_day: datetime | None,
) -> Iterator[OwedRun]:
    start, end = window
    zone = schedule.zone
    expression = parse_cron(schedule.cron or "")
    worked_out_at = start
    month = start.astimezone(zone).date().replace(day=1)
    begun = None if decided_day is None else decided_day.astimezone(zone).date()
    while resolve_wall_time(datetime.combine(month, datetime.min.time()), zone) < end:
        day: date | None = begun
        moved_at = start
        if begun is None or begun.replace(day=1) != month:
            day, moved_at = _month_day(schedule, month, eras, worked_out_at)
        if day is not None and month.month in expression.months:
            midnight = datetime.combine(day, datetime.min.time())
            for seconds in expression.day_seconds:
                nominal = resolve_wall_time(midnight + timedelta(seconds=seconds), zone)
                if start <= nominal < end and _in_bounds(schedule, nominal):
                    worked_out_at = nominal
                    yield _business_day_run(schedule_id, schedule, nominal, moved_at, eras)
        month = (month + timedelta(days=32)).replace(day=1)


def _business_day_run(
    schedule_id: str, schedule: Schedule, nominal: datetime, moved_at: datetime, eras: Sequence[Era]
) -> OwedRun:
    due = nominal + jitter_offset(schedule_id, schedule, nominal)
    at = max(due, moved_at)
    placed, skipped = _blackout(schedule, nominal, nominal, None, _at(eras, at))
    if schedule.pause_until is not None and nominal < schedule.pause_until:
        placed, skipped = nominal, True
    if placed != nominal:
        at = max(placed + (due - nominal), moved_at)
    missed = schedule.misfire is MisfirePolicy.SKIP and at - due > MISFIRE_GRACE
    return OwedRun(nominal, skipped or missed, at, calendar_skipped=skipped)


def _month_day(
    schedule: Schedule, month: date, eras: Sequence[Era], worked_out_at: datetime
) -> tuple[date | None, datetime]:
    """The month's day, worked out at `worked_out_at` and moved by each later version while its
    first time is still ahead of that version's start, and when it was last moved."""
    moved_at = worked_out_at
    day = _nth_business_day(schedule, month, _at(eras, worked_out_at))
    for index, era in enumerate(eras):
        if era.since <= worked_out_at:
            continue
        if day is None or _first_time(schedule, day) <= era.since:
            break
        moved = _nth_business_day(schedule, month, era.calendars)
        if moved is None:
            return None, era.since
        if moved != day and _moves(schedule, day, moved, eras, index):
            day, moved_at = moved, era.since
    return day, moved_at


def _moves(schedule: Schedule, day: date, moved: date, eras: Sequence[Era], index: int) -> bool:
    """Whether era `index` moves the month's day: when the new day is ahead of the latest change
    of the named calendars there, and (a deleted one cannot date the change) only later when
    one of them is gone."""
    changed_at = _changed_at(schedule, eras, index)
    if changed_at is not None and _first_time(schedule, moved) <= changed_at:
        return False
    gone = any(eras[index].calendars.get(calendar_id) is None for calendar_id in schedule.exclude)
    return not gone or moved > day


def _nth_business_day(schedule: Schedule, month: date, calendars: Calendars) -> date | None:
    named = [calendars.get(calendar_id) for calendar_id in schedule.exclude]
    days = []
    day = month
    while day.month == month.month:
        if _business(named, day):
            days.append(day)
        day += timedelta(days=1)
    n = schedule.business_day
    assert n is not None
    if abs(n) > len(days):
        return None
    return days[n - 1] if n > 0 else days[n]


def _first_time(schedule: Schedule, day: date) -> datetime:
    seconds = min(parse_cron(schedule.cron or "").day_seconds)
    midnight = datetime.combine(day, datetime.min.time())
    return resolve_wall_time(midnight + timedelta(seconds=seconds), schedule.zone)


def _in_bounds(schedule: Schedule, nominal: datetime) -> bool:
    return (schedule.start_at is None or nominal >= schedule.start_at) and (
        schedule.end_at is None or nominal <= schedule.end_at
    )


def _at(eras: Sequence[Era], instant: datetime) -> Calendars:
    in_force = eras[0].calendars
    for era in eras:
        if era.since <= instant:
            in_force = era.calendars
    return in_force
