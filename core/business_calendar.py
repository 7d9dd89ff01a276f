"""Shared business calendars: the model every calendars file and event carries, and its queries.

A calendar is a named set of non-business dates (holidays), the business week, and optionally
blackout windows (`kairos.core.calendar_windows`), owned by a team and readable by every
schedule. docs/calendars.md states the shape, the limits and the rules. Pure: no I/O; the
versions a calendar had on its topic are `kairos.core.calendar_versions`'.
"""

from __future__ import annotations

import calendar as month_days
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from enum import StrEnum
from functools import cached_property, partial
from typing import Annotated, Any, Literal, Self
from zoneinfo import ZoneInfo

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from kairos.core.calendar_problems import (
    CalendarsFileFormatError,
    CalendarsInvalidError,
    CalendarValidationError,
    calendar_problem,
    describe_problem,
)
from kairos.core.calendar_windows import (
    BlackoutWindow,
    Name,
    Window,
    WindowIndex,
    calendar_rule,
    fixed_window_problem,
)
from kairos.core.errors import KairosError
from kairos.core.file_entries import EntryFile
from kairos.core.identifiers import SCHEDULE_ID_PATTERN, Identifier
from kairos.core.lru import LruCache
from kairos.core.schedule import Text, ZoneName
from kairos.core.schedule_text import SchedulesFileFormatError, listed_entries

__all__ = [
    "CALENDAR_ID_PATTERN",
    "MAX_HOLIDAYS",
    "MAX_RECURRING_WINDOWS",
    "MAX_WINDOWS",
    "WORK_WEEK",
    "BlackoutWindow",
    "BusinessCalendar",
    "CalendarQueryError",
    "CalendarValidationError",
    "CalendarsFileFormatError",
    "CalendarsInvalidError",
    "Holiday",
    "Weekday",
    "Window",
    "load_calendars",
    "parse_calendar",
]

CALENDAR_ID_PATTERN = SCHEDULE_ID_PATTERN
"""Calendar ids follow the schedule id rule: 1–200 characters of `[A-Za-z0-9._:/-]`."""

MAX_HOLIDAYS = 5000
"""Twenty years of a country's holidays with its regions' fit; more would not fit one record."""

MAX_WINDOWS = 200
MAX_RECURRING_WINDOWS = 32
"""Recurring windows cost a cron search each whenever a decision falls between window boundaries
no decision asked about before (`kairos.core.calendar_windows.WindowIndex`); fixed windows cost
a comparison. bench/bench_calendar_windows.py measures both (docs/benchmarks.md)."""

_ONE_DAY = timedelta(days=1)
_MONTHS_KEPT = 240


class Weekday(StrEnum):
    """A day of the business week, as calendars files spell it."""

    MON = "MON"
    TUE = "TUE"
    WED = "WED"
    THU = "THU"
    FRI = "FRI"
    SAT = "SAT"
    SUN = "SUN"

    @property
    def number(self) -> int:
        """`date.weekday()`'s number: 0 for Monday to 6 for Sunday."""
        return list(Weekday).index(self)


WORK_WEEK = (Weekday.MON, Weekday.TUE, Weekday.WED, Weekday.THU, Weekday.FRI)


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


class Holiday(BaseModel):
    """One non-business date: a local date, so the same in every zone, with its name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    date: date
    name: Name


@dataclass(frozen=True, slots=True)
class _Lookup:
    """What the queries read, derived once from a calendar's fields."""

    weekdays: frozenset[int]
    holiday_names: dict[date, str]
    windows: WindowIndex
    months: LruCache[tuple[int, int], tuple[date, ...]] = field(
        default_factory=lambda: LruCache(_MONTHS_KEPT)
    )
    """Recently asked months' business days."""


class CalendarQueryError(KairosError, ValueError):
    """A calendar query was asked with an unusable argument, such as a naive instant."""


class BusinessCalendar(BaseModel):
    """One calendar. Holidays are kept in date order; windows in the order given."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: Identifier
    owner: Text
    """The team that owns the calendar (in a signed deployment, whose changes of it count)."""
    description: Text | None = None
    timezone: ZoneName = "UTC"
    """IANA zone whose wall clock the windows are read on; holidays are local dates."""
    business_days: tuple[Annotated[Weekday, BeforeValidator(_upper)], ...] = WORK_WEEK
    holidays: tuple[Holiday, ...] = Field(default=(), max_length=MAX_HOLIDAYS)
    windows: tuple[BlackoutWindow, ...] = Field(default=(), max_length=MAX_WINDOWS)

    @field_validator("owner")
    @classmethod
    def _owned(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name the team that answers for the calendar")
        return value

    @field_validator("business_days")
    @classmethod
    def _a_business_week(cls, value: tuple[Weekday, ...]) -> tuple[Weekday, ...]:
        if not value:
            raise ValueError(
                "is empty, so no day is a business day and no business day can be found; "
                "list at least one, such as [MON, TUE, WED, THU, FRI]"
            )
        repeated = sorted({day for day in value if value.count(day) > 1}, key=list(Weekday).index)
        if repeated:
            raise ValueError(f"lists {', '.join(repeated)} more than once; list each day once")
        return tuple(sorted(value, key=lambda day: day.number))

    @field_validator("holidays")
    @classmethod
    def _distinct_dates(cls, value: tuple[Holiday, ...]) -> tuple[Holiday, ...]:
        first: dict[date, int] = {}
        for index, holiday in enumerate(value):
            if holiday.date in first:
                raise calendar_rule(
                    f"{index}.date",
                    f"{holiday.date.isoformat()} is also holidays[{first[holiday.date]}]; "
                    "list each date once (join the names: 'Christmas Day; Boxing Day')",
                )
            first[holiday.date] = index
        return tuple(sorted(value, key=lambda holiday: holiday.date))

    @field_validator("windows")
    @classmethod
    def _windows_on_the_clock(
        cls, value: tuple[BlackoutWindow, ...], info: ValidationInfo
    ) -> tuple[BlackoutWindow, ...]:
        # Checked here rather than on the whole model, so that a problem elsewhere does not
        # hide this one; fields validate in order, and an invalid timezone is reported itself.
        recurring = sum(window.recurring for window in value)
        if recurring > MAX_RECURRING_WINDOWS:
            raise ValueError(
                f"has {recurring} recurring windows (cron and duration), more than the maximum, "
                f"{MAX_RECURRING_WINDOWS}: each costs a cron search in the decisions of every "
                "schedule naming the calendar; list their occurrences as fixed windows (start "
                "and end), or merge windows with one cron"
            )
        timezone = info.data.get("timezone")
        if timezone is None:
            return value
        zone = ZoneInfo(timezone)
        for index, window in enumerate(value):
            problem = None if window.recurring else fixed_window_problem(window, zone)
            if problem is not None:
                raise calendar_rule(f"{index}.end", problem)
        return value

    @cached_property
    def _lookup(self) -> _Lookup:
        # Built on first use and kept: a ticker asks about the same calendar for every fire.
        return _Lookup(
            weekdays=frozenset(day.number for day in self.business_days),
            holiday_names={holiday.date: holiday.name for holiday in self.holidays},
            windows=WindowIndex(self.windows, self.timezone),
        )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; like every pydantic copy, `update` is not validated (use `parse_calendar`)."""
        copy = super().model_copy(update=update, deep=deep)
        # The lookup cached on this calendar describes its fields, not the updated ones.
        copy.__dict__.pop("_lookup", None)
        return copy

    def is_business_day(self, day: date) -> bool:
        """Whether `day` is a day of the business week and not a holiday."""
        _check_date(day)
        lookup = self._lookup
        return day.weekday() in lookup.weekdays and day not in lookup.holiday_names

    def holiday_name(self, day: date) -> str | None:
        """The holiday's name when `day` is one of the calendar's holidays, else `None`."""
        _check_date(day)
        return self._lookup.holiday_names.get(day)

    def next_business_day(self, day: date) -> date:
        """The first business day strictly after `day`."""
        return self._step(day, _ONE_DAY)

    def previous_business_day(self, day: date) -> date:
        """The last business day strictly before `day`."""
        return self._step(day, -_ONE_DAY)

    def business_days_in(self, year: int, month: int) -> list[date]:
        """Every business day of the month, in order."""
        _check_month(year, month)
        lookup = self._lookup
        found = lookup.months.get((year, month))
        if found is None:
            last = month_days.monthrange(year, month)[1]
            days = (date(year, month, number) for number in range(1, last + 1))
            found = tuple(
                day
                for day in days
                if day.weekday() in lookup.weekdays and day not in lookup.holiday_names
            )
            lookup.months.put((year, month), found)
        return list(found)

    def nth_business_day(self, year: int, month: int, n: int) -> date | None:
        """The `n`th business day of the month (1: the first), or from its end when `n` is
        negative (-1: the last); `None` when the month has fewer than |n| business days."""
        if n == 0:
            raise CalendarQueryError(
                "n is 0; count from 1 (the first business day) or from -1 (the last)"
            )
        days = self.business_days_in(year, month)
        if abs(n) > len(days):
            return None
        return days[n - 1] if n > 0 else days[n]

    def window_at(self, instant: datetime) -> Window | None:
        """The blackout window occurrence holding the aware `instant`, or `None`.

        When several hold it, the one that started first (then the one listed first).
        """
        if instant.tzinfo is None or instant.utcoffset() is None:
            raise CalendarQueryError(
                f"instant {instant.isoformat()} is naive; pass an aware datetime "
                "such as datetime(2026, 12, 24, 18, 0, tzinfo=UTC)"
            )
        return self._lookup.windows.at(instant)

    def _step(self, day: date, step: timedelta) -> date:
        _check_date(day)
        lookup = self._lookup
        # Every week holds a business weekday, and each holiday takes at most one of them: a
        # business day lies within that many weeks.
        for _ in range(7 * (len(self.holidays) + 1)):
            try:
                day += step
            except OverflowError:
                break
            if day.weekday() in lookup.weekdays and day not in lookup.holiday_names:
                return day
        direction = "after" if step > timedelta(0) else "before"
        raise CalendarQueryError(
            f"calendar {self.id!r} has no business day {direction} {day.isoformat()} "
            "within the dates Python can represent"
        )


def _check_date(day: date) -> None:
    if isinstance(day, datetime) or not isinstance(day, date):
        raise CalendarQueryError(
            f"{day!r} is not a date; pass the local date, such as "
            "instant.astimezone(ZoneInfo('America/New_York')).date()"
        )


def _check_month(year: int, month: int) -> None:
    if not 1 <= month <= 12:
        raise CalendarQueryError(f"month {month} is not 1–12")
    if not date.min.year <= year <= date.max.year:
        raise CalendarQueryError(f"year {year} is outside 1–9999")


_FIELDS = {
    "": BusinessCalendar.model_fields,
    "holidays": Holiday.model_fields,
    "windows": BlackoutWindow.model_fields,
}
_CALENDARS = EntryFile(
    BusinessCalendar.model_validate,
    CALENDAR_ID_PATTERN,
    partial(describe_problem, fields=_FIELDS),
    calendar_problem,
    CalendarsInvalidError,
)


def parse_calendar(data: object, *, index: int | None = None) -> BusinessCalendar:
    """Validate one calendar given as a mapping; `CalendarsInvalidError` lists every problem."""
    return _CALENDARS.parse(data, index)


def load_calendars(text: str, fmt: Literal["yaml", "json"]) -> list[BusinessCalendar]:
    """Parse a calendars file's text, `{"calendars": [ {...}, ... ]}`, in YAML or JSON.

    Every problem of every calendar is collected into one `CalendarsInvalidError`, duplicate
    ids included; text that is not YAML/JSON of that shape raises `CalendarsFileFormatError`.
    """
    try:
        entries = listed_entries(text, fmt, "calendars")
    except SchedulesFileFormatError as error:
        raise CalendarsFileFormatError(fmt, error.problem) from None
    return _CALENDARS.load(entries)
