"""The herd histogram of `kairos preview --histogram`: fires per UTC minute over a horizon.

Every fire of the counted schedules whose nominal instant lies in (start, end] is counted in its
UTC minute twice: once at its nominal instant (when the herd is due) and once at its nominal
instant plus jitter (`fire_instant_with_jitter`: when the ticker starts it), because jitter is
what spreads a herd.

Speed: schedules whose definitions differ only in fields that do not move their occurrences
(id, jitter, job, owner, …) share one calendar, so each such group's fires are computed once with
`fires_between` and counted once per member. Jitter is per run id, so only the members with
jitter cost one `fire_instant_with_jitter` per fire. A budget bounds that work: a selection that
would take minutes is refused once it passes the budget (a group's jittered fires before they
are computed), with a message saying how to narrow it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from kairos.core.calendar import fire_instant_with_jitter, fires_between, jitter_offset
from kairos.core.calendar_rules import CalendarLookup, planned, uses_calendars
from kairos.core.durations import format_duration
from kairos.core.errors import KairosError
from kairos.core.run_id import format_instant
from kairos.core.schedule import Schedule

LONGEST_HORIZON = timedelta(days=31)
"""A month of minutes is 44,640 rows; a longer horizon is a capacity plan, not a preview."""

FIRE_BUDGET = 5_000_000
"""Fires computed (once per shared calendar, and once per jittered schedule) before the
histogram gives up: about a minute on one core (docs/operations.md has the measurements)."""

# Fields that change what a run does or who answers for it, never when it is due: schedules
# differing only in them have the same occurrences. Every other field (cron, zone, bounds, DST
# policies, and any field added later) keeps schedules apart, so a new firing rule cannot
# be merged away by mistake.
_NOT_CALENDAR_FIELDS = frozenset(
    {
        "id",
        "jitter",
        "paused",
        "job",
        "max_attempts",
        "timeout",
        "retry_backoff",
        "misfire",
        "catchup_window",
        "overlap",
        "owner",
        "labels",
        "description",
    }
)

_MINUTE = 60


class HistogramTooLargeError(KairosError):
    """Counting the selection would take longer than the budget allows."""


@dataclass(slots=True)
class MinuteLoad:
    """One UTC minute: fires due in it, and fires started in it once jitter is added."""

    fires: int = 0
    schedules: int = 0
    fires_with_jitter: int = 0
    schedules_with_jitter: int = 0


@dataclass(frozen=True, slots=True)
class Peak:
    minute: datetime
    fires: int
    schedules: int


@dataclass(frozen=True)
class Histogram:
    """The per-minute counts of the fires with nominal instant in (`start`, `end`]."""

    start: datetime
    end: datetime
    counted: int
    """Schedules counted: every selected one but the paused."""
    paused: int
    """Selected schedules left out because they are paused (they start no runs)."""
    minutes: dict[int, MinuteLoad] = field(default_factory=dict)
    """By minute since the epoch (UTC); only minutes with at least one fire."""

    @property
    def total(self) -> int:
        return sum(load.fires for load in self.minutes.values())

    def peak(self) -> Peak | None:
        """The minute most fires are due in (the earliest of equals), or `None` if none."""
        return self._peak(lambda load: (load.fires, load.schedules))

    def peak_with_jitter(self) -> Peak | None:
        """The minute most fires start in once jitter is added, or `None` if none."""
        return self._peak(lambda load: (load.fires_with_jitter, load.schedules_with_jitter))

    def _peak(self, counts: Callable[[MinuteLoad], tuple[int, int]]) -> Peak | None:
        """The minute with the most fires by `counts` (fires, schedules), the earliest of equals."""
        if not self.minutes:
            return None
        minute = min(self.minutes, key=lambda m: (-counts(self.minutes[m])[0], m))
        return Peak(minute_instant(minute), *counts(self.minutes[minute]))

    def busiest(self, top: int) -> list[tuple[int, MinuteLoad]]:
        """The `top` busiest minutes: by the larger of their two counts, then by fires due,
        then earliest first."""
        ranked = sorted(
            self.minutes.items(),
            key=lambda item: (
                -max(item[1].fires, item[1].fires_with_jitter),
                -item[1].fires,
                item[0],
            ),
        )
        return ranked[:top]


def minute_instant(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * _MINUTE, UTC)


class _Budget:
    """Counts fires computed; refuses the histogram once they would pass `limit`."""

    def __init__(self, limit: int, horizon: timedelta) -> None:
        self.limit = limit
        self.horizon = horizon
        self.spent = 0

    def spend(self, fires: int) -> None:
        self.spent += fires
        if self.spent > self.limit:
            raise HistogramTooLargeError(
                f"the histogram would compute more than {self.limit:,} fires over "
                f"--horizon {format_duration(self.horizon)}; shorten --horizon or select "
                "fewer schedules (--id, --owner, or a smaller file)"
            )


def count_fires(
    schedules: list[Schedule],
    start: datetime,
    end: datetime,
    budget: int = FIRE_BUDGET,
    *,
    calendars: CalendarLookup | None = None,
) -> Histogram:
    """The histogram of the fires of `schedules` with nominal instant in (`start`, `end`].

    A schedule that names shared calendars counts its runs as the calendars leave them (read
    with `calendars`): skipped occurrences not at all, rolled or deferred ones where they run.
    """
    active = [schedule for schedule in schedules if not schedule.paused]
    histogram = Histogram(start, end, counted=len(active), paused=len(schedules) - len(active))
    spending = _Budget(budget, end - start)
    groups: dict[str, list[Schedule]] = {}
    for schedule in active:
        if uses_calendars(schedule):
            _count_calendar_runs(
                histogram.minutes, schedule, start, end, spending, calendars=calendars
            )
            continue
        groups.setdefault(_calendar_key(schedule), []).append(schedule)
    for members in groups.values():
        _count_group(histogram.minutes, members, start, end, spending)
    return histogram


def _calendar_key(schedule: Schedule) -> str:
    return schedule.model_dump_json(exclude=set(_NOT_CALENDAR_FIELDS))


def _count_group(
    minutes: dict[int, MinuteLoad],
    members: list[Schedule],
    start: datetime,
    end: datetime,
    spending: _Budget,
) -> None:
    """Count the fires of schedules that share one calendar: computed once, counted per member."""
    nominals: list[datetime] = []
    for fire in fires_between(members[0], start, end):
        spending.spend(1)
        nominals.append(fire.nominal)
    if not nominals:
        return
    per_minute = Counter(_minute_of(nominal) for nominal in nominals)
    jittered = [member for member in members if member.jitter]
    spending.spend(len(jittered) * len(nominals))
    steady = len(members) - len(jittered)
    for minute, fires in per_minute.items():
        load = minutes.setdefault(minute, MinuteLoad())
        load.fires += fires * len(members)
        load.schedules += len(members)
        # Without jitter a fire starts in the minute it is due.
        load.fires_with_jitter += fires * steady
        load.schedules_with_jitter += steady
    for member in jittered:
        started = Counter(
            _minute_of(fire_instant_with_jitter(member.id, member, nominal)) for nominal in nominals
        )
        for minute, fires in started.items():
            load = minutes.setdefault(minute, MinuteLoad())
            load.fires_with_jitter += fires
            load.schedules_with_jitter += 1


def _count_calendar_runs(
    minutes: dict[int, MinuteLoad],
    schedule: Schedule,
    start: datetime,
    end: datetime,
    spending: _Budget,
    *,
    calendars: CalendarLookup | None,
) -> None:
    due: Counter[int] = Counter()
    started: Counter[int] = Counter()
    for occurrence in planned(schedule, start, calendars):
        if occurrence.fire.nominal > end:
            break
        spending.spend(1)
        runs_at = occurrence.runs_at
        if runs_at is not None:
            due[_minute_of(runs_at)] += 1
            started[
                _minute_of(runs_at + jitter_offset(schedule.id, schedule, occurrence.fire.nominal))
            ] += 1
    for minute, fires in due.items():
        load = minutes.setdefault(minute, MinuteLoad())
        load.fires += fires
        load.schedules += 1
    for minute, fires in started.items():
        load = minutes.setdefault(minute, MinuteLoad())
        load.fires_with_jitter += fires
        load.schedules_with_jitter += 1


def _minute_of(instant: datetime) -> int:
    return int(instant.timestamp() // _MINUTE)


def histogram_text(histogram: Histogram, top: int) -> list[str]:
    """The text report: the busiest minutes as a table, then the total and the peaks."""
    window = f"({format_instant(histogram.start)}, {format_instant(histogram.end)}]"
    paused = f" ({histogram.paused} paused not counted)" if histogram.paused else ""
    lines = [
        f"fires of {histogram.counted} schedule(s){paused} due in {window}, per UTC minute",
    ]
    rows = histogram.busiest(top)
    if rows:
        lines.append(
            f"busiest {len(rows)} of {len(histogram.minutes)} minute(s) with a fire "
            "(WITH JITTER: fires starting in the minute once jitter is added):"
        )
        header = ("MINUTE (UTC)", "FIRES", "SCHEDULES", "WITH JITTER", "SCHEDULES")
        table = [header] + [
            (
                format_instant(minute_instant(minute)),
                str(load.fires),
                str(load.schedules),
                str(load.fires_with_jitter),
                str(load.schedules_with_jitter),
            )
            for minute, load in rows
        ]
        widths = [max(len(row[column]) for row in table) for column in range(len(header))]
        for row in table:
            cells = [row[0].ljust(widths[0])] + [
                cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)
            ]
            lines.append("  ".join(cells).rstrip())
    lines.append(f"total: {histogram.total} fire(s)")
    lines.append(f"peak: {_peak_text(histogram.peak())}")
    lines.append(f"peak with jitter: {_peak_text(histogram.peak_with_jitter())}")
    return lines


def _peak_text(peak: Peak | None) -> str:
    if peak is None:
        return "none (no fire in the horizon)"
    return f"{format_instant(peak.minute)}, {peak.fires} fire(s) of {peak.schedules} schedule(s)"


def histogram_json(histogram: Histogram) -> dict[str, object]:
    """The full per-minute map, chronological, with the window, the total and the peaks."""
    return {
        "from": format_instant(histogram.start),
        "to": format_instant(histogram.end),
        "schedules": histogram.counted,
        "paused": histogram.paused,
        "total": histogram.total,
        "peak": _peak_json(histogram.peak()),
        "peak_with_jitter": _peak_json(histogram.peak_with_jitter()),
        "minutes": {
            format_instant(minute_instant(minute)): {
                "fires": load.fires,
                "schedules": load.schedules,
                "fires_with_jitter": load.fires_with_jitter,
                "schedules_with_jitter": load.schedules_with_jitter,
            }
            for minute, load in sorted(histogram.minutes.items())
        },
    }


def _peak_json(peak: Peak | None) -> dict[str, object] | None:
    if peak is None:
        return None
    return {"minute": format_instant(peak.minute), "fires": peak.fires, "schedules": peak.schedules}
