"""How a calendars file's problems are told: which calendar, which field, what to do.

Pydantic's errors are turned into `CalendarValidationError`s that name the calendar by its id
(or its position in the file) and the field by its dotted path, with the fix in the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kairos.core.errors import KairosError
from kairos.core.file_entries import EntriesInvalidError, EntryValidationError

WEEKDAY_NAMES = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


class CalendarValidationError(EntryValidationError):
    """One problem with one calendar: which calendar, which field, what is wrong.

    `calendar_id` is `None` when the calendar has no usable id; then `index` (its position in
    the file, from 0) identifies it. `field` is a dotted path such as `holidays.3.date`.
    """

    entry = "calendar"

    def __init__(
        self, *, calendar_id: str | None, index: int | None, field: str, problem: str
    ) -> None:
        super().__init__(calendar_id, index=index, field=field, problem=problem)

    @property
    def calendar_id(self) -> str | None:
        return self.entry_id


class CalendarsInvalidError(EntriesInvalidError[CalendarValidationError]):
    """Every problem found in one or more calendars; `errors` lists them all."""

    entries = "calendars"


class CalendarsFileFormatError(KairosError):
    """A calendars file is not YAML/JSON of the shape `{"calendars": [...]}`."""

    def __init__(self, fmt: str, problem: str) -> None:
        self.fmt = fmt
        self.problem = problem
        super().__init__(f"not a valid {fmt.upper()} calendars file: {problem}")


def calendar_problem(
    calendar_id: str | None, index: int | None, field: str, problem: str
) -> CalendarValidationError:
    return CalendarValidationError(
        calendar_id=calendar_id, index=index, field=field, problem=problem
    )


def describe_problem(detail: Any, fields: Mapping[str, Iterable[str]]) -> tuple[str, str]:
    """(field, problem) of one of pydantic's errors about a calendar; `fields` lists the fields
    of the calendar (under "") and of its nested entries (under "holidays" and "windows"), for
    the messages of unknown fields."""
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
