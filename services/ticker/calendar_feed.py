"""The shared calendars a ticker reads its schedules with: the calendars topic, followed.

Read to its end before the ticker joins its group, so no occurrence is decided with calendars
still unread; then read again at most every `REFRESH_S` (each read asks the broker for the
topic's end). The lookup answers with the latest version read. A change reaches the occurrences
not yet decided: the partitions drop the states they decoded with the old version, and the next
decision reads the new one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from kairos.core.business_calendar import CalendarBook, CalendarVersion
from kairos.services.ticker.clients import CalendarSource
from kairos.streams.calendar_reader import CalendarReadError

logger = logging.getLogger(__name__)

REFRESH_S = 1.0
"""How soon a published calendar change reaches the ticker's decisions."""

REFRESH_TIMEOUT_S = 2.0
"""How long a turn may wait on a read of the calendars; a broker failure must not stall firing."""

RETRY_S = 10.0
"""After a read that failed, the next one waits this long."""


class Forgetful(Protocol):
    def forget_decoded(self) -> None: ...


class TickerCalendars:
    def __init__(self) -> None:
        self._feed: CalendarSource | None = None
        self._book = CalendarBook()
        self._next_read_at = 0.0

    def lookup(self, calendar_id: str, _at: datetime) -> CalendarVersion | None:
        """A `CalendarLookup`: the latest version read."""
        return self._book.get(calendar_id)

    def start(self, feed: CalendarSource) -> None:
        """Read `feed` to its end (raises `CalendarReadError` when it cannot), and follow it."""
        self._feed = feed
        self._book = self._feed.refresh()
        self._next_read_at = time.monotonic() + REFRESH_S
        logger.info("calendars read: %d from %s", len(self._book.versions), self._feed.topic)

    def follow(self, partitions: Iterable[Forgetful]) -> None:
        """Read what was published since the last read, when `REFRESH_S` has passed; when a
        calendar changed, the partitions read their states again."""
        if self._feed is None or time.monotonic() < self._next_read_at:
            return
        before = self._book.versions
        try:
            self._book = self._feed.refresh(timeout_s=REFRESH_TIMEOUT_S)
        except CalendarReadError as error:
            # Firing goes on with the calendars read last; a later read catches up.
            logger.warning("calendars not read again (next try in %gs): %s", RETRY_S, error)
            self._next_read_at = time.monotonic() + RETRY_S
            return
        self._next_read_at = time.monotonic() + REFRESH_S
        after = self._book.versions
        changed = {
            calendar_id
            for calendar_id in before.keys() | after.keys()
            if before.get(calendar_id) is not after.get(calendar_id)
        }
        if changed:
            for partition in partitions:
                partition.forget_decoded()
            logger.info("calendars changed: %s", ", ".join(sorted(changed)))

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None
