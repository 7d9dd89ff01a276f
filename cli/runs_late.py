"""`kairos runs late`: the runs that missed their schedule's deadline, read from the topics.

Two sources, so that a run no executor ever consumed shows too: the `deadline_missed` events the
executors published (docs/operations.md, "Run deadlines"), and, for runs with none, the fires of
the runs topic judged against the schedule's current deadline by their run events (not started
by `start_by`, not succeeded by `finish_by`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import typer
from rich.table import Table

from kairos.cli.options import fail, kafka_settings
from kairos.cli.output import Format, JsonAliasOption, OutputOption, chosen, render
from kairos.cli.reading import (
    ScheduleFilterOption,
    SinceOption,
    events_by_run,
    history_reader,
    instant_option,
    text,
    wide_console,
)
from kairos.core.audit import FiredRun, RunEventRecord
from kairos.core.audit_margin import read_margin
from kairos.core.errors import KairosError
from kairos.core.schedule_lifecycle import Deadline
from kairos.streams.readers.schedule_reader import ScheduleReader

_DEFAULT_SINCE = timedelta(days=1)
_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


def late(
    context: typer.Context,
    schedule: ScheduleFilterOption = None,
    since: SinceOption = None,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """List runs (nominal at or after --since, default a day ago) that missed a deadline."""
    chosen_output = chosen(output, as_json)
    now = datetime.now(UTC)
    start = instant_option(since, "--since", now) or now - _DEFAULT_SINCE
    settings = kafka_settings(context)
    try:
        stored = ScheduleReader(settings).read_all().schedules
        deadlines = {sid: s.schedule.deadline for sid, s in stored.items() if s.schedule.deadline}
        owners = {sid: s.schedule.owner for sid, s in stored.items()}

        def wanted(schedule_id: str, nominal: datetime) -> bool:
            return schedule in (None, schedule_id) and nominal >= start

        # Read by append time: what a run with a nominal instant after `start` can have written.
        appended = start - read_margin(s.schedule for s in stored.values())
        with history_reader(settings) as reader:
            fired = reader.runs(
                keep=lambda r: r.attempt == 1 and wanted(r.schedule_id, r.nominal), since=appended
            )
            events = reader.run_events(
                keep=lambda e: wanted(e.schedule_id, e.nominal), since=appended
            )
    except KairosError as error:
        raise fail(f"{error} (broker {settings.bootstrap_servers})") from None
    rows = late_runs(fired, events, deadlines, now)
    for row in rows:
        row["owner"] = owners.get(row["schedule_id"])
    if chosen_output is not Format.TABLE:
        render(rows, chosen_output, lambda: None)
        return
    if not rows:
        typer.echo("no late runs", err=True)
        return
    table = Table(show_edge=False, pad_edge=False)
    for header in ("RUN ID", "OWNER", "DEADLINE", "DUE BY", "REPORTED BY", "WHY"):
        table.add_column(header, no_wrap=header != "WHY")
    for row in rows:
        reporter = row["reported_by"] or "(no executor yet)"
        why = row["reason"] or ""
        cells = (row["run_id"], row["owner"] or "", row["deadline"], text(row["due_by"]))
        table.add_row(*cells, reporter, why)
    wide_console().print(table)


def late_runs(
    fired: list[FiredRun],
    events: list[RunEventRecord],
    deadlines: dict[str, Deadline],
    now: datetime,
) -> list[dict[str, Any]]:
    """One row per (run, deadline) missed: reported by an executor, or judged from the topics."""
    story = events_by_run(events)
    rows = [_reported(event) for event in events if event.kind == "deadline_missed"]
    reported = {(row["run_id"], row["deadline"]) for row in rows}
    for run in {r.run_id: r for r in fired}.values():
        deadline = deadlines.get(run.schedule_id)
        if deadline is None:
            continue
        steps = story.get(run.run_id, [])
        for kind, due_by in _missed(deadline, run.nominal, steps, now):
            if (run.run_id, kind) not in reported:
                rows.append(_row(run.run_id, run.schedule_id, kind, due_by, None, None))
    return sorted(rows, key=lambda row: (row["due_by"], row["run_id"], row["deadline"]))


def _missed(
    deadline: Deadline, nominal: datetime, steps: list[RunEventRecord], now: datetime
) -> list[tuple[str, datetime]]:
    if any(step.kind == "skipped" for step in steps):
        return []  # deliberately not run
    missed = []
    if deadline.start_by is not None and nominal + deadline.start_by <= now:
        due_by = nominal + deadline.start_by
        starts = [s.started_at for s in steps if s.kind == "started" and s.started_at]
        if not starts or min(starts) > due_by:
            missed.append(("start_by", due_by))
    if deadline.finish_by is not None and nominal + deadline.finish_by <= now:
        due_by = nominal + deadline.finish_by
        ends = [s.finished_at for s in steps if s.kind == "succeeded" and s.finished_at]
        if not ends or min(ends) > due_by:
            missed.append(("finish_by", due_by))
    return missed


def _reported(event: RunEventRecord) -> dict[str, Any]:
    reason = event.reason or ""
    kind = "finish_by" if reason.startswith("finish_by") else "start_by"
    # Every reason the executors write ends its instants with the deadline's.
    instants = _INSTANT.findall(reason)
    due_by = datetime.fromisoformat(instants[-1]) if instants else event.nominal
    return _row(event.run_id, event.schedule_id, kind, due_by, event.source, reason)


def _row(
    run_id: str,
    schedule_id: str,
    deadline: str,
    due_by: datetime,
    reported_by: str | None,
    reason: str | None,
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "schedule_id": schedule_id,
        "deadline": deadline,
        "due_by": due_by,
        "reported_by": reported_by,
        "reason": reason,
    }
