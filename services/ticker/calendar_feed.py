"""The shared calendars a ticker reads its schedules with: the calendars topic, followed.

Read to its end before the ticker joins its group, so no occurrence is decided with calendars
still unread; then read again at most every `REFRESH_S` (each read asks the broker for the
topic's end). The lookup answers with the latest version that counts: with `--ownership
signed`, a change counts only when a registered team signed it and may make it, the verdict
every reader of the topic applies (`kairos.core.calendar_ownership`); a refused change is logged
with the team that signed it, and changes nothing. A change reaches the occurrences not yet
decided: the partitions drop the states they decoded of the schedules naming the calendar, and
the next decision reads the new version; the other schedules' states stay.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Protocol

from kairos.core.calendar_versions import CalendarBook, CalendarVersion, RefusedCalendarChange
from kairos.core.ownership import Team
from kairos.services.ticker.clients import CalendarSource
from kairos.streams.readers.calendar_ownership import SignedCalendars
from kairos.streams.readers.calendar_reader import CalendarReadError

logger = logging.getLogger(__name__)

REFRESH_S = 1.0
"""How soon a published calendar change reaches the ticker's decisions."""

REFRESH_TIMEOUT_S = 2.0
"""How long a turn may wait on a read of the calendars; a broker failure must not stall firing."""

RETRY_S = 10.0
"""After a read that failed, the next one waits this long."""


class Forgetful(Protocol):
    def forget_decoded(self, calendar_ids: Iterable[str]) -> None: ...


class TickerCalendars:
    """The calendars a ticker decides with. `teams` gives the registered teams as the ticker
    last read them, when it enforces ownership (`None`: every change counts)."""

    def __init__(self, teams: Callable[[], Mapping[str, Team]] | None = None) -> None:
        self._teams = teams
        self._signed: SignedCalendars | None = None
        self._feed: CalendarSource | None = None
        self._book = CalendarBook()
        self._next_read_at = 0.0

    def lookup(self, calendar_id: str, _at: datetime) -> CalendarVersion | None:
        """A `CalendarLookup`: the latest version read."""
        return self._book.get(calendar_id)

    def start(self, feed: CalendarSource) -> None:
        """Read `feed` to its end (raises `CalendarReadError` when it cannot), and follow it."""
        self._feed = feed
        self._book = self._feed.refresh(signed=self._signed_now())
        self._next_read_at = time.monotonic() + REFRESH_S
        refused = self._book.refused
        logger.info(
            "calendars read: %d from %s%s",
            len(self._book.versions),
            self._feed.topic,
            f"; {self._book.refused_count} changes refused, the latest: {_said(refused[-1])}"
            if refused
            else "",
        )

    def follow(self, partitions: Iterable[Forgetful]) -> None:
        """Read what was published since the last read, when `REFRESH_S` has passed; when a
        calendar changed, the partitions read again the states of the schedules naming it."""
        if self._feed is None or time.monotonic() < self._next_read_at:
            return
        before = self._book
        try:
            self._book = self._feed.refresh(REFRESH_TIMEOUT_S, self._signed_now())
        except CalendarReadError as error:
            # Firing goes on with the calendars read last; a later read catches up.
            logger.warning("calendars not read again (next try in %gs): %s", RETRY_S, error)
            self._next_read_at = time.monotonic() + RETRY_S
            return
        self._next_read_at = time.monotonic() + REFRESH_S
        new = self._book.refused_count - before.refused_count
        for refused in self._book.refused[max(0, len(self._book.refused) - new) :]:
            logger.warning("calendar change refused: %s", _said(refused))
        after = self._book.versions
        changed = {
            calendar_id
            for calendar_id in before.versions.keys() | after.keys()
            if before.versions.get(calendar_id) is not after.get(calendar_id)
        }
        if changed:
            for partition in partitions:
                partition.forget_decoded(changed)
            logger.info("calendars changed: %s", ", ".join(sorted(changed)))

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None

    def _signed_now(self) -> SignedCalendars | None:
        """The registered teams' keys as the ticker last read them; made again only when the
        teams changed (the ticker replaces its teams whenever they do)."""
        if self._teams is None:
            return None
        teams = self._teams()
        if self._signed is None or self._signed.teams is not teams:
            self._signed = SignedCalendars.of(teams)
        return self._signed


def _said(refused: RefusedCalendarChange) -> str:
    by = "unsigned or not verified" if refused.team is None else f"signed by team {refused.team}"
    return f"calendar {refused.calendar_id} at version {refused.version} ({by}): {refused.reason}"
