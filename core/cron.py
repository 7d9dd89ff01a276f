"""Five-field cron expressions, parsed into the dates and times of day they name.

croniter is the parser: it reads numbers, names, ranges (wrapping ones such as `FRI-MON`
included), steps, lists, `?`, and the Quartz extensions it knows (`nW` in day-of-month, `n#k`
and `Ln` in day-of-week). Kairos reads its expansion of each field and adds only what croniter
lacks or reads differently (`kairos.core.cron_syntax` says why, item by item): `L`, `L-n` and
`LW` in day-of-month, Quartz's `5L` / `FRIL`, equal ranges, and refusing `R` and `H`.

Parsing is separate from the calendar: this module only knows which local dates and wall-clock
minutes an expression names. How those become instants in a time zone (DST gaps and repeated
hours) is `kairos.core.calendar`'s job. The semantics are stated in docs/defaults.md.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cached_property, lru_cache

from croniter import CroniterError, croniter

from kairos.core.cron_syntax import (
    FIELDS,
    CronSyntaxError,
    explain_refusal,
    read_day_of_month_extras,
    rewrite_day_of_week,
    split_fields,
)

__all__ = ["CronExpr", "CronSyntaxError", "parse_cron"]

_SAMPLE_START = date(2001, 1, 1)
_SAMPLE_END = date(2028, 12, 31)
"""Every combination of month, leap year and weekday of the 1st occurs in these 28 years, so
an expression that matches no date in them matches none ever."""


@dataclass(frozen=True)
class CronExpr:
    """A parsed expression: the allowed values of each field, its extensions, cronie's flags.

    `wildcard` is true when the minute or hour field starts with `*`; such jobs follow real time
    across DST transitions, while the others are fixed-time jobs (see docs/defaults.md).
    `dom_star`/`dow_star` say whether the day fields start with `*` (or are `?`): when neither
    does, a day matching either fires (OR); otherwise both must match (AND).

    Beside the plain day values: `last_day_offsets` holds n for each `L-n` (0 for `L`),
    `last_weekday` is `LW`, `nearest_weekdays` the n of each `nW`, and `nth_weekdays` the
    (weekday, k) pairs of `weekday#k`, with k = -1 for the last one of the month (`5L`).
    """

    expression: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_star: bool
    dow_star: bool
    wildcard: bool
    day_seconds: tuple[int, ...]
    """Every time of day the expression names, as seconds after midnight, sorted."""
    last_day_offsets: frozenset[int] = frozenset()
    last_weekday: bool = False
    nearest_weekdays: frozenset[int] = frozenset()
    nth_weekdays: frozenset[tuple[int, int]] = frozenset()
    extended: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Plain expressions keep the two set look-ups a herd's date search costs.
        extended = bool(
            self.last_day_offsets or self.last_weekday or self.nearest_weekdays or self.nth_weekdays
        )
        object.__setattr__(self, "extended", extended)

    def matches_date(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        if self.extended:
            dom_ok, dow_ok = self._day_of_month_matches(day), self._day_of_week_matches(day)
        else:
            dom_ok = day.day in self.days_of_month
            dow_ok = (day.weekday() + 1) % 7 in self.days_of_week
        if self.dom_star or self.dow_star:
            return dom_ok and dow_ok
        return dom_ok or dow_ok

    def _day_of_month_matches(self, day: date) -> bool:
        if day.day in self.days_of_month:
            return True
        last = calendar.monthrange(day.year, day.month)[1]
        if last - day.day in self.last_day_offsets:
            return True
        if self.last_weekday and day.day == _nearest_weekday(day.year, day.month, last, last):
            return True
        return any(
            day.day == _nearest_weekday(day.year, day.month, wanted, last)
            for wanted in self.nearest_weekdays
        )

    def _day_of_week_matches(self, day: date) -> bool:
        weekday = (day.weekday() + 1) % 7
        if weekday in self.days_of_week:
            return True
        if (weekday, (day.day - 1) // 7 + 1) in self.nth_weekdays:
            return True
        last = calendar.monthrange(day.year, day.month)[1]
        return day.day + 7 > last and (weekday, -1) in self.nth_weekdays

    def matches(self, wall: datetime) -> bool:
        """Whether a (naive) wall-clock time is one the expression names."""
        return (
            wall.second == 0
            and wall.microsecond == 0
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and self.matches_date(wall.date())
        )

    @cached_property
    def never_matches(self) -> bool:
        """True when no calendar date can ever match, such as `0 0 30 2 *` or `0 0 * 2 1#5`."""
        return _first_match_in_sample(self) is None


def _first_match_in_sample(expr: CronExpr) -> date | None:
    current = _SAMPLE_START
    while current <= _SAMPLE_END:
        if current.month not in expr.months:
            current = date(current.year + current.month // 12, current.month % 12 + 1, 1)
        elif expr.matches_date(current):
            return current
        else:
            current += timedelta(days=1)
    return None


def _nearest_weekday(year: int, month: int, wanted: int, last: int) -> int | None:
    """The weekday (Monday to Friday) nearest the `wanted` day, within the month (Quartz `W`).

    A Saturday moves to the Friday before and a Sunday to the Monday after, unless that leaves
    the month: the 1st on a Saturday moves to Monday the 3rd, a last day on a Sunday to Friday.
    A day the month does not have (`31W` in April) names no day, as `31` names none; croniter
    would take the 30th, Quartz skips the month.
    """
    if wanted > last:
        return None
    weekday = calendar.weekday(year, month, wanted)
    if weekday == 5:
        return wanted - 1 if wanted > 1 else wanted + 2
    if weekday == 6:
        return wanted + 1 if wanted < last else wanted - 2
    return wanted


@lru_cache(maxsize=4096)
def parse_cron(expression: str) -> CronExpr:
    """Parse five fields (minute hour day-of-month month day-of-week) or a macro like `@daily`.

    Raises `CronSyntaxError` naming the field, the problem and the fix.
    """
    fields = split_fields(expression)
    dom_extras = read_day_of_month_extras(expression, fields[2])
    plain = [
        fields[0],
        fields[1],
        dom_extras.plain or "*",
        fields[3],
        rewrite_day_of_week(fields[4]),
    ]
    try:
        parsed = croniter(" ".join(plain), 0)
    except CroniterError as error:
        raise explain_refusal(expression, plain, error) from None
    minutes, hours, doms, months, dows = (
        _values(spec.every_value, expansion)
        for spec, expansion in zip(FIELDS, parsed.expanded, strict=True)
    )
    nth_weekdays = frozenset(
        (int(weekday), -1 if which == "l" else int(which))
        for weekday, kinds in parsed.nth_weekday_of_month.items()
        for which in kinds
    )
    nearest = frozenset(int(day) for day in parsed.nearest_weekday)
    return CronExpr(
        expression=expression,
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days_of_month=frozenset(doms - nearest if dom_extras.plain else ()),
        months=frozenset(months),
        # croniter lists a `#`/`L` weekday among the plain ones too.
        days_of_week=frozenset(dows - {weekday for weekday, _ in nth_weekdays}),
        dom_star=_is_star(fields[2]),
        dow_star=_is_star(fields[4]),
        wildcard=fields[0].startswith("*") or fields[1].startswith("*"),
        day_seconds=tuple(
            sorted(hour * 3600 + minute * 60 for hour in hours for minute in minutes)
        ),
        last_day_offsets=dom_extras.last_day_offsets,
        last_weekday=dom_extras.last_weekday,
        nearest_weekdays=nearest,
        nth_weekdays=nth_weekdays,
    )


def _values(every_value: range, expansion: list[int | str]) -> set[int]:
    if "*" in expansion:  # croniter keeps a `*` listed beside other items (`*,5`)
        return set(every_value)
    return {int(value) for value in expansion}


def _is_star(text: str) -> bool:
    return text.startswith("*") or text == "?"
