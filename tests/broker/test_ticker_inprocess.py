"""The ticker against the real broker, run in this process for fast feedback."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kairos.core.run_id import parse_run_id
from kairos.services.ticker.service import Ticker
from kairos.services.ticker.settings import TickerSettings
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.ownership import OwnershipInfo
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.helpers import eventually, unique_name
from tests.kafka_helpers import read_topic, wait_for_stable_group

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


def turned_by_the_test(
    settings: KafkaSettings, state_dir: Path, group: str, **overrides: float
) -> Ticker:
    """A connected ticker, alone in `group`, whose turns the test takes itself (no thread)."""
    ticker = Ticker(
        settings,
        TickerSettings(
            instance="t", state_dir=state_dir, group_id=group, session_timeout_ms=3000, **overrides
        ),
    )
    ticker.connect()
    return ticker


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
    # murmur2, as every producer of the schedules topic must: a record elsewhere is refused too.
    producer = Producer(kafka_settings.client_config())
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
    group = kafka_settings.deployment_id("tickers")
    request = ConsumerGroupTopicPartitions(group)
    offsets = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    owners = [
        OwnershipInfo.decode(tp.metadata)
        for tp in offsets.topic_partitions
        if tp.topic == schedules_topic
    ]
    assert len(owners) == 4
    assert {o.instance for o in owners if o is not None} == {"t"}


def test_leaving_the_group_does_not_take_up_an_assignment_that_arrives_meanwhile(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A rebalance can finish while the ticker leaves the group (rebuilding after a fenced
    transaction, or stopping): `close()` serves its assignment callback, and restoring then
    would hang on the closing consumer's offset fetch until the restore timeout."""
    group = unique_name("tickers")
    ticker = turned_by_the_test(kafka_settings, tmp_path / "t", group, restore_timeout_s=30)
    schedules = kafka_settings.layout.name(TopicRole.SCHEDULES)
    other = Consumer(kafka_settings.group_member_config(group, "other", 3000))
    other.subscribe([schedules])
    try:

        def shared() -> dict[str, set[int]]:
            ticker.turn()
            other.consume(timeout=0.1)
            assert ticker.owned and other.assignment(), "not shared yet"
            return wait_for_stable_group(
                kafka_settings.bootstrap_servers, group, members=2, timeout_s=1
            )

        eventually(shared, timeout_s=60, interval_s=0)
    finally:
        other.close()
    # The other member left: the group gives its partitions back to the ticker, which does not
    # poll, so the assignment waits for its callback to be served.
    owners = wait_for_stable_group(kafka_settings.bootstrap_servers, group, members=1)
    assert owners == {"t": set(range(kafka_settings.schedules_partitions))}
    started = time.monotonic()
    ticker.disconnect()
    assert time.monotonic() - started < 10, "leaving the group waited on a restore"
    assert not ticker.owned


def test_changes_delivered_again_below_the_committed_offset_are_not_applied_again(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """A partition is taken over with the consumer starting at its own fetch of the committed
    offset; should it ever start before it, the changes it delivers again are already in the
    restored state: applying them again could replay a schedule's old definition."""
    ticker = turned_by_the_test(kafka_settings, tmp_path / "t", unique_name("tickers"))
    transactions = "kairos_ticker_transaction_commit_seconds_count"
    try:

        def taken_over() -> bool:
            ticker.turn()
            return len(ticker.owned) == kafka_settings.schedules_partitions

        eventually(taken_over, timeout_s=60, interval_s=0)
        with SchedulesClient(kafka_settings, changed_by="test") as client:
            client.upsert({"id": "x", "cron": "0 * * * *"})
            client.pause("x")
        owned = ticker.owned[partition_for("x", kafka_settings.schedules_partitions)]

        def paused_and_committed() -> bool:
            ticker.turn()
            state = owned.state("x")
            return state is not None and state.paused and owned.committed_offset >= 2

        eventually(paused_and_committed, timeout_s=30, interval_s=0)
        committed = ticker.metrics.registry.get_sample_value(transactions)
        assert ticker.session is not None
        ticker.session.member.seek(
            TopicPartition(kafka_settings.layout.name(TopicRole.SCHEDULES), owned.partition, 0)
        )
        for _ in range(30):
            ticker.turn()
        assert ticker.metrics.registry.get_sample_value(transactions) == committed
        state = owned.state("x")
        assert state is not None and state.paused
    finally:
        ticker.disconnect()
