"""The schedule-event contract on a real broker: the ticker, the reader and the history agree.

Every row of tests/schedule_event_table.py is published raw (on the partition the row says,
bypassing the SDK), and each consumer of the schedules topic reads it: the ticker in this
process, `ScheduleReader` and `HistoryReader`. They must refuse the same records for the same
reasons, apply the same ones, and only the ticker may write dead letters.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.history import HistoryReader
from kairos.streams.readers.schedule_reader import ScheduleReader
from kairos.streams.wire.dead_letters import VALUE_COPY_LIMIT
from tests.broker.test_ticker_inprocess import running_ticker, runs
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.schedule_event_table import CODECS, Row, a_due_instant, rows

Position = tuple[int, int]


def publish_raw(
    settings: KafkaSettings, records: list[tuple[bytes | None, bytes | None, int]], **config: Any
) -> list[Position]:
    """Produce each (key, value, partition) as given; returns where each landed."""
    topic = settings.layout.name(TopicRole.SCHEDULES)
    producer = Producer(settings.client_config(**config))
    landed: dict[int, Position] = {}

    def delivered(index: int) -> Any:
        def on_delivery(error: KafkaError | None, message: Message) -> None:
            assert error is None, error
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            landed[index] = (partition, offset)

        return on_delivery

    for index, (key, value, partition) in enumerate(records):
        producer.produce(topic, value, key, partition, on_delivery=delivered(index))
        # One at a time, so the table's order is the topic's order within each partition.
        assert producer.flush(30) == 0
    return [landed[index] for index in range(len(records))]


def dead_letters(settings: KafkaSettings) -> list[dict[str, Any]]:
    topic = settings.layout.name(TopicRole.DEAD_LETTERS)
    return [v for _, v in read_topic(settings.bootstrap_servers, topic, CODECS.dead_letter.decode)]


def test_the_ticker_the_reader_and_the_history_read_every_record_alike(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    due = a_due_instant()
    # A compacted topic refuses a record without a key (INVALID_RECORD): only the unit test has it.
    table = [row for row in rows("c", due) if row.key is not None]
    positions = publish_raw(kafka_settings, [(row.key, row.value, row.partition) for row in table])
    by_position: dict[Position, Row] = dict(zip(positions, table, strict=True))
    refused = {p for p, row in by_position.items() if row.outcome not in ("upserted", "deleted")}

    with running_ticker(kafka_settings, tmp_path / "t", "t"):

        def ok_fired() -> bool:
            return any(r["schedule_id"] == "c.ok" for r in runs(kafka_settings))

        eventually(ok_fired, timeout_s=60, interval_s=0.5, message="the valid upsert never fired")
        eventually(
            lambda: len(dead_letters(kafka_settings)) >= len(refused),
            timeout_s=30,
            message="the ticker did not dead-letter every refused record",
        )
    letters = dead_letters(kafka_settings)
    snapshot = ScheduleReader(kafka_settings).read_all()
    history = HistoryReader(kafka_settings)
    events = {(e.partition, e.offset): e for e in history.schedule_events()}

    by_ticker = {(d["source_partition"], d["source_offset"]): d for d in letters}
    by_reader = {(r.partition, r.offset): r for r in snapshot.rejected}
    by_history = {(r.partition, r.offset): r for r in history.rejected}
    assert set(by_ticker) == set(by_reader) == set(by_history) == refused
    assert len(letters) == len(refused), "a record was dead-lettered twice"
    for position in refused:
        row = by_position[position]
        letter, rejected = by_ticker[position], by_reader[position]
        assert letter["error_class"] == rejected.error_class == row.outcome, row.name
        assert letter["reason"] == rejected.reason == by_history[position].reason, row.name
        assert row.reason in rejected.reason, (row.name, rejected.reason)
        assert letter["dead_lettered_by"] == "ticker:t"
        assert (letter["key"], letter["key_size"]) == (row.key, _size(row.key))
        assert letter["value_size"] == _size(row.value)
        if letter["truncated"]:
            assert row.value is not None and letter["value"] == row.value[:VALUE_COPY_LIMIT]
        else:
            assert letter["value"] == row.value, row.name
    for position, row in by_position.items():
        if position in refused:
            assert position not in events, row.name
        else:
            assert (events[position].definition is None) == (row.outcome == "deleted"), row.name
    assert set(snapshot.schedules) == {"c.ok"}
    fired = {str(r["schedule_id"]) for r in runs(kafka_settings)}
    assert fired == {"c.ok"}, "a refused record fired: a misplaced schedule fires twice"


def _size(data: bytes | None) -> int | None:
    return None if data is None else len(data)


def test_an_event_too_large_to_dead_letter_whole_does_not_stop_the_ticker(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """An invalid event near the broker's 1 MiB limit, copied whole into a dead letter beside
    the other fields, exceeds the producer's 1,000,000-byte limit: the transaction must still
    commit, or the ticker aborts and reads the same record again, forever."""
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        client.upsert({"id": "control", "every": "1s", "start_at": start.isoformat()})
    poison = b"not avro" + b"x" * 1_030_000
    # On the control schedule's partition: a partition stuck on the poison stops its schedules.
    partitions = kafka_settings.schedules_partitions
    control_partition = partition_for("control", partitions)
    key = next(
        candidate
        for candidate in (f"poison-{n}".encode() for n in range(1000))
        if partition_for(candidate, partitions) == control_partition
    )
    (where,) = publish_raw(
        kafka_settings, [(key, poison, control_partition)], **{"message.max.bytes": 1_048_000}
    )
    with running_ticker(kafka_settings, tmp_path / "t", "t") as ticker:
        last = start + timedelta(seconds=4)

        def control_kept_firing() -> bool:
            return f"control@{last:%Y-%m-%dT%H:%M:%SZ}" in {
                r["run_id"] for r in runs(kafka_settings)
            }

        eventually(
            control_kept_firing, timeout_s=60, interval_s=0.5, message="the ticker stopped firing"
        )
        aborts = [
            sample
            for metric in ticker.metrics.registry.collect()
            if metric.name == "kairos_ticker_transaction_aborts"
            for sample in metric.samples
            if sample.name.endswith("_total") and sample.value
        ]
        assert not aborts, "a transaction was aborted: the ticker rebuilds and reads it again"
    (letter,) = dead_letters(kafka_settings)
    assert (letter["source_partition"], letter["source_offset"]) == where
    assert letter["error_class"] == "ScheduleEventTooLargeError"
    assert "over the limit" in letter["reason"]
    assert letter["truncated"] is True
    assert letter["value"] == poison[:VALUE_COPY_LIMIT]
    assert (letter["key"], letter["value_size"]) == (key, len(poison))
