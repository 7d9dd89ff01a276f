"""Five-field cron expressions, parsed into sets of allowed values (Debian/cronie syntax).

Parsing is separate from the calendar: this module only knows which wall-clock minutes an
expression names. How those minutes become instants in a time zone (DST gaps and repeated
hours) is `kairos.core.calendar`'s job.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache

from kairos.core.errors import KairosError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
_DAY_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS = (
    _FieldSpec("minute", 0, 59, {}),
    _FieldSpec("hour", 0, 23, {}),
    _FieldSpec("day-of-month", 1, 31, {}),
    _FieldSpec("month", 1, 12, _MONTH_NAMES),
    # 7 is Sunday as well as 0, as in every cron; it is folded onto 0 after parsing.
    _FieldSpec("day-of-week", 0, 7, _DAY_NAMES),
)


class CronSyntaxError(KairosError, ValueError):
    """A cron expression could not be read.

    `expression` is the whole input, `field` the cron field at fault (`minute`, …, or `None` when
    the shape is wrong) and `problem` what is wrong. It is also a `ValueError` so that pydantic
    reports it as a field error.
    """

    def __init__(self, expression: str, field: str | None, problem: str) -> None:
        self.expression = expression
        self.field = field
        self.problem = problem
        where = f"{field} field" if field else "expression"
        super().__init__(f"invalid cron {expression!r}: {where}: {problem}")


@dataclass(frozen=True)
class CronExpr:
    """A parsed expression: the allowed values of each field, plus cronie's `*` flags.

    `wildcard` is true when the minute or hour field starts with `*`; such jobs follow real time
    across DST transitions, while the others are fixed-time jobs (see docs/defaults.md).
    `dom_star`/`dow_star` say whether the day fields start with `*`: when neither does, a day
    matching either fires (OR); otherwise both must match (AND).
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

    def matches_date(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom_ok = day.day in self.days_of_month
        dow_ok = (day.weekday() + 1) % 7 in self.days_of_week
        if self.dom_star or self.dow_star:
            return dom_ok and dow_ok
        return dom_ok or dow_ok

    def matches(self, wall: datetime) -> bool:
        """Whether a (naive) wall-clock time is one the expression names."""
        return (
            wall.second == 0
            and wall.microsecond == 0
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and self.matches_date(wall.date())
        )

    @property
    def never_matches(self) -> bool:
        """True when no calendar date can ever match, such as `0 0 30 2 *`.

        With OR semantics every week has a matching weekday. With AND semantics each valid
        (month, day) pair falls on every weekday over the years, so only impossible pairs remain.
        """
        if not (self.dom_star or self.dow_star):
            return False
        return not any(
            day <= _longest_month(month) for month in self.months for day in self.days_of_month
        )


def _longest_month(month: int) -> int:
    return calendar.monthrange(2000, month)[1]  # 2000 is a leap year, so February has 29


@lru_cache(maxsize=4096)
def parse_cron(expression: str) -> CronExpr:
    """Parse five fields (minute hour day-of-month month day-of-week) or a macro like `@daily`.

    Raises `CronSyntaxError` naming the field and the problem.
    """
    text = " ".join(expression.split())
    if text.startswith("@"):
        expanded = MACROS.get(text.lower())
        if expanded is None:
            raise CronSyntaxError(
                expression, None, f"unknown macro {text!r}; use one of {', '.join(MACROS)}"
            )
        text = expanded
    parts = text.split(" ")
    if len(parts) != len(_FIELDS):
        hint = " (Kairos cron has no seconds or year field)" if len(parts) > len(_FIELDS) else ""
        raise CronSyntaxError(
            expression,
            None,
            f"expected 5 fields (minute hour day-of-month month day-of-week), got "
            f"{len(parts) if text else 0}{hint}",
        )
    minutes, hours, doms, months, dows = (
        _parse_field(expression, spec, part) for spec, part in zip(_FIELDS, parts, strict=True)
    )
    return CronExpr(
        expression=expression,
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days_of_month=frozenset(doms),
        months=frozenset(months),
        days_of_week=frozenset(day % 7 for day in dows),
        dom_star=parts[2].startswith("*"),
        dow_star=parts[4].startswith("*"),
        wildcard=parts[0].startswith("*") or parts[1].startswith("*"),
        day_seconds=tuple(
            sorted(hour * 3600 + minute * 60 for hour in hours for minute in minutes)
        ),
    )


def _parse_field(expression: str, spec: _FieldSpec, text: str) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(expression, spec, item))
    return values


def _parse_item(expression: str, spec: _FieldSpec, item: str) -> range:
    def fail(problem: str) -> CronSyntaxError:
        return CronSyntaxError(expression, spec.name, problem)

    if not item:
        raise fail("empty list item (two commas in a row, or a trailing comma)")
    if any(char in item for char in "?LW#"):
        raise fail(f"{item!r}: '?', 'L', 'W' and '#' are not supported; use '*', ranges and lists")
    range_text, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or int(step_text) == 0:
            raise fail(f"{item!r}: the step after '/' must be a whole number of at least 1")
        step = int(step_text)
    if range_text == "*":
        return range(spec.low, spec.high + 1, step)
    low_text, dash, high_text = range_text.partition("-")
    low = _value(expression, spec, low_text)
    if not dash:
        if slash:
            raise fail(
                f"{item!r}: a step needs a range; write '*/{step}' or '{low}-{spec.high}/{step}'"
            )
        return range(low, low + 1)
    high = _value(expression, spec, high_text)
    if high < low:
        raise fail(f"{item!r}: the range runs backwards; write the smaller value first")
    return range(low, high + 1, step)


def _value(expression: str, spec: _FieldSpec, text: str) -> int:
    if text.isdigit():
        number = int(text)
    elif text.upper() in spec.names:
        number = spec.names[text.upper()]
    else:
        names = f" or a name ({', '.join(spec.names)})" if spec.names else ""
        raise CronSyntaxError(expression, spec.name, f"{text!r} is not a number{names}")
    if not spec.low <= number <= spec.high:
        raise CronSyntaxError(
            expression, spec.name, f"{number} is out of range {spec.low}–{spec.high}"
        )
    return number
