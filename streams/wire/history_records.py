"""The records of the history topics as the domain reads them: one decoding of each, shared by
the reader that reads the topics once (`kairos.streams.readers.history`) and the one that
follows them (the console's view).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Message

from kairos.core.audit import AdmissionDeadLetter, FiredRun, HistoryEvent, RunEventRecord
from kairos.core.audit_dependencies import run_waiting
from kairos.core.errors import KairosError
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.records import read_run_requested
from kairos.streams.wire.schedule_events import ScheduleChange, ScheduleUpserted, restores_mark
from kairos.streams.wire.signing import named_team


@dataclass(frozen=True)
class TopicRecord:
    """A consumed record with what decoding it needs, independent of the client's `Message`."""

    partition: int
    offset: int
    timestamp: datetime
    key: bytes | None
    value: bytes | None
    partitions: int
    """The topic's partition count at read time: where each key belongs."""
    appended: bool = False
    """`timestamp` is the broker's append time (the topic has LogAppendTime)."""
    restores: bool = False
    """The record bears the ticker's restoration mark (`schedule_events.RESTORES_HEADER`)."""
    team: str | None = None
    """The team its `kairos-team` header names, verified or not (`signing.named_team`)."""


class InvalidRecordError(KairosError):
    """A record decoded but breaks its topic's contract; the message is the reason."""


def topic_record(message: Message, partitions: int) -> TopicRecord:
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None  # set on every record
    timestamp_type, timestamp_ms = message.timestamp()
    return TopicRecord(
        partition=partition,
        offset=offset,
        timestamp=datetime.fromtimestamp(timestamp_ms / 1000, UTC),
        key=message.key(),
        value=message.value(),
        partitions=partitions,
        appended=timestamp_type == TIMESTAMP_LOG_APPEND_TIME,
        restores=restores_mark(message.headers()),
        team=named_team(message.headers()),
    )


def history_event(change: ScheduleChange, signed_by: str | None = None) -> HistoryEvent:
    """The change as the audit replays it; `signed_by` is the team a signed ticker verified
    when it took it (`Judged.verified_team`), if one did."""
    return HistoryEvent(
        schedule_id=change.schedule_id,
        partition=change.partition,
        offset=change.offset,
        change=change.change,
        definition=change.schedule if isinstance(change, ScheduleUpserted) else None,
        changed_at=change.changed_at,
        changed_by=change.changed_by,
        reason=change.reason,
        revision=change.revision,
        signed_by=signed_by,
    )


def record_value(record: TopicRecord) -> bytes:
    if record.value is None:
        raise InvalidRecordError("a null value: runs and run events are never deleted")
    return record.value


def fired_run(codecs: Codecs, record: TopicRecord) -> FiredRun:
    """The run a runs-topic record commits; `DecodeError` or `InvalidRecordError` if none."""
    run = read_run_requested(codecs.run_requested.decode(record_value(record)))
    return FiredRun(
        run_id=run.run_id,
        schedule_id=run.schedule_id,
        nominal=run.nominal_at,
        due_at=run.due_at,
        fired_at=run.fired_at,
        lateness_ms=run.lateness_ms,
        attempt=run.attempt,
        ticker_instance=run.ticker_instance,
        schedule_offset=run.schedule_offset,
        partition=record.partition,
        offset=record.offset,
        owner=run.owner,
        appended_at=record.timestamp if record.appended else None,
        waiting=run_waiting(run.upstream, run.upstream_wait_ms, run.upstream_timeout, run.timezone),
    )


def run_event(codecs: Codecs, record: TopicRecord) -> RunEventRecord:
    """The event a run-events record holds; `DecodeError` or `InvalidRecordError` if none."""
    event = codecs.run_event.decode(record_value(record))
    return RunEventRecord(
        run_id=event["run_id"],
        schedule_id=event["schedule_id"],
        kind=event["kind"],
        attempt=event["attempt"],
        source=event["executor_instance"],
        nominal=event["nominal_at"],
        fired_at=event["fired_at"],
        started_at=event["started_at"],
        finished_at=event["finished_at"],
        reason=event["reason"],
        next_attempt_at=event["next_attempt_at"],
        partition=record.partition,
        offset=record.offset,
        appended_at=record.timestamp if record.appended else None,
    )


@dataclass(frozen=True)
class RefusedChange:
    """A schedule change a ticker refused (the ownership rules, a quota), as its dead letter
    tells it."""

    key: str
    source_partition: int
    source_offset: int
    reason: str
    reported_to: str | None
    dead_lettered_at: datetime


def refused_change(letter: dict[str, Any]) -> RefusedChange:
    key = letter["key"]
    return RefusedChange(
        key="" if key is None else key.decode("utf-8", errors="replace"),
        source_partition=letter["source_partition"],
        source_offset=letter["source_offset"],
        reason=letter["reason"],
        reported_to=letter["reported_to"],
        dead_lettered_at=letter["dead_lettered_at"],
    )


def admission_dead_letter(letter: dict[str, Any]) -> AdmissionDeadLetter:
    return AdmissionDeadLetter(
        source_partition=letter["source_partition"],
        source_offset=letter["source_offset"],
        error_class=letter["error_class"],
        reason=letter["reason"],
        dead_lettered_at=letter["dead_lettered_at"],
    )
