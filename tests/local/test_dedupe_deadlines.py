"""Run deadlines in the dedupe store, on SQLite and PostgreSQL: each missed one reported once.

A deadline is settled when it has passed: reported missed (a `deadline_missed` event in the
outbox, returned to the caller) or found met. However many executors sweep, however often a
run is delivered, each deadline of a run id is reported at most once.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

from kairos.streams.dedupe import open_dedupe_store
from kairos.streams.dedupe.base import (
    DeadlineKind,
    DedupeStore,
    EventKind,
    MissedDeadline,
    RunRequest,
)
from tests.local.test_dedupe_contract import BROKEN, OK, SHELL, T0, drain, run_request

MINUTE = timedelta(minutes=1)
LEASE = timedelta(minutes=5)


def with_deadline(
    request: RunRequest, start_by: timedelta | None = None, finish_by: timedelta | None = None
) -> RunRequest:
    nominal = request.nominal_at
    return replace(
        request,
        start_by=None if start_by is None else nominal + start_by,
        finish_by=None if finish_by is None else nominal + finish_by,
    )


def claim(store: DedupeStore, *requests: RunRequest) -> None:
    store.admit(list(requests), T0, "e1")
    store.track_deadlines(list(requests))


def missed(store: DedupeStore, after: timedelta) -> list[tuple[str, DeadlineKind]]:
    return [(m.run_id, m.deadline) for m in store.report_missed_deadlines(T0 + after, "e1")]


def test_a_run_not_started_by_its_start_deadline_is_reported_once(store: DedupeStore) -> None:
    run = with_deadline(run_request(), start_by=10 * MINUTE)
    claim(store, run)

    assert missed(store, 9 * MINUTE) == []
    assert missed(store, 11 * MINUTE) == [(run.run_id, DeadlineKind.START_BY)]
    assert missed(store, 12 * MINUTE) == []
    [event] = [e for e in drain(store) if e.kind is EventKind.DEADLINE_MISSED]
    assert event.run_id == run.run_id
    assert event.reason is not None
    assert event.reason.startswith("start_by missed: not started by 2027-")


def test_a_run_started_in_time_meets_its_start_deadline(store: DedupeStore) -> None:
    run = with_deadline(run_request(), start_by=10 * MINUTE)
    claim(store, run)
    store.acquire("e1", SHELL, T0 + MINUTE, LEASE, 1)

    assert missed(store, 11 * MINUTE) == []


def test_a_first_attempt_started_after_the_deadline_is_reported(store: DedupeStore) -> None:
    run = with_deadline(run_request(), start_by=10 * MINUTE)
    claim(store, run)
    store.acquire("e1", SHELL, T0 + 20 * MINUTE, LEASE, 1)

    [report] = store.report_missed_deadlines(T0 + 21 * MINUTE, "e1")
    assert "started at" in report.reason and "after" in report.reason


def test_a_run_still_running_at_its_finish_deadline_is_reported(store: DedupeStore) -> None:
    run = with_deadline(run_request(), start_by=MINUTE, finish_by=30 * MINUTE)
    claim(store, run)
    store.acquire("e1", SHELL, T0, LEASE, 1)

    assert missed(store, 31 * MINUTE) == [(run.run_id, DeadlineKind.FINISH_BY)]


def test_a_run_that_succeeded_in_time_meets_its_finish_deadline(store: DedupeStore) -> None:
    run = with_deadline(run_request(), finish_by=30 * MINUTE)
    claim(store, run)
    [lease] = store.acquire("e1", SHELL, T0, LEASE, 1)
    store.finish(lease, OK, T0 + MINUTE)

    assert missed(store, 31 * MINUTE) == []


def test_a_run_that_failed_for_good_misses_its_finish_deadline(store: DedupeStore) -> None:
    run = with_deadline(run_request(max_attempts=1), finish_by=30 * MINUTE)
    claim(store, run)
    [lease] = store.acquire("e1", SHELL, T0, LEASE, 1)
    store.finish(lease, BROKEN, T0 + MINUTE)

    [report] = store.report_missed_deadlines(T0 + 31 * MINUTE, "e1")
    assert "not succeeded by" in report.reason and "dead_lettered" in report.reason


def test_a_redelivered_run_keeps_its_settled_deadline(store: DedupeStore) -> None:
    run = with_deadline(run_request(), start_by=MINUTE)
    claim(store, run)
    assert missed(store, 2 * MINUTE) == [(run.run_id, DeadlineKind.START_BY)]

    claim(store, run)

    assert missed(store, 3 * MINUTE) == []


def test_runs_without_a_deadline_are_never_reported(store: DedupeStore) -> None:
    claim(store, run_request())

    assert missed(store, timedelta(days=400)) == []


def test_two_executors_sweeping_at_once_report_each_deadline_once(store_url: str) -> None:
    stores = [open_dedupe_store(store_url) for _ in range(2)]
    runs = [with_deadline(run_request(minute), start_by=MINUTE) for minute in range(40)]
    claim(stores[0], *runs)
    reports: list[list[MissedDeadline]] = [[], []]
    barrier = threading.Barrier(2)

    def sweep(index: int) -> None:
        barrier.wait()
        reports[index] = stores[index].report_missed_deadlines(T0 + timedelta(hours=2), "e")

    threads = [threading.Thread(target=sweep, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for opened in stores:
        opened.close()

    reported = [m.run_id for m in reports[0] + reports[1]]
    assert sorted(reported) == sorted(r.run_id for r in runs)
