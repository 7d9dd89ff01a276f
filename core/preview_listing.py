"""The listing of `kairos preview`: each schedule's next fires, with what moved or doubled them.

Each kind of mark is one function from a fire to its text (or `None`); `MARKS` lists them in the
order they print. A new kind (a calendar skip or roll, say) is one more function in `MARKS`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from itertools import islice
from typing import Any

from kairos.core.calendar import Fire
from kairos.core.calendar_rules import CalendarLookup, Planned, planned
from kairos.core.cron import parse_cron
from kairos.core.data_interval import data_interval
from kairos.core.schedule import Schedule

Mark = Callable[[Fire, Schedule], str | None]


def dst_gap_mark(fire: Fire, schedule: Schedule) -> str | None:
    if not fire.moved_by_dst_gap:
        return None
    return (
        f"[DST gap: {fire.requested_wall.strftime('%H:%M')} does not exist that day; "
        "moved to the jump]"
    )


def dst_repeat_mark(fire: Fire, schedule: Schedule) -> str | None:
    if fire.repeated_hour_pass is None:
        return None
    if schedule.cron is None:
        runs = ""
    elif parse_cron(schedule.cron).wildcard or schedule.dst_repeat == "both":
        runs = ", doubled: runs in both passes"
    else:
        runs = ", runs once"
    return f"[DST repeated hour, pass {fire.repeated_hour_pass} of 2{runs}]"


MARKS: tuple[Mark, ...] = (dst_gap_mark, dst_repeat_mark)


SKIPS_SHOWN = 1000
"""Skipped occurrences a listing looks past before it gives up on finding `count` runs."""


def upcoming(
    schedule: Schedule, after: datetime, count: int, calendars: CalendarLookup | None
) -> list[Planned]:
    """The occurrences after `after` up to the `count`-th that runs, skipped ones included."""
    found: list[Planned] = []
    runs = 0
    for occurrence in islice(planned(schedule, after, calendars), count + SKIPS_SHOWN):
        found.append(occurrence)
        runs += occurrence.runs_at is not None
        if runs == count:
            break
    return found


def runs_json(occurrences: list[Planned]) -> list[str]:
    """When each occurrence that runs starts (before jitter), on its schedule's clock."""
    return [
        occurrence.runs_at.astimezone(occurrence.fire.wall.tzinfo).isoformat()
        for occurrence in occurrences
        if occurrence.runs_at is not None
    ]


def occurrence_line(occurrence: Planned, schedule: Schedule) -> str:
    """`  <wall time in the schedule's zone>  [mark]  [mark]`."""
    fire, verdict = occurrence.fire, occurrence.verdict
    marks = [text for mark in MARKS if (text := mark(fire, schedule)) is not None]
    if verdict.skip_reason is not None:
        marks.append(f"[skipped: {verdict.skip_reason}]")
    if verdict.moved_to is not None:
        moved = verdict.moved_to.astimezone(fire.wall.tzinfo).isoformat()
        marks.append(f"[runs at {moved}: {verdict.moved_why}]")
    return "  ".join([f"  {fire.wall.isoformat()}", *marks])


def heading(schedule: Schedule) -> str:
    if schedule.cron is not None:
        trigger = f"cron '{schedule.cron}'"
    elif schedule.every is not None:
        trigger = f"every {schedule.model_dump(mode='json')['every']}"
    else:
        trigger = "once"
    if schedule.business_day is not None:
        trigger = f"business day {schedule.business_day} of the month at {trigger}"
    paused = " [paused]" if schedule.paused else ""
    return f"{schedule.id}: {trigger} in {schedule.timezone}{_calendars_named(schedule)}{paused}"


def _calendars_named(schedule: Schedule) -> str:
    parts = []
    if schedule.exclude:
        rolled = f", rolled to the {schedule.roll.value.replace('_', ' ')}" if schedule.roll else ""
        parts.append(f"calendars {', '.join(schedule.exclude)}{rolled}")
    if schedule.blackout:
        parts.append(f"blackout {', '.join(schedule.blackout)} ({schedule.blackout_action.value})")
    return f" [{'; '.join(parts)}]" if parts else ""


def fire_document(
    occurrence: Planned, schedule: Schedule, calendars: CalendarLookup | None = None
) -> dict[str, Any]:
    """One next fire as `kairos schedules describe --json` and the console's API show it, with
    where the period its run is for starts (`kairos.core.data_interval`; it ends at the fire's
    nominal instant), on the schedule's clock."""
    fire, verdict = occurrence.fire, occurrence.verdict
    runs_at = occurrence.runs_at
    interval = data_interval(schedule, fire.nominal, calendars)
    return {
        "nominal_at": fire.nominal,
        "wall": fire.wall.isoformat(),
        "interval_start": interval.start.astimezone(fire.wall.tzinfo).isoformat(),
        "runs_at": None if runs_at is None else runs_at.astimezone(fire.wall.tzinfo).isoformat(),
        "dst": [note for mark in MARKS if (note := mark(fire, schedule)) is not None],
        "skipped": verdict.skip_reason,
        "moved_why": verdict.moved_why,
    }
