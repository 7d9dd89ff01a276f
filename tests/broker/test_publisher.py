"""The producer SDK on a real broker: partitions, the full-definition contract, typed errors."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Message, Producer
from fastavro import schemaless_reader
from fastavro.schema import load_schema

import kairos.schemas
from kairos.client import (
    KafkaSettings,
    Schedule,
    ScheduleNotFoundError,
    SchedulesClient,
    SchedulesInvalidError,
)
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import definition_record
from kairos.streams.wire.schedule_events import MAX_SCHEDULE_EVENT_BYTES, ScheduleEventTooLargeError
from tests.kafka_helpers import read_topic

NIGHTLY = Schedule.model_validate(
    {
        "id": "billing.nightly",
        "cron": "30 2 * * *",
        "timezone": "America/New_York",
        "misfire": "latest",
        "jitter": "30s",
        "job": {"kind": "http", "url": "https://billing.internal/run", "method": "POST"},
        "owner": "billing",
        "labels": {"tier": "gold"},
        "description": "Nightly invoices",
    }
)


def schedule_events(settings: KafkaSettings) -> list[tuple[str | None, dict[str, object] | None]]:
    topic = settings.layout.name(TopicRole.SCHEDULES)
    return read_topic(settings.bootstrap_servers, topic, make_codecs().schedule_event.decode)


def test_murmur2_matches_the_partition_librdkafka_chose(
    kafka_settings: KafkaSettings, create_topic: Callable[..., str]
) -> None:
    partitions = 7
    topic = create_topic("murmur2", partitions=partitions)
    # Every tail length, non-ASCII text, and the id shapes schedules use.
    keys = [f"team-{i}.job/{'x' * (i % 9)}:é{i}" for i in range(600)] + ["", "a", "ab", "abc"]
    chosen: dict[str, int] = {}

    def delivered(error: object, message: Message) -> None:
        assert error is None, error
        key, partition = message.key(), message.partition()
        assert key is not None and partition is not None
        chosen[key.decode()] = partition

    producer = Producer(kafka_settings.client_config())
    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"v", on_delivery=delivered)
    assert producer.flush(30) == 0

    assert len(chosen) == len(keys)
    assert {key: partition_for(key, partitions) for key in keys} == chosen
    assert len(set(chosen.values())) == partitions


def test_pause_and_resume_publish_the_whole_definition(kafka_settings: KafkaSettings) -> None:
    with SchedulesClient(kafka_settings, changed_by="alice") as client:
        client.upsert(NIGHTLY)
        client.pause(NIGHTLY.id, reason="month-end freeze")
        assert client.get(NIGHTLY.id).schedule.paused
        client.resume(NIGHTLY.id)
        current = client.get(NIGHTLY.id)

    assert current.schedule == NIGHTLY
    assert (current.change, current.revision, current.changed_by) == ("resumed", 2, "alice")
    events = [value for _, value in schedule_events(kafka_settings)]
    assert [(e["change"], e["revision"]) for e in events if e] == [
        ("upserted", 0),
        ("paused", 1),
        ("resumed", 2),
    ]
    paused_event, resumed_event = events[1], events[2]
    assert paused_event is not None and resumed_event is not None
    # Compaction may keep only the latest record of the key: it must be the whole schedule.
    paused_copy = NIGHTLY.model_copy(update={"paused": True})
    assert paused_event["definition"] == definition_record(paused_copy)
    assert paused_event["reason"] == "month-end freeze"
    assert resumed_event["definition"] == definition_record(NIGHTLY)


def test_delete_publishes_a_deleted_event_then_a_tombstone(kafka_settings: KafkaSettings) -> None:
    with SchedulesClient(kafka_settings, changed_by="alice") as client:
        client.upsert_all([NIGHTLY, NIGHTLY.model_copy(update={"id": "billing.other"})])
        client.delete(NIGHTLY.id, reason="retired")
        assert [s.id for s in client.list()] == ["billing.other"]
        with pytest.raises(ScheduleNotFoundError) as missing:
            client.get(NIGHTLY.id)
    assert missing.value.schedule_id == NIGHTLY.id

    mine = [value for key, value in schedule_events(kafka_settings) if key == NIGHTLY.id]
    assert len(mine) == 3
    deleted, tombstone = mine[1], mine[2]
    assert deleted is not None and tombstone is None
    assert (deleted["change"], deleted["definition"], deleted["revision"]) == ("deleted", None, 1)


@pytest.mark.parametrize("action", ["pause", "resume", "delete"])
def test_changing_an_unknown_schedule_raises_and_publishes_nothing(
    kafka_settings: KafkaSettings, action: str
) -> None:
    with (
        SchedulesClient(kafka_settings, changed_by="alice") as client,
        pytest.raises(ScheduleNotFoundError) as missing,
    ):
        getattr(client, action)("no.such.schedule")
    assert missing.value.schedule_id == "no.such.schedule"
    assert schedule_events(kafka_settings) == []


def test_an_invalid_schedule_is_refused_before_sending(kafka_settings: KafkaSettings) -> None:
    with (
        SchedulesClient(kafka_settings, changed_by="alice") as client,
        pytest.raises(SchedulesInvalidError) as invalid,
    ):
        client.upsert({"id": "broken", "cron": "61 * * * *"})
    assert [(e.schedule_id, e.field) for e in invalid.value.errors] == [("broken", "cron")]
    assert schedule_events(kafka_settings) == []


def test_a_schedule_too_large_for_the_topic_is_refused_before_sending(
    kafka_settings: KafkaSettings,
) -> None:
    """Every consumer refuses an event over the contract's limit, so the SDK never sends one."""
    large = Schedule(id="large", cron="0 2 * * *", description="x" * MAX_SCHEDULE_EVENT_BYTES)
    with (
        SchedulesClient(kafka_settings, changed_by="alice") as client,
        pytest.raises(ScheduleEventTooLargeError) as refused,
    ):
        client.upsert_all([Schedule(id="small", cron="0 2 * * *"), large])
    assert refused.value.schedule_id == "large"
    assert f"over the limit of {MAX_SCHEDULE_EVENT_BYTES}" in str(refused.value)
    assert schedule_events(kafka_settings) == []


def test_an_sdk_record_decodes_with_plain_fastavro_and_the_avsc_file(
    kafka_settings: KafkaSettings,
) -> None:
    with SchedulesClient(kafka_settings, changed_by="alice") as client:
        client.upsert(NIGHTLY)
    topic = kafka_settings.layout.name(TopicRole.SCHEDULES)
    [(key, value)] = read_topic(kafka_settings.bootstrap_servers, topic)
    assert key == NIGHTLY.id and isinstance(value, bytes)

    schemas_dir = Path(kairos.schemas.__file__).parent
    # load_schema finds the named types the event refers to in files beside it.
    schema = load_schema(str(schemas_dir / "io.kairos.v1.ScheduleEvent.avsc"))
    assert value[:2] == b"\xc3\x01"
    event = schemaless_reader(io.BytesIO(value[10:]), schema)
    assert isinstance(event, dict)
    assert event["schedule_id"] == NIGHTLY.id
    assert event["definition"]["cron"] == "30 2 * * *"
    assert event["definition"]["timezone"] == "America/New_York"
