"""The calendars, read from the compacted single-partition calendars topic.

Every read is a fresh pass from the beginning of the topic to its end as of the read,
read_committed, through `kairos.streams.calendar_events` (as every reader of the topic reads
it). `read_calendars` keeps the latest change of each calendar id: the calendars in force, as a
`CalendarBook`. `read_calendar_history` keeps every change in topic order, deletes included,
for the audit to replay the version in force at each decision (`CalendarBook.replay`); what
compaction has removed (superseded versions older than the topic's `min.compaction.lag.ms`,
90 days by default) is gone from both. Records that break the contract are skipped and listed
in the book's `skipped`.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from kairos.core.business_calendar import CalendarBook, CalendarChange, SkippedCalendarRecord
from kairos.core.errors import KairosError
from kairos.streams.calendar_events import read_calendar_message
from kairos.streams.codec import Codecs, make_codecs
from kairos.streams.settings import CALENDAR_READERS_GROUP, KafkaSettings
from kairos.streams.topic_check import calendars_partition_problem
from kairos.streams.topics import CALENDARS_PARTITIONS, TopicRole

logger = logging.getLogger(__name__)

_Record = CalendarChange | SkippedCalendarRecord


class CalendarReadError(KairosError):
    """The calendars topic could not be read to its end: the broker or the topic is unavailable."""

    def __init__(self, topic: str, reason: str, kafka_error: KafkaError | None = None) -> None:
        self.topic = topic
        self.reason = reason
        self.kafka_error = kafka_error
        super().__init__(f"cannot read calendars topic {topic}: {reason}")


def read_calendars(
    settings: KafkaSettings, *, timeout_s: float = 30.0, codecs: Codecs | None = None
) -> CalendarBook:
    """Every current calendar by id, with its version (the offset of the record that set it)."""
    book = CalendarBook()
    skipped = []
    for record in _read(settings, timeout_s, codecs):
        if isinstance(record, SkippedCalendarRecord):
            skipped.append(record)
        else:
            book = book.with_change(record)
    return CalendarBook(book.versions, tuple(skipped))


def read_calendar_history(
    settings: KafkaSettings,
    *,
    calendar_id: str | None = None,
    timeout_s: float = 30.0,
    codecs: Codecs | None = None,
) -> list[CalendarChange]:
    """Every change still on the topic (of one calendar when `calendar_id` is given), in order."""
    return [
        record
        for record in _read(settings, timeout_s, codecs)
        if isinstance(record, CalendarChange)
        and (calendar_id is None or record.calendar_id == calendar_id)
    ]


def _read(settings: KafkaSettings, timeout_s: float, codecs: Codecs | None) -> list[_Record]:
    topic = settings.layout.name(TopicRole.CALENDARS)
    codec = (codecs or make_codecs()).calendar_event
    consumer = Consumer(
        settings.consumer_config(
            **{
                # Assigned, never subscribed and never committed: the client requires a group
                # id, but no group is ever joined.
                "group.id": settings.deployment_id(CALENDAR_READERS_GROUP),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                # A one-shot read to the end: the broker would hold a caught-up fetch 500 ms.
                "fetch.wait.max.ms": 10,
            }
        )
    )
    try:
        _check_partitions(consumer, settings, topic, timeout_s)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        records: list[_Record] = []
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() > deadline:
                raise CalendarReadError(topic, f"not read to its end in {timeout_s:g}s")
            # consume() waits its whole timeout unless the batch fills: keep the timeout short.
            for message in consumer.consume(num_messages=1000, timeout=0.05):
                error = message.error()
                if error is None:
                    records.append(read_calendar_message(codec, message))
                elif error.code() == KafkaError._PARTITION_EOF:
                    _log_skipped(topic, records)
                    return records
                elif error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise CalendarReadError(topic, error.str(), error)
                else:
                    # librdkafka retries transient errors itself; the deadline bounds the wait.
                    logger.warning("reading %s: %s", topic, error.str())
    finally:
        consumer.close()


def _check_partitions(
    consumer: Consumer, settings: KafkaSettings, topic: str, timeout_s: float
) -> None:
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException as error:
        raise CalendarReadError(topic, f"the broker did not answer: {error}") from error
    found = metadata.topics.get(topic)
    if found is not None and found.error is not None:
        if found.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            # Refused (not authorized), not absent: the metadata hides a topic it may not show.
            raise CalendarReadError(topic, found.error.str(), found.error)
        found = None
    if found is None or not found.partitions:
        raise CalendarReadError(
            topic, "the topic does not exist; create it with `kairos topics create`"
        )
    if len(found.partitions) != CALENDARS_PARTITIONS:
        problem = calendars_partition_problem(settings.layout, len(found.partitions))
        assert problem is not None
        raise CalendarReadError(topic, f"{problem.message}; fix: {problem.fix}")


def _log_skipped(topic: str, records: list[_Record]) -> None:
    skipped = sum(isinstance(record, SkippedCalendarRecord) for record in records)
    if skipped:
        logger.debug("skipped %d records of %s", skipped, topic)
