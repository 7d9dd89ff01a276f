"""The dedupe store's rules (kairos.streams.dedupe.base), checked on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kairos.core.overlap import RunState
from kairos.core.schedule import OverlapPolicy
from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from kairos.streams.dedupe.base import (
    Admitted,
    AttemptResult,
    DedupeStore,
    EventKind,
    HandlerTransaction,
    Lease,
    LeaseLostError,
    LeaseStatus,
    OutboxEvent,
    RunEnd,
    RunRequest,
    SourceRecord,
)
from tests.helpers import eventually
from tests.postgres import run_sql

T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
SHORT_LEASE = timedelta(milliseconds=300)
"""Leases expire on the database's clock: tests of expiry let real time pass."""
SHELL = frozenset({"shell"})
OK = AttemptResult(succeeded=True)
BROKEN = AttemptResult(succeeded=False, reason="exit status 1")


def run_request(
    minute: int = 0,
    schedule_id: str = "report",
    overlap: OverlapPolicy = OverlapPolicy.ALLOW,
    max_attempts: int = 3,
    backoff: timedelta = timedelta(seconds=10),
    runner: str = "shell",
) -> RunRequest:
    nominal = T0 + timedelta(minutes=minute)
    return RunRequest(
        run_id=f"{schedule_id}@{nominal:%Y-%m-%dT%H:%M:%SZ}",
        schedule_id=schedule_id,
        nominal_at=nominal,
        due_at=nominal,
        fired_at=nominal,
        overlap=overlap,
        max_attempts=max_attempts,
        retry_backoff=backoff,
        runner=runner,
        value=b"request-" + str(minute).encode(),
        source=SourceRecord("kairos.runs", 3, 100 + minute),
    )


def drain(store: DedupeStore) -> list[OutboxEvent]:
    published: list[OutboxEvent] = []
    while store.publish_events(published.extend, limit=100):
        pass
    return published


def kinds(events: Sequence[OutboxEvent], run_id: str) -> list[tuple[str, int]]:
    return [(e.kind.value, e.attempt) for e in events if e.run_id == run_id]


def admitted(store: DedupeStore, *requests: RunRequest, now: datetime = T0) -> list[Admitted]:
    return [a.admitted for a in store.admit(list(requests), now, "e1")]


def only(leases: list[Lease]) -> Lease:
    assert len(leases) == 1, leases
    return leases[0]


# -- claim once ------------------------------------------------------------------------------


def test_a_run_id_is_claimed_once_however_often_it_is_delivered(store: DedupeStore) -> None:
    first = run_request()
    assert admitted(store, first, first) == [Admitted.READY, Admitted.DUPLICATE]
    again = store.admit([first], T0 + timedelta(hours=1), "e2")
    assert [(a.admitted, a.deliveries) for a in again] == [(Admitted.DUPLICATE, 3)]
    stored = store.get(first.run_id)
    assert stored is not None
    assert (stored.state, stored.deliveries, stored.attempt) == (RunState.READY, 3, 0)


def test_concurrent_deliveries_to_two_executors_claim_once(store_url: str) -> None:
    stores = [open_dedupe_store(store_url) for _ in range(2)]
    requests = [run_request(minute) for minute in range(30)]
    results: list[list[Admitted]] = [[], []]
    barrier = threading.Barrier(2)

    def deliver(index: int) -> None:
        barrier.wait()
        for request in requests:
            results[index].extend(a.admitted for a in stores[index].admit([request], T0, "e"))

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for opened in stores:
        opened.close()
    for n in range(len(requests)):
        assert sorted([results[0][n], results[1][n]]) == [Admitted.DUPLICATE, Admitted.READY]


# -- leases ----------------------------------------------------------------------------------


def test_each_ready_run_is_leased_to_one_executor(store_url: str, store: DedupeStore) -> None:
    store.admit([run_request(minute) for minute in range(40)], T0, "e1")
    other = open_dedupe_store(store_url)
    taken: dict[str, list[str]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def take(owner: str, from_store: DedupeStore) -> None:
        barrier.wait()
        while leases := from_store.acquire(owner, SHELL, T0, LEASE, limit=3):
            taken[owner].extend(lease.run_id for lease in leases)

    threads = [
        threading.Thread(target=take, args=("a", store)),
        threading.Thread(target=take, args=("b", other)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    other.close()
    everything = taken["a"] + taken["b"]
    assert len(everything) == len(set(everything)) == 40
    started = [e for e in drain(store) if e.kind is EventKind.STARTED]
    assert len(started) == 40
    assert {e.executor_instance for e in started} <= {"a", "b"}


def test_a_lease_carries_the_request_and_the_next_attempt(store: DedupeStore) -> None:
    request = run_request()
    store.admit([request], T0, "e1")
    lease = only(store.acquire("a", SHELL, T0, LEASE, limit=10))
    assert (lease.run_id, lease.schedule_id, lease.attempt, lease.owner) == (
        request.run_id,
        "report",
        1,
        "a",
    )
    assert (lease.value, lease.due_at) == (request.value, T0)
    # On the database's clock (this host's, here), whatever the executor's `now` said.
    assert abs(lease.expires_at - LEASE - datetime.now(UTC)) < timedelta(seconds=5)
    assert store.acquire("b", SHELL, T0, LEASE, limit=10) == []


def test_an_executor_acquires_only_runs_it_can_run(store: DedupeStore) -> None:
    shell, payment = run_request(0), run_request(1, runner="python:record-payment")
    store.admit([shell, payment], T0, "e1")
    assert store.acquire("team", {"python:other"}, T0, LEASE, 10) == []
    assert only(store.acquire("team", {"python:record-payment"}, T0, LEASE, 10)).run_id == (
        payment.run_id
    )
    assert only(store.acquire("ops", {"shell", "http"}, T0, LEASE, 10)).run_id == shell.run_id


def test_renewal_keeps_a_lease_from_expiring(store: DedupeStore) -> None:
    store.admit([run_request()], T0, "e1")
    lease = only(store.acquire("a", SHELL, T0, SHORT_LEASE, limit=1))
    renewals_until = time.monotonic() + 3 * SHORT_LEASE.total_seconds()
    while time.monotonic() < renewals_until:  # time must pass on the database's clock
        assert store.renew([lease], T0, SHORT_LEASE) == {lease.run_id: LeaseStatus.HELD}
        assert store.reap_expired(T0, "e2") == []
        time.sleep(SHORT_LEASE.total_seconds() / 3)
    assert store.finish(lease, OK, T0) is RunEnd.SUCCEEDED


def reaped(store: DedupeStore, now: datetime) -> list[tuple[str, RunEnd]]:
    """Once the database's clock passes the lease: what `reap_expired` ended."""
    return eventually(lambda: store.reap_expired(now, "b"), timeout_s=10, interval_s=0.05)


def test_an_expired_lease_is_reaped_and_the_run_retried_elsewhere(store: DedupeStore) -> None:
    request = run_request(backoff=timedelta(seconds=5))
    store.admit([request], T0, "e1")
    dead = only(store.acquire("a", SHELL, T0, SHORT_LEASE, limit=1))
    expired = T0 + timedelta(seconds=1)
    assert reaped(store, expired) == [(request.run_id, RunEnd.RETRYING)]
    assert store.renew([dead], expired, LEASE) == {request.run_id: LeaseStatus.LOST}
    assert store.acquire("b", SHELL, expired, LEASE, limit=1) == [], "the backoff applies"
    retry = only(store.acquire("b", SHELL, expired + timedelta(seconds=5), LEASE, limit=1))
    assert retry.attempt == 2
    # The outcome of the dead attempt is fenced off: nothing of it is written.
    with pytest.raises(LeaseLostError) as lost:
        store.finish(dead, OK, expired)
    assert (lost.value.run_id, lost.value.owner, lost.value.attempt) == (request.run_id, "a", 1)
    assert store.finish(retry, OK, expired + timedelta(seconds=6)) is RunEnd.SUCCEEDED
    events = drain(store)
    assert kinds(events, request.run_id) == [
        ("started", 1),
        ("failed", 1),
        ("retrying", 1),
        ("started", 2),
        ("succeeded", 2),
    ]
    failed = next(e for e in events if e.kind is EventKind.FAILED)
    assert failed.reason == "lease expired: executor a stopped renewing it during attempt 1"
    assert failed.executor_instance == "b"


# -- outcomes, retries, dead letters ---------------------------------------------------------


def test_failures_back_off_exponentially_then_dead_letter(store: DedupeStore) -> None:
    request = run_request(max_attempts=3, backoff=timedelta(seconds=10))
    store.admit([request], T0, "e1")
    now, ends = T0, []
    for _ in range(3):
        lease = only(store.acquire("a", SHELL, now + timedelta(hours=1), LEASE, limit=1))
        now = lease.started_at + timedelta(seconds=1)
        ends.append(store.finish(lease, BROKEN, now))
    assert ends == [RunEnd.RETRYING, RunEnd.RETRYING, RunEnd.DEAD_LETTERED]
    events = drain(store)
    assert kinds(events, request.run_id) == [
        ("started", 1),
        ("failed", 1),
        ("retrying", 1),
        ("started", 2),
        ("failed", 2),
        ("retrying", 2),
        ("started", 3),
        ("failed", 3),
        ("dead_lettered", 3),
    ]
    failed_at = [e.finished_at for e in events if e.kind is EventKind.FAILED]
    retry_at = [e.next_attempt_at for e in events if e.kind is EventKind.RETRYING]
    assert retry_at == [
        failed_at[0] + timedelta(seconds=10),  # type: ignore[operator]
        failed_at[1] + timedelta(seconds=20),
    ]  # type: ignore[operator]
    dead = events[-1]
    assert dead.dead_letter is not None
    assert (dead.dead_letter.value, dead.dead_letter.source) == (request.value, request.source)
    assert dead.reason == "3 of 3 attempts failed; the last: exit status 1"
    stored = store.get(request.run_id)
    assert stored is not None and stored.state is RunState.DEAD_LETTERED


def test_events_carry_the_run_instants(store: DedupeStore) -> None:
    request = run_request()
    store.admit([request], T0, "e1")
    lease = only(store.acquire("a", SHELL, T0 + timedelta(seconds=2), LEASE, limit=1))
    store.finish(lease, OK, T0 + timedelta(seconds=5))
    started, succeeded = drain(store)
    assert (started.nominal_at, started.fired_at, started.started_at, started.finished_at) == (
        request.nominal_at,
        request.fired_at,
        T0 + timedelta(seconds=2),
        None,
    )
    assert (succeeded.started_at, succeeded.finished_at) == (
        T0 + timedelta(seconds=2),
        T0 + timedelta(seconds=5),
    )
    assert succeeded.schedule_id == "report" and succeeded.reason is None


# -- transactional handlers ------------------------------------------------------------------


def effects(store_url: str) -> list[tuple[Any, ...]]:
    return run_sql(store_url, "SELECT run_id, attempt FROM team_effects ORDER BY attempt")


def write_effect(transaction: HandlerTransaction, lease: Lease) -> None:
    mark = "?" if transaction.dialect == "sqlite" else "%s"
    transaction.execute(
        f"INSERT INTO team_effects (run_id, attempt) VALUES ({mark}, {mark})",
        (lease.run_id, lease.attempt),
    )


def test_handler_writes_commit_with_the_outcome_or_not_at_all(
    store_url: str, store: DedupeStore
) -> None:
    run_sql(store_url, "CREATE TABLE team_effects (run_id TEXT, attempt INTEGER)")
    request = run_request(backoff=timedelta(0))
    store.admit([request], T0, "e1")
    # Attempt 1 writes, then fails: its write is rolled back with it.
    first = only(store.acquire("a", SHELL, T0, LEASE, 1))
    with store.attempt_transaction() as transaction:
        write_effect(transaction.begin(), first)
        transaction.rollback()
        assert store.finish(first, BROKEN, T0, transaction) is RunEnd.RETRYING
    # Attempt 2 writes and succeeds: write and outcome commit together.
    second = only(store.acquire("a", SHELL, T0, LEASE, 1))
    with store.attempt_transaction() as transaction:
        write_effect(transaction.begin(), second)
        assert effects(store_url) == [], "nothing is visible before the outcome commits"
        assert store.finish(second, OK, T0, transaction) is RunEnd.SUCCEEDED
    assert effects(store_url) == [(request.run_id, 2)]


def test_a_handler_write_is_discarded_when_the_lease_was_lost(
    store_url: str, store: DedupeStore
) -> None:
    run_sql(store_url, "CREATE TABLE team_effects (run_id TEXT, attempt INTEGER)")
    store.admit([run_request()], T0, "e1")
    lease = only(store.acquire("a", SHELL, T0, SHORT_LEASE, 1))
    reaped(store, T0)
    with store.attempt_transaction() as transaction:
        write_effect(transaction.begin(), lease)
        with pytest.raises(LeaseLostError):
            store.finish(lease, OK, T0, transaction)
    assert effects(store_url) == []


# -- overlap ---------------------------------------------------------------------------------


def test_overlap_skip_ends_a_run_while_another_is_unfinished(store: DedupeStore) -> None:
    first, second, third = (run_request(m, overlap=OverlapPolicy.SKIP) for m in range(3))
    assert admitted(store, first) == [Admitted.READY]
    lease = only(store.acquire("a", SHELL, T0, LEASE, 1))
    assert admitted(store, second) == [Admitted.SKIPPED]
    store.finish(lease, OK, T0 + timedelta(minutes=2))
    assert admitted(store, third) == [Admitted.READY]
    skipped = [e for e in drain(store) if e.kind is EventKind.SKIPPED]
    assert [(e.run_id, e.attempt) for e in skipped] == [(second.run_id, 0)]
    assert skipped[0].reason == (
        f"overlap policy skip: run {first.run_id} of the schedule is still running"
    )


def test_overlap_queue_starts_runs_one_at_a_time_in_order(store: DedupeStore) -> None:
    first, second, third = (run_request(m, overlap=OverlapPolicy.QUEUE) for m in range(3))
    assert admitted(store, first, third, second) == [
        Admitted.READY,
        Admitted.QUEUED,
        Admitted.QUEUED,
    ]
    lease = only(store.acquire("a", SHELL, T0, LEASE, 10))
    assert lease.run_id == first.run_id
    assert store.acquire("a", SHELL, T0, LEASE, 10) == []
    store.finish(lease, OK, T0 + timedelta(minutes=1))
    lease = only(store.acquire("a", SHELL, T0 + timedelta(minutes=1), LEASE, 10))
    assert lease.run_id == second.run_id, "queued runs start in nominal order"
    # A retry keeps the schedule busy: the queue waits for the run, not for one attempt.
    store.finish(lease, BROKEN, T0 + timedelta(minutes=2))
    assert (
        only(store.acquire("a", SHELL, T0 + timedelta(hours=1), LEASE, 10)).run_id == second.run_id
    )


def test_overlap_replace_stops_the_running_run_then_starts(store: DedupeStore) -> None:
    first, second = (run_request(m, overlap=OverlapPolicy.REPLACE) for m in range(2))
    store.admit([first], T0, "e1")
    running = only(store.acquire("a", SHELL, T0, LEASE, 1))
    assert admitted(store, second) == [Admitted.QUEUED]
    assert store.renew([running], T0, LEASE) == {first.run_id: LeaseStatus.STOP_REQUESTED}
    assert store.acquire("b", SHELL, T0, LEASE, 10) == [], "the new run waits for the old to stop"
    stopped_at = T0 + timedelta(seconds=1)
    assert store.finish(running, BROKEN, stopped_at) is RunEnd.CANCELLED
    assert only(store.acquire("b", SHELL, stopped_at, LEASE, 10)).run_id == second.run_id
    failed = next(e for e in drain(store) if e.kind is EventKind.FAILED)
    assert failed.reason == f"overlap policy replace: replaced by run {second.run_id}"


def test_overlap_replace_cancels_a_run_waiting_for_its_retry(store: DedupeStore) -> None:
    first, second = (run_request(m, overlap=OverlapPolicy.REPLACE) for m in range(2))
    store.admit([first], T0, "e1")
    store.finish(only(store.acquire("a", SHELL, T0, LEASE, 1)), BROKEN, T0)
    assert admitted(store, second) == [Admitted.READY]
    stored = store.get(first.run_id)
    assert stored is not None and stored.state is RunState.CANCELLED
    assert (
        only(store.acquire("a", SHELL, T0 + timedelta(hours=1), LEASE, 10)).run_id == second.run_id
    )


def test_schedules_do_not_overlap_each_other(store: DedupeStore) -> None:
    one = run_request(0, schedule_id="one", overlap=OverlapPolicy.SKIP)
    two = run_request(0, schedule_id="two", overlap=OverlapPolicy.SKIP)
    assert admitted(store, one, two) == [Admitted.READY, Admitted.READY]


# -- outbox and housekeeping -----------------------------------------------------------------


def test_events_stay_in_the_outbox_until_published(store: DedupeStore) -> None:
    store.admit([run_request()], T0, "e1")
    store.acquire("a", SHELL, T0, LEASE, 1)

    def fail(events: Sequence[OutboxEvent]) -> None:
        raise RuntimeError("broker down")

    with pytest.raises(RuntimeError):
        store.publish_events(fail, limit=10)
    assert [e.kind for e in drain(store)] == [EventKind.STARTED]
    assert drain(store) == []


def test_pruning_forgets_only_finished_runs(store: DedupeStore) -> None:
    done, pending = run_request(0), run_request(1, schedule_id="other")
    store.admit([done, pending], T0, "e1")
    store.finish(only(store.acquire("a", SHELL, T0, LEASE, 1)), OK, T0)
    assert store.prune_finished(T0, limit=10) == 0, "only runs finished before the cut"
    assert store.prune_finished(T0 + timedelta(days=1), limit=10) == 1
    assert store.get(done.run_id) is None
    assert store.get(pending.run_id) is not None


def test_every_executor_on_one_database_reads_one_store_id(
    store_url: str, store: DedupeStore, tmp_path: Path
) -> None:
    again = open_dedupe_store(store_url)
    elsewhere = open_dedupe_store(sqlite_url(tmp_path / "elsewhere" / "dedupe.sqlite3"))
    try:
        assert store.store_id and again.store_id == store.store_id
        assert elsewhere.store_id != store.store_id
    finally:
        again.close()
        elsewhere.close()
