"""The contract of the calendars topic, in one place: how a calendar becomes a record and back.

Every writer (`kairos.streams.client.calendar_publisher`) encodes through `encode_calendar_event`
and every reader (`kairos.streams.readers.calendar_reader`, and through it the ticker and the audit)
reads through `read_calendar_record`, so all agree on what each record means (docs/calendars.md):

- The topic has one partition; a record's offset is the version of the calendar it sets.
- The key is the calendar id, as UTF-8 text.
- A null value (a tombstone) deletes the calendar.
- A change is in force from the record's timestamp, the broker's append time (the topic stamps
  it, `message.timestamp.type=LogAppendTime`), never from the `changed_at` its publisher wrote.
- A deployment that enforces ownership counts a record only when a registered team signed it
  (`kairos.streams.wire.signing`'s headers, checked here with the calendars' own age limit) and may
  make it (`kairos.core.calendar_ownership`).
- Any other value is a `CalendarEvent` of at most `MAX_CALENDAR_EVENT_BYTES` whose
  `calendar_id` is the key. Its `definition` is the whole calendar after the change, one the
  model accepts with the key as its id. Only a `deleted` event or one of a kind newer than this
  reader (`unknown`) may carry none: that is a delete. An `upserted` event without one breaks
  the contract and is skipped, never read as a delete.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Message
from pydantic import ValidationError

from kairos.core.business_calendar import BusinessCalendar, Weekday
from kairos.core.calendar_versions import CalendarChange, CalendarSignature, SkippedCalendarRecord
from kairos.core.errors import KairosError
from kairos.core.schedule import DURATIONS_IN_MS
from kairos.streams.wire.codec import Codec, DecodeError
from kairos.streams.wire.signing import Refused, Verifier

MAX_CALENDAR_EVENT_BYTES = 900 * 1024
"""The largest calendar event: one record must stay below Kafka's default limit of 1 MB
(`message.max.bytes`). 5,000 holidays with 100-character names take about 530 KiB."""

TOMBSTONE = "tombstone"
"""The `change` of a delete that came as a tombstone (a null value), not as an event."""

_DELETES_WITHOUT_DEFINITION = frozenset({"deleted", "unknown"})
_MILLISECOND = timedelta(milliseconds=1)
_WEEKDAYS = list(Weekday)


class InvalidCalendarEventError(KairosError):
    """A record of the calendars topic breaks its contract; the message is the reason."""


class CalendarEventTooLargeError(InvalidCalendarEventError):
    """A calendar event over `MAX_CALENDAR_EVENT_BYTES`: the publisher refuses to send it."""

    def __init__(self, calendar_id: str, size: int) -> None:
        self.calendar_id = calendar_id
        self.size = size
        super().__init__(
            f"the event of calendar {calendar_id!r} is {size} bytes, over the limit of "
            f"{MAX_CALENDAR_EVENT_BYTES}: a record must fit Kafka's 1 MB limit; split the "
            "calendar (fewer years, or one per region) or shorten holiday names"
        )


def calendar_definition_record(calendar: BusinessCalendar) -> dict[str, Any]:
    """The `CalendarDefinition` record of a calendar."""
    return {
        "id": calendar.id,
        "owner": calendar.owner,
        "description": calendar.description,
        "timezone": calendar.timezone,
        "business_days": [day.number + 1 for day in calendar.business_days],
        "holidays": [{"date": h.date, "name": h.name} for h in calendar.holidays],
        "windows": [
            {
                "name": window.name,
                "start": None if window.start is None else window.start.isoformat(),
                "end": None if window.end is None else window.end.isoformat(),
                "cron": window.cron,
                "duration_ms": None if window.duration is None else window.duration // _MILLISECOND,
            }
            for window in calendar.windows
        ],
    }


def calendar_from_definition(record: dict[str, Any]) -> BusinessCalendar:
    """The calendar a definition record describes, validated like a calendars file."""
    days = record["business_days"]
    fields = {
        "id": record["id"],
        "owner": record["owner"],
        "description": record["description"],
        "timezone": record["timezone"],
        # A number outside 1-7 is left as it is, for the model to refuse with the field named.
        "business_days": [_WEEKDAYS[n - 1] if 1 <= n <= 7 else n for n in days],
        "holidays": record["holidays"],
        "windows": [
            {
                key: value
                for key, value in (
                    ("name", window["name"]),
                    ("start", window["start"]),
                    ("end", window["end"]),
                    ("cron", window["cron"]),
                    ("duration", window["duration_ms"]),
                )
                if value is not None
            }
            for window in record["windows"]
        ],
    }
    try:
        return BusinessCalendar.model_validate(fields, context=DURATIONS_IN_MS)
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or 'definition'}: {detail['msg']}"
            for detail in invalid.errors(include_url=False)
        )
        raise InvalidCalendarEventError(f"invalid definition: {problems}") from invalid


def encode_calendar_event(
    codec: Codec,
    *,
    calendar_id: str,
    calendar: BusinessCalendar | None,
    changed_by: str,
    reason: str | None,
) -> bytes:
    """The value of an upsert (`calendar` given) or a delete (`None`) of `calendar_id`.

    Raises `CalendarEventTooLargeError` before anything is sent when it would not fit a record.
    """
    if calendar is not None and calendar.id != calendar_id:
        raise ValueError(f"the calendar's id {calendar.id!r} differs from {calendar_id!r}")
    value = codec.encode(
        {
            "calendar_id": calendar_id,
            "event_id": uuid.uuid4(),
            "change": "deleted" if calendar is None else "upserted",
            "definition": None if calendar is None else calendar_definition_record(calendar),
            "changed_by": changed_by,
            "changed_at": datetime.now(UTC),
            "reason": reason,
        }
    )
    if len(value) > MAX_CALENDAR_EVENT_BYTES:
        raise CalendarEventTooLargeError(calendar_id, len(value))
    return value


def read_calendar_record(
    codec: Codec,
    *,
    key: bytes | None,
    value: bytes | None,
    offset: int,
    timestamp: datetime,
    signature: CalendarSignature | None = None,
) -> CalendarChange | SkippedCalendarRecord:
    """What the record at `offset` of the calendars topic means; `timestamp` is its own, and
    `signature` what its signature proves when the reader checked it."""
    try:
        calendar_id = _calendar_id(key)
        if value is None:
            return CalendarChange(
                calendar_id, offset, TOMBSTONE, None, timestamp, None, None, signature
            )
        if len(value) > MAX_CALENDAR_EVENT_BYTES:
            raise CalendarEventTooLargeError(calendar_id, len(value))
        return _change(codec.decode(value), calendar_id, offset, timestamp, signature)
    except (DecodeError, InvalidCalendarEventError) as problem:
        return SkippedCalendarRecord(offset, f"{type(problem).__name__}: {problem}")


def read_calendar_message(
    codec: Codec, message: Message, verifier: Verifier | None = None
) -> CalendarChange | SkippedCalendarRecord:
    """`read_calendar_record` of a consumed record, its signature checked with `verifier` (a
    deployment that enforces ownership: `kairos.streams.readers.calendar_ownership`)."""
    offset = message.offset()
    assert offset is not None  # set on every consumed record
    _, timestamp_ms = message.timestamp()
    signature = None
    if verifier is not None:
        signer = verifier.signer(
            str(message.topic()),
            message.key(),
            message.value(),
            message.headers(),
            message.timestamp(),
        )
        signature = (
            CalendarSignature(signer.team, signer.reason)
            if isinstance(signer, Refused)
            else CalendarSignature(signer)
        )
    return read_calendar_record(
        codec,
        key=message.key(),
        value=message.value(),
        offset=offset,
        timestamp=datetime.fromtimestamp(timestamp_ms / 1000, UTC),
        signature=signature,
    )


def _calendar_id(key: bytes | None) -> str:
    if key is None:
        raise InvalidCalendarEventError("a calendar event must be keyed by its calendar id")
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidCalendarEventError("the key is not UTF-8 text") from None


def _change(
    event: dict[str, Any],
    calendar_id: str,
    offset: int,
    appended_at: datetime,
    signature: CalendarSignature | None,
) -> CalendarChange:
    if event["calendar_id"] != calendar_id:
        raise InvalidCalendarEventError(
            f"the key {calendar_id!r} differs from the event's calendar_id "
            f"{event['calendar_id']!r}; key each event by its calendar id"
        )
    change: str = event["change"]
    definition = event["definition"]
    calendar = None
    if definition is None:
        if change not in _DELETES_WITHOUT_DEFINITION:
            raise InvalidCalendarEventError(
                f"an event of change {change!r} must carry the whole definition"
            )
    else:
        calendar = calendar_from_definition(definition)
        if calendar.id != calendar_id:
            raise InvalidCalendarEventError(
                f"the definition's id {calendar.id!r} differs from the key {calendar_id!r}"
            )
    return CalendarChange(
        calendar_id,
        offset,
        change,
        calendar,
        appended_at,
        event["changed_by"],
        event["reason"],
        signature,
    )
