"""Time arguments as people give them to the tools: an instant, `now`, or relative to now."""

from __future__ import annotations

from datetime import UTC, datetime

from kairos.core.durations import parse_duration
from kairos.core.errors import KairosError


class TimeArgumentError(KairosError, ValueError):
    """A time argument could not be read; `text` is the input."""

    def __init__(self, text: str, problem: str) -> None:
        self.text = text
        self.problem = problem
        super().__init__(
            f"invalid time {text!r}: {problem}; give an ISO-8601 instant with an offset such as "
            "2027-03-14T07:00:00Z, 'now', or a time relative to now such as -10m, -2h30m or +2h"
        )


def parse_time(text: str, now: datetime) -> datetime:
    """An instant from `2027-03-14T07:00:00Z`, `now`, `-10m` (ten minutes before `now`) or
    `+2h` (two hours after it)."""
    value = text.strip()
    if value == "now":
        return now
    if value[:1] in ("-", "+"):
        try:
            offset = parse_duration(value[1:])
            return now - offset if value[0] == "-" else now + offset
        except (ValueError, OverflowError) as error:
            raise TimeArgumentError(text, str(error)) from None
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise TimeArgumentError(text, "not an ISO-8601 instant") from None
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise TimeArgumentError(text, "it has no UTC offset, so it is not an instant")
    try:
        return instant.astimezone(UTC)
    except OverflowError:
        raise TimeArgumentError(text, "it is outside the years 1 to 9999 in UTC") from None
