"""Failure streaks in the dedupe store: how many of a schedule's latest runs failed in a row.

The store knows every executor's outcomes, so the count holds across the fleet; `pause_on_failure`
(services/executor/failure_pause.py) reads it after each dead-lettered run.
"""

from __future__ import annotations

from datetime import datetime

from kairos.streams.dedupe.database import Connection, Database, to_ms


class FailureStreaks(Database):
    """The failure-streak method of `SqlDedupeStore` (a mixin on its `Database`)."""

    def failures_in_a_row(self, schedule_id: str, since: datetime, limit: int) -> int:
        """Of the schedule's runs fired at or after `since` that ended (succeeded or failed for
        good), how many of the latest, by nominal instant, failed in a row; at most `limit`."""

        def work(conn: Connection) -> int:
            rows = conn.execute(
                self.q(
                    "SELECT state FROM kairos_runs WHERE schedule_id = ? AND fired_ms >= ? "
                    "AND state IN ('succeeded', 'dead_lettered') ORDER BY nominal_ms DESC LIMIT ?"
                ),
                (schedule_id, to_ms(since), limit),
            ).fetchall()
            streak = 0
            for (state,) in rows:
                if state != "dead_lettered":
                    break
                streak += 1
            return streak

        return self.transaction(work)
