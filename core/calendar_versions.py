"""Calendars as their topic has them: versions, the records readers take, what they hold.

Pure. `kairos.streams.wire.calendar_events` turns each record of the calendars topic into a
`CalendarChange` (or a `SkippedCalendarRecord`); `kairos.core.calendar_ownership` judges which
count and holds the result, a `CalendarBook` of `CalendarVersion`s; `CalendarBook.replay` and
`kairos.core.calendar_rules.as_of_history` give the versions in force at an instant from the
changes that count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kairos.core.business_calendar import BusinessCalendar


@dataclass(frozen=True)
class CalendarVersion:
    """A calendar as its topic has it: `version` is the offset of the record that set it,
    `changed_at` when the broker appended it, `changed_by` what its publisher wrote (free text)
    and `signed_by` the team whose signature a signed deployment verified on it."""

    calendar: BusinessCalendar
    version: int
    changed_at: datetime
    changed_by: str
    reason: str | None = None
    signed_by: str | None = None


@dataclass(frozen=True)
class CalendarSignature:
    """What a record's signature proves: the registered team whose key signed it (`None` when
    none did), and why it does not count (`None` when that team signed it fresh)."""

    team: str | None
    refusal: str | None = None


@dataclass(frozen=True)
class CalendarChange:
    """One record of the calendars topic, in topic order: `calendar` is `None` for a delete.

    `change` is upserted, deleted, unknown (a kind newer than the reader) or tombstone (a null
    value, whose `changed_by` is `None`). `changed_at` is the record's timestamp: the broker's
    append time on a topic that stamps it. `signature` is what its signature proves, when the
    reader checked it (`kairos.core.calendar_ownership` judges it).
    """

    calendar_id: str
    version: int
    change: str
    calendar: BusinessCalendar | None
    changed_at: datetime
    changed_by: str | None
    reason: str | None = None
    signature: CalendarSignature | None = None

    def in_force(self) -> CalendarVersion | None:
        """The version this change puts in force; `None` for a delete."""
        if self.calendar is None:
            return None
        signed_by = None if self.signature is None else self.signature.team
        return CalendarVersion(
            self.calendar,
            self.version,
            self.changed_at,
            self.changed_by or "",
            self.reason,
            signed_by,
        )


@dataclass(frozen=True)
class RefusedCalendarChange:
    """A calendar change that does not count, with why; `team` is the registered team that
    signed it, when one did (whom the refusal is reported to)."""

    calendar_id: str
    version: int
    reason: str
    team: str | None
    appended_at: datetime


@dataclass(frozen=True)
class SkippedCalendarRecord:
    """A record of the calendars topic that breaks its contract, skipped with why."""

    version: int
    reason: str


KEPT_PROBLEMS = 1_000
"""How many skipped and refused records a book keeps (the latest): a ticker follows the topic for
as long as it runs, and a team publishing refused changes one after another must not grow it."""


@dataclass(frozen=True)
class CalendarBook:
    """Every current calendar by id, as of a read of the calendars topic (or of a replay)."""

    versions: Mapping[str, CalendarVersion] = field(default_factory=dict)
    skipped: tuple[SkippedCalendarRecord, ...] = ()
    """The latest records that break the contract, at most `KEPT_PROBLEMS`."""
    refused: tuple[RefusedCalendarChange, ...] = ()
    """The latest changes a deployment that enforces ownership does not count (`CalendarLedger`),
    at most `KEPT_PROBLEMS`."""
    skipped_count: int = 0
    refused_count: int = 0
    """How many were met in all, those no longer kept included."""

    def get(self, calendar_id: str) -> CalendarVersion | None:
        return self.versions.get(calendar_id)

    def __contains__(self, calendar_id: object) -> bool:
        return calendar_id in self.versions

    @classmethod
    def replay(
        cls, changes: Iterable[CalendarChange], as_of: datetime | None = None
    ) -> CalendarBook:
        """The calendars in force at `as_of` (every change when `None`): the audit's view of
        the calendars a decision at that instant was made with. Changes come in topic order,
        the ones that count (`read_calendar_history`); one counts from its `changed_at` on."""
        versions: dict[str, CalendarVersion] = {}
        for change in changes:
            if as_of is None or change.changed_at <= as_of:
                version = change.in_force()
                if version is None:
                    versions.pop(change.calendar_id, None)
                else:
                    versions[change.calendar_id] = version
        return cls(versions)
