"""In-memory clients over `FakeKafka`, one per port of `kairos.streams.kafka.ports`.

Waiting is the clock's business: a `consume` that finds nothing advances the shared `FakeClock`
by its timeout instead of sleeping, so a test of many turns runs in milliseconds of real time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, Literal

from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from kairos.core.calendar_versions import CalendarBook
from kairos.core.schedule import Schedule
from kairos.services.ticker.upstream_book import PartitionRead
from kairos.streams.kafka.ports import DeliveryCallback, Headers, RebalanceCallback
from kairos.streams.readers.calendar_ownership import SignedCalendars
from kairos.streams.readers.run_outcomes import RunOutcome, Wanted
from kairos.streams.readers.team_events import TeamChange
from tests.fakes.kafka_log import FakeKafka, GroupMetadata, Record, Transaction, group_metadata


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _message(topic: str, partition: int, offset: int, record: Record) -> Message:
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=record.key,
        value=record.value,
        headers=record.headers,
        timestamp=(TIMESTAMP_LOG_APPEND_TIME, record.timestamp_ms),
    )


def _metadata(kafka: FakeKafka, topic: str | None) -> Any:
    names = list(kafka.logs) if topic is None else [topic]
    topics = {}
    for name in names:
        if name in kafka.logs:
            partitions = {p: SimpleNamespace(id=p) for p in range(len(kafka.logs[name]))}
            topics[name] = SimpleNamespace(topic=name, partitions=partitions, error=None)
        else:
            error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
            topics[name] = SimpleNamespace(topic=name, partitions={}, error=error)
    return SimpleNamespace(topics=topics)


class _Reading:
    """Positions, pause and consume over assigned partitions (both consumer kinds)."""

    def __init__(self, kafka: FakeKafka, clock: FakeClock) -> None:
        self.kafka = kafka
        self.clock = clock
        self.positions: dict[tuple[str, int], int] = {}
        self.paused: set[tuple[str, int]] = set()
        self._eof_at: dict[tuple[str, int], int] = {}
        self.report_eof = False

    def fetch(self, num_messages: int, timeout: float) -> list[Message]:
        messages: list[Message] = []
        for (topic, partition), position in list(self.positions.items()):
            if (topic, partition) in self.paused or len(messages) >= num_messages:
                continue
            taken, after = self.kafka.read_committed(
                topic, partition, position, num_messages - len(messages)
            )
            messages += [_message(topic, partition, o, r) for o, r in taken]
            self.positions[(topic, partition)] = after
            at_end = after == self.kafka.stable_end(topic, partition)
            if self.report_eof and at_end and self._eof_at.get((topic, partition)) != after:
                self._eof_at[(topic, partition)] = after
                eof = KafkaError(KafkaError._PARTITION_EOF)
                messages.append(Message(topic=topic, partition=partition, offset=after, error=eof))
        if not messages and timeout > 0:
            self.clock.advance(timeout)
        return messages

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions[(tp.topic, tp.partition)])
            for tp in partitions
        ]

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        self.kafka.enter("get_watermark_offsets")
        return 0, self.kafka.stable_end(partition.topic, partition.partition)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return _metadata(self.kafka, topic)


class FakeGroupMember(_Reading):
    """A `GroupMember`: cooperative assignments delivered inside `consume`."""

    def __init__(self, kafka: FakeKafka, clock: FakeClock, group_id: str) -> None:
        super().__init__(kafka, clock)
        self.group_id = group_id
        self.membership: Any = None
        self._callbacks: dict[str, RebalanceCallback | None] = {}
        self._assignment_changed = False
        self.closed = False

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self.membership = self.kafka.join(self.group_id, topics)

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        self.kafka.enter("consume")
        self._rebalance()
        return self.fetch(num_messages, timeout)

    def _rebalance(self) -> None:
        member = self.membership
        if member is None or member.member_id not in self.kafka.groups[self.group_id].members:
            return
        member.generation = self.kafka.groups[self.group_id].generation
        revoked, member.to_revoke = member.to_revoke, []
        assigned, member.to_assign = member.to_assign, []
        if revoked:
            self._call("revoke", revoked)
            member.assigned -= set(revoked)
            self.kafka.handed_over(self.group_id)
        if assigned:
            member.assigned |= set(assigned)
            self._call("assign", assigned)

    def _call(self, kind: str, partitions: list[tuple[str, int]]) -> None:
        given = [TopicPartition(t, p) for t, p in partitions]
        self._assignment_changed = False
        callback = self._callbacks.get(kind)
        if callback is not None:
            callback(self, given)
        # As confluent-kafka does: a callback that left the assignment alone (the executor's)
        # has it changed for it once it returns.
        if not self._assignment_changed:
            (self.incremental_assign if kind == "assign" else self.incremental_unassign)(given)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._assignment_changed = True
        for tp in partitions:
            key = (tp.topic, tp.partition)
            committed = self.kafka.groups[self.group_id].committed.get(key)
            self.positions[key] = (
                tp.offset if tp.offset >= 0 else (committed.offset if committed is not None else 0)
            )

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._assignment_changed = True
        for tp in partitions:
            self.positions.pop((tp.topic, tp.partition), None)
            self.paused.discard((tp.topic, tp.partition))

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in partitions}

    def seek(self, partition: TopicPartition) -> None:
        self.positions[(partition.topic, partition.partition)] = partition.offset

    def committed(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]:
        self.kafka.enter("committed")
        answers = []
        for tp in partitions:
            if self.kafka.offsets_pending(self.group_id, tp.topic, tp.partition):
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
            found = self.kafka.groups[self.group_id].committed.get((tp.topic, tp.partition))
            answers.append(found or TopicPartition(tp.topic, tp.partition, -1001))
        return answers

    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: Literal[False]
    ) -> list[TopicPartition]:
        self.kafka.enter("commit")
        if self.closed:
            raise RuntimeError("Consumer closed")
        return self.kafka.commit_offsets(self.group_id, self.membership.member_id, offsets)

    def consumer_group_metadata(self) -> Any:
        return group_metadata(self.group_id, self.membership)

    def close(self) -> None:
        """Leave the group: the revocation callback runs for what it held, as librdkafka's does."""
        if self.closed:
            return
        self.closed = True
        member = self.membership
        if member is not None and member.member_id in self.kafka.groups[self.group_id].members:
            if member.assigned:
                self._call("revoke", sorted(member.assigned))
            self.kafka.leave(self.group_id, member.member_id)


class FakePartitionReader(_Reading):
    """A `PartitionReader` (enable.partition.eof)."""

    def __init__(self, kafka: FakeKafka, clock: FakeClock) -> None:
        super().__init__(kafka, clock)
        self.report_eof = True

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions = {(tp.topic, tp.partition): tp.offset for tp in partitions}

    def unassign(self) -> None:
        self.positions = {}

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        self.kafka.enter("read")
        # A restore polls with short timeouts in real time: no need to move the clock.
        return self.fetch(num_messages, 0)

    def close(self) -> None:
        self.positions = {}


@dataclass
class _Delivery:
    callback: DeliveryCallback | None
    message: Message


def _write(
    kafka: FakeKafka,
    topic: str,
    value: str | bytes | None,
    key: str | bytes | None,
    partition: int,
    headers: Headers | None,
    transaction: Transaction | None,
) -> Message:
    """Append the record, stamped with the broker's clock; the message its delivery reports."""
    as_bytes = [v.encode() if isinstance(v, str) else v for v in (key, value)]
    timestamp_ms = int(kafka.clock().timestamp() * 1000)
    record = Record(as_bytes[0], as_bytes[1], headers, timestamp_ms, transaction)
    chosen = kafka.partition_of(topic, key, partition)
    offset = kafka.append(topic, chosen, record)
    return _message(topic, chosen, offset, record)


def _deliver(deliveries: list[_Delivery]) -> int:
    """Run the delivery callbacks of what was produced, in order; nothing stays undelivered."""
    delivered = list(deliveries)
    deliveries.clear()
    for delivery in delivered:
        if delivery.callback is not None:
            delivery.callback(delivery.message.error(), delivery.message)
    return 0


@dataclass
class FakePlainProducer:
    """A `Producer` without a transactional id: records visible once written (rule 6)."""

    kafka: FakeKafka
    deliveries: list[_Delivery] = field(default_factory=list)

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Headers | None = None,
    ) -> None:
        self.kafka.enter("produce")
        refused = self.kafka.refused_delivery(topic)
        if refused is not None:
            self.deliveries.append(
                _Delivery(callback or on_delivery, Message(topic=topic, error=refused))
            )
            return
        written = _write(self.kafka, topic, value, key, partition, headers, None)
        self.deliveries.append(_Delivery(callback or on_delivery, written))

    def poll(self, timeout: float = -1) -> int:
        self.kafka.enter("poll")
        _deliver(self.deliveries)
        return 0

    def flush(self, timeout: float = -1) -> int:
        self.kafka.enter("flush")
        return _deliver(self.deliveries)


@dataclass
class FakeProducer:
    """A `TransactionalProducer`: fenced once another producer initialised the same id."""

    kafka: FakeKafka
    transactional_id: str
    epoch: int = -1
    transaction: Transaction | None = None
    deliveries: list[_Delivery] = field(default_factory=list)

    def _check(self, operation: str) -> None:
        if self.epoch >= 0 and self.kafka.epochs[self.transactional_id] != self.epoch:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
        self.kafka.enter(operation)

    def init_transactions(self, timeout: float = -1) -> None:
        self.kafka.enter("init_transactions")
        self.epoch = self.kafka.init_producer(self.transactional_id)

    def begin_transaction(self) -> None:
        self._check("begin_transaction")
        self.transaction = self.kafka.begin(self.transactional_id)

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Headers | None = None,
    ) -> None:
        self._check("produce")
        assert self.transaction is not None, "produce outside a transaction"
        written = _write(self.kafka, topic, value, key, partition, headers, self.transaction)
        self.deliveries.append(_Delivery(callback or on_delivery, written))

    def poll(self, timeout: float = -1) -> int:
        return self.flush(timeout)

    def flush(self, timeout: float = -1) -> int:
        self.kafka.enter("flush")
        return _deliver(self.deliveries)

    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float = -1
    ) -> None:
        self._check("send_offsets_to_transaction")
        assert self.transaction is not None and isinstance(group_metadata, GroupMetadata)
        group = self.kafka.groups[group_metadata.group_id]
        member = group.members.get(group_metadata.member_id)
        if member is None or group_metadata.generation != group.generation:
            raise KafkaException(
                KafkaError(KafkaError.ILLEGAL_GENERATION, "stale", txn_requires_abort=True)
            )
        self.transaction.group = group_metadata.group_id
        for tp in positions:
            self.transaction.offsets[(tp.topic, tp.partition)] = tp

    def commit_transaction(self, timeout: float = -1) -> None:
        self._check("commit_transaction")
        assert self.transaction is not None
        self.flush()
        self.kafka.end(self.transaction, "committed")
        self.transaction = None

    def abort_transaction(self, timeout: float = -1) -> None:
        self._check("abort_transaction")
        if self.transaction is not None:
            self.deliveries.clear()
            self.kafka.end(self.transaction, "aborted")
            self.transaction = None

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return _metadata(self.kafka, topic)


class FakeEndOffsets:
    def __init__(self, kafka: FakeKafka) -> None:
        self.kafka = kafka

    def end_offset(self, partition: TopicPartition, timeout_s: float) -> int:
        return len(self.kafka.logs[partition.topic][partition.partition])


class FakeCalendars:
    def __init__(self, topic: str) -> None:
        self.topic = topic

    def refresh(
        self, timeout_s: float | None = None, signed: SignedCalendars | None = None
    ) -> CalendarBook:
        return CalendarBook()

    def close(self) -> None:
        """Nothing held."""


class FakeTeams:
    """A teams topic where no team is registered."""

    def __init__(self, topic: str) -> None:
        self.topic = topic

    def refresh(self, timeout_s: float | None = None) -> dict[str, TeamChange]:
        return {}

    def close(self) -> None:
        """Nothing held."""


class FakeRunOutcomes:
    """The run-events topic as a list a test appends `RunOutcome`s to; each take returns the
    wanted ones appended since the last."""

    def __init__(self) -> None:
        self.published: list[RunOutcome] = []
        self._taken = 0

    def take(self, wanted: Wanted, max_records: int = 10_000) -> list[RunOutcome]:
        new = self.published[self._taken : self._taken + max_records]
        self._taken += len(new)
        return [outcome for outcome in new if wanted(outcome.schedule_id)]

    def close(self) -> None:
        """Nothing held."""


class FakeTickerClients:
    """`TickerClients` over one `FakeKafka`; remembers what it made, for tests to look at."""

    def __init__(self, kafka: FakeKafka, clock: FakeClock) -> None:
        self.kafka = kafka
        self.clock = clock
        self.members: list[FakeGroupMember] = []
        self.producers: list[FakeProducer] = []
        self.outcomes = FakeRunOutcomes()
        self.upstream_definitions: dict[str, Schedule] = {}

    def check_access(self) -> None:
        """The fake cluster grants everything."""

    def calendars(self) -> FakeCalendars:
        return FakeCalendars("calendars")

    def teams(self) -> FakeTeams:
        return FakeTeams("teams")

    def run_outcomes(self) -> FakeRunOutcomes:
        return self.outcomes

    def upstream_partitions(self, signed: bool) -> Callable[[str], PartitionRead]:
        """The schedules other tickers hold, as a test sets them (`upstream_definitions`), all
        on partition 0."""
        return lambda _schedule_id: PartitionRead(0, dict(self.upstream_definitions), 1)

    def group_member(self, config: dict[str, Any]) -> FakeGroupMember:
        member = FakeGroupMember(self.kafka, self.clock, config["group.id"])
        self.members.append(member)
        return member

    def transactional_producer(self, config: dict[str, Any]) -> FakeProducer:
        producer = FakeProducer(self.kafka, config["transactional.id"])
        self.producers.append(producer)
        return producer

    def partition_reader(self, config: dict[str, Any]) -> FakePartitionReader:
        return FakePartitionReader(self.kafka, self.clock)

    def end_offsets(self) -> FakeEndOffsets:
        return FakeEndOffsets(self.kafka)
