"""The rules of `kairos.streams.kafka.ports`, checked on the real broker and on the in-memory fakes.

The ticker's unit tests (tests/local/test_ticker_turns.py) trust the fakes to keep these rules;
this suite keeps the fakes honest: each rule runs against both, and both must agree.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kairos.streams.kafka.ports import GroupMember, PartitionReader, TransactionalProducer
from kairos.streams.kafka.ports import Producer as PlainProducer
from kairos.streams.kafka.settings import KafkaSettings
from tests.fakes.kafka import (
    FakeClock,
    FakeGroupMember,
    FakePartitionReader,
    FakePlainProducer,
    FakeProducer,
)
from tests.fakes.kafka_log import FakeKafka
from tests.fakes.ticker_world import START
from tests.helpers import unique_name

SESSION_TIMEOUT_MS = 3_000
"""No rule here waits for a session to expire: members leave by closing. A rebalance is noticed
at the next heartbeat, hence the short interval below."""
HEARTBEAT_INTERVAL_MS = 100
NO_OFFSET = -1001
"""What `committed` answers for a partition the group never committed (OFFSET_INVALID)."""


class Cluster(Protocol):
    def topic(self, partitions: int) -> str: ...
    def producer(self, transactional_id: str) -> TransactionalProducer: ...
    def plain_producer(self) -> PlainProducer: ...
    def reader(self) -> PartitionReader: ...
    def member(self, group_id: str) -> GroupMember: ...


@dataclass
class RealCluster:
    settings: KafkaSettings
    admin: AdminClient
    consumers: list[Consumer] = field(default_factory=list)

    def topic(self, partitions: int) -> str:
        name = unique_name("port-rules")
        futures = self.admin.create_topics([NewTopic(name, partitions, 1)])
        futures[name].result(30)
        # A member subscribing before the broker serves the topic's metadata is told it does
        # not exist (an error message from `consume`).
        deadline = time.monotonic() + 30
        while len(self.admin.list_topics(name, timeout=10).topics[name].partitions) < partitions:
            assert time.monotonic() < deadline, f"{name} never showed in the metadata"
            time.sleep(0.05)
        return name

    def producer(self, transactional_id: str) -> TransactionalProducer:
        return Producer(
            self.settings.producer_config(
                **{"transactional.id": transactional_id, "transaction.timeout.ms": 10_000}
            )
        )

    def plain_producer(self) -> PlainProducer:
        return Producer(self.settings.producer_config())

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

    def member(self, group_id: str) -> GroupMember:
        """Configured as the ticker's and the executor's members are (cooperative-sticky,
        read_committed, offsets committed by hand)."""
        consumer = Consumer(
            self.settings.group_member_config(
                group_id,
                unique_name("rules-member"),
                SESSION_TIMEOUT_MS,
                **{"heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS},
            )
        )
        self.consumers.append(consumer)
        return consumer

    def close(self) -> None:
        """Close what a failed test left open, so its group and threads do not linger."""
        for consumer in self.consumers:
            with contextlib.suppress(RuntimeError):  # closed already
                consumer.close()


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

    def plain_producer(self) -> PlainProducer:
        return FakePlainProducer(self.kafka)

    def reader(self) -> PartitionReader:
        return FakePartitionReader(self.kafka, self.clock)

    def member(self, group_id: str) -> GroupMember:
        return FakeGroupMember(self.kafka, self.clock, group_id)


@pytest.fixture(params=["broker", "fake"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if request.param == "fake":
        clock = FakeClock(START)
        yield InMemoryCluster(FakeKafka(clock), clock)
        return
    settings: KafkaSettings = request.getfixturevalue("kafka_settings")
    real = RealCluster(settings, AdminClient(settings.client_config()))
    try:
        yield real
    finally:
        real.close()


@dataclass
class Watched:
    """A group member, with what its rebalance callbacks (which change nothing themselves) were
    called with and inside which of its calls, and what it consumed."""

    member: GroupMember
    calls: list[tuple[str, list[int], str]] = field(default_factory=list)
    """(assign, revoke or lost; the partitions; "consume", "close" or "elsewhere"), non-empty
    ones only: librdkafka serves a member's first assignment even when it is empty."""
    seen: list[tuple[int, int, bytes | None]] = field(default_factory=list)
    """(partition, offset, value) of each record consumed."""
    _inside: str = "elsewhere"

    def subscribe(self, topic: str) -> None:
        def watch(kind: str) -> Callable[[Any, list[TopicPartition]], None]:
            def callback(_: Any, partitions: list[TopicPartition]) -> None:
                if partitions:
                    self.calls.append((kind, sorted(p.partition for p in partitions), self._inside))

            return callback

        self.member.subscribe(
            [topic], on_assign=watch("assign"), on_revoke=watch("revoke"), on_lost=watch("lost")
        )

    @property
    def assigned(self) -> set[int]:
        held: set[int] = set()
        for kind, partitions, _ in self.calls:
            held = held | set(partitions) if kind == "assign" else held - set(partitions)
        return held

    @property
    def values(self) -> list[bytes | None]:
        return [value for _, _, value in self.seen]

    def consume(self) -> None:
        messages = self._within("consume", lambda: self.member.consume(100, 0.1))
        for message in messages:
            if message.error() is not None:
                raise KafkaException(message.error())
            self.seen.append((message.partition() or 0, message.offset() or 0, message.value()))

    def close(self) -> None:
        self._within("close", self.member.close)

    def _within(self, call: str, run: Callable[[], Any]) -> Any:
        self._inside = call
        try:
            return run()
        finally:
            self._inside = "elsewhere"


def _consume_until(members: list[Watched], done: Callable[[], bool], what: str) -> None:
    """Every member consumes in turn (rebalances need each to) until `done`."""
    deadline = time.monotonic() + 30
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: {[(m.calls, m.seen) for m in members]}")
        for member in members:
            member.consume()


def _produce_plain(producer: PlainProducer, topic: str, *records: tuple[int, bytes]) -> None:
    for partition, value in records:
        producer.produce(topic, value, b"k", partition)
    assert producer.flush(10) == 0


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


def _read_in_the_end(reader: PartitionReader, topic: str, expected: list[bytes]) -> None:
    """`_read_to_end` reads `expected`, once the broker wrote the transaction markers: the
    broker answers `commit_transaction` and `abort_transaction` once it decided, and writes the
    markers that move the last stable offset after. Meanwhile it reads a part of it, never more."""
    deadline = time.monotonic() + 15
    while (values := _read_to_end(reader, topic)) != expected and time.monotonic() < deadline:
        assert values == expected[: len(values)], f"read {values}, never committed as such"
        time.sleep(0.05)
    assert values == expected


def test_read_committed_sees_a_transaction_only_once_committed(cluster: Cluster) -> None:
    topic = cluster.topic(1)
    producer = cluster.producer(unique_name("rules-tx"))
    producer.init_transactions(30)
    offsets: list[int | None] = []
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
        _read_in_the_end(reader, topic, [b"a", b"b"])
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
        _read_in_the_end(reader, topic, [b"kept"])
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
        _read_in_the_end(reader, topic, [b"successor"])
    finally:
        reader.close()


def test_committed_does_not_answer_while_a_transaction_carries_offsets(cluster: Cluster) -> None:
    """Rule 2: stable offsets (KIP-447), as a new owner's offset fetch relies on."""
    topic = cluster.topic(1)
    partition = [TopicPartition(topic, 0)]
    member = Watched(cluster.member(unique_name("rules-stable")))
    member.subscribe(topic)
    _consume_until([member], lambda: member.assigned == {0}, "never assigned the partition")
    assert member.member.committed(partition, timeout=10)[0].offset == NO_OFFSET
    producer = cluster.producer(unique_name("rules-stable-tx"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 7, "sent")], member.member.consumer_group_metadata(), 30
    )
    with pytest.raises(KafkaException) as raised:
        member.member.committed(partition, timeout=1)
    error: KafkaError = raised.value.args[0]
    assert error.code() in {KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT}, error
    producer.commit_transaction(30)
    [answer] = member.member.committed(partition, timeout=10)
    assert (answer.offset, answer.metadata) == (7, "sent")
    member.close()


def test_rebalance_callbacks_run_inside_consume_and_close(cluster: Cluster) -> None:
    """Rule 3: callbacks that assign and unassign nothing have it done for them."""
    topic = cluster.topic(2)
    group = unique_name("rules-rebalance")
    producer = cluster.plain_producer()
    _produce_plain(producer, topic, (0, b"early-0"), (1, b"early-1"))
    first = Watched(cluster.member(group))
    first.subscribe(topic)
    _consume_until([first], lambda: len(first.seen) == 2, "the first member read nothing")
    assert first.calls == [("assign", [0, 1], "consume")]
    assert set(first.values) == {b"early-0", b"early-1"}

    second = Watched(cluster.member(group))
    second.subscribe(topic)
    _consume_until([first, second], lambda: second.assigned != set(), "a partition never moved")
    [moved] = second.assigned
    [kept] = first.assigned
    assert first.calls[1:] == [("revoke", [moved], "consume")]
    assert second.calls == [("assign", [moved], "consume")]
    read_first = len(first.seen)
    _produce_plain(producer, topic, (kept, b"late-kept"), (moved, b"late-moved"))
    _consume_until(
        [first, second],
        lambda: b"late-kept" in first.values and b"late-moved" in second.values,
        "the late records were not both read",
    )
    assert first.seen[read_first:] == [(kept, 1, b"late-kept")], "unassigned from the moved one"
    assert {partition for partition, _, _ in second.seen} == {moved}
    first.close()
    assert first.calls[-1] == ("revoke", [kept], "close")
    second.close()


def test_offsets_sent_for_an_old_generation_require_an_abort(cluster: Cluster) -> None:
    """Rule 4, the group's half: a member the group moved on from cannot commit through a
    transaction (a zombie ticker whose partitions moved)."""
    topic = cluster.topic(2)
    group = unique_name("rules-generation")
    first = Watched(cluster.member(group))
    first.subscribe(topic)
    _consume_until([first], lambda: first.assigned == {0, 1}, "never assigned the partitions")
    stale = first.member.consumer_group_metadata()
    second = Watched(cluster.member(group))
    second.subscribe(topic)
    _consume_until([first, second], lambda: second.assigned != set(), "a partition never moved")
    producer = cluster.producer(unique_name("rules-generation-tx"))
    producer.init_transactions(30)
    producer.begin_transaction()
    with pytest.raises(KafkaException) as raised:
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], stale, 30)
    error: KafkaError = raised.value.args[0]
    assert error.txn_requires_abort() and not error.fatal(), error
    producer.abort_transaction(30)
    assert first.member.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == NO_OFFSET
    producer.begin_transaction()  # an abort was all it took: the producer goes on
    producer.commit_transaction(30)
    first.close()
    second.close()


def test_delivery_callbacks_run_in_flush_or_poll(cluster: Cluster) -> None:
    """Rule 5: the callback, with the record's offset, runs in `flush` or `poll`, never in
    `produce`; `flush` counts what is still undelivered."""
    topic = cluster.topic(1)
    producer = cluster.plain_producer()
    delivered: list[tuple[KafkaError | None, int | None]] = []

    def report(error: KafkaError | None, message: Message) -> None:
        delivered.append((error, message.offset()))

    for value in (b"a", b"b"):
        producer.produce(topic, value, b"k", 0, report)
    assert delivered == [], "no callback inside produce"
    assert producer.flush(0) == 2 - len(delivered)
    assert producer.flush(10) == 0
    assert delivered == [(None, 0), (None, 1)]
    producer.produce(topic, b"c", b"k", 0, report)
    assert len(delivered) == 2
    deadline = time.monotonic() + 10
    while len(delivered) < 3 and time.monotonic() < deadline:
        producer.poll(0.1)
    assert delivered[2:] == [(None, 2)], "delivered during poll"
    assert producer.flush(0) == 0


def test_a_plain_record_is_visible_once_written(cluster: Cluster) -> None:
    """Rule 6: no transaction holds a plain producer's record back."""
    topic = cluster.topic(1)
    producer = cluster.plain_producer()
    delivered: list[tuple[KafkaError | None, int | None]] = []
    producer.produce(topic, b"plain", b"k", 0, lambda e, m: delivered.append((e, m.offset())))
    assert producer.flush(10) == 0
    assert delivered == [(None, 0)]
    reader = cluster.reader()
    try:
        assert _read_to_end(reader, topic) == [b"plain"]
        assert reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 1)
    finally:
        reader.close()


def test_a_committed_offset_is_where_the_next_member_starts(cluster: Cluster) -> None:
    """Rule 7: a commit outside any transaction is stored once `commit` returns."""
    topic = cluster.topic(1)
    group = unique_name("rules-commit")
    _produce_plain(cluster.plain_producer(), topic, (0, b"a"), (0, b"b"), (0, b"c"))
    first = Watched(cluster.member(group))
    first.subscribe(topic)
    _consume_until([first], lambda: len(first.seen) == 3, "the first member read nothing")
    first.member.commit(offsets=[TopicPartition(topic, 0, 2, "two")], asynchronous=False)
    [answer] = first.member.committed([TopicPartition(topic, 0)], timeout=10)
    assert (answer.offset, answer.metadata) == (2, "two")
    first.close()
    second = Watched(cluster.member(group))
    second.subscribe(topic)
    _consume_until([second], lambda: second.seen != [], "the next member read nothing")
    assert second.seen == [(0, 2, b"c")]
    second.close()


def test_a_closed_member_commits_nothing(cluster: Cluster) -> None:
    """Rule 7: a closed member's commit is refused by the client itself, and the group keeps its
    offset."""
    topic = cluster.topic(1)
    group = unique_name("rules-closed")
    member = Watched(cluster.member(group))
    member.subscribe(topic)
    _consume_until([member], lambda: member.assigned == {0}, "never assigned the partition")
    member.member.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    member.close()
    try:
        with pytest.raises(RuntimeError, match="closed"):
            member.member.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    finally:  # whatever it raised, it stored nothing
        outsider = cluster.member(group)  # never subscribes: it only asks
        assert outsider.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 1
        outsider.close()
