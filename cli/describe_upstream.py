"""What `kairos schedules describe` shows of a schedule's upstream: for its current period (its
latest occurrence at or before now), the period of each upstream it waits for, and whether a run
of that period succeeded.

Each upstream is resolved as the ticker resolves it when it fires the run
(`kairos.core.upstream_wait.resolve`, from the upstream's definition as its ticker holds it), and
its period's runs are read from the run-events topic from that period's instant less the
clocks' margin, one schedule's keys only: a read of the window, not of the history.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kairos.cli.reading import text
from kairos.core.audit_margin import CLOCK_MARGIN
from kairos.core.calendar_rules import CalendarLookup
from kairos.core.data_interval import latest_occurrence
from kairos.core.schedule import Schedule
from kairos.core.upstream_wait import Resolution, UpstreamPeriod, resolve
from kairos.streams.readers.history import HistoryReader
from kairos.streams.readers.schedule_reader import ScheduleReader

_ENDED_BADLY = frozenset({"dead_lettered", "skipped", "cancelled"})


def upstream_documents(
    schedules: ScheduleReader,
    history: HistoryReader,
    schedule: Schedule,
    now: datetime,
    calendars: CalendarLookup | None = None,
) -> list[dict[str, Any]]:
    """One document per upstream: its rule, the period the current run waits for, its state."""
    if not schedule.upstream:
        return []
    current = latest_occurrence(schedule, now, calendars)
    documents = []
    for upstream in schedule.upstream:
        document: dict[str, Any] = {"schedule": upstream.schedule, "match": upstream.match.value}
        if current is None:
            documents.append({**document, "period_at": None, "state": "no run yet"})
            continue
        stored = schedules.read_one(upstream.schedule)
        period = resolve(
            schedule.owner,
            upstream,
            None if stored is None else stored.schedule,
            (current, schedule.zone),
            calendars,
        )
        documents.append({**document, **_state(history, period), "for_run_at": text(current)})
    return documents


def _state(history: HistoryReader, period: UpstreamPeriod) -> dict[str, Any]:
    if period.resolution is not Resolution.MATCHED or period.period_at is None:
        return {"period_at": None, "state": period.resolution.value, "reason": period.reason}
    at = period.period_at
    events = history.run_events(
        since=at - CLOCK_MARGIN,
        schedule_id=period.schedule_id,
        keep=lambda event: event.nominal == at,
    )
    succeeded = [e.finished_at for e in events if e.kind == "succeeded" and e.finished_at]
    if succeeded:
        state = f"succeeded at {text(min(succeeded))}"
    elif any(e.kind in _ENDED_BADLY for e in events):
        state = "ended without success (re-run it: kairos schedules trigger --at)"
    elif events:
        state = "running or retrying"
    else:
        state = "not run yet"
    return {"period_at": text(at), "state": state}


def upstream_lines(documents: list[dict[str, Any]], downstream: list[str] | None) -> list[str]:
    """The text form: one line per upstream, then who waits for it (known with `--view`)."""
    lines = []
    if documents:
        lines += ["", "Waits for (the current period):"]
    for document in documents:
        period = document["period_at"] or "-"
        detail = document.get("reason") or ""
        lines.append(
            f"  {document['schedule']} ({document['match']}): period ending {period}: "
            f"{document['state']}{f' ({detail})' if detail else ''}"
        )
    if downstream:
        lines += ["", f"Waited for by: {', '.join(downstream)}"]
    return lines
