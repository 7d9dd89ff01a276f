"""The text of a cron expression before croniter expands it, and why croniter refused one.

`kairos.core.cron` hands croniter five plain fields. This module gets them ready: macros,
field count, the items croniter lacks (`L`, `L-n`, `LW`, `nL`) and the ones it reads otherwise
(`1-1`), and random or hashed fields it must not see. When croniter refuses a field, its message
names neither the field nor the fix; `explain_refusal` finds the item at fault and says both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from croniter import CroniterError, CroniterUnsupportedSyntaxError, croniter

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
DAY_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}


@dataclass(frozen=True)
class FieldSpec:
    name: str
    low: int
    high: int
    """The highest value accepted: 7 in day-of-week, which is Sunday again."""
    names: dict[str, int]

    @property
    def every_value(self) -> range:
        """What `*` names: day-of-week's Sunday is 0 only."""
        return range(self.low, min(self.high, 6 if self.name == "day-of-week" else self.high) + 1)


FIELDS = (
    FieldSpec("minute", 0, 59, {}),
    FieldSpec("hour", 0, 23, {}),
    FieldSpec("day-of-month", 1, 31, {}),
    FieldSpec("month", 1, 12, _MONTH_NAMES),
    FieldSpec("day-of-week", 0, 7, DAY_NAMES),
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
class DayOfMonthExtras:
    """The day-of-month items croniter lacks, and the rest of the field for croniter."""

    plain: str
    """The other items, comma-separated; empty when there are none."""
    last_day_offsets: frozenset[int]
    """n for each `L-n`; 0 for `L`."""
    last_weekday: bool
    """`LW`: the last weekday (Monday to Friday) of the month."""


_RANDOM_OR_HASHED = re.compile(r"^[HR](?:$|[/(])", re.IGNORECASE)
_EQUAL_RANGE = re.compile(r"^([^-/#]+)-([^-/#]+)(?:/\d+)?$")
_LAST_MINUS = re.compile(r"^L-(\d+)$", re.IGNORECASE)
_QUARTZ_LAST_WEEKDAY = re.compile(r"^(\d|[A-Z]{3})L$", re.IGNORECASE)


def split_fields(expression: str) -> list[str]:
    """The five fields of an expression or macro, each item checked and normalised."""
    text = " ".join(expression.split())
    if text.startswith("@"):
        expanded = MACROS.get(text.lower())
        if expanded is None:
            raise CronSyntaxError(
                expression, None, f"unknown macro {text!r}; use one of {', '.join(MACROS)}"
            )
        text = expanded
    parts = text.split(" ")
    if len(parts) != len(FIELDS):
        hint = " (Kairos cron has no seconds or year field)" if len(parts) > len(FIELDS) else ""
        raise CronSyntaxError(
            expression,
            None,
            f"expected 5 fields (minute hour day-of-month month day-of-week), got "
            f"{len(parts) if text else 0}{hint}",
        )
    return [
        ",".join(_normal_item(expression, spec, item) for item in part.split(","))
        for spec, part in zip(FIELDS, parts, strict=True)
    ]


def _normal_item(expression: str, spec: FieldSpec, item: str) -> str:
    if not item:
        raise CronSyntaxError(
            expression, spec.name, "empty list item (two commas in a row, or a trailing comma)"
        )
    if _RANDOM_OR_HASHED.match(item):
        raise CronSyntaxError(
            expression,
            spec.name,
            f"{item!r}: random and hashed values ('R', 'H') are not supported, since every "
            "ticker must read the same times from a schedule; write the value, and use "
            "'jitter' to spread a herd",
        )
    equal = _EQUAL_RANGE.match(item)
    if equal and _same_value(spec, equal.group(1), equal.group(2)):
        # In every cron `1-1` is the one value 1; croniter reads an equal range as the whole
        # field, which would turn "Mondays only" (`MON-MON`) into every day.
        return equal.group(1)
    return item


def _same_value(spec: FieldSpec, low: str, high: str) -> bool:
    def number(text: str) -> int | None:
        return int(text) if text.isdigit() else spec.names.get(text.upper())

    first, second = number(low), number(high)
    return first is not None and first == second


def read_day_of_month_extras(expression: str, text: str) -> DayOfMonthExtras:
    """Take `L`, `L-n` and `LW` out of the day-of-month field (croniter has no `L-n`, `LW`)."""
    items = text.split(",")
    if len(items) > 1 and any("W" in item.upper() for item in items):
        raise CronSyntaxError(
            expression,
            "day-of-month",
            f"{text!r}: 'W' names one day, so it stands alone in the field ('15W' or 'LW'); "
            "write a second schedule for the other days",
        )
    plain: list[str] = []
    offsets: set[int] = set()
    last_weekday = False
    for item in items:
        upper = item.upper()
        minus = _LAST_MINUS.match(item)
        if re.fullmatch(r"L-\d+W", upper):
            raise CronSyntaxError(
                expression,
                "day-of-month",
                f"{item!r}: the weekday nearest a day counted from the end is not supported; "
                "write 'LW' (the last weekday) or 'L-n' (n days before the last)",
            )
        if upper == "L":
            offsets.add(0)
        elif upper in ("LW", "WL"):
            last_weekday = True
        elif minus:
            offset = int(minus.group(1))
            if not 1 <= offset <= 30:
                raise CronSyntaxError(
                    expression,
                    "day-of-month",
                    f"{item!r}: the days before the last after 'L-' must be 1–30 "
                    "('L-3' is three days before the last day)",
                )
            offsets.add(offset)
        else:
            plain.append(item)
    return DayOfMonthExtras(",".join(plain), frozenset(offsets), last_weekday)


def rewrite_day_of_week(text: str) -> str:
    """Quartz's `5L` / `FRIL` (the last Friday) in croniter's spelling, `L5`; and Quartz's `L`
    alone, which is Saturday (Quartz's day 7), as croniter has no meaning for it."""
    if text.upper() == "L":
        return str(DAY_NAMES["SAT"])
    items = []
    for item in text.split(","):
        quartz = _QUARTZ_LAST_WEEKDAY.match(item)
        if quartz is None:
            items.append(item)
            continue
        day = quartz.group(1).upper()
        items.append(f"L{DAY_NAMES.get(day, day)}")
    return ",".join(items)


def explain_refusal(expression: str, fields: list[str], error: CroniterError) -> CronSyntaxError:
    """Which field and item croniter refused in `fields`, what is wrong, and how to fix it."""
    for index, spec in enumerate(FIELDS):
        probe = ["*"] * len(FIELDS)
        for item in fields[index].split(","):
            probe[index] = item
            if _refused(probe):
                return CronSyntaxError(expression, spec.name, _item_problem(spec, item, probe))
        probe[index] = fields[index]
        refusal = _refused(probe)
        if isinstance(refusal, CroniterUnsupportedSyntaxError):
            return CronSyntaxError(
                expression,
                spec.name,
                f"{fields[index]!r}: plain weekdays and '#' or 'L' weekdays cannot share the "
                "field; write a second schedule for one of them",
            )
        if refusal is not None:
            return CronSyntaxError(expression, spec.name, _croniter_words(fields[index], probe))
    return CronSyntaxError(expression, None, _croniter_words(" ".join(fields), fields, error))


_LONELY_LETTERS = {
    ("day-of-week", "L"): "'L' stands alone (Saturday, as in Quartz) or after a weekday ('5L' "
    "or 'FRIL' is the last Friday of the month); for the last day, put 'L' in day-of-month",
    ("day-of-month", "W"): "write the day before 'W' ('15W' is the weekday nearest the 15th), "
    "or 'LW' for the last weekday of the month",
}


def _refused(fields: list[str]) -> CroniterError | None:
    try:
        croniter(" ".join(fields), 0)
    except CroniterError as error:
        return error
    return None


def _item_problem(spec: FieldSpec, item: str, probe: list[str]) -> str:
    lonely = _LONELY_LETTERS.get((spec.name, item.upper()))
    if lonely is not None:
        return f"{item!r}: {lonely}"
    if "?" in item:
        return (
            f"{item!r}: '?' (no specific value) stands alone, and only in day-of-month or "
            "day-of-week; write '*' elsewhere"
        )
    range_text, slash, step = item.partition("/")
    if slash and (not step.isdigit() or int(step) == 0):
        return f"{item!r}: the step after '/' must be a whole number of at least 1"
    range_text, hash_sign, week = range_text.partition("#")
    if hash_sign and not (week.isdigit() and 1 <= int(week) <= 5):
        return f"{item!r}: the week after '#' must be 1–5 ('FRI#3' is the third Friday)"
    if spec.name == "day-of-week" and range_text[:1] in "Ll" and range_text[1:].isdigit():
        range_text = range_text[1:]
    if spec.name == "day-of-month":
        range_text = range_text.strip("Ww")
    for token in range_text.split("-") if range_text != "*" else ():
        if token.isdigit():
            number = int(token)
            if not spec.low <= number <= spec.high:
                return f"{number} is out of range {spec.low}–{spec.high}"
        elif token.upper() not in spec.names:
            names = f" or a name ({', '.join(spec.names)})" if spec.names else ""
            return f"{token!r} is not a number{names}"
    return _croniter_words(item, probe)


def _croniter_words(text: str, probe: list[str], error: CroniterError | None = None) -> str:
    refusal = error or _refused(probe)
    message = str(refusal)
    # croniter opens with the whole expression in brackets, which the error already quotes.
    message = re.sub(r"^\[[^\]]*\]\s*", "", message).strip().rstrip(".")
    if message in ("", "is not acceptable"):
        message = "not a value, a range (1-5), a step (*/15, 1-30/5) or a list of them"
    return f"{text!r}: {message}; see docs/defaults.md#cron for the syntax"
