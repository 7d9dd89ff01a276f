"""What a schedule's page shows of its dependencies: the schedules it waits for, with the state
of the period its current run waits for, and the schedules that wait for it.

From the view: the upstream's definition as its ticker holds it, resolved as the ticker resolves
it when it fires the run (`kairos.core.upstream_wait.resolve`), and the statuses of the
upstream's runs at that period's instant (its occurrence's run and its re-runs).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from kairos.core.data_interval import latest_occurrence
from kairos.core.instants import epoch_ms
from kairos.core.run_id import format_instant
from kairos.core.schedule import Schedule
from kairos.core.upstream_wait import Resolution, resolve
from kairos.services.console import queries
from kairos.services.console.view import ConsoleView

HeldLookup = Callable[[str], Schedule | None]


def dependencies(
    view: ConsoleView, schedule: Schedule, now: datetime, held: HeldLookup
) -> dict[str, Any]:
    """`held` gives a schedule's definition as its ticker holds it (`documents.held_schedule`):
    a change its ticker may still refuse (another team's forgery) is not the upstream's."""
    current = latest_occurrence(schedule, now)
    return {
        "current_period": None if current is None else format_instant(current),
        "waits_for": [_upstream(view, schedule, index, current, held) for index in
                      range(len(schedule.upstream))],
        "waited_for_by": queries.downstream_of(view, schedule.id),
    }  # fmt: skip


def _upstream(
    view: ConsoleView,
    schedule: Schedule,
    index: int,
    current: datetime | None,
    held: HeldLookup,
) -> dict[str, Any]:
    upstream = schedule.upstream[index]
    shown: dict[str, Any] = {"schedule": upstream.schedule, "match": upstream.match.value}
    if current is None:
        return {**shown, "period_at": None, "state": "no run yet"}
    definition = held(upstream.schedule)
    period = resolve(schedule.owner, upstream, definition, (current, schedule.zone))
    if period.resolution is not Resolution.MATCHED or period.period_at is None:
        return {**shown, "period_at": None, "state": period.resolution.value,
                "reason": period.reason}  # fmt: skip
    statuses = queries.statuses_at(view, upstream.schedule, epoch_ms(period.period_at))
    state = "succeeded" if "succeeded" in statuses else ", ".join(statuses) or "not run yet"
    return {**shown, "period_at": format_instant(period.period_at), "state": state}
