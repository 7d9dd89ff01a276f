"""How a calendars file's problems are told: which calendar, which field, what to do.

Pydantic's errors are turned into `CalendarValidationError`s that name the calendar by its id
(or its position in the file) and the field by its dotted path, with the fix in the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from kairos.core.errors import KairosError
from kairos.core.schedule import SCHEDULE_ID_PATTERN

WEEKDAY_NAMES = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


class CalendarValidationError(KairosError):
    """One problem with one calendar: which calendar, which field, what is wrong.

    `calendar_id` is `None` when the calendar has no usable id; then `index` (its position in
    the file, from 0) identifies it. `field` is a dotted path such as `holidays.3.date`.
    """

    def __init__(
        self, *, calendar_id: str | None, index: int | None, field: str, problem: str
    ) -> None:
        self.calendar_id = calendar_id
        self.index = index
        self.field = field
        self.problem = problem
        super().__init__(f"{self.where}: field '{field}': {problem}")

    @property
    def where(self) -> str:
        position = f"calendars[{self.index}]" if self.index is not None else None
        if self.calendar_id is None:
            return f"calendar {position or '(without id)'}"
        return f"calendar '{self.calendar_id}'" + (f" ({position})" if position else "")


class CalendarsInvalidError(KairosError):
    """Every problem found in one or more calendars; `errors` lists them all."""

    def __init__(self, errors: list[CalendarValidationError]) -> None:
        self.errors = tuple(errors)
        lines = "\n".join(f"  - {error}" for error in self.errors)
        count = f"{len(self.errors)} problem{'s' if len(self.errors) != 1 else ''}"
        super().__init__(f"{count} in the calendars; fix each and try again:\n{lines}")


class CalendarsFileFormatError(KairosError):
    """A calendars file is not YAML/JSON of the shape `{"calendars": [...]}`."""

    def __init__(self, fmt: str, problem: str) -> None:
        self.fmt = fmt
        self.problem = problem
        super().__init__(f"not a valid {fmt.upper()} calendars file: {problem}")


def calendar_problems(
    error: ValidationError,
    data: object,
    index: int | None,
    fields: Mapping[str, Iterable[str]],
) -> list[CalendarValidationError]:
    """Every problem of one calendar's `error`; `fields` lists the fields of the calendar
    (under "") and of its nested entries (under "holidays" and "windows"), for the messages
    of unknown fields."""
    calendar_id = None
    if isinstance(data, Mapping):
        candidate = data.get("id")
        if isinstance(candidate, str) and SCHEDULE_ID_PATTERN.fullmatch(candidate):
            calendar_id = candidate
    return [
        CalendarValidationError(calendar_id=calendar_id, index=index, field=field, problem=problem)
        for field, problem in (
            _describe(detail, fields) for detail in error.errors(include_url=False)
        )
    ]


def _describe(detail: Any, fields: Mapping[str, Iterable[str]]) -> tuple[str, str]:
    # A key can hold a lone surrogate; the path must still print.
    loc = detail["loc"]
    field = ".".join(str(part) for part in loc).encode("utf-8", "backslashreplace").decode()
    context = detail.get("ctx") or {}
    kind = detail["type"]
    if kind == "calendar_rule":
        inner = str(context["field"])
        return (f"{field}.{inner}" if field else inner), str(context["problem"])
    if kind == "value_error" and "error" in context:
        return field, str(context["error"])
    if kind == "missing":
        return field, "is required"
    if kind == "extra_forbidden":
        known = fields.get("" if len(loc) == 1 else str(loc[0]))
        listed = f"; the fields are {', '.join(known)}" if known is not None else ""
        return field, f"unknown field{listed}"
    if kind == "too_long":
        return field, (
            f"has {context.get('actual_length')} entries, more than the maximum, "
            f"{context.get('max_length')}; split the calendar into several"
        )
    if kind == "enum":
        return field, f"is not a day; use one of {', '.join(WEEKDAY_NAMES)}"
    if kind == "model_type" and not loc:
        return "", "each calendar must be a mapping of fields"
    shown = detail.get("input")
    got = f" (got {shown!r})" if isinstance(shown, str | int | float | bool) else ""
    return field, f"{detail['msg']}{got}"
