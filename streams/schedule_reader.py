"""The current schedules, read from the compacted schedules topic.

A read consumes the topic (or, for one schedule, the one partition murmur2 puts it on) from
the beginning to the end of every partition, read_committed, and keeps the latest event of each
schedule id. Because every event but a delete carries the whole definition after the change
(docs/wire-format.md), the latest event alone is the schedule's state: its definition, or none
(a `deleted` event, or a tombstone) when the schedule is gone.

Records that are not valid schedule events (garbage bytes, unknown fingerprints, definitions the
schedule model rejects, keys that differ from the event's schedule id) are skipped and copied to
the dead-letter topic with the reason. Each is dead-lettered once per deployment by the readers,
whichever reads it first: the dead letters and a per-partition watermark (the committed offsets
of the consumer group `<prefix>schedule-readers`) are written in one Kafka transaction, and a
reader filters its rejects by the watermark only after `init_transactions` has fenced any
concurrent reader. The ticker dead-letters what it consumes on its own, so a bad record may
appear twice on the dead-letter topic: once per consumer (`dead_lettered_by` tells them apart).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from pydantic import ValidationError

from kairos.core.errors import KairosError
from kairos.core.schedule import Schedule
from kairos.streams.codec import Codecs, DecodeError, make_codecs
from kairos.streams.partitioner import partition_for
from kairos.streams.records import schedule_from_definition
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredSchedule:
    """A schedule as the topic has it, with the metadata of its latest event."""

    schedule: Schedule
    change: str
    """The latest event's change, for the audit: upserted, paused, resumed (unknown if newer)."""
    event_id: uuid.UUID
    revision: int
    changed_by: str
    changed_at: datetime
    reason: str | None
    partition: int
    offset: int

    @property
    def id(self) -> str:
        return self.schedule.id


@dataclass(frozen=True)
class RejectedRecord:
    """A record of the schedules topic that is not a valid schedule event; it was skipped."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    error_class: str


@dataclass(frozen=True)
class ScheduleSnapshot:
    """The schedules of the partitions read, as of the end of each partition at read time."""

    schedules: dict[str, StoredSchedule]
    rejected: tuple[RejectedRecord, ...]
    """Every invalid record met, including those an earlier read already dead-lettered."""


class ScheduleReadError(KairosError):
    """The schedules topic could not be read: the broker, or the topic, is unavailable."""

    def __init__(self, topic: str, reason: str) -> None:
        self.topic = topic
        self.reason = reason
        super().__init__(f"cannot read schedules topic {topic}: {reason}")


class InvalidScheduleEventError(KairosError):
    """A record decoded, but breaks the schedules topic's contract (its key or its definition).

    Its message is the dead letter's reason; `DecodeError`s are the records that did not decode.
    """


class ScheduleReader:
    """Reads the current schedules; every read is a fresh pass over the topic.

    `reader_name` identifies this reader in the dead letters it writes (`dead_lettered_by`).
    Raises `ScheduleReadError` when the topic cannot be read to its end within `timeout_s`, and
    `SchemaRegistryUnavailableError` when a registry codec cannot look a writer schema up.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        reader_name: str,
        codecs: Codecs | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.topic = settings.layout.name(TopicRole.SCHEDULES)
        self.dead_letters_topic = settings.layout.name(TopicRole.DEAD_LETTERS)
        self.reader_name = reader_name
        # Consumer group of the dead-letter watermark, and transactional id of the readers: one
        # per deployment, so that concurrent readers fence each other.
        self.group_id = f"{settings.topic_prefix}schedule-readers"
        self._settings = settings
        self._codecs = codecs or make_codecs()
        self._timeout_s = timeout_s

    def read_all(self) -> ScheduleSnapshot:
        """Every current schedule, by id."""
        return self._read(lambda partitions: list(range(partitions)))

    def read_one(self, schedule_id: str) -> StoredSchedule | None:
        """The current state of one schedule, reading only the partition murmur2 assigns it."""
        snapshot = self._read(lambda partitions: [partition_for(schedule_id, partitions)])
        return snapshot.schedules.get(schedule_id)

    def _read(self, choose: Callable[[int], list[int]]) -> ScheduleSnapshot:
        consumer = Consumer(
            self._settings.consumer_config(
                **{
                    "group.id": self.group_id,
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
            partitions = choose(self._partition_count(consumer))
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
            schedules: dict[str, StoredSchedule] = {}
            rejected: list[RejectedRecord] = []
            ends = self._consume_to_end(consumer, partitions, schedules, rejected)
            if rejected:
                self._dead_letter(consumer, rejected, ends)
            return ScheduleSnapshot(schedules, tuple(rejected))
        finally:
            consumer.close()

    def _partition_count(self, consumer: Consumer) -> int:
        try:
            metadata = consumer.list_topics(self.topic, timeout=self._timeout_s)
        except KafkaException as error:
            raise ScheduleReadError(self.topic, f"the broker did not answer: {error}") from error
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise ScheduleReadError(
                self.topic, "the topic does not exist; create it with `kairos topics create`"
            )
        return len(topic.partitions)

    def _consume_to_end(
        self,
        consumer: Consumer,
        partitions: list[int],
        schedules: dict[str, StoredSchedule],
        rejected: list[RejectedRecord],
    ) -> dict[int, int]:
        """Fold each partition's records into `schedules` up to its end; returns the end offsets."""
        ends: dict[int, int] = {}
        deadline = time.monotonic() + self._timeout_s
        while len(ends) < len(partitions):
            if time.monotonic() > deadline:
                missing = sorted(set(partitions) - set(ends))
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
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None  # set on records and EOFs
                # A record published after this read reached the partition's end is not part of
                # the snapshot: the end offset is also the dead-letter watermark.
                if partition in ends:
                    continue
                if error is None:
                    self._take(message, partition, offset, schedules, rejected)
                else:
                    ends[partition] = offset
        return ends

    def _take(
        self,
        message: Message,
        partition: int,
        offset: int,
        schedules: dict[str, StoredSchedule],
        rejected: list[RejectedRecord],
    ) -> None:
        try:
            schedule_id, stored = self._decode(message, partition, offset)
        except (DecodeError, InvalidScheduleEventError) as problem:
            # Every read meets the record again; it is logged once, when dead-lettered.
            logger.debug(
                "skipping %s partition=%s offset=%s: %s", self.topic, partition, offset, problem
            )
            rejected.append(
                RejectedRecord(
                    partition,
                    offset,
                    message.key(),
                    message.value(),
                    str(problem),
                    type(problem).__name__,
                )
            )
            return
        if stored is None:
            schedules.pop(schedule_id, None)
        else:
            schedules[schedule_id] = stored

    def _decode(
        self, message: Message, partition: int, offset: int
    ) -> tuple[str, StoredSchedule | None]:
        """The schedule id and its state after this record (None: deleted)."""
        raw_key = message.key()
        if raw_key is None:
            raise InvalidScheduleEventError("a schedule event must be keyed by its schedule id")
        try:
            schedule_id = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidScheduleEventError("the key is not UTF-8 text") from None
        value = message.value()
        if value is None:
            return schedule_id, None
        event = self._codecs.schedule_event.decode(value)
        if event["schedule_id"] != schedule_id:
            raise InvalidScheduleEventError(
                f"the key {schedule_id!r} differs from the event's schedule_id "
                f"{event['schedule_id']!r}; key each event by its schedule id"
            )
        definition = event["definition"]
        # As the ticker does: the state comes from the definition; only a delete has none, and
        # any other change without one breaks the contract, so it is rejected, not a deletion.
        if definition is None:
            if event["change"] != "deleted":
                raise InvalidScheduleEventError(
                    f"a {event['change']!r} event must carry the whole definition; "
                    "publish the schedule's full definition with every change but a delete"
                )
            return schedule_id, None
        schedule = _schedule_of(definition)
        if schedule.id != schedule_id:
            raise InvalidScheduleEventError(
                f"the definition's id {schedule.id!r} differs from the key {schedule_id!r}"
            )
        return schedule_id, StoredSchedule(
            schedule=schedule,
            change=event["change"],
            event_id=event["event_id"],
            revision=event["revision"],
            changed_by=event["changed_by"],
            changed_at=event["changed_at"],
            reason=event["reason"],
            partition=partition,
            offset=offset,
        )

    def _dead_letter(
        self, consumer: Consumer, rejected: list[RejectedRecord], ends: dict[int, int]
    ) -> None:
        """Dead-letter the rejects no reader has yet and advance the watermark, atomically.

        A failure is logged, not raised: the read itself succeeded, and since the watermark did
        not move, the next reader dead-letters the same records.
        """
        producer = Producer(
            self._settings.client_config(
                **{
                    "transactional.id": self.group_id,
                    "transaction.timeout.ms": int(self._timeout_s * 1000),
                }
            )
        )
        try:
            # Fences any concurrent reader and completes its transaction, so the watermark read
            # next is stable: a reject below it has been dead-lettered already.
            producer.init_transactions(self._timeout_s)
            asked = [TopicPartition(self.topic, p) for p in ends]
            watermark = {
                tp.partition: max(tp.offset, 0)
                for tp in consumer.committed(asked, timeout=self._timeout_s)
            }
            fresh = [r for r in rejected if r.offset >= watermark[r.partition]]
            if not fresh:
                return
            producer.begin_transaction()
            now = datetime.now(UTC)
            for record in fresh:
                logger.warning(
                    "dead-lettering %s partition=%s offset=%s: %s",
                    self.topic,
                    record.partition,
                    record.offset,
                    record.reason,
                )
                value = self._dead_letter_value(record, now)
                producer.produce(self.dead_letters_topic, key=record.key, value=value)
            # Never move a watermark back: a slower concurrent reader may have read less.
            positions = [
                TopicPartition(self.topic, p, max(end, watermark[p])) for p, end in ends.items()
            ]
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), self._timeout_s
            )
            producer.commit_transaction(self._timeout_s)
        except KafkaException as error:
            logger.warning(
                "could not dead-letter records of %s to %s (the next read retries): %s",
                self.topic,
                self.dead_letters_topic,
                error,
            )

    def _dead_letter_value(self, record: RejectedRecord, now: datetime) -> bytes:
        dead_letter: dict[str, Any] = {
            "source_topic": self.topic,
            "source_partition": record.partition,
            "source_offset": record.offset,
            "key": record.key,
            "value": record.value,
            "reason": record.reason,
            "error_class": record.error_class,
            "dead_lettered_at": now,
            "dead_lettered_by": f"schedule-reader:{self.reader_name}",
        }
        return self._codecs.dead_letter.encode(dead_letter)


def _schedule_of(definition: dict[str, Any]) -> Schedule:
    try:
        return schedule_from_definition(definition)
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or 'definition'}: {detail['msg']}"
            for detail in invalid.errors(include_url=False)
        )
        raise InvalidScheduleEventError(f"invalid definition: {problems}") from invalid
    except (ValueError, TypeError, KeyError) as invalid:
        # job params_json that is not a JSON object, for example.
        raise InvalidScheduleEventError(f"invalid definition: {invalid}") from invalid
