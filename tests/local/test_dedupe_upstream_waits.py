"""Runs held for their upstream periods in the dedupe store, on SQLite and PostgreSQL: claimed but
never acquired until released, released or ended once however many executors sweep, and a
queued run promoted after its predecessor still held."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timedelta

from kairos.core.overlap import RunState
from kairos.core.schedule import OverlapPolicy
from kairos.streams.dedupe import open_dedupe_store
from kairos.streams.dedupe.base import DedupeStore, EventKind, RunRequest
from tests.local.test_dedupe_contract import OK, SHELL, T0, drain, kinds, run_request
from tests.postgres import run_sql

LEASE = timedelta(minutes=5)
WAIT = timedelta(hours=1)


def held(request: RunRequest, awaits: tuple[tuple[str, datetime], ...] = ()) -> RunRequest:
    return replace(request, waits_until=request.nominal_at + WAIT, awaits=awaits)


def acquired(store: DedupeStore, after: timedelta = timedelta(hours=2)) -> list[str]:
    return [lease.run_id for lease in store.acquire("e1", SHELL, T0 + after, LEASE, 10)]


def test_a_held_run_is_claimed_but_starts_only_once_released(store: DedupeStore) -> None:
    export = held(run_request(schedule_id="export"))
    store.admit([export, export], T0, "e1")

    assert acquired(store) == []
    [waiting] = store.waiting_for_upstream(T0, 10)
    assert (waiting.run_id, waiting.until) == (export.run_id, T0 + WAIT)
    later = T0 + timedelta(minutes=5)
    assert store.release_waiting([waiting], later, "e1") == [export.run_id]
    assert store.release_waiting([waiting], later, "e1") == []
    assert store.waiting_for_upstream(T0, 10) == []
    assert acquired(store) == [export.run_id]
    assert kinds(drain(store), export.run_id) == [("released", 0), ("started", 1)]


def test_a_period_succeeded_once_a_run_at_its_instant_did(store: DedupeStore) -> None:
    settle = run_request(schedule_id="settle")
    store.admit([settle], T0, "e1")
    assert not store.period_succeeded("settle", T0)
    [lease] = store.acquire("e1", SHELL, T0, LEASE, 1)
    store.finish(lease, OK, T0)

    assert store.period_succeeded("settle", T0)
    assert not store.period_succeeded("settle", T0 + timedelta(minutes=1))
    assert not store.period_succeeded("other", T0)


def test_a_held_run_ends_once_when_two_executors_end_it_together(store_url: str) -> None:
    stores = [open_dedupe_store(store_url) for _ in range(2)]
    try:
        export = held(run_request(schedule_id="export"))
        stores[0].admit([export], T0, "e1")
        [waiting] = stores[0].waiting_for_upstream(T0, 10)
        barrier, ended = threading.Barrier(2), []

        def end(index: int) -> None:
            barrier.wait()
            reason = "waited until 08:00 for settle"
            ended.append(
                stores[index].end_waiting(waiting, EventKind.SKIPPED, reason, T0 + WAIT, "e")
            )

        threads = [threading.Thread(target=end, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(ended) == [False, True]
        assert stores[0].release_waiting([waiting], T0 + WAIT, "e1") == []
        assert kinds(drain(stores[0]), export.run_id) == [("skipped", 0)]
        run = stores[0].get(export.run_id)
        assert run is not None and run.state is RunState.SKIPPED
    finally:
        for opened in stores:
            opened.close()


def test_a_queued_run_promoted_after_its_predecessor_stays_held(store: DedupeStore) -> None:
    first = run_request(minute=0, schedule_id="export", overlap=OverlapPolicy.QUEUE)
    second = held(run_request(minute=1, schedule_id="export", overlap=OverlapPolicy.QUEUE))
    store.admit([first, second], T0, "e1")
    [lease] = store.acquire("e1", SHELL, T0 + timedelta(minutes=1), LEASE, 10)
    store.finish(lease, OK, T0 + timedelta(minutes=2))

    assert store.get(second.run_id).state is RunState.READY  # type: ignore[union-attr]
    assert acquired(store) == []
    [waiting] = store.waiting_for_upstream(T0, 10)
    assert store.end_waiting(waiting, EventKind.DEAD_LETTERED, "no settle", T0 + WAIT, "e1")
    events = drain(store)
    assert kinds(events, second.run_id) == [("dead_lettered", 0)]
    assert [e.dead_letter is not None for e in events if e.run_id == second.run_id] == [True]


def _race_release_with_promotion(stores: list[DedupeStore], schedule: str) -> list[str]:
    """Release a queued held run while its predecessor ends, together; what starts after."""
    first = run_request(minute=0, schedule_id=schedule, overlap=OverlapPolicy.QUEUE)
    second = held(run_request(minute=1, schedule_id=schedule, overlap=OverlapPolicy.QUEUE))
    stores[0].admit([first, second], T0, "e1")
    [lease] = stores[0].acquire("e1", SHELL, T0 + timedelta(minutes=1), LEASE, 10)
    [waiting] = stores[1].waiting_for_upstream(T0, 10)
    barrier, at = threading.Barrier(2), T0 + timedelta(minutes=2)

    def finish() -> None:
        barrier.wait()
        stores[0].finish(lease, OK, at)

    def release() -> None:
        barrier.wait()
        stores[1].release_waiting([waiting], at, "e2")

    threads = [threading.Thread(target=finish), threading.Thread(target=release)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stores[0].waiting_for_upstream(T0, 10) == []
    started = stores[0].acquire("e1", SHELL, T0 + timedelta(hours=2), LEASE, 10)
    return [lease.run_id for lease in started]


def test_a_release_racing_the_promotion_of_its_run_leaves_it_startable(store_url: str) -> None:
    """Whichever of the two commits first, the run is ready and due once both did: never held
    with no wait left (which nothing would ever start or end)."""
    stores = [open_dedupe_store(store_url) for _ in range(2)]
    try:
        for attempt in range(20):
            schedule = f"export-{attempt}"
            expected = run_request(minute=1, schedule_id=schedule).run_id
            assert _race_release_with_promotion(stores, schedule) == [expected], attempt
    finally:
        for opened in stores:
            opened.close()


def test_the_success_of_an_awaited_period_is_news_once_and_leads_to_its_runs(
    store_url: str,
) -> None:
    store = open_dedupe_store(store_url)
    settle_t0, tomorrow = ("settle", T0), ("settle", T0 + timedelta(days=1))
    exports = [held(run_request(minute=m, schedule_id=f"export-{m}"), (settle_t0,))
               for m in (0, 1, 2)]  # fmt: skip
    other = held(run_request(minute=3, schedule_id="other"), (tomorrow, ("ledger", T0)))
    unawaited, settle = run_request(schedule_id="lonely"), run_request(schedule_id="settle")
    store.admit([*exports, other, unawaited, settle], T0, "e1")
    try:
        for lease in store.acquire("e1", SHELL, T0, LEASE, 10):
            store.finish(lease, OK, T0)

        assert store.take_upstream_news() == [settle_t0]  # none for the period nobody awaits
        assert store.take_upstream_news() == []
        ids = sorted(r.run_id for r in exports)
        assert [r.run_id for r in store.awaiting(settle_t0, "", 10)] == ids
        assert [r.run_id for r in store.awaiting(settle_t0, ids[0], 1)] == [ids[1]]
        assert store.awaiting(tomorrow, "", 10)[0].run_id == other.run_id
        store.keep_upstream_news([settle_t0, settle_t0])
        assert store.take_upstream_news() == [settle_t0]

        released = store.release_waiting(store.awaiting(settle_t0, "", 10), T0, "e1")
        assert sorted(released) == ids
        assert store.awaiting(settle_t0, "", 10) == []
        remaining = run_sql(store_url, "SELECT run_id FROM kairos_upstream_awaits")
        assert remaining == [(other.run_id,), (other.run_id,)], "a released run awaits nothing"
    finally:
        store.close()


def test_a_held_run_a_replacing_run_cancels_no_longer_waits(store_url: str) -> None:
    store = open_dedupe_store(store_url)
    first = held(
        run_request(minute=0, schedule_id="export", overlap=OverlapPolicy.REPLACE),
        (("settle", T0),),
    )
    second = run_request(minute=1, schedule_id="export", overlap=OverlapPolicy.REPLACE)
    store.admit([first], T0, "e1")
    store.admit([second], T0 + timedelta(minutes=1), "e1")

    try:
        assert store.waiting_for_upstream(T0, 10) == []
        assert run_sql(store_url, "SELECT count(*) FROM kairos_upstream_waits") == [(0,)]
        assert run_sql(store_url, "SELECT count(*) FROM kairos_upstream_awaits") == [(0,)]
        assert kinds(drain(store), first.run_id) == [("skipped", 0)]
    finally:
        store.close()
