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

from confluent_kafka import KafkaError

from kairos.core.business_calendar import CalendarBook, CalendarChange, SkippedCalendarRecord
from kairos.core.errors import KairosError
from kairos.streams.calendar_events import read_calendar_message
from kairos.streams.codec import Codecs, make_codecs
from kairos.streams.settings import CALENDAR_READERS_GROUP, KafkaSettings
from kairos.streams.table_feed import TableFeed
from kairos.streams.topic_check import calendars_partition_problem
from kairos.streams.topics import TopicRole

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
        codec = (codecs or make_codecs()).calendar_event
        self._table: TableFeed[_Record] = TableFeed(
            settings,
            TopicRole.CALENDARS,
            group=CALENDAR_READERS_GROUP,
            read_record=lambda message: read_calendar_message(codec, message),
            read_error=CalendarReadError,
            partition_problem=calendars_partition_problem,
            timeout_s=timeout_s,
        )
        self.topic = self._table.topic
        self._book = CalendarBook()

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
        """The records after those read before (all, the first time), up to the end now."""
        records = self._table.read_new(timeout_s)
        _log_skipped(self.topic, records)
        return records

    def close(self) -> None:
        self._table.close()

    def __enter__(self) -> CalendarFeed:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


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


def _log_skipped(topic: str, records: list[_Record]) -> None:
    skipped = sum(isinstance(record, SkippedCalendarRecord) for record in records)
    if skipped:
        logger.debug("skipped %d records of %s", skipped, topic)
