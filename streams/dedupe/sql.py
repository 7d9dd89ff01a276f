"""The dedupe store's state machine in SQL, shared by the SQLite and PostgreSQL stores.

The transitions are written once, here, so both stores keep the rules of
`kairos.streams.dedupe.base` the same way; each store supplies its connections, schema, locks and
error classification (`kairos.streams.dedupe.database`).

Locking (PostgreSQL; SQLite serialises every write transaction with `BEGIN IMMEDIATE` instead):
a transaction that changes which runs of a schedule are unfinished (admit, finish, reap) first
takes the schedule's lock, then locks the run rows it reads. `acquire` takes no schedule lock and
skips locked rows, and heartbeats update one row per statement, so no two transactions ever wait
for each other in a cycle.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

from kairos.core.concurrency import DEFAULT_OWNER_SHARE, owner_of
from kairos.core.instants import epoch_ms, from_epoch_ms
from kairos.core.overlap import Admission as OverlapAdmission
from kairos.core.overlap import (
    OverlapDecision,
    PeerRun,
    RunState,
    decide_admission,
)
from kairos.core.retry import after_failure
from kairos.streams.dedupe.base import (
    Admission,
    Admitted,
    AttemptResult,
    AttemptTransaction,
    EventKind,
    Lease,
    LeaseLostError,
    LeaseStatus,
    Publisher,
    RunEnd,
    RunRequest,
    StoredRun,
)
from kairos.streams.dedupe.concurrency import ConcurrencyLimits
from kairos.streams.dedupe.database import (
    Connection,
    LazyTransaction,
)
from kairos.streams.dedupe.deadlines import DeadlineBook
from kairos.streams.dedupe.outbox import NewEvent, delete_events, oldest_events, write_event
from kairos.streams.dedupe.upstream_waits import HELD_MS, UpstreamWaits

_MS = timedelta(milliseconds=1)
_REAP_BATCH = 100
_UNFINISHED = "('queued', 'ready', 'running')"
_FINISHED = "('succeeded', 'dead_lettered', 'skipped', 'cancelled')"
_ADMITTED = {
    OverlapAdmission.START: (RunState.READY, Admitted.READY),
    OverlapAdmission.QUEUE: (RunState.QUEUED, Admitted.QUEUED),
    OverlapAdmission.SKIP: (RunState.SKIPPED, Admitted.SKIPPED),
}
_RUNNING_ATTEMPT = (
    "SELECT run_id, schedule_id, attempt, lease_owner, max_attempts, retry_backoff_ms, "
    "stop_reason, started_ms FROM kairos_runs WHERE state = 'running' AND run_id = ? "
)


@dataclass(frozen=True, slots=True)
class _RunningAttempt:
    """A running attempt's row, locked by the transaction that ends the attempt."""

    run_id: str
    schedule_id: str
    attempt: int
    owner: str
    max_attempts: int
    backoff_ms: int
    stop_reason: str | None
    started_ms: int


class SqlDedupeStore(DeadlineBook, ConcurrencyLimits, UpstreamWaits):
    """A `DedupeStore` on a SQL database."""

    for_update: ClassVar[str]
    """Appended to a SELECT whose rows a decision depends on."""
    skip_locked: ClassVar[str]
    """Appended to a SELECT that takes rows no other transaction holds."""
    clock_ms: ClassVar[str]
    """The database's clock in epoch milliseconds, as SQL: every lease instant is set and
    compared on it, so executors whose own clocks disagree agree on which leases expired."""

    @abstractmethod
    def _lock_schedule(self, conn: Connection, schedule_id: str) -> None:
        """Serialise, until the transaction ends, every decision about this schedule's runs."""

    @abstractmethod
    def _take_outbox(self, conn: Connection) -> bool:
        """Hold the outbox for this transaction; False if another publisher holds it."""

    # -- admission ---------------------------------------------------------------------------

    def admit(
        self, requests: Sequence[RunRequest], now: datetime, instance: str
    ) -> list[Admission]:
        def work(conn: Connection) -> list[Admission]:
            # Schedules in one order in every transaction: two executors admitting batches that
            # share schedules take their locks in the same order, so they never deadlock.
            order = sorted(range(len(requests)), key=lambda i: (requests[i].schedule_id, i))
            done = {i: self._admit_one(conn, requests[i], epoch_ms(now), instance) for i in order}
            return [done[i] for i in range(len(requests))]

        return self.transaction(work)

    def _admit_one(
        self, conn: Connection, request: RunRequest, now_ms: int, instance: str
    ) -> Admission:
        self._lock_schedule(conn, request.schedule_id)
        seen = conn.execute(
            self.q(
                "UPDATE kairos_runs SET deliveries = deliveries + 1 WHERE run_id = ? "
                "RETURNING deliveries"
            ),
            (request.run_id,),
        ).fetchone()
        if seen is not None:
            return Admission(request.run_id, Admitted.DUPLICATE, seen[0])
        decision = decide_admission(
            request.overlap, request.run_id, self._unfinished_peers(conn, request.schedule_id)
        )
        state, admitted = _ADMITTED[decision.admission]
        skip_reason = decision.reason if state is RunState.SKIPPED else None
        self._insert_run(conn, request, state, skip_reason, now_ms)
        if state is RunState.SKIPPED:
            write_event(
                self,
                conn,
                NewEvent(
                    request.run_id,
                    EventKind.SKIPPED,
                    0,
                    instance,
                    finished_ms=now_ms,
                    reason=skip_reason,
                ),
            )
        self._resolve_overlap(conn, decision, now_ms, instance)
        return Admission(request.run_id, admitted, 1)

    def _insert_run(
        self,
        conn: Connection,
        request: RunRequest,
        state: RunState,
        skip_reason: str | None,
        now_ms: int,
    ) -> None:
        conn.execute(
            self.q(
                "INSERT INTO kairos_runs (run_id, schedule_id, nominal_ms, due_ms, fired_ms, "
                "overlap, state, attempt, max_attempts, retry_backoff_ms, runner, next_ms, "
                "deliveries, reason, value, source_topic, source_partition, source_offset, "
                "created_ms, updated_ms, owner) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (
                request.run_id,
                request.schedule_id,
                epoch_ms(request.nominal_at),
                epoch_ms(request.due_at),
                epoch_ms(request.fired_at),
                request.overlap.value,
                state.value,
                request.max_attempts,
                request.retry_backoff // _MS,
                request.runner,
                now_ms if request.waits_until is None else HELD_MS,
                skip_reason,
                request.value,
                request.source.topic,
                request.source.partition,
                request.source.offset,
                now_ms,
                now_ms,
                owner_of(request.groups),
            ),
        )
        self._record_groups(conn, request)
        if state is not RunState.SKIPPED:
            self._hold_for_upstream(conn, request, now_ms)

    def _resolve_overlap(
        self, conn: Connection, decision: OverlapDecision, now_ms: int, instance: str
    ) -> None:
        """Ask the running peers the new run replaces to stop; cancel the waiting ones."""
        for run_id in decision.stop_running:
            conn.execute(
                self.q(
                    "UPDATE kairos_runs SET stop_reason = ?, updated_ms = ? "
                    "WHERE run_id = ? AND state = 'running'"
                ),
                (decision.reason, now_ms, run_id),
            )
        for run_id in decision.cancel_waiting:
            cancelled = conn.execute(
                self.q(
                    "UPDATE kairos_runs SET state = 'cancelled', reason = ?, updated_ms = ? "
                    "WHERE run_id = ? AND state IN ('ready', 'queued') RETURNING attempt"
                ),
                (decision.reason, now_ms, run_id),
            ).fetchone()
            if cancelled is not None:
                self._drop_wait(conn, run_id)  # a replaced run awaits nothing any more
                write_event(
                    self,
                    conn,
                    NewEvent(
                        run_id,
                        EventKind.SKIPPED,
                        cancelled[0],
                        instance,
                        finished_ms=now_ms,
                        reason=decision.reason,
                    ),
                )

    def _unfinished_peers(self, conn: Connection, schedule_id: str) -> list[PeerRun]:
        rows = conn.execute(
            self.q(
                f"SELECT run_id, state, nominal_ms FROM kairos_runs WHERE schedule_id = ? "
                f"AND state IN {_UNFINISHED} ORDER BY nominal_ms{self.for_update}"
            ),
            (schedule_id,),
        ).fetchall()
        return [PeerRun(run_id, RunState(state), from_epoch_ms(ms)) for run_id, state, ms in rows]

    # -- leases ------------------------------------------------------------------------------

    def acquire(
        self,
        owner: str,
        runners: Collection[str],
        now: datetime,
        lease: timedelta,
        limit: int,
        *,
        owner_share: float = DEFAULT_OWNER_SHARE,
    ) -> list[Lease]:
        now_ms, lease_ms = epoch_ms(now), lease // _MS
        served = sorted(runners)
        if not served or limit < 1:
            return []

        def work(conn: Connection) -> list[Lease]:
            leases = []
            for run_id in self._startable(conn, now_ms, served, limit, owner_share):
                row = conn.execute(
                    self.q(
                        "UPDATE kairos_runs SET state = 'running', attempt = attempt + 1, "
                        f"lease_owner = ?, lease_expires_ms = {self.clock_ms} + ?, "
                        "started_ms = ?, stop_reason = NULL, updated_ms = ? WHERE run_id = ? "
                        "AND state = 'ready' "
                        "RETURNING schedule_id, attempt, due_ms, value, lease_expires_ms"
                    ),
                    (owner, lease_ms, now_ms, now_ms, run_id),
                ).fetchone()
                schedule_id, attempt, due_ms, value, expires_ms = row
                write_event(self, conn, NewEvent(run_id, EventKind.STARTED, attempt, owner, now_ms))
                expires, due = from_epoch_ms(expires_ms), from_epoch_ms(due_ms)
                held = Lease(run_id, schedule_id, attempt, owner, now, expires, due, bytes(value))
                leases.append(held)
            return leases

        return self.transaction(work)

    def renew(
        self, leases: Sequence[Lease], now: datetime, lease: timedelta
    ) -> dict[str, LeaseStatus]:
        statuses = {}
        for held in leases:
            # One statement per lease: a heartbeat never holds one row while waiting for another.
            row = self.statement(
                f"UPDATE kairos_runs SET lease_expires_ms = {self.clock_ms} + ?, updated_ms = ? "
                "WHERE run_id = ? AND lease_owner = ? AND attempt = ? AND state = 'running' "
                "RETURNING stop_reason",
                (lease // _MS, epoch_ms(now), held.run_id, held.owner, held.attempt),
            ).fetchone()
            if row is None:
                statuses[held.run_id] = LeaseStatus.LOST
            elif row[0] is not None:
                statuses[held.run_id] = LeaseStatus.STOP_REQUESTED
            else:
                statuses[held.run_id] = LeaseStatus.HELD
        return statuses

    # -- outcomes ----------------------------------------------------------------------------

    @contextmanager
    def attempt_transaction(self) -> Iterator[AttemptTransaction]:
        transaction = LazyTransaction(self)
        try:
            yield transaction
        finally:
            transaction.rollback()

    def finish(
        self,
        lease: Lease,
        result: AttemptResult,
        now: datetime,
        transaction: AttemptTransaction | None = None,
    ) -> RunEnd:
        def work(conn: Connection) -> RunEnd:
            self._lock_schedule(conn, lease.schedule_id)
            running = self._running_attempt(
                conn,
                "AND lease_owner = ? AND attempt = ?",
                (lease.run_id, lease.owner, lease.attempt),
            )
            if running is None:
                raise LeaseLostError(lease.run_id, lease.owner, lease.attempt)
            return self._end_attempt(conn, running, result, epoch_ms(now), lease.owner)

        if transaction is None or not transaction.begun:
            return self.transaction(work)
        if not isinstance(transaction, LazyTransaction) or transaction.database is not self:
            raise TypeError("finish() takes the transaction this store's attempt_transaction made")
        return transaction.commit_with(work)

    def reap_expired(self, now: datetime, instance: str) -> list[tuple[str, RunEnd]]:
        now_ms = epoch_ms(now)
        expired = self.statement(
            "SELECT run_id, schedule_id FROM kairos_runs WHERE state = 'running' "
            f"AND lease_expires_ms < {self.clock_ms} ORDER BY lease_expires_ms LIMIT ?",
            (_REAP_BATCH,),
        ).fetchall()
        ended = []
        for run_id, schedule_id in expired:

            def work(
                conn: Connection, run_id: str = run_id, schedule_id: str = schedule_id
            ) -> RunEnd | None:
                self._lock_schedule(conn, schedule_id)
                running = self._running_attempt(
                    conn, f"AND lease_expires_ms < {self.clock_ms}", (run_id,)
                )
                if running is None:  # renewed or finished since the candidates were read
                    return None
                reason = (
                    f"lease expired: executor {running.owner} stopped renewing it during "
                    f"attempt {running.attempt}"
                )
                return self._end_attempt(
                    conn, running, AttemptResult(False, reason), now_ms, instance
                )

            end = self.transaction(work)
            if end is not None:
                ended.append((run_id, end))
        return ended

    def _running_attempt(
        self, conn: Connection, condition: str, params: Sequence[Any]
    ) -> _RunningAttempt | None:
        row = conn.execute(
            self.q(f"{_RUNNING_ATTEMPT}{condition}{self.for_update}"), params
        ).fetchone()
        return None if row is None else _RunningAttempt(*row)

    def _end_attempt(
        self,
        conn: Connection,
        running: _RunningAttempt,
        result: AttemptResult,
        now_ms: int,
        instance: str,
    ) -> RunEnd:
        """Record how an attempt ended and what follows; the run's row is locked."""
        ended = NewEvent(
            running.run_id,
            EventKind.FAILED,
            running.attempt,
            instance,
            started_ms=running.started_ms,
            finished_ms=now_ms,
        )
        next_ms = None
        if result.succeeded:
            end, state, reason = RunEnd.SUCCEEDED, RunState.SUCCEEDED, None
            write_event(self, conn, replace(ended, kind=EventKind.SUCCEEDED))
            self._tell_awaiting(conn, running.run_id)
        elif running.stop_reason is not None:
            end, state, reason = RunEnd.CANCELLED, RunState.CANCELLED, running.stop_reason
            write_event(self, conn, replace(ended, reason=reason))
        else:
            reason = result.reason or "the attempt failed"
            write_event(self, conn, replace(ended, reason=reason))
            end, state, next_ms = self._after_failure(conn, running, reason, now_ms, instance)
        conn.execute(
            self.q(
                "UPDATE kairos_runs SET state = ?, reason = ?, next_ms = COALESCE(?, next_ms), "
                "lease_owner = NULL, lease_expires_ms = NULL, updated_ms = ? WHERE run_id = ?"
            ),
            (state.value, reason, next_ms, now_ms, running.run_id),
        )
        if state.finished:
            self._start_following(conn, running.schedule_id, now_ms)
        return end

    def _after_failure(
        self, conn: Connection, running: _RunningAttempt, reason: str, now_ms: int, instance: str
    ) -> tuple[RunEnd, RunState, int | None]:
        """A retry after the backoff, or the run dead-lettered once its attempts are spent."""
        decision = after_failure(
            attempt=running.attempt,
            max_attempts=running.max_attempts,
            backoff=timedelta(milliseconds=running.backoff_ms),
            failed_at=from_epoch_ms(now_ms),
        )
        follows = NewEvent(running.run_id, EventKind.RETRYING, running.attempt, instance)
        if decision.next_attempt_at is not None:
            next_ms = epoch_ms(decision.next_attempt_at)
            write_event(self, conn, replace(follows, reason=reason, next_attempt_ms=next_ms))
            return RunEnd.RETRYING, RunState.READY, next_ms
        exhausted = (
            f"{running.attempt} of {running.max_attempts} attempts failed; the last: {reason}"
        )
        write_event(
            self,
            conn,
            replace(follows, kind=EventKind.DEAD_LETTERED, reason=exhausted, dead_letter=True),
        )
        return RunEnd.DEAD_LETTERED, RunState.DEAD_LETTERED, None

    # -- the outbox --------------------------------------------------------------------------

    def publish_events(self, publish: Publisher, limit: int) -> int:
        def work(conn: Connection) -> int:
            if not self._take_outbox(conn):
                return 0
            pending = oldest_events(self, conn, limit)
            if pending:
                publish([event for _, event in pending])
                delete_events(self, conn, [event_id for event_id, _ in pending])
            return len(pending)

        return self.transaction(work)

    # -- inspection and housekeeping ---------------------------------------------------------

    def get(self, run_id: str) -> StoredRun | None:
        row = self.statement(
            "SELECT run_id, schedule_id, state, attempt, max_attempts, deliveries, lease_owner, "
            "reason FROM kairos_runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            return None
        run_id, schedule_id, state, attempt, max_attempts, deliveries, owner, reason = row
        return StoredRun(
            run_id, schedule_id, RunState(state), attempt, max_attempts, deliveries, owner, reason
        )

    def prune_finished(self, before: datetime, limit: int) -> int:
        def work(conn: Connection) -> int:
            rows = conn.execute(
                self.q(
                    f"SELECT run_id FROM kairos_runs WHERE state IN {_FINISHED} "
                    "AND updated_ms < ? LIMIT ?"
                ),
                (epoch_ms(before), limit),
            ).fetchall()
            if not rows:
                return 0
            run_ids = [run_id for (run_id,) in rows]
            listed = ", ".join("?" * len(run_ids))
            conn.execute(
                self.q(f"DELETE FROM kairos_run_groups WHERE run_id IN ({listed})"), run_ids
            )
            cursor = conn.execute(
                self.q(f"DELETE FROM kairos_runs WHERE run_id IN ({listed})"), run_ids
            )
            return cursor.rowcount

        return self.transaction(work)
