"""Run deadlines in the dedupe store: which claimed runs missed theirs, each reported once.

A run whose schedule has a `deadline` gets a row beside its run row when it is admitted (every
delivery writes it if missing, so a crash between the claim and this write is repaired by the
redelivery). Each turn an executor settles the deadlines that have passed, judging the run by
its row: a start deadline is missed when the first attempt had not started by it, a finish
deadline when the run had not succeeded by it. Settling marks the deadline with a conditional
update and writes the `deadline_missed` event (if missed) in the same transaction, so however
many executors sweep, each deadline of each run id is reported at most once, and, while some
executor runs, at least once.

What the store cannot see it cannot report: a run never consumed by any executor (`kairos runs
late` reads the topics for those), and the first start of a run whose retry started before any
executor swept (its row keeps only the latest attempt's start; such a deadline is settled as
met rather than guessed missed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from kairos.core.instants import epoch_ms, from_epoch_ms
from kairos.core.run_id import format_instant
from kairos.streams.dedupe.base import DeadlineKind, EventKind, MissedDeadline, RunRequest
from kairos.streams.dedupe.database import Connection, Database
from kairos.streams.dedupe.outbox import NewEvent, write_event

_SWEEP_BATCH = 500
_NOT_RUN = ("skipped", "cancelled")
"""Runs deliberately not run (overlap skip, replaced): never late."""


@dataclass(frozen=True, slots=True)
class _Passed:
    run_id: str
    schedule_id: str
    due_by_ms: int
    state: str
    attempt: int
    started_ms: int | None
    updated_ms: int
    value: bytes


class DeadlineBook(Database):
    """The deadline methods of `SqlDedupeStore` (a mixin on its `Database`)."""

    def track_deadlines(self, requests: Sequence[RunRequest]) -> None:
        """Write the deadline row of every claimed request that has one and has none yet."""
        rows = [
            (r.run_id, _maybe_ms(r.start_by), _maybe_ms(r.finish_by), int(r.start_by is None),
             int(r.finish_by is None))
            for r in requests
            if r.start_by is not None or r.finish_by is not None
        ]  # fmt: skip
        if not rows:
            return

        def work(conn: Connection) -> None:
            for row in rows:
                conn.execute(
                    self.q(
                        "INSERT INTO kairos_deadlines (run_id, start_by_ms, finish_by_ms, "
                        "start_settled, finish_settled) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (run_id) DO NOTHING"
                    ),
                    row,
                )

        self.transaction(work)

    def report_missed_deadlines(self, now: datetime, instance: str) -> list[MissedDeadline]:
        """Settle the deadlines passed by `now`; the missed ones get a `deadline_missed` event."""

        def work(conn: Connection) -> list[MissedDeadline]:
            missed = []
            for kind in DeadlineKind:
                for passed in self._passed(conn, kind, epoch_ms(now)):
                    if not self._settle(conn, kind, passed.run_id):
                        continue  # another executor settled it first
                    reason = _missed_reason(kind, passed)
                    if reason is None:
                        continue
                    write_event(
                        self,
                        conn,
                        NewEvent(
                            passed.run_id,
                            EventKind.DEADLINE_MISSED,
                            passed.attempt,
                            instance,
                            started_ms=passed.started_ms,
                            reason=reason,
                        ),
                    )
                    due_by = from_epoch_ms(passed.due_by_ms)
                    missed.append(
                        MissedDeadline(
                            passed.run_id, passed.schedule_id, kind, due_by, reason, passed.value
                        )
                    )
            return missed

        return self.transaction(work)

    def prune_deadlines(self, limit: int) -> int:
        """Delete up to `limit` settled deadlines whose run was pruned; returns how many."""

        def work(conn: Connection) -> int:
            cursor = conn.execute(
                self.q(
                    "DELETE FROM kairos_deadlines WHERE run_id IN (SELECT d.run_id FROM "
                    "kairos_deadlines d WHERE d.start_settled = 1 AND d.finish_settled = 1 "
                    "AND NOT EXISTS (SELECT 1 FROM kairos_runs r WHERE r.run_id = d.run_id) "
                    "LIMIT ?)"
                ),
                (limit,),
            )
            return cursor.rowcount

        return self.transaction(work)

    def _passed(self, conn: Connection, kind: DeadlineKind, now_ms: int) -> list[_Passed]:
        column = f"{kind.value}_ms"
        rows = conn.execute(
            self.q(
                f"SELECT d.run_id, r.schedule_id, d.{column}, r.state, r.attempt, r.started_ms, "
                "r.updated_ms, r.value FROM kairos_deadlines d "
                "JOIN kairos_runs r ON r.run_id = d.run_id "
                f"WHERE d.{kind.value.split('_')[0]}_settled = 0 AND d.{column} <= ? "
                f"ORDER BY d.{column} LIMIT ?"
            ),
            (now_ms, _SWEEP_BATCH),
        ).fetchall()
        return [
            _Passed(run_id, schedule_id, due_by_ms, state, attempt, started, updated, bytes(value))
            for run_id, schedule_id, due_by_ms, state, attempt, started, updated, value in rows
        ]

    def _settle(self, conn: Connection, kind: DeadlineKind, run_id: str) -> bool:
        settled = f"{kind.value.split('_')[0]}_settled"
        cursor = conn.execute(
            self.q(f"UPDATE kairos_deadlines SET {settled} = 1 WHERE run_id = ? AND {settled} = 0"),
            (run_id,),
        )
        return cursor.rowcount == 1


def _maybe_ms(instant: datetime | None) -> int | None:
    return None if instant is None else epoch_ms(instant)


def _missed_reason(kind: DeadlineKind, run: _Passed) -> str | None:
    """Why the run missed the deadline, or `None` when it met it (or was not to run)."""
    due_by = format_instant(from_epoch_ms(run.due_by_ms))
    if run.state in _NOT_RUN:
        return None
    if kind is DeadlineKind.START_BY:
        if run.attempt == 0:
            return f"start_by missed: not started by {due_by} ({run.state})"
        if run.attempt == 1 and run.started_ms is not None and run.started_ms > run.due_by_ms:
            started = format_instant(from_epoch_ms(run.started_ms))
            return f"start_by missed: started at {started}, after {due_by}"
        return None
    if run.state != "succeeded":
        return f"finish_by missed: not succeeded by {due_by} ({run.state})"
    if run.updated_ms > run.due_by_ms:
        succeeded = format_instant(from_epoch_ms(run.updated_ms))
        return f"finish_by missed: succeeded at {succeeded}, after {due_by}"
    return None
