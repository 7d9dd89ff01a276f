"""What shared calendars do to a schedule's occurrences: skip, roll, defer, or business days.

Pure: the calendars come in through a `CalendarLookup`, which says which version of a calendar
was in force for an occurrence; the ticker's lookup is the latest version it read, the audit's
the version whose `changed_at` is at or before the occurrence (the one a ticker deciding on time
had). docs/defaults.md states the rules for users:

- `pause_until`: an occurrence before the instant is skipped ("paused until ...").
- `exclude`: an occurrence whose local date (on the schedule's clock) is a holiday of one of the
  calendars is skipped, the reason naming the calendar, its version and the holiday. With
  `roll`, an occurrence on a non-business day (a holiday, or outside the business week, of any of
  the calendars) instead runs on the next or previous business day at the same wall time. Its
  run id keeps the occurrence's nominal instant, so a calendar change never renames a run.
- `blackout`: an occurrence inside a window of one of the calendars is skipped, or with
  `blackout_action: defer` runs at the window's end; several deferred into one window's end run
  once, as the last of them (the others are skipped as coalesced).
- `business_day: n`: the occurrences are the n-th business day of each month (from the end
  when negative), at the cron's times, by the `exclude` calendars (Monday to Friday without
  them).

A calendar the lookup does not know counts as one with the Monday-to-Friday week, no holidays
and no windows: an occurrence is never lost to a calendar nobody published.
"""

from __future__ import annotations

import calendar as month_days
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta

from kairos.core.calendar import Fire, jitter_offset, next_fire, real_time_fire
from kairos.core.calendar_versions import CalendarChange, CalendarVersion
from kairos.core.calendar_windows import Window, resolve_wall_time
from kairos.core.cron import parse_cron
from kairos.core.run_id import format_instant
from kairos.core.schedule import Schedule
from kairos.core.schedule_calendars import BlackoutAction, RollPolicy

CalendarLookup = Callable[[str, datetime], CalendarVersion | None]
"""The version of the calendar with an id in force for the occurrence at an instant."""

LONGEST_ROLL_DAYS = 14
"""A roll looks this many days for a business day; beyond, the occurrence is skipped."""

_MOST_WINDOWS_IN_A_ROW = 16
_WEEK = frozenset(range(5))


def latest(versions: dict[str, CalendarVersion]) -> CalendarLookup:
    """The ticker's lookup: the latest version read, whatever the occurrence's instant."""
    return lambda calendar_id, _at: versions.get(calendar_id)


def as_of_history(changes: Iterable[CalendarChange]) -> CalendarLookup:
    """The audit's lookup: the version whose `changed_at` (the broker's append time) is at or
    before the instant asked, among the changes that count (`read_calendar_history`)."""
    by_id: dict[str, list[CalendarChange]] = {}
    for change in changes:
        by_id.setdefault(change.calendar_id, []).append(change)

    def lookup(calendar_id: str, at: datetime) -> CalendarVersion | None:
        in_force: CalendarChange | None = None
        for change in by_id.get(calendar_id, ()):
            if change.changed_at <= at:
                in_force = change
        return None if in_force is None else in_force.in_force()

    return lookup


def uses_calendars(schedule: Schedule) -> bool:
    return bool(
        schedule.exclude
        or schedule.blackout
        or schedule.pause_until is not None
        or schedule.business_day is not None
    )


def next_occurrence(
    schedule: Schedule, after: datetime, calendars: CalendarLookup | None
) -> Fire | None:
    """The schedule's first occurrence strictly after `after` within its bounds, `business_day`
    triggers included (`kairos.core.calendar.next_fire` knows the others)."""
    if schedule.business_day is None:
        return next_fire(schedule, after)
    start, end = schedule.start_at, schedule.end_at
    if start is not None and after < start:
        after = start - timedelta(microseconds=1)
    for instant in business_day_instants(schedule, after, calendars):
        if end is not None and instant > end:
            return None
        return real_time_fire(instant, schedule.zone)
    return None


def fire_instant(
    schedule_id: str, schedule: Schedule, nominal: datetime, calendars: CalendarLookup | None
) -> tuple[Verdict, datetime]:
    """The calendars' verdict on the occurrence of schedule `schedule_id` and when it starts:
    where a roll or a deferral moved it, or its nominal instant, plus its jitter."""
    found = verdict(schedule, nominal, calendars, lambda at: _following(schedule, at, calendars))
    base = found.moved_to or nominal
    return found, base + jitter_offset(schedule_id, schedule, nominal)


def roll_target(
    schedule: Schedule, nominal: datetime, calendars: CalendarLookup | None
) -> datetime:
    """Where `roll` moves the occurrence at `nominal`, blackouts aside: its own instant when it
    is on a business day, when the schedule does not roll, or when no business day is near."""
    if schedule.roll is None:
        return nominal
    return _by_business_days(schedule, nominal, calendars or _no_calendars).moved_to or nominal


def _following(
    schedule: Schedule, nominal: datetime, calendars: CalendarLookup | None
) -> datetime | None:
    fire = next_occurrence(schedule, nominal, calendars)
    return fire.nominal if fire is not None else None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the calendars make of one occurrence: skipped (`skip_reason`), or run, at
    `moved_to` when a roll or a deferral moved it (`moved_why` says which)."""

    skip_reason: str | None = None
    moved_to: datetime | None = None
    moved_why: str | None = None
    placed_at: datetime | None = None
    """Of a moved occurrence: when the calendars that moved it last changed. A change that
    moves it into the past makes it late from then, not missed (`kairos.core.misfire`)."""


ON_TIME = Verdict()


def verdict(
    schedule: Schedule,
    nominal: datetime,
    calendars: CalendarLookup | None,
    following: Callable[[datetime], datetime | None],
) -> Verdict:
    """The calendars' verdict on the occurrence at `nominal`; `following(nominal)` is the next
    occurrence's nominal instant (a deferral coalesces into the last one in a window)."""
    found = _verdict(schedule, nominal, calendars, following)
    if found.moved_to is None:
        return found
    lookup = calendars or _no_calendars
    in_force = [
        lookup(calendar_id, nominal) for calendar_id in (*schedule.exclude, *schedule.blackout)
    ]
    changes = [version.changed_at for version in in_force if version is not None]
    return replace(found, placed_at=max(changes)) if changes else found


def _verdict(
    schedule: Schedule,
    nominal: datetime,
    calendars: CalendarLookup | None,
    following: Callable[[datetime], datetime | None],
) -> Verdict:
    if schedule.pause_until is not None and nominal < schedule.pause_until:
        return Verdict(skip_reason=f"paused until {format_instant(schedule.pause_until)}")
    lookup = calendars or _no_calendars
    start = nominal
    moved: Verdict = ON_TIME
    # A `business_day` occurrence is on a business day by construction, or one a calendar
    # change left at its old instant to run late rather than never (`business_day_in_force`).
    if schedule.exclude and schedule.business_day is None:
        moved = _by_business_days(schedule, nominal, lookup)
        if moved.skip_reason is not None:
            return moved
        start = moved.moved_to or nominal
    if not schedule.blackout:
        return moved
    window = _blackout_at(schedule.blackout, start, nominal, lookup)
    if window is None:
        return moved
    calendar_id, version, found = window
    inside = (
        f"inside blackout window {found.name!r} of calendar {calendar_id} v{version} "
        f"({format_instant(found.start)} to {format_instant(found.end)})"
    )
    if schedule.blackout_action is BlackoutAction.SKIP:
        return Verdict(skip_reason=inside)
    later = following(nominal)
    if later is not None and later < found.end:
        return Verdict(skip_reason=f"deferred and coalesced into a later occurrence: {inside}")
    return Verdict(moved_to=found.end, moved_why=f"deferred to the end of the window: {inside}")


def _no_calendars(_calendar_id: str, _at: datetime) -> CalendarVersion | None:
    return None


def _by_business_days(schedule: Schedule, nominal: datetime, lookup: CalendarLookup) -> Verdict:
    zone = schedule.zone
    wall = nominal.astimezone(zone)
    day = wall.date()
    versions = [(calendar_id, lookup(calendar_id, nominal)) for calendar_id in schedule.exclude]
    if schedule.roll is None:
        for calendar_id, found in versions:
            name = found.calendar.holiday_name(day) if found is not None else None
            if name is not None:
                assert found is not None
                return Verdict(
                    skip_reason=f"{day.isoformat()} is {name!r} in calendar {calendar_id} "
                    f"v{found.version}"
                )
        return ON_TIME
    if _business(versions, day):
        return ON_TIME
    step = 1 if schedule.roll is RollPolicy.NEXT_BUSINESS_DAY else -1
    for days in range(1, LONGEST_ROLL_DAYS + 1):
        target = day + timedelta(days=step * days)
        if _business(versions, target):
            moved_to = resolve_wall_time(
                datetime.combine(target, wall.time().replace(tzinfo=None)), zone
            )
            return Verdict(
                moved_to=moved_to,
                moved_why=f"{day.isoformat()} is not a business day in {_named(versions)}; "
                f"rolled to {target.isoformat()} ({schedule.roll.value})",
            )
    return Verdict(
        skip_reason=f"no business day within {LONGEST_ROLL_DAYS} days of {day.isoformat()} "
        f"in {_named(versions)} to roll to"
    )


def _business(versions: Sequence[tuple[str, CalendarVersion | None]], day: date) -> bool:
    for _, found in versions:
        if found is None:
            if day.weekday() not in _WEEK:
                return False
        elif not found.calendar.is_business_day(day):
            return False
    return True


def _named(versions: Sequence[tuple[str, CalendarVersion | None]]) -> str:
    return ", ".join(
        f"{calendar_id} v{found.version}" if found is not None else f"{calendar_id} (unpublished)"
        for calendar_id, found in versions
    )


def _blackout_at(
    calendar_ids: Sequence[str], instant: datetime, nominal: datetime, lookup: CalendarLookup
) -> tuple[str, int, Window] | None:
    """The window holding `instant`, stretched over windows that begin before it ends."""
    found: tuple[str, int, Window] | None = None
    at = instant
    for _ in range(_MOST_WINDOWS_IN_A_ROW):
        holding = [
            (calendar_id, version.version, window)
            for calendar_id in calendar_ids
            if (version := lookup(calendar_id, nominal)) is not None
            and (window := version.calendar.window_at(at)) is not None
        ]
        if not holding:
            return found
        latest_end = max(holding, key=lambda entry: entry[2].end)
        if found is None:
            found = latest_end
        else:
            first_id, first_version, first_window = found
            found = (first_id, first_version, _stretched(first_window, latest_end[2].end))
        at = found[2].end
    return found


def _stretched(window: Window, end: datetime) -> Window:
    return Window(window.name, window.start, max(window.end, end), window.index, window.recurring)


def business_day_instants(
    schedule: Schedule, after: datetime, calendars: CalendarLookup | None
) -> Iterable[datetime]:
    """The `business_day` trigger's instants after `after`, month by month, in order."""
    n = schedule.business_day
    assert schedule.cron is not None and n is not None
    expr = parse_cron(schedule.cron)
    zone = schedule.zone
    local = after.astimezone(zone)
    year, month = local.year, local.month
    lookup = calendars or _no_calendars
    for _ in range(12 * 41):
        if month in expr.months:
            versions = [
                (calendar_id, lookup(calendar_id, after)) for calendar_id in schedule.exclude
            ]
            day = _nth_business_day(versions, year, month, n)
            midnight = datetime.combine(day, datetime.min.time()) if day is not None else None
            for seconds in expr.day_seconds if midnight is not None else ():
                assert midnight is not None
                instant = resolve_wall_time(midnight + timedelta(seconds=seconds), zone)
                if instant > after:
                    yield instant
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        if year > 9899:
            return


def business_day_following(
    schedule: Schedule,
    decided: datetime,
    calendars: CalendarLookup | None,
    after: datetime | None = None,
) -> Fire | None:
    """The first `business_day` occurrence after `after` (`decided` unless given) of a
    schedule whose last decided occurrence is at `decided`: a later time of that day, or a
    later month's. Never another day of its month, should a calendar change have moved the
    month's n-th business day since: a month runs on one day, whatever paused or edited it."""
    assert schedule.cron is not None
    after = decided if after is None else after
    zone = schedule.zone
    day = decided.astimezone(zone)
    later = after.astimezone(zone)
    if (later.year, later.month) != (day.year, day.month):
        return next_occurrence(schedule, after, calendars)
    midnight = datetime.combine(day.date(), datetime.min.time())
    end = schedule.end_at
    for seconds in parse_cron(schedule.cron).day_seconds:
        instant = resolve_wall_time(midnight + timedelta(seconds=seconds), zone)
        if instant > after and (schedule.start_at is None or instant >= schedule.start_at):
            return None if end is not None and instant > end else real_time_fire(instant, zone)
    year, month = (day.year + 1, 1) if day.month == 12 else (day.year, day.month + 1)
    next_month = resolve_wall_time(datetime(year, month, 1), zone)
    return next_occurrence(schedule, next_month - timedelta(microseconds=1), calendars)


def business_day_in_force(
    schedule: Schedule,
    stored: datetime,
    last_decided: datetime | None,
    calendars: CalendarLookup | None,
) -> datetime | None:
    """The `business_day` occurrence a state holding `stored` owes next with the calendars as
    they are now: `stored`, or where a calendar change moved it (`None`: none is left).

    The month of `stored` is derived again. Its day moves when the new one is still ahead of
    the change (after the latest `changed_at` of the calendars it names); one the change put
    behind it runs at the old instant instead, late rather than never. A month with no n-th
    business day any more owes nothing. A month whose day has begun (`last_decided` in it)
    keeps that day: a month never runs on two days. A deleted calendar has no `changed_at`
    to date the change by: with one among those named, the day moves only later.
    """
    zone = schedule.zone
    local = stored.astimezone(zone)
    if last_decided is not None:
        decided = last_decided.astimezone(zone)
        if (decided.year, decided.month) == (local.year, local.month):
            return stored
    month_start = resolve_wall_time(datetime(local.year, local.month, 1), zone)
    derived = next_occurrence(schedule, month_start - timedelta(microseconds=1), calendars)
    if derived is None:
        return None
    found = derived.nominal.astimezone(zone)
    if found.date() == local.date():
        return stored  # the same day: its times before `stored` were not owed
    if (found.year, found.month) != (local.year, local.month):
        return derived.nominal  # the month has no n-th business day any more
    lookup = calendars or _no_calendars
    in_force = [lookup(calendar_id, stored) for calendar_id in schedule.exclude]
    dated = [version.changed_at for version in in_force if version is not None]
    if dated and derived.nominal <= max(dated):
        return stored
    if len(dated) < len(in_force) and derived.nominal < stored:
        return stored  # a deleted calendar cannot date the change: never earlier, then
    return derived.nominal


def _nth_business_day(
    versions: Sequence[tuple[str, CalendarVersion | None]], year: int, month: int, n: int
) -> date | None:
    last = month_days.monthrange(year, month)[1]
    days = [
        day
        for day in (date(year, month, number) for number in range(1, last + 1))
        if _business(versions, day)
    ]
    if abs(n) > len(days):
        return None
    return days[n - 1] if n > 0 else days[n]


@dataclass(frozen=True, slots=True)
class Planned:
    """One occurrence as the calendars leave it: skipped, or run at `runs_at`."""

    fire: Fire
    verdict: Verdict

    @property
    def runs_at(self) -> datetime | None:
        """Where a roll or deferral moved it, else its nominal instant; `None` when skipped."""
        if self.verdict.skip_reason is not None:
            return None
        return self.verdict.moved_to or self.fire.nominal


def planned(
    schedule: Schedule, after: datetime, calendars: CalendarLookup | None
) -> Iterator[Planned]:
    """Every occurrence strictly after `after`, in nominal order, with the calendars' verdict
    (endless unless the schedule ends)."""
    fire = next_occurrence(schedule, after, calendars)
    while fire is not None:
        following = next_occurrence(schedule, fire.nominal, calendars)
        yield Planned(fire, verdict(schedule, fire.nominal, calendars, _known(following)))
        fire = following


def _known(following: Fire | None) -> Callable[[datetime], datetime | None]:
    """The `following` of `verdict` when the next occurrence is already known."""
    nominal = following.nominal if following is not None else None
    return lambda _at: nominal
