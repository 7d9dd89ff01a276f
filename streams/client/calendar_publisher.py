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

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kairos.core.business_calendar import BusinessCalendar
from kairos.core.errors import KairosError
from kairos.streams.kafka.authorization import kafka_error_of
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.calendar_events import encode_calendar_event
from kairos.streams.wire.codec import Codecs, make_codecs
from kairos.streams.wire.signing import load_signer


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


class CalendarsClient:
    """Publishes calendar events to the compacted calendars topic."""

    def __init__(
        self,
        settings: KafkaSettings,
        changed_by: str,
        codecs: Codecs | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        if not changed_by.strip():
            raise ValueError("changed_by must name who publishes, for the audit trail")
        self.changed_by = changed_by
        self.topic = settings.layout.name(TopicRole.CALENDARS)
        self._codec = (codecs or make_codecs()).calendar_event
        self._timeout_s = timeout_s
        self._signer = None if settings.signing_key is None else load_signer(settings.signing_key)
        self._producer = Producer(
            settings.producer_config(**{"message.timeout.ms": int(timeout_s * 1000)})
        )

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
                self._codec,
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

    def close(self) -> None:
        self._producer.flush(self._timeout_s)

    def __enter__(self) -> CalendarsClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _deliver_all(self, records: Sequence[_Record]) -> list[int]:
        outcomes: dict[int, Message] = {}
        for index, (calendar_id, value) in enumerate(records):
            key = calendar_id.encode("utf-8")
            headers = (
                None
                if self._signer is None
                else self._signer.headers(self.topic, key, value, int(time.time() * 1000))
            )
            while True:
                try:
                    self._producer.produce(
                        self.topic,
                        key=key,
                        value=value,
                        headers=headers,
                        on_delivery=partial(_store_outcome, outcomes, index),
                    )
                    break
                except BufferError:
                    # The local queue is full: serve delivery reports until it drains.
                    self._producer.poll(0.1)
                except KafkaException as refused:
                    raise CalendarPublishError(calendar_id, str(refused)) from refused
        try:
            self._producer.flush(self._timeout_s)
        except (KafkaException, SystemError) as failure:
            # A fatal error comes out of the flush, or as the SystemError of the next callback.
            fatal = kafka_error_of(failure)
            if fatal is None:
                raise
            raise CalendarPublishError(records[0][0], fatal.str(), fatal) from failure
        return [self._offset(outcomes, index, records) for index in range(len(records))]

    def _offset(self, outcomes: dict[int, Message], index: int, records: Sequence[_Record]) -> int:
        calendar_id = records[index][0]
        message = outcomes.get(index)
        if message is None:
            raise CalendarPublishError(
                calendar_id, f"no acknowledgement within {self._timeout_s:g}s"
            )
        error = message.error()
        offset = message.offset()
        if error is not None or offset is None:
            reason = error.str() if error is not None else "the broker returned no offset"
            raise CalendarPublishError(calendar_id, reason, error)
        return offset


def _store_outcome(
    outcomes: dict[int, Message], index: int, _: KafkaError | None, message: Message
) -> None:
    outcomes[index] = message
