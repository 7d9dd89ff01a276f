"""The executors' dedupe store: the one place that knows which runs exist and who runs them.

Delivery of `RunRequested` is at least once; this store makes the outcome effectively once. Every
implementation keeps these rules (tests/local/test_dedupe_contract.py checks them on each):

1. **Claim once.** `admit` records a run id in a database transaction the first time it is
   delivered; every later delivery of that id, from any executor, is a `DUPLICATE` (its count is
   kept) and changes nothing else. A run id is claimed once however often it is delivered.
2. **Overlap in the store.** `admit` decides the new run's fate with
   `kairos.core.overlap.decide_admission` while holding the schedule's lock, so executors on many
   hosts apply a schedule's overlap policy one decision at a time.
3. **Leases.** `acquire` hands a ready, due run to one executor under a lease and starts its next
   attempt; no other executor acquires it while the lease is held. `renew` extends leases and
   reports those lost or asked to stop. `reap_expired` ends the attempts whose lease expired (their
   executor died or hung) as failed, so the run is retried by any executor: never run twice at once
   while leases are renewed, never abandoned when they are not.
4. **Fenced outcomes.** `finish` records an attempt's outcome only if the lease is still the
   caller's (same owner, same attempt, still running); otherwise it raises `LeaseLostError` and
   writes nothing, including a handler's own writes in the `HandlerTransaction`.
5. **Retries from the store.** A failed attempt is retried (`kairos.core.retry.after_failure`)
   by making the run ready again at its next attempt instant; an exhausted run ends
   `DEAD_LETTERED`. A run that ends lets the schedule's next queued run start.
6. **Outbox.** Every change writes the lifecycle events it causes in the same transaction;
   `publish_events` hands them, in order, to one publisher at a time and deletes them only after
   the publisher returned. Events are published at least once and never before their change
   committed.
7. **Time is an argument, except a lease's.** Methods take `now` (the executor's clock) for
   what they record: events' instants, retry instants, admission. Lease expiry is set by
   `acquire` and `renew` and compared by `reap_expired` on the database's own clock, so an
   executor whose clock is ahead never reaps a healthy lease, and one whose clock is behind
   never holds a lease longer than it renews it.
8. **One identity.** `store_id` is made at random when the store's tables are created and kept
   in them: every executor on one database (or one SQLite file) reads the same id, and a
   different database has a different one. Executors compare it to refuse a consumer group
   whose members keep their claims in different stores.

9. **Concurrency groups.** `admit` records the groups each run belongs to. `acquire` starts a run
   only while every limited group it belongs to (`set_concurrency_limit`) runs fewer runs than
   its limit, counting across every executor of the store: two executors never both take a
   group's last place. A run held back stays ready and keeps its place: the runs of a group start
   in their due order, and a full group never holds up runs outside it. A limit applies to the
   starts after it is set; lowering it stops nothing already running.
10. **Owners' turns.** `acquire` takes ready runs round-robin across their schedules' owners (runs
   without owner are one more owner), each owner's in due order, so a team's runs start in the
   first acquire after they are due however many runs of another team wait. While another
   owner's runs can start, an owner running `owner_share` of the pool (running runs among the
   runners asked for, plus `limit`; `kairos.core.concurrency.owner_cap`) starts no more.

Methods raise `DedupeStoreError` when the database fails; the caller retries later.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from kairos.core.concurrency import DEFAULT_OWNER_SHARE, GroupStatus
from kairos.core.errors import KairosError
from kairos.core.overlap import RunState
from kairos.core.schedule import OverlapPolicy


class DeadlineKind(StrEnum):
    START_BY = "start_by"
    FINISH_BY = "finish_by"


@dataclass(frozen=True, slots=True)
class MissedDeadline:
    """A deadline reported missed by this sweep; `value` is the run's `RunRequested`."""

    run_id: str
    schedule_id: str
    deadline: DeadlineKind
    due_by: datetime
    reason: str
    value: bytes


class DedupeStoreError(KairosError):
    """The database failed or refused; `store` names it (URL without password)."""

    retryable = True
    """The executor tries the batch again: a database away or overloaded comes back."""

    def __init__(self, store: str, problem: str) -> None:
        self.store = store
        self.problem = problem
        super().__init__(f"dedupe store {store}: {problem}")


class LeaseLostError(KairosError):
    """An outcome came from an executor that no longer holds the run's lease; nothing was written.

    Another executor reaped the lease (this one stopped renewing it in time) or the run was
    replaced. The attempt's result is discarded; the run's current owner decides what follows.
    """

    def __init__(self, run_id: str, owner: str, attempt: int) -> None:
        self.run_id = run_id
        self.owner = owner
        self.attempt = attempt
        super().__init__(
            f"run {run_id}: attempt {attempt} no longer belongs to executor {owner}; "
            "its outcome was discarded (renew leases more often than they expire)"
        )


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """Where a record was consumed: topic, partition, offset."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A decoded, valid `RunRequested` with the bytes it arrived as (kept for retries and DLQ)."""

    run_id: str
    schedule_id: str
    nominal_at: datetime
    due_at: datetime
    fired_at: datetime
    overlap: OverlapPolicy
    max_attempts: int
    retry_backoff: timedelta
    runner: str
    """What can run it: the job kind, or `python:<handler>`. Executors acquire only the runs of
    runners they have, so executors with different kinds and handlers can share a store."""
    value: bytes
    source: SourceRecord
    start_by: datetime | None = None
    """The run is late if its first attempt has not started by then (the schedule's deadline)."""
    finish_by: datetime | None = None
    """The run is late if it has not succeeded by then."""
    groups: tuple[str, ...] = ()
    """The concurrency groups the run counts in (`kairos.core.concurrency.run_groups`)."""
    waits_until: datetime | None = None
    """Set when the run waits for upstream periods: the end of its wait. It is held until
    released (`kairos.streams.dedupe.upstream_waits`)."""
    awaits: tuple[tuple[str, datetime], ...] = ()
    """The (upstream schedule id, nominal instant) of each period matched for it: the success
    of one sends the gate to it at once."""


class Admitted(StrEnum):
    """What `admit` did with one delivery."""

    READY = "ready"
    """Claimed: the run starts as soon as an executor acquires it."""
    QUEUED = "queued"
    """Claimed: the run waits for an earlier run of its schedule (overlap)."""
    SKIPPED = "skipped"
    """Claimed and ended at once by the overlap policy `skip`."""
    DUPLICATE = "duplicate"
    """The run id was claimed before: this delivery is suppressed."""


@dataclass(frozen=True, slots=True)
class Admission:
    run_id: str
    admitted: Admitted
    deliveries: int
    """Deliveries of this run id seen so far, this one included."""


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to run attempt `attempt` of a run, held by executor `owner`."""

    run_id: str
    schedule_id: str
    attempt: int
    owner: str
    started_at: datetime
    expires_at: datetime
    due_at: datetime
    value: bytes
    """The `RunRequested` as it was consumed."""


class LeaseStatus(StrEnum):
    HELD = "held"
    LOST = "lost"
    """Reaped or finished elsewhere: stop the attempt, its outcome will be refused."""
    STOP_REQUESTED = "stop_requested"
    """Still held, but a newer run replaces this one: stop the attempt."""


@dataclass(frozen=True, slots=True)
class AttemptResult:
    succeeded: bool
    reason: str | None = None
    """Why the attempt failed; `None` when it succeeded."""


class RunEnd(StrEnum):
    """What `finish` made of an attempt's outcome."""

    SUCCEEDED = "succeeded"
    RETRYING = "retrying"
    DEAD_LETTERED = "dead_lettered"
    CANCELLED = "cancelled"


class EventKind(StrEnum):
    """The `RunEvent` kinds the store writes (the Avro enum's symbols)."""

    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRYING = "retrying"
    SKIPPED = "skipped"
    DEAD_LETTERED = "dead_lettered"
    DEADLINE_MISSED = "deadline_missed"
    RELEASED = "released"
    """A run held for its upstream periods was released: they succeeded."""


@dataclass(frozen=True, slots=True)
class DeadLetteredRun:
    """What a `DeadLetter` record of an exhausted run copies: the request as first consumed."""

    source: SourceRecord
    value: bytes


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """A lifecycle event waiting in the outbox, with the run's fields a `RunEvent` carries."""

    run_id: str
    schedule_id: str
    kind: EventKind
    attempt: int
    executor_instance: str
    nominal_at: datetime
    fired_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    reason: str | None
    next_attempt_at: datetime | None
    dead_letter: DeadLetteredRun | None
    """Set on `DEAD_LETTERED` events: a `DeadLetter` record goes out with the event."""
    owner: str | None = None
    """The team the ticker fired the run for (`RunRequested.owner`)."""


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as the store has it (for inspection and tests)."""

    run_id: str
    schedule_id: str
    state: RunState
    attempt: int
    max_attempts: int
    deliveries: int
    lease_owner: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class WaitingRun:
    """A run held for its upstream periods, as the gate judges it."""

    run_id: str
    schedule_id: str
    nominal_at: datetime
    until: datetime
    """The end of its wait: `nominal_at + upstream_wait`."""
    value: bytes
    """The `RunRequested` as first consumed: what it waits for, its owner and zone."""


class HandlerTransaction(Protocol):
    """The store's database transaction, lent to a `python` job handler.

    Writes made with `execute` commit together with the attempt's outcome, or not at all: when
    the handler raises, the lease was lost, or the executor dies before the commit. SQL uses the
    driver's placeholders: `?` for SQLite, `%s` for PostgreSQL (see `dialect`).
    """

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        ...

    @property
    def connection(self) -> Any:
        """The driver's connection (`sqlite3.Connection` or `psycopg.Connection`), in the
        transaction: for what `execute` does not cover. Never commit or roll it back."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement in the transaction; returns the rows it produced, if any."""
        ...


class AttemptTransaction(HandlerTransaction, Protocol):
    """A `HandlerTransaction` that `DedupeStore.finish` commits (or the executor rolls back)."""

    @property
    def begun(self) -> bool:
        """Whether the handler asked for the transaction (it begins on first use)."""
        ...

    def begin(self) -> HandlerTransaction:
        """Begin the transaction if it has not begun; returns it for the handler."""
        ...

    def rollback(self) -> None:
        """Discard the handler's writes (a no-op if the transaction never began)."""
        ...


Publisher = Callable[[Sequence[OutboxEvent]], None]
"""Publishes events durably (produce and flush) or raises; the store deletes them after."""


class DedupeStore(Protocol):
    """See the module docstring for the rules every implementation keeps."""

    @property
    def name(self) -> str:
        """The store for messages and logs: a path or a URL without password."""
        ...

    @property
    def store_id(self) -> str:
        """The store's identity (rule 8): the same for every connection to this database."""
        ...

    def admit(
        self, requests: Sequence[RunRequest], now: datetime, instance: str
    ) -> list[Admission]:
        """Claim each request's run id, or count it as a duplicate, in one transaction.

        The results are in the order of `requests`; a run id twice in `requests` is a duplicate
        the second time. Durable when this returns: commit the consumed offsets only after.
        """
        ...

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
        """Start the next attempt of up to `limit` ready runs due at `now`, leased to `owner`
        until the database's clock passes its present reading plus `lease`.

        Only runs of the given `runners` are taken, by their owners' turns (rule 10), each
        owner's in order of their due instant; a `started` event is written for each.
        """
        ...

    def renew(
        self, leases: Sequence[Lease], now: datetime, lease: timedelta
    ) -> dict[str, LeaseStatus]:
        """Extend each lease still held to `lease` past the database's clock; the status of
        each, by run id."""
        ...

    def attempt_transaction(self) -> AbstractContextManager[AttemptTransaction]:
        """A transaction for one attempt of a `python` handler, begun lazily, on this thread's
        connection; rolled back on leaving unless `finish` committed it."""
        ...

    def finish(
        self,
        lease: Lease,
        result: AttemptResult,
        now: datetime,
        transaction: AttemptTransaction | None = None,
    ) -> RunEnd:
        """Record the outcome of the leased attempt, fenced by the lease, and what follows.

        With a begun `transaction`, the outcome is written in it and it commits: the handler's
        writes and the outcome are one atomic change. Raises `LeaseLostError` (writing nothing)
        when the lease is no longer the caller's.
        """
        ...

    def reap_expired(self, now: datetime, instance: str) -> list[tuple[str, RunEnd]]:
        """End every running attempt whose lease expired (on the database's clock) as failed,
        at `now`; retry or dead-letter each run like a failure. Returns each run id with what
        followed."""
        ...

    def publish_events(self, publish: Publisher, limit: int) -> int:
        """Hand up to `limit` outbox events, oldest first, to `publish`, then delete them.

        One publisher at a time across every executor sharing the store, so events keep their
        order; returns 0 at once when another holds the outbox. If `publish` raises, the events
        stay for the next call.
        """
        ...

    def track_deadlines(self, requests: Sequence[RunRequest]) -> None:
        """Keep the deadline of each request that has one (`kairos.streams.dedupe.deadlines`);
        call it for every admitted delivery, duplicates included."""
        ...

    def report_missed_deadlines(self, now: datetime, instance: str) -> list[MissedDeadline]:
        """Settle the deadlines passed by `now`, once each across executors; the missed ones
        get a `deadline_missed` event in the outbox and are returned."""
        ...

    def prune_deadlines(self, limit: int) -> int:
        """Delete up to `limit` settled deadlines of pruned runs; returns how many."""
        ...

    def set_concurrency_limit(self, group: str, max_running: int, now: datetime) -> None:
        """Limit `group` (`owner:OWNER`, `label:OWNER/KEY=VALUE` or `shared:KEY=VALUE`) to
        `max_running` runs at once across the store's executors; raises `ConcurrencyGroupError`
        for a bad group or limit."""
        ...

    def remove_concurrency_limit(self, group: str) -> bool:
        """Lift `group`'s limit; False if it had none."""
        ...

    def concurrency(self, now: datetime) -> Sequence[GroupStatus]:
        """Every limited group with its limit, its runs running and its runs due but waiting."""
        ...

    def get(self, run_id: str) -> StoredRun | None: ...

    def waiting_for_upstream(self, now: datetime, limit: int) -> list[WaitingRun]:
        """Up to `limit` runs held for their upstream periods, those checked longest ago
        first (`kairos.streams.dedupe.upstream_waits`)."""

    def period_succeeded(self, schedule_id: str, nominal: datetime) -> bool:
        """Whether a run of the schedule at that nominal instant succeeded (a re-run's too)."""

    def take_upstream_news(self) -> list[tuple[str, datetime]]:
        """The periods that succeeded, while held runs awaited them, since the last take (any
        executor's); each is taken once."""

    def keep_upstream_news(self, periods: Sequence[tuple[str, datetime]]) -> None:
        """Put back news taken and not judged, for the next sweep."""

    def awaiting(
        self, period: tuple[str, datetime], after_run_id: str, limit: int
    ) -> list[WaitingRun]:
        """Up to `limit` runs held for `period`, in run id order after `after_run_id`."""

    def release_waiting(
        self, runs: Sequence[WaitingRun], now: datetime, instance: str
    ) -> list[str]:
        """Let held runs start now, in one transaction, each with a `RELEASED` event; the ids of
        those released (one that no longer waits is not)."""

    def end_waiting(
        self, run: WaitingRun, ending: EventKind, reason: str, now: datetime, instance: str
    ) -> bool:
        """End a held run skipped or dead-lettered with the reason; False if it no longer
        waits."""

    def prune_finished(self, before: datetime, limit: int) -> int:
        """Delete up to `limit` finished runs last changed before `before`; returns how many.

        A pruned run id is no longer recognised as a duplicate: prune only beyond the longest
        time a request can still be delivered (the runs topic's retention).
        """
        ...

    def close(self) -> None:
        """Close every connection of every thread."""
        ...
