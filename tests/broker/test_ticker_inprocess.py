"""The ticker against the real broker, run in this process for fast feedback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from kairos.core.run_id import parse_run_id
from kairos.services.ticker.service import Ticker, TickerSettings
from kairos.streams.codec import make_codecs
from kairos.streams.ownership import OwnershipInfo
from kairos.streams.schedule_publisher import SchedulesClient
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole
from tests.helpers import eventually
from tests.kafka_helpers import read_topic

CODECS = make_codecs()


@contextmanager
def running_ticker(settings: KafkaSettings, state_dir: Path, instance: str) -> Iterator[Ticker]:
    ticker = Ticker(
        settings,
        TickerSettings(instance=instance, state_dir=state_dir, session_timeout_ms=3000),
    )
    stop = threading.Event()
    thread = threading.Thread(target=ticker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield ticker
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the ticker did not stop"


def runs(settings: KafkaSettings) -> list[dict[str, object]]:
    topic = settings.layout.name(TopicRole.RUNS)
    return [
        value
        for _, value in read_topic(settings.bootstrap_servers, topic, CODECS.run_requested.decode)
    ]


def test_every_second_schedules_fire_each_occurrence_once(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    # A schedule owes only occurrences at or after its creation: leave the upserts time to be
    # published before the first one, even on a loaded machine.
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
    ids = [f"tick-{n}" for n in range(8)]
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        for schedule_id in ids:
            client.upsert({"id": schedule_id, "every": "1s", "start_at": start.isoformat()})

    with running_ticker(kafka_settings, tmp_path / "t1", "t1"):
        until = start + timedelta(seconds=4)

        def all_fired() -> bool:
            fired = {r["run_id"] for r in runs(kafka_settings)}
            return all(f"{i}@{until:%Y-%m-%dT%H:%M:%SZ}" in fired for i in ids)

        eventually(all_fired, timeout_s=60, interval_s=0.5, message="runs up to +4s not all fired")

    records = runs(kafka_settings)
    run_ids = [r["run_id"] for r in records]
    assert len(run_ids) == len(set(run_ids)), "a run id was committed twice"
    for schedule_id in ids:
        nominals = sorted(
            parse_run_id(str(r["run_id"]))[1] for r in records if r["schedule_id"] == schedule_id
        )
        # Every second from the start, none missing, none extra before the last one seen.
        expected = [start + timedelta(seconds=s) for s in range(len(nominals))]
        assert nominals == expected
        assert len(nominals) >= 5


def test_a_change_takes_effect_within_a_second_and_garbage_is_dead_lettered(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    schedules_topic = kafka_settings.layout.name(TopicRole.SCHEDULES)
    producer = Producer({"bootstrap.servers": kafka_settings.bootstrap_servers})
    with running_ticker(kafka_settings, tmp_path / "t", "t") as ticker:
        eventually(lambda: ticker.metrics.owned_partitions._value.get() == 4, timeout_s=30)
        producer.produce(schedules_topic, key=b"broken", value=b"\x00not avro at all")
        producer.flush(10)
        due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
        with SchedulesClient(kafka_settings, changed_by="test") as client:
            client.upsert({"id": "soon", "at": due.isoformat()})

        def fired() -> dict[str, object]:
            found = [r for r in runs(kafka_settings) if r["schedule_id"] == "soon"]
            assert found, "not fired yet"
            return found[0]

        run = eventually(fired, timeout_s=30, interval_s=0.2)
        assert run["run_id"] == f"soon@{due:%Y-%m-%dT%H:%M:%SZ}"
        assert int(str(run["lateness_ms"])) < 1000

        dead = read_topic(
            kafka_settings.bootstrap_servers,
            kafka_settings.layout.name(TopicRole.DEAD_LETTERS),
            CODECS.dead_letter.decode,
        )
        assert len(dead) == 1
        letter = dead[0][1]
        assert letter["key"] == b"broken"
        assert letter["source_topic"] == schedules_topic
        assert "marker" in letter["reason"], letter["reason"]
        assert letter["dead_lettered_by"] == "ticker:t"

        registry = ticker.metrics.registry
        assert registry.get_sample_value("kairos_ticker_fires_total") == 1
        assert registry.get_sample_value("kairos_ticker_dead_letters_total") == 1
        assert registry.get_sample_value("kairos_ticker_schedules_held") == 1
        assert registry.get_sample_value("kairos_ticker_fire_lateness_seconds_count") == 1

    # The owner is visible in the metadata of the offsets it commits.
    admin = AdminClient({"bootstrap.servers": kafka_settings.bootstrap_servers})
    request = ConsumerGroupTopicPartitions("kairos-tickers")
    offsets = admin.list_consumer_group_offsets([request])["kairos-tickers"].result(timeout=30)
    owners = [
        OwnershipInfo.decode(tp.metadata)
        for tp in offsets.topic_partitions
        if tp.topic == schedules_topic
    ]
    assert len(owners) == 4
    assert {o.instance for o in owners if o is not None} == {"t"}
