"""Which runs missed their schedule's deadline: reported by an executor, or judged from progress.

Pure: `kairos runs late` gathers each fired run's progress from the topics or from the console's
view, and the `deadline_missed` events the executors published (docs/operations.md, "Run
deadlines"); a run with none is judged against the schedule's current deadline (not started by
`start_by`, not succeeded by `finish_by`), at the `now` passed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kairos.core.audit import FiredRun, RunEventRecord
from kairos.core.schedule_lifecycle import Deadline

_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")


@dataclass(frozen=True)
class RunProgress:
    """What a deadline judges of one fired run: when it first started and first succeeded."""

    run_id: str
    schedule_id: str
    nominal: datetime
    skipped: bool
    first_start: datetime | None
    first_success: datetime | None


@dataclass(frozen=True)
class ReportedMiss:
    """A `deadline_missed` event an executor published."""

    run_id: str
    schedule_id: str
    nominal: datetime
    reported_by: str
    reason: str | None


def progress_from_topics(
    fired: list[FiredRun], events: list[RunEventRecord]
) -> tuple[list[RunProgress], list[ReportedMiss]]:
    """Each fired run's progress, and the misses reported, from the topics' records."""
    story: dict[str, list[RunEventRecord]] = {}
    for event in events:
        story.setdefault(event.run_id, []).append(event)
    runs = []
    for run in {r.run_id: r for r in fired}.values():
        steps = story.get(run.run_id, [])
        starts = [s.started_at for s in steps if s.kind == "started" and s.started_at]
        ends = [s.finished_at for s in steps if s.kind == "succeeded" and s.finished_at]
        skipped = any(step.kind == "skipped" for step in steps)
        runs.append(
            RunProgress(
                run.run_id,
                run.schedule_id,
                run.nominal,
                skipped,
                min(starts, default=None),
                min(ends, default=None),
            )
        )
    reported = [
        ReportedMiss(e.run_id, e.schedule_id, e.nominal, e.source, e.reason)
        for e in events
        if e.kind == "deadline_missed"
    ]
    return runs, reported


def late_runs(
    runs: list[RunProgress],
    reported: list[ReportedMiss],
    deadlines: dict[str, Deadline],
    now: datetime,
) -> list[dict[str, Any]]:
    """One row per (run, deadline) missed: reported by an executor, or judged from the topics."""
    rows = [_reported(miss) for miss in reported]
    seen = {(row["run_id"], row["deadline"]) for row in rows}
    for run in runs:
        deadline = deadlines.get(run.schedule_id)
        if deadline is None:
            continue
        for kind, due_by in _missed(deadline, run, now):
            if (run.run_id, kind) not in seen:
                rows.append(
                    _row(run.run_id, run.schedule_id, kind, due_by, reported_by=None, reason=None)
                )
    return sorted(rows, key=lambda row: (row["due_by"], row["run_id"], row["deadline"]))


def _missed(deadline: Deadline, run: RunProgress, now: datetime) -> list[tuple[str, datetime]]:
    if run.skipped:
        return []  # deliberately not run
    missed = []
    if deadline.start_by is not None and run.nominal + deadline.start_by <= now:
        due_by = run.nominal + deadline.start_by
        if run.first_start is None or run.first_start > due_by:
            missed.append(("start_by", due_by))
    if deadline.finish_by is not None and run.nominal + deadline.finish_by <= now:
        due_by = run.nominal + deadline.finish_by
        if run.first_success is None or run.first_success > due_by:
            missed.append(("finish_by", due_by))
    return missed


def _reported(miss: ReportedMiss) -> dict[str, Any]:
    reason = miss.reason or ""
    kind = "finish_by" if reason.startswith("finish_by") else "start_by"
    # Every reason the executors write ends its instants with the deadline's.
    instants = _INSTANT.findall(reason)
    due_by = datetime.fromisoformat(instants[-1]) if instants else miss.nominal
    return _row(
        miss.run_id,
        miss.schedule_id,
        kind,
        due_by,
        reported_by=miss.reported_by,
        reason=reason,
    )


def _row(
    run_id: str,
    schedule_id: str,
    deadline: str,
    due_by: datetime,
    *,
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
