"""The changelog's writer and reader round-trip a partition's writes into a real store."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message

from kairos.core.calendar_rules import latest
from kairos.core.firing import ScheduleState
from kairos.core.schedule import Schedule
from kairos.streams.state.changelog import (
    CHECKPOINT_KEY,
    ChangelogRecord,
    Floor,
    RestoreError,
    StateWriteEncoder,
    changelog_records,
    floor_from_stored,
    read_changelog,
    state_from_stored,
)
from kairos.streams.state.state_store import PartitionStore, StateWrite, StoreMemory
from kairos.streams.wire.codec import make_codecs

MEMORY = StoreMemory(16)
"""One RocksDB memory limit shared by every store of a test module, as a ticker shares one."""

CODECS = make_codecs()
CALENDARS = latest({})
PARTITION = 4
NOMINAL = datetime(2030, 1, 1, 9, tzinfo=UTC)


def _state(schedule_id: str, version: int, next_nominal: datetime | None) -> ScheduleState:
    return ScheduleState(
        schedule=Schedule(id=schedule_id, cron="0 9 * * *"),
        version=version,
        next_nominal=next_nominal,
        last_decided_nominal=NOMINAL - timedelta(days=1),
    )


def _messages(records: list[ChangelogRecord], first_offset: int) -> list[Message]:
    """What a consumer of the changelog partition reads back: the records, in order."""
    return [
        Message(
            topic="changelog",
            partition=PARTITION,
            offset=first_offset + position,
            key=key.encode(),
            value=value,
            headers=headers or None,
        )
        for position, (key, value, headers, _) in enumerate(records)
    ]


def _writes() -> tuple[list[StateWrite], dict[str, ScheduleState]]:
    encoder = StateWriteEncoder(CODECS)
    created = _state("created", 3, NOMINAL)
    fired = _state("fired", 5, NOMINAL + timedelta(days=1))
    ended = _state("ended", 6, None)
    writes = [
        encoder.state_write("created", created, redefined=True),
        encoder.state_write("fired", fired, redefined=True),
        encoder.state_write("fired", fired, redefined=False),
        encoder.state_write("ended", ended, redefined=True),
        encoder.state_write("gone", _state("gone", 1, NOMINAL), redefined=True),
        encoder.state_write("gone", None, redefined=False),
        encoder.state_write("owned-gone", _state("owned-gone", 4, NOMINAL), redefined=True),
        encoder.floor_write("owned-gone", Floor(4, None, "growth")),
        encoder.state_write("floored", _state("floored", 2, NOMINAL), redefined=True),
        encoder.floor_write("floored", Floor(2, NOMINAL, "payments")),
    ]
    return writes, {"created": created, "fired": fired, "ended": ended}


def test_written_records_read_back_into_a_store_hold_what_the_writes_hold(tmp_path: Path) -> None:
    writes, states = _writes()
    records = list(changelog_records(writes, checkpoint=812))
    batch = read_changelog(_messages(records, first_offset=100), PARTITION)
    assert batch.next_offset == 100 + len(records)
    assert batch.schedules_offset == 812
    assert not batch.reached_end

    restored = PartitionStore(tmp_path / "restored", MEMORY)
    restored.apply(batch.writes, batch.next_offset, batch.schedules_offset)
    written = PartitionStore(tmp_path / "written", MEMORY)
    written.apply(writes, 100 + len(records), 812)

    for schedule_id, state in states.items():
        stored = restored.get(schedule_id)
        assert stored == written.get(schedule_id)
        assert stored is not None
        assert state_from_stored(CODECS, *stored, CALENDARS) == state
    assert restored.get("gone") is None and restored.progress("gone") is None
    assert restored.get("floored") is None
    assert restored.progress("floored") == written.progress("floored") is not None
    # A floor keeps the id's owner, even of a schedule deleted before it decided anything.
    kept = {sid: restored.progress(sid) for sid in ("floored", "owned-gone")}
    assert {sid: floor_from_stored(CODECS, progress or b"") for sid, progress in kept.items()} == {
        "floored": Floor(2, NOMINAL, "payments"),
        "owned-gone": Floor(4, None, "growth"),
    }
    assert restored.count == written.count == 3
    due = int(NOMINAL.timestamp() * 1000)
    assert restored.due(0, 2**62, 10) == written.due(0, 2**62, 10)
    assert restored.due(0, 2**62, 10) == [(due, "created"), (due + 86_400_000, "fired")]
    assert (restored.changelog_offset, restored.schedules_offset) == (100 + len(records), 812)


def test_the_bytes_on_the_wire_keys_header_and_checkpoint() -> None:
    state = _state("s-1", 9, NOMINAL)
    write = StateWriteEncoder(CODECS).state_write("s-1", state, redefined=True)
    records = list(changelog_records([write], checkpoint=77))
    due = int(NOMINAL.timestamp() * 1000)
    assert records == [
        ("s-1", write.definition, None, False),
        ("s-1#progress", write.progress, [("kairos.due_ms", struct.pack(">q", due))], False),
        ("#checkpoint", struct.pack(">q", 77), None, True),
    ]
    assert CHECKPOINT_KEY == "#checkpoint"


def test_the_last_record_without_a_checkpoint_is_the_last_progress() -> None:
    writes, _ = _writes()
    records = list(changelog_records(writes, checkpoint=None))
    assert [is_last for *_, is_last in records].count(True) == 1
    assert records[-1][0] == "floored#progress" and records[-1][3]
    # A progress that is not due, or a deletion's, carries no due header.
    assert records[-1][2] == []


def test_a_definition_only_batch_end_is_not_due_until_its_progress_follows() -> None:
    writes, _ = _writes()
    records = list(changelog_records(writes[:1], checkpoint=None))
    batch = read_changelog(_messages(records[:1], first_offset=0), PARTITION)
    assert batch.writes == [StateWrite("created", writes[0].definition, None, None)]
    assert batch.next_offset == 1 and batch.schedules_offset is None


def test_the_end_of_the_partition_is_reported_and_other_errors_raise() -> None:
    end = Message(error=KafkaError(KafkaError._PARTITION_EOF), partition=PARTITION)
    batch = read_changelog([end], PARTITION)
    assert batch == type(batch)([], None, None, reached_end=True)
    failed = Message(error=KafkaError(KafkaError._TRANSPORT, "broker went away"))
    with pytest.raises(RestoreError, match="restoring partition 4 from the changelog failed"):
        read_changelog([failed], PARTITION)


def test_a_malformed_checkpoint_is_refused() -> None:
    malformed = Message(partition=PARTITION, offset=12, key=CHECKPOINT_KEY.encode(), value=b"x")
    with pytest.raises(RestoreError, match="checkpoint at offset 12 is malformed"):
        read_changelog([malformed], PARTITION)
