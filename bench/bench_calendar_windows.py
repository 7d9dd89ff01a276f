"""A decision's cost with a calendar of many blackout windows, against one without calendars.

Run: `.venv/bin/python -m bench.bench_calendar_windows [--windows 32] [--decisions 3000]`.

Each figure is `fire_instant` (the calendars' verdict on one occurrence, and its start) of a
schedule with `blackout: [freeze]`, `blackout_action: defer`, in microseconds per decision, the
best of three passes. The baseline, measured in the same run, is the same schedule's decision
naming no calendar; the ratio is each figure over it. Each pass decides with a fresh copy
of the calendar, which remembers no answer from an earlier pass.

- herd: every decision at the same instant (a midnight herd naming the calendar);
- spread: one decision a second, over an hour (schedules not due together);
- far apart: one decision a day, so no two decisions fall between the same window boundaries:
  the cost of an answer worked out afresh every time.

The calendar has `--windows` recurring windows (a cron and a duration each, on New York's clock:
the kind a query pays a cron search for; 32 by default, the most a calendar may have) and as many
fixed ones as the limit of 200 windows leaves.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from kairos.core.business_calendar import MAX_RECURRING_WINDOWS, MAX_WINDOWS, BusinessCalendar
from kairos.core.calendar_rules import CalendarLookup, fire_instant, latest
from kairos.core.calendar_versions import CalendarVersion
from kairos.core.schedule import Schedule

FIRST = datetime(2027, 3, 3, 0, 0, tzinfo=UTC)


def freeze(recurring: int) -> BusinessCalendar:
    """`recurring` windows a few minutes long, several an hour on weekdays, and fixed one-day
    freezes every sixth day up to `MAX_WINDOWS` in all."""
    windows: list[dict[str, Any]] = [
        {"name": f"batch {n}", "cron": f"{(7 * n) % 60} {n % 24} * * MON-FRI", "duration": "9m"}
        for n in range(recurring)
    ]
    for n in range(max(0, MAX_WINDOWS - recurring)):
        day = date(2027, 1, 1) + timedelta(days=6 * n)
        windows.append({"name": f"freeze {n}", "start": day, "end": day + timedelta(days=1)})
    return BusinessCalendar.model_validate(
        {"id": "freeze", "owner": "ops", "timezone": "America/New_York", "windows": windows}
    )


def per_decision_us(
    decider: Callable[[], Callable[[datetime], object]], instants: list[datetime]
) -> float:
    """The best of three passes, each with a decider made afresh (nothing remembered)."""
    best = float("inf")
    for _ in range(3):
        decide = decider()
        started = time.perf_counter()
        for instant in instants:
            decide(instant)
        best = min(best, (time.perf_counter() - started) / len(instants) * 1e6)
    return best


def deciding(
    schedule: Schedule, calendar: BusinessCalendar | None
) -> Callable[[], Callable[[datetime], object]]:
    def decider() -> Callable[[datetime], object]:
        # A copy remembers none of the answers the calendar worked out before.
        lookup: CalendarLookup | None = None
        if calendar is not None:
            lookup = latest({calendar.id: CalendarVersion(calendar.model_copy(), 1, FIRST, "x")})
        return lambda instant: fire_instant("bench.job", schedule, instant, lookup)

    return decider


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=MAX_RECURRING_WINDOWS)
    parser.add_argument("--decisions", type=int, default=3000)
    args = parser.parse_args()

    calendar = freeze(args.windows)
    plain = Schedule.model_validate({"id": "bench.job", "cron": "* * * * *"})
    blacked_out = plain.model_copy(update={"blackout": ("freeze",), "blackout_action": "defer"})
    n = args.decisions
    patterns = {
        "herd (one instant)": [FIRST] * n,
        "spread (one a second)": [FIRST + timedelta(seconds=s % 3600) for s in range(n)],
        "far apart (one a day)": [FIRST + timedelta(days=d, minutes=d % 60) for d in range(n)],
    }
    print(f"python {platform.python_version()} on {platform.machine()}")
    fixed = len(calendar.windows) - args.windows
    print(f"calendar: {args.windows} recurring and {fixed} fixed windows; {n} decisions a pass")
    print(f"{'pattern':<24}{'no calendar µs':>16}{'calendar µs':>14}{'ratio':>9}")
    for name, instants in patterns.items():
        baseline = per_decision_us(deciding(plain, None), instants)
        measured = per_decision_us(deciding(blacked_out, calendar), instants)
        print(f"{name:<24}{baseline:>16.2f}{measured:>14.2f}{measured / baseline:>8.1f}×")


if __name__ == "__main__":
    main()
