"""The contract of the schedules topic, read in one place: each record is a change or a rejection.

Every consumer of the schedules topic (the ticker, `kairos.streams.readers.schedule_reader` and
`kairos.streams.readers.history`) reads its records through `read_schedule_event`, so all of
them agree on what each record means (docs/wire-format.md, docs/producers.md):

- The key is the schedule id, as UTF-8 text.
- The record is on the partition murmur2 (Java's default partitioner) puts its key on. A record
  on another partition is refused: the ticker that owns that partition would fire the schedule
  beside its rightful owner, and a delete published correctly would never reach it.
- A null value (a tombstone) deletes the schedule, as of the record's timestamp.
- Any other value is a `ScheduleEvent` of at most `MAX_SCHEDULE_EVENT_BYTES`, whose
  `schedule_id` is the key. Its `definition` is the whole state after the change: a schedule the
  model accepts, whose id is the key. Only a `deleted` event, or an event of a change kind newer
  than this reader (`unknown`, which the schema says to apply from `definition`), may carry no
  definition: that is a delete. An `upserted`, `paused` or `resumed` event without one breaks the
  contract and is refused, never read as a delete.

A re-run request (`kairos schedules trigger`, `backfill`) is keyed `<schedule id>~rerun-<request
id>` and lies on the partition of its schedule id, not of its key, so that the ticker owning the
schedule fires it and compaction never replaces the definition with it: a `ScheduleEvent` of
change `rerun_requested` with `rerun` set and no definition, read as a `RerunRequested`. A
tombstone under such a key removes the request from the topic (compaction then forgets it); it
withdraws nothing already fired and reads as a `RerunRemoved`.

Where ownership is enforced (docs/teams.md), the ticker that refuses a change publishes right
after it, in the same transaction, the definition in force (or a tombstone when there is none)
with the header `RESTORES_HEADER`, so the latest record of the key is again what the ticker
holds, whatever compaction keeps. Such a record restating the definition already in force
changes nothing, for the ticker and for every reader (`is_restoration`).

A refused record is a `RejectedEvent` carrying the reason. Only the ticker dead-letters it
(`kairos.streams.wire.dead_letters`); the readers skip it and report it to their caller.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Message
from pydantic import ValidationError

from kairos.core.errors import KairosError
from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.run_id import REQUEST_ID_PATTERN, RERUN_MARK
from kairos.core.schedule import Schedule
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.wire.codec import Codec, DecodeError
from kairos.streams.wire.records import rerun_from_event, schedule_from_definition

MAX_SCHEDULE_EVENT_BYTES = 512 * 1024
"""The largest schedule event accepted. Every record the ticker derives from one (its changelog
record, its runs) is about as large, and all must stay well under Kafka's default limit of
1 MB per record: an unproducible changelog record would stop the partition."""

RESTORES_HEADER = "kairos-restores"
"""Marks a record the ticker published to restore a key after refusing the change at the offset
the header holds (ASCII digits)."""

IF_VERSION_HEADER = "kairos-if-version"
"""Marks a change that holds only while the schedule is at the version the header names (the
schedules-topic offset of its definition, ASCII digits): every change made from a definition
read, not written by its author (a pause or resume, `pause_on_failure`, the ticker's own
`after_last_run`). Once the schedule changed since, the ticker refuses it (a dead letter every
reader skips) and restores the key, so it never overwrites a newer edit, nor takes a definition
its reader should not have seen. The header is not signed: see docs/teams.md's limits."""

TOMBSTONE = "tombstone"
"""The `change` of a delete that came as a tombstone (a null value), not as an event."""

_DELETES_WITHOUT_DEFINITION = frozenset({"deleted", "unknown"})


class InvalidScheduleEventError(KairosError):
    """A record of the schedules topic breaks its contract; the message is the reason."""


class MisplacedScheduleEventError(InvalidScheduleEventError):
    """A record is on another partition than the one murmur2 assigns its key."""

    def __init__(self, schedule_id: str, partition: int, expected: int, partitions: int) -> None:
        self.schedule_id = schedule_id
        self.partition = partition
        self.expected = expected
        self.partitions = partitions
        super().__init__(
            f"schedule {schedule_id!r} is on partition {partition}, but murmur2 (Java's default "
            f"partitioner) puts it on partition {expected} of {partitions}: the producer used "
            "another partitioner. Set partitioner=murmur2_random in librdkafka clients (Python, "
            "Go, .NET, C), keep Java's default, and publish the event again"
        )


class ScheduleEventTooLargeError(InvalidScheduleEventError):
    """A schedule event over `MAX_SCHEDULE_EVENT_BYTES`: publishers refuse it, consumers too."""

    def __init__(self, schedule_id: str, size: int) -> None:
        self.schedule_id = schedule_id
        self.size = size
        super().__init__(
            f"the event of schedule {schedule_id!r} is {size} bytes, over the limit of "
            f"{MAX_SCHEDULE_EVENT_BYTES}: every record made from it must fit Kafka's record size "
            "limit; keep job parameters, labels and the description small"
        )


def check_event_size(schedule_id: str, value: bytes) -> None:
    """Raise `ScheduleEventTooLargeError` when an encoded event is over the limit."""
    if len(value) > MAX_SCHEDULE_EVENT_BYTES:
        raise ScheduleEventTooLargeError(schedule_id, len(value))


@dataclass(frozen=True)
class ScheduleUpserted:
    """The schedule exists after this record, defined by `schedule`."""

    schedule_id: str
    partition: int
    offset: int
    schedule: Schedule
    change: str
    """upserted, paused, resumed, or unknown (a kind newer than this reader)."""
    changed_at: datetime
    changed_by: str
    event_id: uuid.UUID
    revision: int
    reason: str | None


@dataclass(frozen=True)
class ScheduleDeleted:
    """The schedule is gone after this record: a `deleted` event, or a tombstone."""

    schedule_id: str
    partition: int
    offset: int
    change: str
    """deleted, unknown, or `TOMBSTONE`."""
    changed_at: datetime
    """The event's `changed_at`; a tombstone's is the record's timestamp."""
    changed_by: str | None
    """`None` for a tombstone, as are the fields below."""
    event_id: uuid.UUID | None
    revision: int
    reason: str | None


ScheduleChange = ScheduleUpserted | ScheduleDeleted


@dataclass(frozen=True)
class RerunRequested:
    """A re-run request of `request.schedule_id`, at `offset` of its schedule's partition."""

    partition: int
    offset: int
    request: RerunRequest
    appended_at: datetime
    """The record's timestamp: the broker's append time on a schedules topic that stamps it
    (docs/teams.md), the instant the ticker and the audit bound the request's end by."""

    @property
    def schedule_id(self) -> str:
        return self.request.schedule_id


@dataclass(frozen=True)
class RerunRemoved:
    """A tombstone under a re-run request's key: the topic forgets the request."""

    schedule_id: str
    partition: int
    offset: int


SchedulesRecord = ScheduleChange | RerunRequested | RerunRemoved
"""What a valid record of the schedules topic is."""


@dataclass(frozen=True)
class RejectedEvent:
    """A record that breaks the contract, as consumed, with why; it is never applied."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    error_class: str


def read_schedule_event(
    codec: Codec,
    *,
    key: bytes | None,
    value: bytes | None,
    partition: int,
    offset: int,
    timestamp: datetime,
    partitions: int,
) -> SchedulesRecord | RejectedEvent:
    """What the record at `partition`/`offset` of a schedules topic of `partitions` means.

    `timestamp` is the record's own, the instant of a tombstone's delete.
    """
    try:
        schedule_id, request_id = _schedule_id(key, partition, partitions)
        if request_id is not None:
            if value is None:
                return RerunRemoved(schedule_id, partition, offset)
            place = (partition, offset, timestamp)
            return _rerun(codec, schedule_id, request_id, value, place)
        if value is None:
            return ScheduleDeleted(
                schedule_id, partition, offset, TOMBSTONE, timestamp, None, None, 0, None
            )
        return _event(codec, schedule_id, value, partition, offset)
    except (DecodeError, InvalidScheduleEventError) as problem:
        return RejectedEvent(partition, offset, key, value, str(problem), type(problem).__name__)


def read_schedule_message(
    codec: Codec, message: Message, partitions: int
) -> SchedulesRecord | RejectedEvent:
    """`read_schedule_event` of a consumed record."""
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None  # set on every consumed record
    _, timestamp_ms = message.timestamp()
    return read_schedule_event(
        codec,
        key=message.key(),
        value=message.value(),
        partition=partition,
        offset=offset,
        timestamp=datetime.fromtimestamp(timestamp_ms / 1000, UTC),
        partitions=partitions,
    )


def _event(
    codec: Codec, schedule_id: str, value: bytes, partition: int, offset: int
) -> ScheduleChange:
    # Before decoding: the bytes of an oversized event are not worth reading.
    check_event_size(schedule_id, value)
    event = codec.decode(value)
    if event["schedule_id"] != schedule_id:
        raise InvalidScheduleEventError(
            f"the key {schedule_id!r} differs from the event's schedule_id "
            f"{event['schedule_id']!r}; key each event by its schedule id"
        )
    change: str = event["change"]
    if change == "rerun_requested" or event["rerun"] is not None:
        raise InvalidScheduleEventError(
            f"a re-run request must be keyed {schedule_id}{RERUN_MARK}<request id>, not by the "
            "schedule id alone (it would replace the definition under compaction)"
        )
    # The fields both kinds of change end with, in the order both keep them.
    stamp = (
        event["changed_at"],
        event["changed_by"],
        event["event_id"],
        event["revision"],
        event["reason"],
    )
    if event["definition"] is None:
        if change not in _DELETES_WITHOUT_DEFINITION:
            raise InvalidScheduleEventError(
                f"an event of change {change!r} must carry the whole definition; publish the "
                "schedule's full definition with every change but a delete"
            )
        return ScheduleDeleted(schedule_id, partition, offset, change, *stamp)
    schedule = _schedule_of(event["definition"])
    if schedule.id != schedule_id:
        raise InvalidScheduleEventError(
            f"the definition's id {schedule.id!r} differs from the key {schedule_id!r}"
        )
    # schedule.id: equal to the key's, and the one object every copy of the state keeps.
    return ScheduleUpserted(schedule.id, partition, offset, schedule, change, *stamp)


def _schedule_id(key: bytes | None, partition: int, partitions: int) -> tuple[str, str | None]:
    """The schedule id the key names, and the re-run request id when it names one."""
    if key is None:
        raise InvalidScheduleEventError("a schedule event must be keyed by its schedule id")
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidScheduleEventError("the key is not UTF-8 text") from None
    schedule_id, mark, request_id = text.partition(RERUN_MARK)
    if mark and not REQUEST_ID_PATTERN.fullmatch(request_id):
        raise InvalidScheduleEventError(
            f"the re-run request id {request_id!r} in the key is not 1-64 characters of "
            "letters, digits and . _ -"
        )
    # A re-run request lies where its schedule does, whatever its own key hashes to.
    expected = partition_for(schedule_id.encode("utf-8"), partitions)
    if partition != expected:
        raise MisplacedScheduleEventError(schedule_id, partition, expected, partitions)
    return schedule_id, (request_id if mark else None)


def _rerun(
    codec: Codec,
    schedule_id: str,
    request_id: str,
    value: bytes,
    place: tuple[int, int, datetime],
) -> RerunRequested:
    """The request a record carries; `place` is its partition, offset and timestamp."""
    check_event_size(schedule_id, value)
    event = codec.decode(value)
    rerun = event["rerun"]
    if event["change"] != "rerun_requested" or rerun is None:
        raise InvalidScheduleEventError(
            f"a record keyed {schedule_id}{RERUN_MARK}{request_id} must be a rerun_requested "
            "event carrying its request in `rerun`"
        )
    if event["schedule_id"] != schedule_id or rerun["request_id"] != request_id:
        raise InvalidScheduleEventError(
            f"the key names schedule {schedule_id!r} and request {request_id!r}, the event "
            f"{event['schedule_id']!r} and {rerun['request_id']!r}; key it by both"
        )
    if rerun["kind"] == "unknown":
        raise InvalidScheduleEventError(
            "the re-run kind is newer than this reader; upgrade the ticker to fire it"
        )
    start, end = rerun["start_at"], rerun["end_at"]
    if end < start or (rerun["kind"] == RerunKind.TRIGGER and end != start):
        raise InvalidScheduleEventError(
            f"the re-run's end_at {end.isoformat()} must be at or after start_at "
            f"{start.isoformat()}, and equal to it for a trigger"
        )
    if rerun["overlap"] == "unknown":
        raise InvalidScheduleEventError("the re-run's overlap policy is newer than this reader")
    partition, offset, appended_at = place
    return RerunRequested(partition, offset, rerun_from_event(event), appended_at)


def _schedule_of(definition: dict[str, Any]) -> Schedule:
    try:
        return schedule_from_definition(definition)
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or 'definition'}: {detail['msg']}"
            for detail in invalid.errors(include_url=False)
        )
        raise InvalidScheduleEventError(f"invalid definition: {problems}") from invalid
    except (ValueError, TypeError, KeyError, ArithmeticError) as invalid:
        # Whatever else untrusted bytes make the model raise; job_from_record's own errors
        # (params_json that is not a JSON object) already name the field.
        raise InvalidScheduleEventError(f"invalid definition: {invalid}") from invalid


def restores_mark(headers: object) -> bool:
    """Whether a record's headers (a list of pairs, as consumed) carry `RESTORES_HEADER`."""
    return isinstance(headers, list) and any(
        pair[0] == RESTORES_HEADER for pair in headers if isinstance(pair, tuple)
    )


def if_version_mark(headers: object) -> int | None:
    """The version a record's `IF_VERSION_HEADER` names; `None` without one. A value that is
    not a version names none (-1): the change holds at no version."""
    if not isinstance(headers, list):
        return None
    for pair in headers:
        if isinstance(pair, tuple) and pair[0] == IF_VERSION_HEADER:
            value = pair[1]
            digits = value.decode("ascii", errors="replace") if isinstance(value, bytes) else ""
            return int(digits) if digits.isdigit() and len(digits) <= 19 else -1
    return None


def is_restoration(restores: bool, change: SchedulesRecord, held: Schedule | None) -> bool:
    """Whether a record marked `restores` restates what is held (`held`: the definition in
    force before it, `None`: none): it then changes nothing and is not applied."""
    if not restores:
        return False
    if isinstance(change, ScheduleUpserted):
        return held is not None and change.schedule == held
    return isinstance(change, ScheduleDeleted) and held is None
