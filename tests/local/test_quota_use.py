"""A partition's quota use, counted from its real RocksDB store and moved by commits only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kairos.core.calendar_rules import latest
from kairos.core.firing import ScheduleState
from kairos.core.quotas import NO_USE, Use
from kairos.core.schedule import Schedule
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.quotas import count_quota_use
from kairos.services.ticker.work import TransactionWork
from kairos.streams.state.changelog import StateWriteEncoder
from kairos.streams.state.state_store import (
    PartitionStore,
    StateStoreError,
    StateWrite,
    StoreMemory,
)
from kairos.streams.wire.codec import make_codecs

CODECS = make_codecs()
T0 = datetime(2027, 1, 1, tzinfo=UTC)


def _state(schedule_id: str, owner: str | None, every_s: int | None = None) -> ScheduleState:
    trigger: dict[str, object] = (
        {"cron": "0 3 * * *"} if every_s is None else {"every": timedelta(seconds=every_s)}
    )
    schedule = Schedule(id=schedule_id, owner=owner, start_at=T0, **trigger)
    return ScheduleState(schedule, version=1, next_nominal=T0)


def _store(path: Path, *states: ScheduleState) -> PartitionStore:
    store = PartitionStore(path, StoreMemory(16))
    encoder = StateWriteEncoder(CODECS)
    writes = [encoder.state_write(s.schedule_id, s, redefined=True) for s in states]
    store.apply(writes, changelog_offset=len(writes))
    return store


def _owned(store: PartitionStore) -> OwnedPartition:
    return OwnedPartition(0, store, CODECS, T0, latest({}))


def test_use_is_counted_from_the_store_and_moved_only_by_what_commits(tmp_path: Path) -> None:
    owned = _owned(
        _store(tmp_path, _state("a", "growth"), _state("b", "growth", 10), _state("c", None))
    )
    assert owned.use.of("growth") == Use(2, 7)
    assert owned.use.of("nobody") == NO_USE
    work = TransactionWork()
    work.count_use(0, None, _state("d", "growth", 5))
    work.count_use(0, _state("b", "growth", 10), None)
    assert work.use_of(owned, "growth") == Use(2, 13)
    assert owned.use.of("growth") == Use(2, 7), "an open transaction moved the committed count"
    owned.use.committed(work.use_changes[0])
    assert owned.use.of("growth") == Use(2, 13)
    owned.store.close()


def test_a_store_replaced_by_a_cold_restore_is_the_one_counted(tmp_path: Path) -> None:
    owned = _owned(_store(tmp_path / "kept", _state("a", "growth"), _state("b", "growth")))
    owned.store.destroy()
    # What the restore does when the kept store cannot be trusted (restore.py).
    owned.store = _store(tmp_path / "fresh", _state("a", "growth"))
    assert owned.use.of("growth") == Use(1, 1)
    owned.store.close()


def test_a_store_that_cannot_be_read_is_a_retryable_failure_not_a_verdict(
    tmp_path: Path,
) -> None:
    owned = _owned(_store(tmp_path, _state("a", "growth")))
    owned.store.close()
    with pytest.raises(StateStoreError, match="count partition 0's quota use") as raised:
        owned.use.of("growth")
    assert raised.value.retryable


def test_a_count_in_slices_is_the_store_as_it_began_plus_the_commits_since(
    tmp_path: Path,
) -> None:
    states = [_state(f"s{n:04d}", "growth", 60) for n in range(2_000)]
    owned = _owned(_store(tmp_path, *states))
    encoder = StateWriteEncoder(CODECS)
    owned.use.count_for(0.0)
    assert not owned.use.counted, "one slice of 256 is not all 2,000"
    # Committed mid-count: a creation the scan cannot see, and the deletions of a schedule
    # it has counted already and of one it has not reached yet.
    work = TransactionWork()
    work.count_use(0, None, _state("new", "growth", 60))
    work.count_use(0, states[0], None)
    work.count_use(0, states[-1], None)
    owned.store.apply(
        [
            encoder.state_write("new", _state("new", "growth", 60), redefined=True),
            StateWrite("s0000", None, None, None, deleted=True),
            StateWrite("s1999", None, None, None, deleted=True),
        ],
        changelog_offset=2_001,
    )
    owned.use.committed(work.use_changes[0])
    count_quota_use([owned.use], budget_s=5.0)
    assert owned.use.counted
    assert owned.use.of("growth") == Use(1_999, 1_999)
    owned.store.close()


def test_a_store_closed_mid_count_lets_go_of_its_database_and_the_count_fails_retryably(
    tmp_path: Path,
) -> None:
    owned = _owned(_store(tmp_path, *(_state(f"s{n:04d}", "growth") for n in range(1_000))))
    owned.use.count_for(0.0)
    owned.store.close()
    # The scan's iterator would hold the database's lock: the next owner could not open it.
    PartitionStore(tmp_path, StoreMemory(16)).close()
    with pytest.raises(StateStoreError, match="count partition 0's quota use") as raised:
        owned.use.of("growth")
    assert raised.value.retryable


def test_a_recount_mid_count_begins_again_from_the_store_as_it_is(tmp_path: Path) -> None:
    owned = _owned(_store(tmp_path, *(_state(f"s{n:04d}", "growth") for n in range(1_000))))
    owned.use.count_for(0.0)
    # A quarantine's commit: what the poisoned schedule took is read from the store again.
    owned.store.apply([StateWrite("s0500", None, None, None, deleted=True)], changelog_offset=1_001)
    owned.use.recount()
    assert not owned.use.counted
    assert owned.use.of("growth") == Use(999, 999)
    owned.store.close()
    PartitionStore(tmp_path, StoreMemory(16)).close()  # no scan left holding the database
