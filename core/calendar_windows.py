"""Blackout windows of a business calendar: fixed ranges of wall time and recurring ones.

A fixed window names its `start` and `end` as wall times on the calendar's clock; a recurring
window starts at every time its `cron` names on that clock and lasts `duration` of elapsed time.
A window holds the instants in [start, end). Pure: no I/O.

Wall times that a DST change makes odd are read the way Kairos reads a fixed-time cron job
(docs/defaults.md): a wall time that occurs twice (fall back) means its first pass, and one the
clock skips (spring forward) means the instant the clock jumps.
"""

from __future__ import annotations

import threading
from bisect import bisect_right, insort
from collections.abc import Sequence
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
_NEVER = datetime.max.replace(tzinfo=UTC)
_SPANS_KEPT = 4096
"""Answers a calendar keeps with their spans; past it they are forgotten all at once (a fire's
instants move forward, so the old ones are rarely asked again)."""


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


class WindowIndex:
    """`window_at` for one calendar's windows, each answer remembered over the span it holds.

    The answer at an instant stays the same until the next boundary after it: the start of an
    occurrence not begun yet, or the end of one holding the instant. (A recurring window's
    earliest occurrence holding an instant is the first to start after the instant less the
    duration; that stays its earliest until it ends, since none starts between.) So each answer
    is worked out once, with one cron search per recurring window, and kept with its span: a
    herd deciding at one instant, or decisions spread between two boundaries, ask nothing more.
    Shared between threads (the calendars are): the spans are kept under a lock.
    """

    __slots__ = ("_fixed", "_lock", "_recurring", "_spans", "_untils")

    def __init__(self, windows: Sequence[BlackoutWindow], timezone: str) -> None:
        zone = ZoneInfo(timezone)
        self._fixed = tuple(
            fixed_occurrence(window, index, zone)
            for index, window in enumerate(windows)
            if not window.recurring
        )
        self._recurring = tuple(
            (compile_cron(window.cron, timezone), window.duration, index, window.name)
            for index, window in enumerate(windows)
            if window.cron is not None and window.duration is not None
        )
        self._untils: list[datetime] = []
        """The ends of the spans kept, in order: spans ending apart never overlap."""
        self._spans: dict[datetime, tuple[datetime, Window | None]] = {}
        """A span's end -> its start (the earliest instant asked) and its answer."""
        self._lock = threading.Lock()

    def at(self, instant: datetime) -> Window | None:
        """The occurrence holding the aware `instant` that started first (then the one listed
        first), or `None`."""
        at = instant.astimezone(UTC)
        with self._lock:
            index = bisect_right(self._untils, at)
            if index < len(self._untils):
                start, found = self._spans[self._untils[index]]
                if start <= at:
                    return found
        found, until = self._worked_out(at)
        with self._lock:
            kept = self._spans.get(until)
            if kept is None:
                if len(self._untils) >= _SPANS_KEPT:
                    self._untils.clear()
                    self._spans.clear()
                insort(self._untils, until)
            self._spans[until] = (at if kept is None else min(kept[0], at), found)
        return found

    def _worked_out(self, at: datetime) -> tuple[Window | None, datetime]:
        """The answer at `at` and the next boundary after it (`_NEVER` when none)."""
        holding: list[Window] = []
        until = _NEVER
        for window in self._fixed:
            if at < window.start:
                until = min(until, window.start)
            elif at < window.end:
                holding.append(window)
                until = min(until, window.end)
        for compiled, duration, index, name in self._recurring:
            # It holds `at` when it starts in (at - duration, at]: one forward search.
            fire = compiled.next_after((at - duration).timestamp())
            if fire is None:
                continue
            start = fire.nominal
            if start > at:
                until = min(until, start)
                continue
            holding.append(Window(name, start, start + duration, index, recurring=True))
            until = min(until, start + duration)
        found = min(holding, key=lambda window: (window.start, window.index), default=None)
        return found, until
