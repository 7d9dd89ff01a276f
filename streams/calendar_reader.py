"""The calendars, read from the compacted single-partition calendars topic.

A read consumes the topic from its beginning to its end as of the read, read_committed, through
`kairos.streams.calendar_events` (as every reader of the topic reads it); a `CalendarFeed` goes
on from where its last read ended. `read_calendars` keeps the latest change of each calendar
id: the calendars in force, as a `CalendarBook`. `read_calendar_history` keeps every change in
topic order, deletes included, for the audit to replay the version in force at each decision
(`CalendarBook.replay`). What compaction has removed (superseded versions older than the
topic's `min.compaction.lag.ms`, 90 days by default) is gone from both. Records that break the
contract are skipped and listed in the book's `skipped`.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import TopicMetadata

from kairos.core.business_calendar import CalendarBook, CalendarChange, SkippedCalendarRecord
from kairos.core.errors import KairosError
from kairos.streams.calendar_events import read_calendar_message
from kairos.streams.codec import Codecs, make_codecs
from kairos.streams.passing import BROKER_GONE, LEADER_MOVING, ask_until_answered
from kairos.streams.settings import CALENDAR_READERS_GROUP, KafkaSettings
from kairos.streams.topic_check import calendars_partition_problem
from kairos.streams.topics import CALENDARS_PARTITIONS, TopicRole

logger = logging.getLogger(__name__)

_Record = CalendarChange | SkippedCalendarRecord


class CalendarReadError(KairosError):
    """The calendars topic could not be read to its end: the broker or the topic is unavailable."""

    retryable = True

    def __init__(self, topic: str, reason: str, kafka_error: KafkaError | None = None) -> None:
        self.topic = topic
        self.reason = reason
        self.kafka_error = kafka_error
        super().__init__(f"cannot read calendars topic {topic}: {reason}")


class CalendarFeed:
    """Follows the calendars topic: each `refresh` folds in the records published since the
    last one, so a long-lived process (a ticker) keeps its book current without re-reading.

    Not thread-safe: one thread refreshes. Raises `CalendarReadError` when the topic cannot be
    read (missing, refused, or of more than one partition).
    """

    def __init__(
        self, settings: KafkaSettings, *, timeout_s: float = 30.0, codecs: Codecs | None = None
    ) -> None:
        self.topic = settings.layout.name(TopicRole.CALENDARS)
        self._codec = (codecs or make_codecs()).calendar_event
        self._timeout_s = timeout_s
        self._partition = TopicPartition(self.topic, 0)
        self._next_offset = 0
        self._unreturned: list[_Record] = []
        """Records a failed read took, returned by the next read."""
        self._book = CalendarBook()
        self._consumer = Consumer(
            settings.consumer_config(
                **{
                    # Assigned, never subscribed and never committed: the client requires a
                    # group id, but no group is ever joined.
                    "group.id": settings.deployment_id(CALENDAR_READERS_GROUP),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    # A read to the end: the broker would hold a caught-up fetch for 500 ms.
                    "fetch.wait.max.ms": 10,
                }
            )
        )
        try:
            _check_partitions(self._consumer, settings, self.topic, timeout_s)
            self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        except BaseException:
            self._consumer.close()
            raise

    @property
    def book(self) -> CalendarBook:
        """The calendars as of the last `refresh`."""
        return self._book

    def refresh(self, timeout_s: float | None = None) -> CalendarBook:
        """The calendars as of the topic's end now (`timeout_s`: this read's bound)."""
        book, skipped = self._book, list(self._book.skipped)
        for record in self.read_new(timeout_s):
            if isinstance(record, SkippedCalendarRecord):
                skipped.append(record)
            else:
                book = book.with_change(record)
        self._book = CalendarBook(book.versions, tuple(skipped))
        return self._book

    def read_new(self, timeout_s: float | None = None) -> list[_Record]:
        """The records after those read before (all, the first time), up to the end now.

        A read that fails keeps what it took for the next one, so a caller that reads again
        misses no record."""
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        try:
            # A calendars topic just created, or whose leader is moving, answers "not leader"
            # for a moment: asked again, it answers.
            _, end = ask_until_answered(
                lambda attempt_s: self._consumer.get_watermark_offsets(
                    self._partition, timeout=attempt_s, cached=False
                ),
                timeout_s,
                LEADER_MOVING | BROKER_GONE,
                refresh=lambda attempt_s: self._consumer.list_topics(self.topic, timeout=attempt_s),
            )
        except KafkaException as error:
            raise CalendarReadError(self.topic, f"the broker did not answer: {error}") from error
        deadline = time.monotonic() + timeout_s
        # librdkafka reports the end once per arrival at it: with nothing new since the last
        # read there is no report to wait for, hence the watermark.
        start = self._next_offset
        while self._next_offset < end:
            if time.monotonic() > deadline:
                raise CalendarReadError(self.topic, f"not read to its end in {timeout_s:g}s")
            if self._consume_batch(self._unreturned, start, end):
                break
        records, self._unreturned = self._unreturned, []
        _log_skipped(self.topic, records)
        return records

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> CalendarFeed:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _consume_batch(self, records: list[_Record], start: int, end: int) -> bool:
        """Append one batch's records; whether the end (of committed records) was reached."""
        # consume() waits its whole timeout unless the batch fills: keep the timeout short.
        for message in self._consumer.consume(num_messages=1000, timeout=0.05):
            error = message.error()
            offset = message.offset()
            if error is None:
                records.append(read_calendar_message(self._codec, message))
                assert offset is not None  # set on every record
                self._next_offset = offset + 1
            elif error.code() == KafkaError._PARTITION_EOF:
                # An end reported where the last read stopped is that read's, still queued;
                # one further on is this read's (below the watermark when a transaction is open).
                if offset is not None and (offset > start or offset >= end):
                    self._next_offset = max(self._next_offset, offset)
                    return True
            elif error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise CalendarReadError(self.topic, error.str(), error)
            else:
                # librdkafka retries transient errors itself; the deadline bounds the wait.
                logger.warning("reading %s: %s", self.topic, error.str())
        return False


def read_calendars(
    settings: KafkaSettings, *, timeout_s: float = 30.0, codecs: Codecs | None = None
) -> CalendarBook:
    """Every current calendar by id, with its version (the offset of the record that set it)."""
    with CalendarFeed(settings, timeout_s=timeout_s, codecs=codecs) as feed:
        return feed.refresh()


def read_calendar_history(
    settings: KafkaSettings,
    *,
    calendar_id: str | None = None,
    timeout_s: float = 30.0,
    codecs: Codecs | None = None,
) -> list[CalendarChange]:
    """Every change still on the topic (of one calendar when `calendar_id` is given), in order."""
    with CalendarFeed(settings, timeout_s=timeout_s, codecs=codecs) as feed:
        records = feed.read_new()
    return [
        record
        for record in records
        if isinstance(record, CalendarChange)
        and (calendar_id is None or record.calendar_id == calendar_id)
    ]


_ELECTING = frozenset({KafkaError.LEADER_NOT_AVAILABLE})


def _check_partitions(
    consumer: Consumer, settings: KafkaSettings, topic: str, timeout_s: float
) -> None:
    def ask(attempt_s: float) -> TopicMetadata | None:
        found: TopicMetadata | None = consumer.list_topics(topic, timeout=attempt_s).topics.get(
            topic
        )
        if found is not None and found.error is not None and found.error.code() in _ELECTING:
            raise KafkaException(found.error)  # a topic just created, its leader not elected
        return found

    try:
        found = ask_until_answered(ask, timeout_s, _ELECTING | BROKER_GONE)
    except KafkaException as error:
        raise CalendarReadError(topic, f"the broker did not answer: {error}") from error
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
