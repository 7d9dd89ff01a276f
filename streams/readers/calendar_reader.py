"""The calendars, read from the compacted single-partition calendars topic.

A read consumes the topic from its beginning to its end as of the read, read_committed, through
`kairos.streams.wire.calendar_events` (as every reader of the topic reads it); a `CalendarFeed` goes
on from where its last read ended. Every record passes through one
`kairos.core.calendar_ownership.CalendarLedger`, the verdict the tickers apply too: in a
deployment whose tickers enforce ownership, a change counts only when a registered team signed
it and may make it; refused changes are listed in the book's `refused`, and records that break
the contract in its `skipped`. `read_calendars` gives the calendars in force, as a
`CalendarBook`; `read_calendar_history` every change that counts, in topic order, deletes
included, for the audit to replay the version in force at each decision (`as_of_history`, by the
broker's append time). What compaction has removed (superseded versions older than the topic's
`min.compaction.lag.ms`, 90 days by default) is gone from both.
"""

from __future__ import annotations

import logging

from kairos.core.calendar_ownership import CalendarLedger
from kairos.core.calendar_versions import CalendarBook, CalendarChange, SkippedCalendarRecord
from kairos.streams.kafka.ownership import Ownership
from kairos.streams.kafka.partition_status import PartitionStatusError, read_judged
from kairos.streams.kafka.settings import CALENDAR_READERS_GROUP, TICKER_GROUP, KafkaSettings
from kairos.streams.kafka.topic_check import calendars_partition_problem
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.calendar_ownership import SignedCalendars
from kairos.streams.readers.table_feed import TableFeed, TopicReadError
from kairos.streams.readers.team_events import TeamFeed, TeamReadError
from kairos.streams.wire.calendar_events import read_calendar_message
from kairos.streams.wire.codec import Codecs, make_codecs

logger = logging.getLogger(__name__)

_Record = CalendarChange | SkippedCalendarRecord


class CalendarReadError(TopicReadError):
    """The calendars topic could not be read to its end: the broker or the topic is unavailable."""

    retryable = True
    kind = "calendars"


class CalendarFeed:
    """Follows the calendars topic: each read judges the records published since the last one,
    so a long-lived process (a ticker) keeps its calendars current without reading again.

    Not thread-safe: one thread reads. Raises `CalendarReadError` when the topic cannot be read
    (missing, refused, or of more than one partition).
    """

    def __init__(
        self, settings: KafkaSettings, *, timeout_s: float = 30.0, codecs: Codecs | None = None
    ) -> None:
        codec = (codecs or make_codecs()).calendar_event
        self._signed: SignedCalendars | None = None
        self._table: TableFeed[_Record] = TableFeed(
            settings,
            TopicRole.CALENDARS,
            group=CALENDAR_READERS_GROUP,
            read_record=lambda message: read_calendar_message(
                codec, message, None if self._signed is None else self._signed.verifier
            ),
            read_error=CalendarReadError,
            partition_problem=calendars_partition_problem,
            timeout_s=timeout_s,
        )
        self.topic = self._table.topic
        self._ledger = CalendarLedger()
        self._book = CalendarBook()

    @property
    def book(self) -> CalendarBook:
        """The calendars as of the last read."""
        return self._book

    def refresh(
        self, timeout_s: float | None = None, signed: SignedCalendars | None = None
    ) -> CalendarBook:
        """The calendars as of the topic's end now (`timeout_s`: this read's bound), judged
        with `signed` (`None`: a deployment that does not enforce ownership)."""
        self.read(timeout_s, signed)
        return self._book

    def read(
        self, timeout_s: float | None = None, signed: SignedCalendars | None = None
    ) -> list[CalendarChange]:
        """The changes that count among the records published since the last read (all, the
        first time), up to the end now; `book` holds the calendars after them."""
        self._signed = signed
        records = self._table.read_new(timeout_s)
        teams = None if signed is None else signed.teams
        taken = [change for record in records if (change := self._ledger.take(record, teams))]
        if records:
            self._book = self._ledger.book()
            _log_skipped(self.topic, records)
        return taken

    def close(self) -> None:
        self._table.close()

    def __enter__(self) -> CalendarFeed:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def read_calendars(
    settings: KafkaSettings,
    *,
    timeout_s: float = 30.0,
    codecs: Codecs | None = None,
    judged_as: Ownership | None = None,
) -> CalendarBook:
    """Every current calendar by id, with its version (the offset of the record that set it),
    judged in the ownership mode the deployment's tickers run in (or `judged_as`)."""
    with CalendarFeed(settings, timeout_s=timeout_s, codecs=codecs) as feed:
        return feed.refresh(signed=_judged_with(settings, judged_as, timeout_s, codecs))


def read_calendar_history(
    settings: KafkaSettings,
    *,
    calendar_id: str | None = None,
    timeout_s: float = 30.0,
    codecs: Codecs | None = None,
) -> list[CalendarChange]:
    """Every change still on the topic that counts (of one calendar when `calendar_id` is
    given), in order, judged as the deployment's tickers judge them."""
    with CalendarFeed(settings, timeout_s=timeout_s, codecs=codecs) as feed:
        changes = feed.read(signed=_judged_with(settings, None, timeout_s, codecs))
    return [c for c in changes if calendar_id is None or c.calendar_id == calendar_id]


def deployment_ownership(settings: KafkaSettings, timeout_s: float = 30.0) -> Ownership:
    """The ownership mode the deployment's tickers judge changes in, as they committed it:
    signed once any schedules partition was last committed signed (one mode runs a deployment,
    `kairos.streams.kafka.ownership.mode_refusal`); open when none was, or nothing was committed."""
    group = settings.deployment_id(TICKER_GROUP)
    try:
        judged = read_judged(settings, group, timeout_s)
    except PartitionStatusError as error:
        raise CalendarReadError(
            settings.layout.name(TopicRole.CALENDARS),
            f"cannot tell which ownership mode the tickers judge calendar changes in: {error} "
            f"(a reader needs DESCRIBE on the schedules topic and on the tickers' group {group}; "
            "`kairos acls` lists them)",
        ) from error
    signed = any(one.mode is Ownership.SIGNED for one in judged.values())
    return Ownership.SIGNED if signed else Ownership.OPEN


def _judged_with(
    settings: KafkaSettings, mode: Ownership | None, timeout_s: float, codecs: Codecs | None
) -> SignedCalendars | None:
    if (mode or deployment_ownership(settings, timeout_s)) is Ownership.OPEN:
        return None
    try:
        with TeamFeed(settings, timeout_s=timeout_s, codecs=codecs) as feed:
            registered = feed.refresh()
    except TeamReadError as error:
        raise CalendarReadError(
            settings.layout.name(TopicRole.CALENDARS),
            f"the deployment enforces ownership, and its calendar changes' signatures are "
            f"checked against the registered teams: {error}",
            error.kafka_error,
        ) from error
    return SignedCalendars.of({n: c.team for n, c in registered.items() if c.team is not None})


def _log_skipped(topic: str, records: list[_Record]) -> None:
    skipped = sum(isinstance(record, SkippedCalendarRecord) for record in records)
    if skipped:
        logger.debug("skipped %d records of %s", skipped, topic)
