"""Blackout windows of a business calendar: fixed ranges of wall time and recurring ones.

A fixed window names its `start` and `end` as wall times on the calendar's clock; a recurring
window starts at every time its `cron` names on that clock and lasts `duration` of elapsed time.
A window holds the instants in [start, end). Pure: no I/O.

Wall times that a DST change makes odd are read the way Kairos reads a fixed-time cron job
(docs/defaults.md): a wall time that occurs twice (fall back) means its first pass, and one the
clock skips (spring forward) means the instant the clock jumps.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated
from zoneinfo import ZoneInfo

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from kairos.core.calendar import compile_cron, transition_instant
from kairos.core.cron import parse_cron
from kairos.core.durations import format_duration
from kairos.core.schedule import PositiveDuration, Text

LONGEST_WINDOW = timedelta(days=366)
"""No window lasts longer: a longer freeze is a change of the business week, or several windows."""

MAX_NAME_LENGTH = 100
"""Names of holidays and windows; 5,000 holidays with long names must still fit one record."""

_NEVER_SINCE = datetime(2000, 1, 1, tzinfo=UTC).timestamp()


def calendar_rule(field: str, problem: str) -> PydanticCustomError:
    """A cross-field problem, located at `field` (pydantic locates model rules nowhere)."""
    return PydanticCustomError(
        "calendar_rule", "{field}: {problem}", {"field": field, "problem": problem}
    )


def _named(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank; say what it is, such as 'Christmas Day'")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(
            f"is {len(value)} characters, more than the maximum, {MAX_NAME_LENGTH}; shorten it"
        )
    return value


Name = Annotated[Text, AfterValidator(_named)]
"""The name of a holiday or a window: not blank, at most `MAX_NAME_LENGTH` characters."""


def _wall_time_input(value: object) -> object:
    # YAML reads `2026-12-20` as a date: a window from that date starts at its midnight.
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime.combine(value, time())
    return value


def _naive_whole_seconds(value: datetime) -> datetime:
    if value.tzinfo is not None:
        raise ValueError(
            f"{value.isoformat()} has a UTC offset; write the wall time on the calendar's "
            "clock (its timezone) without one, such as '2026-12-20T00:00'"
        )
    if value.microsecond:
        raise ValueError(f"{value.isoformat()} has a fraction of a second; drop it")
    return value


WallTime = Annotated[
    datetime, BeforeValidator(_wall_time_input), AfterValidator(_naive_whole_seconds)
]
"""A wall time on the calendar's clock, `2026-12-20T00:00` (or a date: its midnight)."""


def _not_too_long(value: timedelta) -> timedelta:
    if value > LONGEST_WINDOW:
        raise ValueError(
            f"{format_duration(value)} is longer than the maximum, "
            f"{format_duration(LONGEST_WINDOW)}; shorten it or split the window"
        )
    return value


WindowDuration = Annotated[PositiveDuration, AfterValidator(_not_too_long)]


def _occurring_cron(value: str) -> str:
    parse_cron(value)
    spelled = " ".join(value.split())
    if compile_cron(spelled, "UTC").next_after(_NEVER_SINCE) is None:
        raise ValueError(f"{value!r} matches no calendar date, so the window never starts")
    return spelled


class BlackoutWindow(BaseModel):
    """One blackout window: `start` and `end`, or `cron` and `duration`; always a `name`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    start: WallTime | None = None
    """First wall time inside a fixed window."""
    end: WallTime | None = None
    """First wall time after a fixed window."""
    cron: Annotated[str, AfterValidator(_occurring_cron)] | None = None
    """Five fields or a macro on the calendar's clock: each start of a recurring window."""
    duration: WindowDuration | None = None
    """Elapsed time from each start of a recurring window to its end."""

    @model_validator(mode="after")
    def _one_kind(self) -> BlackoutWindow:
        fixed = [name for name in ("start", "end") if getattr(self, name) is not None]
        recurring = [name for name in ("cron", "duration") if getattr(self, name) is not None]
        if fixed and recurring:
            raise calendar_rule(
                recurring[0],
                "a window is either fixed (start and end) or recurring (cron and duration), "
                f"but {' and '.join(map(repr, fixed + recurring))} are set; keep one kind",
            )
        if not fixed and not recurring:
            raise calendar_rule(
                "start",
                "set start and end (a fixed window) or cron and duration (a recurring one)",
            )
        if len(fixed) == 1:
            missing = "end" if fixed == ["start"] else "start"
            raise calendar_rule(missing, f"a fixed window needs both start and end; set {missing}")
        if len(recurring) == 1:
            missing = "duration" if recurring == ["cron"] else "cron"
            raise calendar_rule(
                missing, f"a recurring window needs both cron and duration; set {missing}"
            )
        return self

    @property
    def recurring(self) -> bool:
        return self.cron is not None


@dataclass(frozen=True, slots=True)
class Window:
    """One occurrence of a blackout window: the instants in [start, end), both aware, in UTC.

    `index` is the window's position in the calendar's `windows`, so a caller can name it.
    """

    name: str
    start: datetime
    end: datetime
    index: int
    recurring: bool

    def contains(self, instant: datetime) -> bool:
        return self.start <= instant < self.end


def resolve_wall_time(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of a naive wall time on `zone`'s clock, by the rules of this module."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first <= second:
        # Equal: an ordinary wall time; earlier: it occurs twice and the first pass counts.
        return first
    # Skipped by the clock: fold=1 reads it with the offset after the jump, an instant before
    # the jump; fold=0 with the offset before it, an instant after. The jump lies between.
    jump = transition_instant(zone, int(second.timestamp()), int(first.timestamp()))
    return datetime.fromtimestamp(jump, UTC)


def fixed_window_problem(window: BlackoutWindow, zone: ZoneInfo) -> str | None:
    """Why a fixed window is empty or too long on `zone`'s clock, or `None`."""
    assert window.start is not None and window.end is not None
    start, end = resolve_wall_time(window.start, zone), resolve_wall_time(window.end, zone)
    if end <= start:
        return (
            f"end {window.end.isoformat()} is not after start {window.start.isoformat()} "
            f"on the {zone.key} clock; move it later"
        )
    if end - start > LONGEST_WINDOW:
        return (
            f"the window lasts {format_duration(end - start)}, longer than the maximum, "
            f"{format_duration(LONGEST_WINDOW)}; shorten it or split it"
        )
    return None


def fixed_occurrence(window: BlackoutWindow, index: int, zone: ZoneInfo) -> Window:
    """The one occurrence of a fixed window."""
    assert window.start is not None and window.end is not None
    return Window(
        window.name,
        resolve_wall_time(window.start, zone),
        resolve_wall_time(window.end, zone),
        index,
        recurring=False,
    )


def recurring_occurrence_at(
    window: BlackoutWindow, index: int, timezone: str, instant: datetime
) -> Window | None:
    """The earliest-starting occurrence of a recurring window that contains `instant`."""
    assert window.cron is not None and window.duration is not None
    # An occurrence holds `instant` when start <= instant < start + duration, that is when it
    # starts in (instant - duration, instant]: one forward search from the lower bound.
    earliest = (instant - window.duration).timestamp()
    fire = compile_cron(window.cron, timezone).next_after(earliest)
    if fire is None or fire.nominal > instant:
        return None
    return Window(window.name, fire.nominal, fire.nominal + window.duration, index, recurring=True)
