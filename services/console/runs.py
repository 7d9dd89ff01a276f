"""The runs on-call reads: a list across schedules, failed and late first, and a run's own page
with its events and attempts in order, the re-runs of its occurrence, and its reason.

A run's team is the owner its ticker fired it for (`RunRequested.owner`): the ticker's verdict,
which a forged change of the schedule awaiting that verdict cannot move.

A failure's reason carries the tail of the job's output (bounded by the executor's
`output_limit_bytes`, the job's secret values blanked by the executor), so it is shown only to
the owning team's users; everyone else reads the run's states without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kairos.core.instants import epoch_ms
from kairos.services.console.identity import Identity
from kairos.services.console.redaction import sees_secrets
from kairos.services.console.view import ConsoleView

RUNS_SHOWN = 100
PROBLEMS = ("failed", "retrying", "dead_lettered", "deadline_missed")
STATES = ("requested", "started", "succeeded", "skipped", *PROBLEMS)
OUTPUT_STATES = frozenset({"failed", "retrying", "dead_lettered"})
"""The states whose reason may hold the job's output."""
HIDDEN_REASON = "shown to the owning team"
_RUN_KEYS = (
    "run_id", "schedule_id", "owner", "nominal_at", "fired_at", "lateness_ms", "ticker_instance",
    "status", "attempts", "executor", "reason", "finished_at",
)  # fmt: skip
_RUN_COLUMNS = (
    "r.run_id, r.schedule_id, r.owner, r.nominal_at, r.fired_at, r.lateness_ms, r.ticker, "
    "r.status, r.attempts, r.executor, r.reason, r.finished_at FROM runs r"
)


@dataclass(frozen=True)
class RunFilter:
    start: datetime
    end: datetime
    team: str | None = None
    state: str | None = None
    schedule: str | None = None
    """An id prefix."""


def runs_list(
    view: ConsoleView, chosen: RunFilter, viewer: Identity | None
) -> list[dict[str, Any]]:
    """Runs whose nominal instant is in the window, problems first, then the latest by
    lateness, then the newest; at most `RUNS_SHOWN`."""
    where = ["r.nominal_at >= ?", "r.nominal_at < ?"]
    arguments: list[object] = [epoch_ms(chosen.start), epoch_ms(chosen.end)]
    for clause, value in (
        ("r.owner = ?", chosen.team),
        ("r.status = ?", chosen.state),
        ("r.schedule_id >= ? AND r.schedule_id < ?", chosen.schedule),
    ):
        if value:
            where.append(clause)
            arguments.extend([value, value + "\U0010ffff"] if "AND" in clause else [value])
    problems = ", ".join(f"'{state}'" for state in PROBLEMS)
    with view.connection() as db:
        rows = db.execute(
            f"SELECT {_RUN_COLUMNS} WHERE {' AND '.join(where)} "
            f"ORDER BY CASE WHEN r.status IN ({problems}) THEN 0 ELSE 1 END, "
            "COALESCE(r.lateness_ms, 0) DESC, r.nominal_at DESC LIMIT ?",
            [*arguments, RUNS_SHOWN],
        ).fetchall()
    return [_shown(dict(zip(_RUN_KEYS, row, strict=True)), viewer) for row in rows]


def run_page(view: ConsoleView, run_id: str, viewer: Identity | None) -> dict[str, Any] | None:
    """The run, its events in order, and every run of the same occurrence (its re-runs, or the
    scheduled run it re-runs), each linked."""
    with view.connection() as db:
        row = db.execute(f"SELECT {_RUN_COLUMNS} WHERE r.run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        run = _shown(dict(zip(_RUN_KEYS, row, strict=True)), viewer)
        events = db.execute(
            "SELECT attempt, kind, at_ms, source, reason FROM run_events WHERE run_id = ? "
            "ORDER BY attempt, at_ms",
            (run_id,),
        ).fetchall()
        others = db.execute(
            f"SELECT {_RUN_COLUMNS} WHERE r.schedule_id = ? AND r.nominal_at = ? "
            "AND r.run_id <> ? ORDER BY r.fired_at",
            (run["schedule_id"], run["nominal_at"], run_id),
        ).fetchall()
    hidden = not sees_secrets(viewer, run["owner"])
    return {
        "run": run,
        "events": [
            {
                "attempt": attempt,
                "kind": kind,
                "at": at_ms,
                "executor": source,
                "reason": HIDDEN_REASON if hidden and reason and kind in OUTPUT_STATES else reason,
            }
            for attempt, kind, at_ms, source, reason in events
        ],
        "same_occurrence": [_shown(dict(zip(_RUN_KEYS, o, strict=True)), viewer) for o in others],
    }


def _shown(run: dict[str, Any], viewer: Identity | None) -> dict[str, Any]:
    if run["reason"] and run["status"] in OUTPUT_STATES and not sees_secrets(viewer, run["owner"]):
        run["reason"] = HIDDEN_REASON
    return run
