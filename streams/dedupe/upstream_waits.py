"""Runs held for their upstream periods in the dedupe store (`Schedule.upstream`).

A claimed run whose request names upstream schedules gets a wait row in the transaction that
claims it, and its row's `next_ms` is `HELD_MS`, which no `acquire` reaches: the run is claimed
(redeliveries are duplicates, its overlap counts it in progress) but starts only once released.
Each turn an executor takes the waits checked longest ago, and for each either releases the run
(its `next_ms` becomes now: it starts like any ready run), leaves it waiting, or ends it at the
end of its wait, skipped or dead-lettered with the reason (`kairos.services.executor
.upstream_gate` decides). The end is a conditional update with its event, in one transaction, so
however many executors sweep, a run ends once; one released is never ended, and one ended is
never released.

A run promoted from `queued` (its predecessor ended) stays held while its wait row is there.

The round takes every held run in turn, so with many held (a team's million) it is long. So a
held run's matched periods are also indexed (`kairos_upstream_awaits`), the end of a run that
succeeded while runs awaited its period records that period (`kairos_upstream_news`, in the
transaction of the success), and each sweep first takes those and judges the runs awaiting them:
a release follows its upstream's success at the next sweep of any executor of the store.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime

from kairos.core.instants import epoch_ms, from_epoch_ms
from kairos.core.overlap import PeerRun, next_to_start
from kairos.streams.dedupe.base import EventKind, RunRequest, WaitingRun
from kairos.streams.dedupe.database import Connection, Database
from kairos.streams.dedupe.outbox import NewEvent, write_event

HELD_MS = 2**62
"""The `next_ms` of a held run: after any instant an executor's clock gives."""

_WAITING = "('ready', 'queued')"


class UpstreamWaits(Database):
    """The upstream-wait methods of `SqlDedupeStore` (a mixin on its `Database`)."""

    @abstractmethod
    def _lock_schedule(self, conn: Connection, schedule_id: str) -> None: ...

    @abstractmethod
    def _unfinished_peers(self, conn: Connection, schedule_id: str) -> list[PeerRun]: ...

    def _hold_for_upstream(self, conn: Connection, request: RunRequest, now_ms: int) -> None:
        """In the claim's transaction: the wait row of a run that waits (its `next_ms` is
        already `HELD_MS`)."""
        if request.waits_until is not None:
            conn.execute(
                self.q(
                    "INSERT INTO kairos_upstream_waits (run_id, until_ms, checked_ms) "
                    "VALUES (?, ?, ?)"
                ),
                (request.run_id, epoch_ms(request.waits_until), now_ms),
            )
            for schedule_id, nominal in set(request.awaits):
                conn.execute(
                    self.q(
                        "INSERT INTO kairos_upstream_awaits (schedule_id, nominal_ms, run_id) "
                        "VALUES (?, ?, ?)"
                    ),
                    (schedule_id, epoch_ms(nominal), request.run_id),
                )

    def _drop_wait(self, conn: Connection, run_id: str) -> bool:
        """Delete a run's wait and what it awaits; False if it had no wait (any more)."""
        conn.execute(self.q("DELETE FROM kairos_upstream_awaits WHERE run_id = ?"), (run_id,))
        gone = conn.execute(
            self.q("DELETE FROM kairos_upstream_waits WHERE run_id = ? RETURNING run_id"),
            (run_id,),
        ).fetchone()
        return gone is not None

    def _tell_awaiting(self, conn: Connection, run_id: str) -> None:
        """In the transaction of a run's success: record its period if held runs await it."""
        conn.execute(
            self.q(
                "INSERT INTO kairos_upstream_news (schedule_id, nominal_ms) "
                "SELECT r.schedule_id, r.nominal_ms FROM kairos_runs r WHERE r.run_id = ? "
                "AND EXISTS (SELECT 1 FROM kairos_upstream_awaits a WHERE a.schedule_id = "
                "r.schedule_id AND a.nominal_ms = r.nominal_ms) "
                "ON CONFLICT (schedule_id, nominal_ms) DO NOTHING"
            ),
            (run_id,),
        )

    def _start_following(self, conn: Connection, schedule_id: str, now_ms: int) -> None:
        """Once a run of the schedule ended: start its next queued run, held if it waits."""
        following = next_to_start(self._unfinished_peers(conn, schedule_id))
        if following is None:
            return
        conn.execute(
            self.q(
                "UPDATE kairos_runs SET state = 'ready', updated_ms = ?, next_ms = CASE WHEN "
                "EXISTS (SELECT 1 FROM kairos_upstream_waits w WHERE w.run_id = ?) "
                "THEN ? ELSE ? END WHERE run_id = ?"
            ),
            (now_ms, following, HELD_MS, now_ms, following),
        )

    def waiting_for_upstream(self, now: datetime, limit: int) -> list[WaitingRun]:
        """Up to `limit` held runs, those checked longest ago first; each is marked checked."""
        now_ms = epoch_ms(now)

        def work(conn: Connection) -> list[WaitingRun]:
            # A replaced run's wait is deleted with its cancel (`_resolve_overlap`): the state is
            # checked anyway, so a wait left by any other end is never judged.
            rows = conn.execute(
                self.q(
                    "SELECT w.run_id, r.schedule_id, r.nominal_ms, w.until_ms, r.value "
                    "FROM kairos_upstream_waits w JOIN kairos_runs r ON r.run_id = w.run_id "
                    f"WHERE r.state IN {_WAITING} ORDER BY w.checked_ms, w.run_id LIMIT ?"
                ),
                (limit,),
            ).fetchall()
            for row in rows:
                conn.execute(
                    self.q("UPDATE kairos_upstream_waits SET checked_ms = ? WHERE run_id = ?"),
                    (now_ms, row[0]),
                )
            return [
                WaitingRun(run_id, schedule_id, from_epoch_ms(nominal), from_epoch_ms(until),
                           bytes(value))
                for run_id, schedule_id, nominal, until, value in rows
            ]  # fmt: skip

        return self.transaction(work)

    def period_succeeded(self, schedule_id: str, nominal: datetime) -> bool:
        """Whether a run of the schedule at that nominal instant (the occurrence's run or a
        re-run of it) succeeded, as this store knows (until its finished runs are pruned)."""
        rows = self.transaction(
            lambda conn: conn.execute(
                self.q(
                    "SELECT 1 FROM kairos_runs WHERE schedule_id = ? AND nominal_ms = ? "
                    "AND state = 'succeeded' LIMIT 1"
                ),
                (schedule_id, epoch_ms(nominal)),
            ).fetchall()
        )
        return bool(rows)

    def take_upstream_news(self) -> list[tuple[str, datetime]]:
        """The periods that succeeded while runs awaited them, since the last take."""
        rows = self.transaction(
            lambda conn: conn.execute(
                "DELETE FROM kairos_upstream_news RETURNING schedule_id, nominal_ms"
            ).fetchall()
        )
        return sorted((schedule_id, from_epoch_ms(nominal)) for schedule_id, nominal in rows)

    def keep_upstream_news(self, periods: Sequence[tuple[str, datetime]]) -> None:
        """Put back news taken and not judged: the next sweep, of any executor, judges it."""

        def work(conn: Connection) -> None:
            for schedule_id, nominal in periods:
                conn.execute(
                    self.q(
                        "INSERT INTO kairos_upstream_news (schedule_id, nominal_ms) VALUES (?, ?) "
                        "ON CONFLICT (schedule_id, nominal_ms) DO NOTHING"
                    ),
                    (schedule_id, epoch_ms(nominal)),
                )

        self.transaction(work)

    def awaiting(
        self, period: tuple[str, datetime], after_run_id: str, limit: int
    ) -> list[WaitingRun]:
        """Up to `limit` runs held for `period`, in run id order after `after_run_id`."""
        rows = self.transaction(
            lambda conn: conn.execute(
                self.q(
                    "SELECT w.run_id, r.schedule_id, r.nominal_ms, w.until_ms, r.value "
                    "FROM kairos_upstream_awaits a "
                    "JOIN kairos_upstream_waits w ON w.run_id = a.run_id "
                    "JOIN kairos_runs r ON r.run_id = a.run_id "
                    "WHERE a.schedule_id = ? AND a.nominal_ms = ? AND a.run_id > ? "
                    f"AND r.state IN {_WAITING} ORDER BY a.run_id LIMIT ?"
                ),
                (period[0], epoch_ms(period[1]), after_run_id, limit),
            ).fetchall()
        )
        return [
            WaitingRun(run_id, schedule_id, from_epoch_ms(nominal), from_epoch_ms(until),
                       bytes(value))
            for run_id, schedule_id, nominal, until, value in rows
        ]  # fmt: skip

    def release_waiting(
        self, runs: Sequence[WaitingRun], now: datetime, instance: str
    ) -> list[str]:
        """Let held runs start now, in one transaction, each with a `released` event; the ids
        of those released (a run that no longer waits, ended or released already, is not).

        Under their schedules' locks, taken in one order as `admit` takes them: a run released
        while its predecessor ends (which promotes it from queued, held while it waits) is
        either promoted after the release, and starts, or released after the promotion."""
        now_ms = epoch_ms(now)

        def work(conn: Connection) -> list[str]:
            for schedule_id in sorted({run.schedule_id for run in runs}):
                self._lock_schedule(conn, schedule_id)
            released = []
            for run in runs:
                if not self._drop_wait(conn, run.run_id):
                    continue
                conn.execute(
                    self.q(
                        "UPDATE kairos_runs SET next_ms = ?, updated_ms = ? "
                        "WHERE run_id = ? AND state = 'ready' AND next_ms = ?"
                    ),
                    (now_ms, now_ms, run.run_id, HELD_MS),
                )
                # The audit tells a run released in time (then held back, late) from one left
                # waiting past its wait by this event.
                write_event(self, conn, NewEvent(run.run_id, EventKind.RELEASED, 0, instance))
                released.append(run.run_id)
            return released

        return self.transaction(work)

    def end_waiting(
        self, run: WaitingRun, ending: EventKind, reason: str, now: datetime, instance: str
    ) -> bool:
        """End a held run, `SKIPPED` or `DEAD_LETTERED` (a dead letter with the reason), with its
        event; False if it no longer waits."""
        now_ms, run_id, schedule_id = epoch_ms(now), run.run_id, run.schedule_id
        state = "skipped" if ending is EventKind.SKIPPED else "dead_lettered"

        def work(conn: Connection) -> bool:
            self._lock_schedule(conn, schedule_id)
            if not self._drop_wait(conn, run_id):
                return False
            ended_row = conn.execute(
                self.q(
                    "UPDATE kairos_runs SET state = ?, reason = ?, updated_ms = ? "
                    f"WHERE run_id = ? AND state IN {_WAITING} RETURNING attempt"
                ),
                (state, reason, now_ms, run_id),
            ).fetchone()
            if ended_row is None:
                return False
            event = NewEvent(
                run_id, ending, ended_row[0], instance, finished_ms=now_ms, reason=reason,
                dead_letter=ending is EventKind.DEAD_LETTERED,
            )  # fmt: skip
            write_event(self, conn, event)
            self._start_following(conn, schedule_id, now_ms)
            return True

        return self.transaction(work)
