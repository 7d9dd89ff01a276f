"""Publishing calendar changes: validated and encoded before sending, acknowledged before returning.

    with CalendarsClient(settings, changed_by="treasury") as client:
        versions = client.upsert_all(load_calendars(text, "yaml"))

The producer is idempotent with acks=all (`KafkaSettings.producer_config`), so an acknowledged
change survives a broker's loss and a retried send is not written twice. Each call returns the
versions the changes got: the offsets the broker acknowledged them at. With a signing key
(`KafkaSettings.signing_key`, `kairos --signing-key`), every record is signed right before it is
produced, as a deployment that enforces ownership requires (docs/calendars.md, "Ownership").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from confluent_kafka import KafkaError, Message

from kairos.core.business_calendar import BusinessCalendar
from kairos.core.errors import KairosError
from kairos.streams.client.publisher import AcknowledgedPublisher
from kairos.streams.kafka.delivery import Outgoing, Undelivered
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.calendar_events import encode_calendar_event


class CalendarPublishError(KairosError):
    """The broker did not acknowledge a calendar change; nothing may be assumed published."""

    retryable = True
    """Publishing the same change again is safe: the calendar's last record wins."""

    def __init__(self, calendar_id: str, reason: str, kafka_error: KafkaError | None = None):
        super().__init__(f"calendar {calendar_id!r} was not published: {reason}")
        self.calendar_id = calendar_id
        self.reason = reason
        self.kafka_error = kafka_error


@dataclass(frozen=True)
class CalendarUpsert:
    """Create or redefine a calendar."""

    calendar: BusinessCalendar

    @property
    def calendar_id(self) -> str:
        return self.calendar.id


@dataclass(frozen=True)
class CalendarDelete:
    """Delete a calendar: a `deleted` event for the audit trail, then a tombstone."""

    calendar_id: str


CalendarEdit = CalendarUpsert | CalendarDelete

# (calendar id, value; None for a tombstone)
_Record = tuple[str, bytes | None]


class CalendarsClient(AcknowledgedPublisher):
    """Publishes calendar events to the compacted calendars topic."""

    role = TopicRole.CALENDARS

    def upsert(self, calendar: BusinessCalendar, reason: str | None = None) -> int:
        """Create or redefine one calendar; its new version."""
        return self.publish([CalendarUpsert(calendar)], reason)[0]

    def upsert_all(
        self, calendars: Iterable[BusinessCalendar], reason: str | None = None
    ) -> list[int]:
        """Create or redefine calendars with one wait for the broker; their new versions."""
        return self.publish([CalendarUpsert(calendar) for calendar in calendars], reason)

    def delete(self, calendar_id: str, reason: str | None = None) -> int:
        """Delete a calendar; the version (offset) of its `deleted` event."""
        return self.publish([CalendarDelete(calendar_id)], reason)[0]

    def publish(self, edits: Sequence[CalendarEdit], reason: str | None = None) -> list[int]:
        """Publish the edits in order, each encoded before the first is sent; per edit, the
        offset of its event (a delete's tombstone follows it)."""
        records: list[_Record] = []
        positions = []
        for edit in edits:
            calendar = edit.calendar if isinstance(edit, CalendarUpsert) else None
            value = encode_calendar_event(
                self._codecs.calendar_event,
                calendar_id=edit.calendar_id,
                calendar=calendar,
                changed_by=self.changed_by,
                reason=reason,
            )
            positions.append(len(records))
            records.append((edit.calendar_id, value))
            if calendar is None:
                records.append((edit.calendar_id, None))
        offsets = self._deliver_all(records)
        return [offsets[position] for position in positions]

    def _deliver_all(self, records: Sequence[_Record]) -> list[int]:
        messages = self._deliver(
            [Outgoing(calendar_id.encode("utf-8"), value) for calendar_id, value in records],
            partial(self._failed, records),
        )
        return [_offset(records[index][0], message) for index, message in enumerate(messages)]

    def _failed(self, records: Sequence[_Record], failure: Undelivered) -> CalendarPublishError:
        reason = failure.reason
        if reason is None:
            reason = f"no acknowledgement within {self._timeout_s:g}s"
        return CalendarPublishError(records[failure.index][0], reason, failure.kafka_error)


def _offset(calendar_id: str, message: Message) -> int:
    offset = message.offset()
    if offset is None:
        raise CalendarPublishError(calendar_id, "the broker returned no offset")
    return offset
