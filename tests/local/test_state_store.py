"""The ticker's RocksDB store: time-ordered due index, atomic batches, reopen, one owner."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from kairos.streams.state.state_store import (
    PartitionStore,
    StateStoreError,
    StateWrite,
    StoreMemory,
)
from tests.helpers import eventually

MEMORY = StoreMemory(16)
"""One RocksDB memory limit shared by every store of a test module, as a ticker shares one."""


def test_due_index_iterates_in_time_order_and_respects_bounds(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    writes = [
        StateWrite("late", b"v1", b"p", 3_000),
        StateWrite("early", b"v2", b"p", 1_000),
        StateWrite("middle-b", b"v3", b"p", 2_000),
        StateWrite("middle-a", b"v4", b"p", 2_000),
        # Far apart in magnitude: big-endian fixed width keeps numeric order.
        StateWrite("far", b"v5", b"p", 1_893_456_000_000),
        StateWrite("idle", b"v6", b"p", None),
    ]
    store.apply(writes, changelog_offset=6)
    # Schedules due at one instant come together, in the order they became due there.
    assert store.due(0, 2_500, limit=10) == [
        (1_000, "early"),
        (2_000, "middle-b"),
        (2_000, "middle-a"),
    ]
    assert store.due(1_500, 10**13, limit=2) == [(2_000, "middle-b"), (2_000, "middle-a")]
    assert store.next_due_ms() == 1_000
    assert list(store.due_instants(2_000, 10**13)) == [
        (2_000, ["middle-b", "middle-a"]),
        (3_000, ["late"]),
        (1_893_456_000_000, ["far"]),
    ]
    assert sorted(store.schedule_ids()) == sorted(w.schedule_id for w in writes)
    assert store.count == len(writes)
    store.close()


def test_updates_move_the_due_entry_and_deletes_remove_it(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    store.apply([StateWrite("a", b"v1", b"p", 1_000), StateWrite("b", b"v1", b"p", 2_000)], 2)
    store.apply(
        [StateWrite("a", b"v2", b"p", 5_000), StateWrite("b", None, None, None, deleted=True)], 4
    )
    assert store.due(0, 10_000, 10) == [(5_000, "a")]
    assert store.get("a") == (b"v2", b"p")
    assert store.get("b") is None
    assert store.count == 1
    store.apply([StateWrite("a", None, b"p2", 7_000)], 5)
    assert store.get("a") == (b"v2", b"p2"), "a progress write keeps the definition"
    assert store.due(0, 10_000, 10) == [(7_000, "a")]
    store.apply([StateWrite("a", b"v3", b"p", None)], 6)
    assert store.due(0, 10_000, 10) == []
    assert store.get("a") == (b"v3", b"p")
    store.close()


def test_a_deletion_may_keep_the_progress_as_the_ids_floor(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    store.apply([StateWrite("a", b"v1", b"p", 1_000), StateWrite("b", b"v1", b"p", 2_000)], 2)
    store.apply(
        [
            StateWrite("a", None, b"floor", None, deleted=True),
            StateWrite("b", None, None, None, deleted=True),
        ],
        4,
    )
    assert store.get("a") is None and store.count == 0
    assert store.due(0, 10_000, 10) == []
    assert (store.progress("a"), store.progress("b")) == (b"floor", None)
    store.close()
    reopened = PartitionStore(tmp_path / "p0", MEMORY)
    assert reopened.progress("a") == b"floor"
    assert reopened.due(0, 10_000, 10) == [] and reopened.schedule_ids() == []
    reopened.apply([StateWrite("a", b"v2", b"p2", 3_000)], 6)
    assert reopened.get("a") == (b"v2", b"p2") and reopened.count == 1
    reopened.close()


def test_state_and_changelog_offset_survive_reopen(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    assert store.changelog_offset is None
    assert store.written_at_ms is None
    before = int(time.time() * 1000)
    store.apply([StateWrite("a", b"v1", b"p", 1_000)], changelog_offset=42)
    assert before <= (store.written_at_ms or 0) <= int(time.time() * 1000)
    store.close()
    reopened = PartitionStore(tmp_path / "p0", MEMORY)
    assert reopened.changelog_offset == 42
    assert reopened.get("a") == (b"v1", b"p")
    assert reopened.due(0, 2_000, 10) == [(1_000, "a")]
    assert reopened.count == 1
    reopened.destroy()
    assert PartitionStore(tmp_path / "p0", MEMORY).changelog_offset is None


def test_a_second_opener_gets_a_clear_error(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    with pytest.raises(StateStoreError, match="another ticker"):
        PartitionStore(tmp_path / "p0", MEMORY)
    store.close()


def test_one_batch_may_rewrite_a_schedule_many_times(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    store.apply(
        [
            StateWrite("a", b"v1", b"p1", 1_000),
            StateWrite("a", None, b"p2", 2_000),
            StateWrite("a", b"v2", b"p3", 3_000),
            StateWrite("b", b"v1", b"p1", 1_500),
            StateWrite("b", None, None, None, deleted=True),
            StateWrite("b", b"v9", b"p9", 9_000),
        ],
        changelog_offset=6,
    )
    assert store.count == 2
    assert store.due(0, 10_000, 10) == [(3_000, "a"), (9_000, "b")]
    assert store.get("a") == (b"v2", b"p3")
    store.close()


def test_the_due_index_read_at_open_is_the_one_written(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    store.apply([StateWrite(f"s{n}", b"v", b"p", 1_000 * (n % 3)) for n in range(9)], 9)
    store.apply([StateWrite("s0", None, b"p", 5_000), StateWrite("s1", None, b"p", None)], 11)
    store.apply([StateWrite("s2", None, None, None, deleted=True)], 12)
    before = list(store.due_instants(0, 10_000))
    store.close()
    reopened = PartitionStore(tmp_path / "p0", MEMORY)
    after = list(reopened.due_instants(0, 10_000))
    assert [(instant, sorted(ids)) for instant, ids in after] == [
        (instant, sorted(ids)) for instant, ids in before
    ]
    assert [instant for instant, _ in after] == [0, 1_000, 2_000, 5_000]
    assert reopened.count == 8
    reopened.close()


def test_a_failed_batch_leaves_the_memory_index_untouched(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    store.apply([StateWrite("a", b"v", b"p", 1_000)], 1)
    store.close()
    with pytest.raises(Exception, match=r"(?i)closed|invalid|not open"):
        store.apply([StateWrite("a", None, b"p", 9_000)], 2)
    assert store.next_due_ms() == 1_000
    assert store.count == 1


def test_a_definition_without_its_progress_is_not_due_until_the_progress_follows(
    tmp_path: Path,
) -> None:
    # A restore batch may end between a definition and the progress written with it.
    store = PartitionStore(tmp_path / "p0", MEMORY)
    store.apply([StateWrite("a", b"v1", b"p1", 1_000)], 1)
    store.apply([StateWrite("a", b"v2", None, None)], 2)
    assert store.due(0, 10_000, 10) == []
    assert store.get("a") == (b"v2", b"p1"), "the progress it had is kept"
    store.close()
    reopened = PartitionStore(tmp_path / "p0", MEMORY)
    assert reopened.due(0, 10_000, 10) == []
    reopened.apply([StateWrite("a", None, b"p2", 2_000)], 3)
    assert reopened.due(0, 10_000, 10) == [(2_000, "a")]
    assert reopened.get("a") == (b"v2", b"p2")
    reopened.close()


def test_a_store_of_another_layout_starts_over_empty(tmp_path: Path) -> None:
    store = PartitionStore(tmp_path / "p0", MEMORY)
    store.apply([StateWrite("a", b"v1", b"p1", 1_000)], 7)
    store.close()
    options = Options(raw_mode=True)
    db = Rdict(str(tmp_path / "p0"), options)
    db.put(b"m:format", b"1")  # as an older release's store would say
    db.close()
    reopened = PartitionStore(tmp_path / "p0", MEMORY)
    assert reopened.changelog_offset is None, "restored cold from the changelog"
    assert reopened.get("a") is None
    assert reopened.count == 0
    assert reopened.next_due_ms() is None
    reopened.close()


def test_rocksdb_memory_stays_under_the_limit_however_much_the_stores_hold(
    tmp_path: Path,
) -> None:
    memory = StoreMemory(8)
    stores = [PartitionStore(tmp_path / f"p{n}", memory) for n in range(4)]
    definition = bytes(range(256)) * 2  # 512 B a schedule, 40 MB over the four stores
    for batch in range(20):
        for n, store in enumerate(stores):
            writes = [
                StateWrite(f"s{n}-{batch}-{i}", definition, b"p", batch * 1_000 + i)
                for i in range(1_000)
            ]
            store.apply(writes, changelog_offset=batch + 1)

        # The limit triggers flushes that run in the background: on a slow machine the memtables
        # pass it for as long as a flush takes, then fall back under it. Without the limit they
        # only grow (each store would keep 10 MB, under RocksDB's own 64 MB flush size).
        def under_the_limit() -> bool:
            memtables = sum(store.memtable_bytes for store in stores)
            return memtables <= 5 << 20 and memory.usage_bytes <= 9 << 20

        eventually(
            under_the_limit,
            timeout_s=30,
            message="RocksDB stayed over its limit (5 MiB of memtables, 9 MiB in all)",
        )
    for n, store in enumerate(stores):
        assert store.count == 20_000
        assert store.get(f"s{n}-7-123") == (definition, b"p")
        store.close()
