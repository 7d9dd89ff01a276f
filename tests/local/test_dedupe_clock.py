"""Leases on one clock: the database's. Executors whose clocks are skewed, simulated by the `now`
they pass, agree on which leases expired (kairos.streams.dedupe.base, rule 7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kairos.streams.dedupe.base import DedupeStore, LeaseStatus, RunEnd
from tests.helpers import eventually
from tests.local.test_dedupe_contract import (
    LEASE,
    OK,
    SHELL,
    SHORT_LEASE,
    only,
    run_request,
)

SKEW = timedelta(seconds=20)


def test_an_executor_whose_clock_is_ahead_does_not_reap_a_healthy_lease(
    store: DedupeStore,
) -> None:
    now = datetime.now(UTC)
    store.admit([run_request()], now, "e1")
    lease = only(store.acquire("a", SHELL, now, LEASE, limit=1))
    renewed_by_a_clock_behind = now - SKEW
    assert store.renew([lease], renewed_by_a_clock_behind, LEASE) == {
        lease.run_id: LeaseStatus.HELD
    }
    assert store.reap_expired(now + SKEW + LEASE, "ahead") == []
    assert store.finish(lease, OK, now) is RunEnd.SUCCEEDED


def test_an_executor_whose_clock_is_behind_holds_a_lease_no_longer_than_it_renews_it(
    store: DedupeStore,
) -> None:
    behind = datetime.now(UTC) - timedelta(hours=1)
    request = run_request()
    store.admit([request], behind, "e1")
    store.acquire("a", SHELL, behind, SHORT_LEASE, limit=1)
    reaped = eventually(
        lambda: store.reap_expired(behind, "also-behind"),
        timeout_s=10,
        interval_s=0.05,
        message="a lease acquired by a clock an hour behind never expired",
    )
    assert reaped == [(request.run_id, RunEnd.RETRYING)]
