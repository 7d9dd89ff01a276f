"""Follows the schedules, runs, run-events and dead-letters topics into the console's view.

The follower assigns itself every partition of the four topics (no group is joined and no offset
is committed to Kafka: the view stores its own, in the transaction that applies what they
cover), reads committed records only, and applies what each poll brought as one batch. Records
that are not valid events are counted and skipped, as the ticker and `kairos audit` skip them.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaPartition

from kairos.core.errors import KairosError
from kairos.core.instants import epoch_ms
from kairos.core.run_id import parse_run_id
from kairos.core.schedule import Schedule
from kairos.services.console.view import (
    ChangeRow,
    ConsoleView,
    DeadLetterRow,
    ScheduleRow,
    ViewBatch,
)
from kairos.streams.kafka.settings import CONSOLE_READERS_GROUP, KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codecs, DecodeError, make_codecs
from kairos.streams.wire.history_records import (
    InvalidRecordError,
    fired_run,
    history_event,
    record_value,
    run_event,
    topic_record,
)
from kairos.streams.wire.schedule_events import (
    RejectedEvent,
    ScheduleDeleted,
    ScheduleUpserted,
    read_schedule_message,
    restores_mark,
)
from kairos.streams.wire.signing import named_team

logger = logging.getLogger(__name__)

FOLLOWED = (TopicRole.SCHEDULES, TopicRole.RUNS, TopicRole.RUN_EVENTS, TopicRole.DEAD_LETTERS)
_BATCH = 5_000
PRUNE_EVERY_S = 600.0


class ViewFollower:
    """Keeps a `ConsoleView` up with the topics on a thread of its own until `stop`."""

    def __init__(self, settings: KafkaSettings, view: ConsoleView) -> None:
        self._settings = settings
        self._view = view
        self._codecs: Codecs = make_codecs()
        self._topics = {settings.layout.name(role): role for role in FOLLOWED}
        self._partitions: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="view-follower", daemon=True)
        self.rejected = 0
        self.applied_at: datetime | None = None
        """When the last batch was applied; what the pages show as the view's freshness."""
        self.error: str | None = None
        """Why the follower is not reading now, if it is not; shown on every page."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        consumer = Consumer(
            self._settings.consumer_config(
                **{
                    "group.id": self._settings.deployment_id(CONSOLE_READERS_GROUP),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
            )
        )
        try:
            while not self._stop.is_set():
                try:
                    self._follow(consumer)
                    return
                except (KafkaException, KairosError) as error:
                    self.error = f"cannot read the topics: {error}"
                except Exception as error:
                    # The failed batch rolled back with its offsets: reading again from the
                    # offsets stored applies it once, on a new connection.
                    self.error = f"cannot write the view: {error}"
                    self._view.reconnect()
                logger.warning("%s; trying again in 5 s", self.error)
                self._stop.wait(5)
        finally:
            consumer.close()

    def _follow(self, consumer: Consumer) -> None:
        # Two followers of one view would each count every fire in the activity.
        while not self._view.take_follower_lock():
            self.error = "another console follows the topics into this view; this one reads it"
            if self._stop.wait(5):
                return
        self._assign(consumer)
        pruned_at = 0.0
        while not self._stop.is_set():
            if time.monotonic() - pruned_at >= PRUNE_EVERY_S:
                self._view.prune(epoch_ms(datetime.now(UTC)))
                pruned_at = time.monotonic()
            messages = consumer.consume(num_messages=_BATCH, timeout=0.5)
            batch = ViewBatch()
            for message in messages:
                self._add(batch, message)
            if batch.offsets:
                self._view.apply(batch)
                self.applied_at = datetime.now(UTC)
            self.error = None

    def _assign(self, consumer: Consumer) -> None:
        stored = self._view.offsets()
        metadata = consumer.list_topics(timeout=10)
        assigned: list[KafkaPartition] = []
        for topic in self._topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise KairosError(
                    f"no topic {topic}; create the topics with `kairos topics create`"
                )
            self._partitions[topic] = len(found.partitions)
            assigned += [
                KafkaPartition(topic, p, stored.get((topic, p), OFFSET_BEGINNING))
                for p in found.partitions
            ]
        consumer.assign(assigned)

    def _add(self, batch: ViewBatch, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise KafkaException(error)
            logger.warning("reading: %s", error.str())
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        assert topic is not None and partition is not None and offset is not None
        batch.offsets[(topic, partition)] = offset + 1
        role = self._topics[topic]
        try:
            if role is TopicRole.SCHEDULES:
                self._add_schedule_record(batch, message)
                return
            record = topic_record(message, self._partitions[topic])
            if role is TopicRole.RUNS:
                batch.fired.append(fired_run(self._codecs, record))
            elif role is TopicRole.RUN_EVENTS:
                batch.events.append(run_event(self._codecs, record))
            else:
                letter = self._codecs.dead_letter.decode(record_value(record))
                batch.dead_letters.append(_dead_letter_row(topic, partition, offset, letter))
        except (DecodeError, InvalidRecordError) as problem:
            self._reject(topic, partition, offset, str(problem))

    def _add_schedule_record(self, batch: ViewBatch, message: Message) -> None:
        record = read_schedule_message(
            self._codecs.schedule_event, message, self._partitions[message.topic() or ""]
        )
        headers = message.headers()
        team, restores = named_team(headers), restores_mark(headers)
        if isinstance(record, RejectedEvent):
            self._reject(message.topic() or "", record.partition, record.offset, record.reason)
        elif isinstance(record, ScheduleUpserted):
            row = schedule_row(record)
            batch.upsert(row)
            batch.changes.append(ChangeRow(history_event(record), row.definition, team, restores))
        elif isinstance(record, ScheduleDeleted):
            batch.delete(record.schedule_id)
            batch.changes.append(ChangeRow(history_event(record), None, team, restores))

    def _reject(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.rejected += 1
        logger.info("skipped %s[%d]@%d: %s", topic, partition, offset, reason)


def trigger_of(schedule: Schedule) -> tuple[str, str]:
    """The schedule's trigger kind and its text, as the console lists them."""
    if schedule.cron is not None:
        return "cron", schedule.cron
    if schedule.every is not None:
        return "every", str(schedule.model_dump(mode="json")["every"])
    return "at", str(schedule.model_dump(mode="json")["at"])


def schedule_row(record: ScheduleUpserted) -> ScheduleRow:
    schedule = record.schedule
    kind, trigger = trigger_of(schedule)
    return ScheduleRow(
        schedule_id=record.schedule_id,
        owner=schedule.owner,
        paused=schedule.paused,
        trigger_kind=kind,
        trigger=trigger,
        timezone=schedule.timezone,
        partition=record.partition,
        offset=record.offset,
        revision=record.revision,
        changed_at=epoch_ms(record.changed_at),
        changed_by=record.changed_by,
        definition=schedule.model_dump_json(exclude_defaults=True),
        labels=dict(schedule.labels),
        upstream=tuple(upstream.schedule for upstream in schedule.upstream),
    )


def _dead_letter_row(
    topic: str, partition: int, offset: int, letter: dict[str, Any]
) -> DeadLetterRow:
    key = letter["key"]
    schedule_id: str | None = None
    if isinstance(key, bytes):
        text = key.decode(errors="replace")
        try:
            schedule_id = parse_run_id(text)[0]
        except ValueError:
            schedule_id = text
    return DeadLetterRow(
        topic=topic,
        partition=partition,
        offset=offset,
        source_topic=str(letter["source_topic"]),
        source_partition=letter["source_partition"],
        source_offset=letter["source_offset"],
        error_class=str(letter["error_class"]),
        reason=str(letter["reason"]),
        dead_lettered_at=epoch_ms(letter["dead_lettered_at"]),
        schedule_id=schedule_id,
    )
