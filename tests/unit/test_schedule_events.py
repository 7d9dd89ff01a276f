"""The schedule-event contract, row by row, and the bounded dead-letter copy."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kairos.streams.wire.dead_letters import KEY_COPY_LIMIT, VALUE_COPY_LIMIT, dead_letter_record
from kairos.streams.wire.schedule_events import (
    TOMBSTONE,
    RejectedEvent,
    ScheduleDeleted,
    ScheduleUpserted,
    read_schedule_event,
)
from tests.schedule_event_table import CODECS, PARTITIONS, Row, a_due_instant, rows

pytestmark = pytest.mark.unit

DUE = a_due_instant()
RECORDED_AT = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
TABLE = rows("unit", DUE)


def read(row: Row, offset: int = 7) -> ScheduleUpserted | ScheduleDeleted | RejectedEvent:
    return read_schedule_event(
        CODECS.schedule_event,
        key=row.key,
        value=row.value,
        partition=row.partition,
        offset=offset,
        timestamp=RECORDED_AT,
        partitions=PARTITIONS,
    )


@pytest.mark.parametrize("row", TABLE, ids=[row.name for row in TABLE])
def test_each_record_means_what_the_table_says(row: Row) -> None:
    change = read(row)
    if isinstance(change, RejectedEvent):
        assert (change.error_class, row.reason in change.reason) == (row.outcome, True), change
        # What the ticker dead-letters: the record as consumed.
        assert (change.key, change.value, change.partition, change.offset) == (
            row.key,
            row.value,
            row.partition,
            7,
        )
    elif isinstance(change, ScheduleUpserted):
        assert row.outcome == "upserted"
        assert change.schedule.id == change.schedule_id
        assert (change.partition, change.offset) == (row.partition, 7)
    else:
        assert row.outcome == "deleted"


def test_a_tombstone_deletes_as_of_the_records_timestamp() -> None:
    (tombstone,) = [row for row in TABLE if row.name == "tombstone"]
    change = read(tombstone)
    assert isinstance(change, ScheduleDeleted)
    assert (change.change, change.changed_at, change.changed_by) == (TOMBSTONE, RECORDED_AT, None)


def test_a_misplaced_record_names_the_partitioner_to_use() -> None:
    (misplaced,) = [row for row in TABLE if row.name == "a valid upsert on the wrong partition"]
    change = read(misplaced)
    assert isinstance(change, RejectedEvent)
    assert f"on partition {misplaced.partition}" in change.reason
    assert "Java's default partitioner" in change.reason


def test_a_dead_letter_copies_a_record_whole_when_it_fits() -> None:
    record = dead_letter_record(
        source_topic="s",
        source_partition=1,
        source_offset=2,
        key=b"k",
        value=b"v" * VALUE_COPY_LIMIT,
        reason="why",
        error_class="E",
        dead_lettered_at=RECORDED_AT,
        dead_lettered_by="ticker:t",
    )
    assert (record["key"], record["value"]) == (b"k", b"v" * VALUE_COPY_LIMIT)
    assert (record["truncated"], record["key_size"], record["value_size"]) == (
        False,
        1,
        VALUE_COPY_LIMIT,
    )
    assert CODECS.dead_letter.decode(CODECS.dead_letter.encode(record)) == record


def test_a_dead_letter_of_a_huge_record_keeps_its_first_bytes_and_its_sizes() -> None:
    key, value = b"k" * 5000, b"v" * 1_200_000
    record = dead_letter_record(
        source_topic="s",
        source_partition=1,
        source_offset=2,
        key=key,
        value=value,
        reason="r" * 10_000,
        error_class="E",
        dead_lettered_at=RECORDED_AT,
        dead_lettered_by="ticker:t",
    )
    assert record["key"] == key[:KEY_COPY_LIMIT]
    assert record["value"] == value[:VALUE_COPY_LIMIT]
    assert (record["truncated"], record["key_size"], record["value_size"]) == (
        True,
        5000,
        1_200_000,
    )
    # Well under Kafka's default limit of 1,000,000 bytes per record, key included.
    assert len(CODECS.dead_letter.encode(record)) + len(record["key"]) < 600 * 1024


def test_a_dead_letter_of_a_tombstone_has_no_value_size() -> None:
    record = dead_letter_record(
        source_topic="s",
        source_partition=1,
        source_offset=2,
        key=None,
        value=None,
        reason="why",
        error_class="E",
        dead_lettered_at=RECORDED_AT,
        dead_lettered_by="ticker:t",
    )
    assert (record["truncated"], record["key_size"], record["value_size"]) == (False, None, None)
