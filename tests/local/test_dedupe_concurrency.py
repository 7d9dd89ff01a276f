"""Concurrency groups in the dedupe store (rule 9), on SQLite and PostgreSQL.

A limited group never runs more than its limit across every executor of the store; the runs it
holds back start in their due order as places free up, and it never holds up runs outside it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest

from kairos.core.concurrency import ConcurrencyGroupError, GroupStatus, run_groups
from kairos.streams.dedupe import open_dedupe_store
from kairos.streams.dedupe.base import DedupeStore, Lease, RunRequest
from tests.local.test_dedupe_contract import OK, SHELL, T0, run_request

LEASE = timedelta(minutes=5)
LATER = T0 + timedelta(hours=1)


def of(owner: str, minute: int, schedule: str | None = None, **labels: str) -> RunRequest:
    request = run_request(minute, schedule_id=schedule or f"{owner}-{minute}")
    return replace(request, groups=run_groups(owner, labels))


def started(leases: list[Lease]) -> list[str]:
    return [lease.run_id for lease in leases]


def test_a_limited_owner_runs_at_most_its_limit_and_the_rest_start_in_due_order(
    store: DedupeStore,
) -> None:
    store.set_concurrency_limit("owner:payments", 2, T0)
    payments = [of("payments", minute) for minute in range(5)]
    store.admit(list(reversed(payments)), T0, "e1")
    first = store.acquire("e1", SHELL, LATER, LEASE, 10)
    assert started(first) == [r.run_id for r in payments[:2]]
    assert store.acquire("e2", SHELL, LATER, LEASE, 10) == []
    assert store.concurrency(LATER) == [GroupStatus("owner:payments", 2, 2, 3)]
    store.finish(first[1], OK, LATER)
    assert started(store.acquire("e2", SHELL, LATER, LEASE, 10)) == [payments[2].run_id]
    store.finish(first[0], OK, LATER)
    assert started(store.acquire("e1", SHELL, LATER, LEASE, 10)) == [payments[3].run_id]


def test_a_full_group_does_not_hold_up_runs_outside_it(store: DedupeStore) -> None:
    store.set_concurrency_limit("owner:payments", 1, T0)
    # Payments' runs are due first and fill a whole page of candidates.
    store.admit([of("payments", minute) for minute in range(20)], T0, "e1")
    store.admit([of("growth", 30 + minute) for minute in range(3)], T0, "e1")
    taken = started(store.acquire("e1", SHELL, LATER, LEASE, 4))
    assert taken == ["payments-0@2027-03-14T07:00:00Z"] + [
        f"growth-{30 + m}@2027-03-14T07:{30 + m}:00Z" for m in range(3)
    ]


def test_a_shared_label_group_spans_owners_and_every_limited_group_of_a_run_must_have_room(
    store: DedupeStore,
) -> None:
    store.set_concurrency_limit("shared:warehouse=eu", 1, T0)
    store.set_concurrency_limit("owner:growth", 5, T0)
    store.admit(
        [of("payments", 0, warehouse="eu"), of("growth", 1, warehouse="eu"), of("growth", 2)],
        T0,
        "e1",
    )
    assert started(store.acquire("e1", SHELL, LATER, LEASE, 10)) == [
        "payments-0@2027-03-14T07:00:00Z",
        "growth-2@2027-03-14T07:02:00Z",
    ]
    statuses = {s.group: (s.running, s.waiting) for s in store.concurrency(LATER)}
    assert statuses == {"shared:warehouse=eu": (1, 1), "owner:growth": (1, 1)}


def test_a_teams_label_group_takes_no_place_of_another_team_with_the_same_label(
    store: DedupeStore,
) -> None:
    """Payments is limited to one `warehouse=eu` run at once; growth labels its schedules
    `warehouse=eu` too, and neither counts in nor is held back by payments' group."""
    store.set_concurrency_limit("label:payments/warehouse=eu", 1, T0)
    store.admit(
        [of("payments", m, warehouse="eu") for m in range(3)]
        + [of("growth", 10 + m, warehouse="eu") for m in range(3)],
        T0,
        "e1",
    )
    taken = started(store.acquire("e1", SHELL, LATER, LEASE, 10))
    assert sorted(taken) == sorted(
        ["payments-0@2027-03-14T07:00:00Z"]
        + [f"growth-{10 + m}@2027-03-14T07:{10 + m}:00Z" for m in range(3)]
    )
    assert store.concurrency(LATER) == [GroupStatus("label:payments/warehouse=eu", 1, 1, 2)]


def test_a_limit_set_after_runs_were_claimed_counts_them_and_removing_it_frees_the_rest(
    store: DedupeStore,
) -> None:
    store.admit([of("payments", minute) for minute in range(4)], T0, "e1")
    assert len(store.acquire("e1", SHELL, LATER, LEASE, 1)) == 1
    store.set_concurrency_limit("owner:payments", 1, T0)
    assert store.acquire("e1", SHELL, LATER, LEASE, 10) == []
    assert store.remove_concurrency_limit("owner:payments") is True
    assert store.remove_concurrency_limit("owner:payments") is False
    assert len(store.acquire("e1", SHELL, LATER, LEASE, 10)) == 3
    assert store.concurrency(LATER) == []


def test_executors_acquiring_at_once_never_exceed_a_groups_limit(store_url: str) -> None:
    """Four executors take and end runs of one group as fast as they can; the leases held at
    any moment (a lease is counted from its acquire's return to its finish's call, inside the
    store's own running span) never outnumber the limit."""
    stores = [open_dedupe_store(store_url) for _ in range(4)]
    stores[0].set_concurrency_limit("owner:payments", 2, T0)
    stores[0].admit([of("payments", minute) for minute in range(400)], T0, "e1")
    barrier = threading.Barrier(len(stores))
    counting = threading.Lock()
    held = [0, 0, 0]  # now, most, started

    def work(index: int) -> None:
        barrier.wait()
        for _ in range(40):
            leases = stores[index].acquire(f"e{index}", SHELL, LATER, LEASE, 2)
            with counting:
                held[0] += len(leases)
                held[1], held[2] = max(held[1], held[0]), held[2] + len(leases)
            time.sleep(0.005)  # the job: others try to start runs meanwhile
            with counting:
                held[0] -= len(leases)
            for lease in leases:
                stores[index].finish(lease, OK, LATER)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert held[1] == 2, f"at most {held[1]} held at once"
    assert held[2] >= 40, "too few runs started to have raced"
    statuses = stores[1].concurrency(LATER)
    assert statuses == [GroupStatus("owner:payments", 2, 0, 400 - held[2])]
    for store in stores:
        store.close()


def test_a_run_pruned_leaves_no_group_behind(store: DedupeStore) -> None:
    store.set_concurrency_limit("owner:payments", 1, T0)
    store.admit([of("payments", 0)], T0, "e1")
    store.finish(store.acquire("e1", SHELL, LATER, LEASE, 1)[0], OK, LATER)
    assert store.prune_finished(LATER + timedelta(days=1), 100) == 1
    store.admit([of("payments", 1)], T0, "e1")
    assert len(store.acquire("e1", SHELL, LATER, LEASE, 1)) == 1


@pytest.mark.parametrize(
    ("group", "limit", "problem"),
    [
        ("payments", 1, "write owner:OWNER, label:OWNER/KEY=VALUE"),
        ("owner:", 1, "names no owner"),
        ("label:warehouse=eu", 1, "a label group is one team's: name the owner"),
        ("label:payments/warehouse", 1, "names no label KEY=VALUE"),
        ("shared:warehouse", 1, "names no label KEY=VALUE"),
        ("owner:payments", 0, "would hold every run back forever"),
    ],
)
def test_a_bad_group_or_limit_is_refused_with_how_to_write_it(
    store: DedupeStore, group: str, limit: int, problem: str
) -> None:
    with pytest.raises(ConcurrencyGroupError, match=problem):
        store.set_concurrency_limit(group, limit, T0)
    assert store.concurrency(LATER) == []
