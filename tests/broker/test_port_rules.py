"""The rules of `kairos.streams.kafka.ports`, checked on the real broker and on the in-memory fakes.

The ticker's unit tests (tests/local/test_ticker_turns.py) trust the fakes to keep these rules;
this suite keeps the fakes honest: each rule runs against both, and both must agree.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kairos.streams.kafka.ports import PartitionReader, TransactionalProducer
from kairos.streams.kafka.settings import KafkaSettings
from tests.fakes.kafka import FakeClock, FakePartitionReader, FakeProducer
from tests.fakes.kafka_log import FakeKafka
from tests.fakes.ticker_world import START
from tests.helpers import unique_name


class Cluster(Protocol):
    def topic(self, partitions: int) -> str: ...
    def producer(self, transactional_id: str) -> TransactionalProducer: ...
    def reader(self) -> PartitionReader: ...


@dataclass
class RealCluster:
    settings: KafkaSettings
    admin: AdminClient

    def topic(self, partitions: int) -> str:
        name = unique_name("port-rules")
        futures = self.admin.create_topics([NewTopic(name, partitions, 1)])
        futures[name].result(30)
        return name

    def producer(self, transactional_id: str) -> TransactionalProducer:
        return Producer(
            self.settings.producer_config(
                **{"transactional.id": transactional_id, "transaction.timeout.ms": 10_000}
            )
        )

    def reader(self) -> PartitionReader:
        return Consumer(
            self.settings.consumer_config(
                **{
                    "group.id": unique_name("port-rules-reader"),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 10,
                }
            )
        )


@dataclass
class InMemoryCluster:
    kafka: FakeKafka
    clock: FakeClock

    def topic(self, partitions: int) -> str:
        name = unique_name("port-rules")
        self.kafka.create_topic(name, partitions)
        return name

    def producer(self, transactional_id: str) -> TransactionalProducer:
        return FakeProducer(self.kafka, transactional_id)

    def reader(self) -> PartitionReader:
        return FakePartitionReader(self.kafka, self.clock)


@pytest.fixture(params=["broker", "fake"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if request.param == "fake":
        clock = FakeClock(START)
        yield InMemoryCluster(FakeKafka(clock), clock)
        return
    settings: KafkaSettings = request.getfixturevalue("kafka_settings")
    yield RealCluster(settings, AdminClient(settings.client_config()))


def _read_to_end(reader: PartitionReader, topic: str, start: int = 0) -> list[bytes | None]:
    """Every value a read_committed reader sees from `start` up to the end it reports."""
    reader.assign([TopicPartition(topic, 0, start)])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            for message in reader.consume(num_messages=100, timeout=0.2):
                error = message.error()
                if error is None:
                    values.append(message.value())
                elif error.code() == KafkaError._PARTITION_EOF:
                    return values
                else:
                    raise KafkaException(error)
        raise AssertionError("the end of the partition was never reported")
    finally:
        reader.unassign()


def test_read_committed_sees_a_transaction_only_once_committed(cluster: Cluster) -> None:
    topic = cluster.topic(1)
    producer = cluster.producer(unique_name("rules-tx"))
    producer.init_transactions(30)
    offsets: list[int] = []
    producer.begin_transaction()
    for value in (b"a", b"b"):
        producer.produce(
            topic, value, b"k", 0, lambda _e, m: offsets.append(m.offset()), None, 0, None
        )
    assert producer.flush(10) == 0
    assert offsets == [0, 1], "delivery on flush, with the records' offsets"
    reader = cluster.reader()
    try:
        assert _read_to_end(reader, topic) == []
        low, stable = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, stable) == (0, 0), "the open transaction holds the last stable offset"
        producer.commit_transaction(30)
        assert _read_to_end(reader, topic) == [b"a", b"b"]
    finally:
        reader.close()


def test_records_of_an_aborted_transaction_are_never_seen(cluster: Cluster) -> None:
    topic = cluster.topic(1)
    producer = cluster.producer(unique_name("rules-abort"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"lost", b"k", 0)
    producer.flush(10)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"kept", b"k", 0)
    producer.commit_transaction(30)
    reader = cluster.reader()
    try:
        assert _read_to_end(reader, topic) == [b"kept"]
    finally:
        reader.close()


def test_a_producer_of_the_same_transactional_id_fences_the_old_one(cluster: Cluster) -> None:
    topic = cluster.topic(1)
    transactional_id = unique_name("rules-fence")
    zombie = cluster.producer(transactional_id)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", b"k", 0)
    zombie.flush(10)
    successor = cluster.producer(transactional_id)
    successor.init_transactions(30)
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, b"more", b"k", 0)
        zombie.flush(10)
        zombie.commit_transaction(30)
    error: KafkaError = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    successor.begin_transaction()
    successor.produce(topic, b"successor", b"k", 0)
    successor.commit_transaction(30)
    reader = cluster.reader()
    try:
        assert _read_to_end(reader, topic) == [b"successor"]
    finally:
        reader.close()
