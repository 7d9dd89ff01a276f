"""The current schedules, read from the compacted schedules topic.

A read consumes the topic (or, for one schedule, the one partition murmur2 puts it on) from
the beginning to the end of every partition, read_committed, and keeps the latest change of each
schedule id. Because every event but a delete carries the whole definition after the change
(docs/wire-format.md), the latest change alone is the schedule's state: its definition, or none
(a delete, or a tombstone) when the schedule is gone.

Records are read through `kairos.streams.wire.schedule_events`, exactly as the ticker reads them.
Records that break the contract (garbage bytes, unknown fingerprints, definitions the schedule
model rejects, keys that differ from the event's schedule id, records on the wrong partition)
are skipped and reported in the snapshot's `rejected`. A read never writes: the ticker, which
consumes every record, is the one that dead-letters them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from kairos.streams.kafka.ownership import Judged, Ownership
from kairos.streams.kafka.partition_status import PartitionStatusError, read_judged
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import SCHEDULE_READERS_GROUP, TICKER_GROUP, KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.held_schedules import FoldedRecord, HeldSchedules, StoredSchedule
from kairos.streams.readers.history import HistoryReader
from kairos.streams.readers.table_feed import TopicReadError
from kairos.streams.wire.codec import Codecs, make_codecs
from kairos.streams.wire.schedule_events import (
    RejectedEvent,
    ScheduleDeleted,
    ScheduleUpserted,
    read_schedule_message,
    restores_mark,
)
from kairos.streams.wire.signing import named_team

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScheduleSnapshot:
    """The schedules of the partitions read, as of the end of each partition at read time."""

    schedules: dict[str, StoredSchedule]
    """As their tickers hold them (`kairos.streams.readers.held_schedules`)."""
    rejected: tuple[RejectedEvent, ...]
    """Every record met that breaks the contract; the ticker dead-letters them."""
    partitions: int
    """The topic's partition count, as the broker gave it for this read."""
    awaiting: dict[str, list[int]] = field(default_factory=dict)
    """Per schedule id, the offsets of changes its signed ticker has not judged yet: not shown."""
    judged: Mapping[int, Judged] = field(default_factory=dict)
    """What the tickers committed per partition, as this read found it."""

    def signed(self, partition: int) -> bool:
        """Whether the partition was last judged by a ticker in signed mode."""
        found = self.judged.get(partition)
        return found is not None and found.mode is Ownership.SIGNED


_UNKNOWN_TOPIC = KafkaError.UNKNOWN_TOPIC_OR_PART


class ScheduleReadError(TopicReadError):
    """The schedules topic could not be read: the broker, or the topic, is unavailable."""

    retryable = True
    kind = "schedules"


class ScheduleReader:
    """Reads the current schedules; every read is a fresh pass over the topic.

    Raises `ScheduleReadError` when the topic cannot be read to its end within `timeout_s`.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        codecs: Codecs | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.topic = settings.layout.name(TopicRole.SCHEDULES)
        self._settings = settings
        self._codecs = codecs or make_codecs()
        self._timeout_s = timeout_s

    def read_all(self) -> ScheduleSnapshot:
        """Every current schedule, by id."""
        return self._read(lambda partitions: list(range(partitions)))

    def read_one(self, schedule_id: str) -> StoredSchedule | None:
        """The current state of one schedule, reading only the partition murmur2 assigns it."""
        return self.read_partition_of(schedule_id).schedules.get(schedule_id)

    def read_partition_of(self, schedule_id: str) -> ScheduleSnapshot:
        """Every current schedule of the partition murmur2 puts `schedule_id` on."""
        return self._read(lambda partitions: [partition_for(schedule_id, partitions)])

    def _read(self, choose: Callable[[int], list[int]]) -> ScheduleSnapshot:
        consumer = Consumer(
            self._settings.consumer_config(
                **{
                    # Assigned, never subscribed and never committed: the client requires a
                    # group id, but no group is ever joined.
                    "group.id": self._settings.deployment_id(SCHEDULE_READERS_GROUP),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    # A one-shot read to the end: by default the broker holds the fetch of a
                    # caught-up partition for 500 ms before answering, which an EOF waits for.
                    "fetch.wait.max.ms": 10,
                }
            )
        )
        try:
            count = self._partition_count(consumer)
            partitions = choose(count)
            # Before the records: every change before a committed offset read here was judged,
            # and the dead letter of each one refused is visible by the time it is asked for.
            judged = self._judged()
            held = HeldSchedules(judged)
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
            records: dict[int, list[FoldedRecord]] = {p: [] for p in partitions}
            rejected: list[RejectedEvent] = []
            self._consume_to_end(consumer, partitions, count, records, rejected)
            if rejected:
                # Every read meets them again; the ticker dead-letters and logs them once.
                logger.debug("skipped %d records of %s", len(rejected), self.topic)
            refused = _Refusals(self._settings, self._codecs, self._timeout_s)
            for partition in partitions:
                held.fold(records[partition], refused.offsets)
            return ScheduleSnapshot(held.schedules, tuple(rejected), count, held.awaiting, judged)
        finally:
            consumer.close()

    def _judged(self) -> dict[int, Judged]:
        group = self._settings.deployment_id(TICKER_GROUP)
        try:
            return read_judged(self._settings, group, self._timeout_s)
        except PartitionStatusError as error:
            # Shown as the topic has them, each marked pending: what an open ticker takes.
            logger.warning(
                "cannot tell which changes the tickers took: %s (a reader needs DESCRIBE on "
                "the tickers' group %s; `kairos acls` lists it)",
                error,
                group,
            )
            return {}

    def _partition_count(self, consumer: Consumer) -> int:
        try:
            metadata = consumer.list_topics(self.topic, timeout=self._timeout_s)
        except KafkaException as error:
            raise ScheduleReadError(self.topic, f"the broker did not answer: {error}") from error
        topic = metadata.topics.get(self.topic)
        if topic is not None and topic.error is not None and topic.error.code() != _UNKNOWN_TOPIC:
            # Refused (not authorized), not absent: the metadata hides a topic it may not show.
            raise ScheduleReadError(self.topic, topic.error.str(), topic.error)
        if topic is None or topic.error is not None or not topic.partitions:
            raise ScheduleReadError(
                self.topic, "the topic does not exist; create it with `kairos topics create`"
            )
        return len(topic.partitions)

    def _consume_to_end(
        self,
        consumer: Consumer,
        partitions: list[int],
        count: int,
        records: dict[int, list[FoldedRecord]],
        rejected: list[RejectedEvent],
    ) -> None:
        """Collect each partition's definition records up to its end as of the read."""
        ends: set[int] = set()
        deadline = time.monotonic() + self._timeout_s
        while len(ends) < len(partitions):
            if time.monotonic() > deadline:
                missing = sorted(set(partitions) - ends)
                raise ScheduleReadError(
                    self.topic, f"partitions {missing} not read to their end in {self._timeout_s}s"
                )
            # consume() waits its whole timeout unless the batch fills: keep the timeout short.
            for message in consumer.consume(num_messages=1000, timeout=0.05):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    if error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise ScheduleReadError(self.topic, error.str())
                    # librdkafka retries transient errors itself; the deadline bounds the wait.
                    logger.warning("reading %s: %s", self.topic, error.str())
                    continue
                partition = message.partition()
                assert partition is not None  # set on records and EOFs
                # A record published after this read reached the partition's end is not part of
                # the snapshot.
                if partition in ends:
                    continue
                if error is not None:
                    ends.add(partition)
                    continue
                change = read_schedule_message(self._codecs.schedule_event, message, count)
                if isinstance(change, RejectedEvent):
                    rejected.append(change)
                elif isinstance(change, ScheduleUpserted | ScheduleDeleted):
                    headers = message.headers()
                    records[partition].append(
                        FoldedRecord(change, restores_mark(headers), named_team(headers))
                    )


class _Refusals:
    """The changes the tickers refused, read from the dead letters once, when first asked."""

    def __init__(self, settings: KafkaSettings, codecs: Codecs, timeout_s: float) -> None:
        self._reader = HistoryReader(settings, codecs, idle_timeout_s=timeout_s)
        self._offsets: frozenset[tuple[int, int]] | None = None

    def offsets(self) -> frozenset[tuple[int, int]]:
        if self._offsets is None:
            self._offsets = frozenset(
                (c.source_partition, c.source_offset) for c in self._reader.refused_changes()
            )
        return self._offsets
