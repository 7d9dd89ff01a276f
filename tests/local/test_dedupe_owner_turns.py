"""Owners' turns in the dedupe store (rule 10), on SQLite and PostgreSQL.

A team's runs start in the first acquires after they are due however long another team's herd
is; an owner holding its share of the pool waits while others' runs can start; and a store of
schema version 1 is upgraded with its runs' owners and its label limits kept as shared ones.
"""

from __future__ import annotations

from datetime import timedelta

from kairos.core.concurrency import GroupStatus
from kairos.streams.dedupe import open_dedupe_store
from kairos.streams.dedupe.base import DedupeStore, Lease
from kairos.streams.dedupe.database import SCHEMA_VERSION
from tests.local.test_dedupe_concurrency import of, started
from tests.local.test_dedupe_contract import OK, SHELL, T0, run_request
from tests.postgres import run_sql

LEASE = timedelta(minutes=5)
LATER = T0 + timedelta(days=1)
HERD = 2_000


def finish_all(store: DedupeStore, leases: list[Lease]) -> None:
    for lease in leases:
        store.finish(lease, OK, LATER)


def test_a_small_teams_runs_start_in_the_first_acquires_not_after_a_herd(
    store: DedupeStore,
) -> None:
    herd = [of("herd", minute, schedule=f"herd-{minute}") for minute in range(HERD)]
    for first in range(0, HERD, 500):
        store.admit(herd[first : first + 500], T0, "e1")
    small = [of("small", HERD + minute) for minute in range(3)]
    unowned = run_request(HERD + 10, schedule_id="unowned")
    store.admit([*small, unowned], T0, "e1")
    order: list[str] = []
    for _ in range(3):
        leases = store.acquire("e1", SHELL, LATER, LEASE, 4)
        order += started(leases)
        finish_all(store, leases)
    # In due order the small team's first run would be the 2,001st to start.
    assert order[:4] == [herd[0].run_id, small[0].run_id, unowned.run_id, herd[1].run_id]
    assert {r.run_id for r in small} <= set(order[:8])
    assert sum(1 for run_id in order if run_id.startswith("herd-")) == 12 - 4


def test_an_owner_holding_its_share_of_the_pool_waits_while_others_can_start(
    store: DedupeStore,
) -> None:
    store.admit([of("herd", minute) for minute in range(20)], T0, "e1")
    # Alone, the herd takes every place offered: nobody waits.
    assert len(store.acquire("e1", SHELL, LATER, LEASE, 6)) == 6
    small = [of("small", 30 + minute) for minute in range(5)]
    store.admit(small, T0, "e1")
    # 6 running and 2 places: half the pool is 4, the herd holds 6, its runs due first wait.
    assert started(store.acquire("e2", SHELL, LATER, LEASE, 2)) == [r.run_id for r in small[:2]]
    # With the whole pool as an owner's share, turns alone decide: the herd's run is due first.
    assert started(store.acquire("e3", SHELL, LATER, LEASE, 2, owner_share=1.0)) == [
        "herd-6@2027-03-14T07:06:00Z",
        small[2].run_id,
    ]


def test_a_store_of_version_1_keeps_its_limits_as_shared_and_learns_its_runs_owners(
    store_url: str,
) -> None:
    store = open_dedupe_store(store_url)
    store.set_concurrency_limit("shared:warehouse=eu", 1, T0)
    store.admit(
        [of("payments", minute) for minute in range(5)] + [of("growth", 10, warehouse="eu")],
        T0,
        "e1",
    )
    store.close()
    # As version 1 left it: no owner column, label groups (and their limits) spanning owners.
    for statement in [
        "DROP INDEX kairos_runs_by_owner",
        "ALTER TABLE kairos_runs DROP COLUMN owner",
        "DELETE FROM kairos_run_groups WHERE substr(group_key, 1, 6) = 'label:'",
        "UPDATE kairos_run_groups SET group_key = 'label:' || substr(group_key, 8) "
        "WHERE substr(group_key, 1, 7) = 'shared:'",
        "UPDATE kairos_concurrency_limits SET group_key = 'label:' || substr(group_key, 8)",
        "UPDATE kairos_dedupe_schema SET version = 1",
    ]:
        run_sql(store_url, statement)
    upgraded = open_dedupe_store(store_url)
    try:
        upgraded.set_concurrency_limit("label:growth/warehouse=eu", 1, T0)
        assert upgraded.concurrency(LATER) == [
            GroupStatus("label:growth/warehouse=eu", 1, 0, 1),
            GroupStatus("shared:warehouse=eu", 1, 0, 1),
        ]
        # Turns by owner: growth's run is due after payments' five, and starts second.
        assert started(upgraded.acquire("e1", SHELL, LATER, LEASE, 2, owner_share=1.0)) == [
            "payments-0@2027-03-14T07:00:00Z",
            "growth-10@2027-03-14T07:10:00Z",
        ]
        assert run_sql(store_url, "SELECT version FROM kairos_dedupe_schema") == [(SCHEMA_VERSION,)]
    finally:
        upgraded.close()
