"""The ticker changelog's format, its writer and its reader: the one owner of all three.

Each changelog partition holds, per schedule id `<id>`:

- the key `<id>` with its `TickerStateRecord` (written when the definition changes; a tombstone
  when the schedule is deleted);
- the key `<id>#progress` with its `TickerProgress` (written on every decision; a deleted or
  quarantined schedule keeps one with `next_nominal_at` null as its floor, `Floor`), whose header
  `kairos.due_ms` carries the be64 due instant, so a restore copies bytes into the store without
  decoding them.

Besides, the key `#checkpoint` (no schedule id contains `#`) holds the be64 of the next
schedules-topic offset the partition's state reflects, written in every transaction that moved
it. docs/wire-format.md describes the same records for readers outside Kairos.

The store (`streams/state/state_store.py`) holds exactly the bytes of these values: a `StateWrite`
is both what the store applies and what the changelog carries, so the writer turns writes into
records and the reader turns records back into the same writes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from confluent_kafka import KafkaError, Message

from kairos.core.calendar_rules import CalendarLookup
from kairos.core.errors import KairosError
from kairos.core.firing import ScheduleState
from kairos.core.instants import epoch_ms
from kairos.core.quotas import Trigger, Use, schedule_use
from kairos.core.rerun_request import RerunProgress
from kairos.streams.state.state_store import StateWrite
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.records import definition_record, shared_definition_of
from kairos.streams.wire.run_encoder import ProgressEncoder

PROGRESS_SUFFIX = "#progress"
"""A progress record's key is `<id>#progress`: '#' never occurs in a schedule id, so the two keys
of a schedule never collide."""
CHECKPOINT_KEY = "#checkpoint"
"""The changelog key of a partition's schedules-offset checkpoint (no schedule id has a '#')."""
_CHECKPOINT_KEY_BYTES = CHECKPOINT_KEY.encode()
DUE_HEADER = "kairos.due_ms"
_BE64 = struct.Struct(">q")

Headers = list[tuple[str, str | bytes | None]]
ChangelogRecord = tuple[str, bytes | None, Headers | None, bool]
"""(key, value, headers, is_last): one record to produce, `is_last` on a partition's last."""


@dataclass(frozen=True, slots=True)
class Floor:
    """What a deleted or quarantined schedule leaves of its id: its progress, kept."""

    version: int
    """The schedules-topic offset of the definition it was removed under."""
    last_decided: datetime | None
    """Its last decided occurrence: the id created again decides none at or before it."""
    last_owner: str | None
    """The team that owned it: only that team or an administrators' team creates the id again
    (`kairos.core.ownership.refusal`)."""

    @property
    def keeps_anything(self) -> bool:
        """Whether it is worth a record: without either, a deletion leaves nothing behind."""
        return self.last_decided is not None or self.last_owner is not None


class RestoreError(KairosError):
    """A take-over could not restore a partition yet; it is tried again later."""

    retryable = True

    def __init__(self, partition: int, reason: str) -> None:
        super().__init__(f"restoring partition {partition} from the changelog failed: {reason}")
        self.partition = partition
        self.reason = reason


@lru_cache(maxsize=65_536)
def changelog_headers(due: int | None) -> Headers:
    """The due instant rides beside each progress value, so restore never decodes values.

    Cached, so shared: a herd's progress records share their due instants. The producer copies
    headers; nobody may change the list.
    """
    return [] if due is None else [(DUE_HEADER, _BE64.pack(due))]


def _due_from_headers(message: Message) -> int | None:
    for header in message.headers() or []:
        value = header[1]
        if header[0] == DUE_HEADER and isinstance(value, bytes):
            return int(_BE64.unpack(value)[0])
    return None


def checkpoint_value(schedules_offset: int) -> bytes:
    """The checkpoint record's value: be64 of the next schedules-topic offset to apply."""
    return _BE64.pack(schedules_offset)


def _checkpoint_from(message: Message) -> int:
    value = message.value()
    if value is None or len(value) != _BE64.size:
        raise RestoreError(
            message.partition() or 0, f"checkpoint at offset {message.offset()} is malformed"
        )
    return int(_BE64.unpack(value)[0])


def changelog_records(
    writes: Sequence[StateWrite], checkpoint: int | None
) -> Iterator[ChangelogRecord]:
    """One partition's changelog records for its `writes` and checkpoint, in produce order.

    A definition only when it changed (or its tombstone), the progress always, then the
    schedules-offset checkpoint when it moved. The partition's records are delivered in order,
    so the one marked last ends the partition's part of the transaction.
    """
    last = len(writes) - 1 if checkpoint is None else -1
    for position, write in enumerate(writes):
        schedule_id = write.schedule_id
        if write.deleted or write.definition is not None:
            yield schedule_id, write.definition, None, False
        # The key built inline, not by a helper: a herd writes one progress record per fire.
        yield (
            schedule_id + PROGRESS_SUFFIX,
            write.progress,
            changelog_headers(write.due_ms),
            position == last,
        )
    if checkpoint is not None:
        yield CHECKPOINT_KEY, checkpoint_value(checkpoint), None, True


@dataclass(frozen=True, slots=True)
class ChangelogBatch:
    """What one batch of changelog messages brings a store to."""

    writes: list[StateWrite]
    next_offset: int | None
    """The changelog offset past the batch's last record; `None` for a batch without records."""
    schedules_offset: int | None
    """The last schedules-offset checkpoint in the batch, if any."""
    reached_end: bool
    """Whether the consumer reported the end of the partition."""


def read_changelog(messages: Sequence[Message], partition: int) -> ChangelogBatch:
    """The writes a batch of changelog messages holds; `RestoreError` on a consumer error."""
    writes: list[StateWrite] = []
    reached_end = False
    next_offset: int | None = None
    schedules_offset: int | None = None
    for message in messages:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                reached_end = True
                continue
            raise RestoreError(partition, error.str())
        key = message.key()
        assert key is not None, "changelog records are keyed by schedule id"
        if key == _CHECKPOINT_KEY_BYTES:
            schedules_offset = _checkpoint_from(message)
        else:
            write = _restored_write(key.decode(), message)
            last = writes[-1] if writes else None
            if last is not None and _completes(last, write):
                # The progress a definition is written with: one write of the two, so the store
                # neither marks the schedule not due nor looks up the progress it had.
                writes[-1] = StateWrite(
                    last.schedule_id, last.definition, write.progress, write.due_ms
                )
            else:
                writes.append(write)
        offset = message.offset()
        assert offset is not None
        next_offset = offset + 1
    return ChangelogBatch(writes, next_offset, schedules_offset, reached_end)


def _completes(definition: StateWrite, progress: StateWrite) -> bool:
    """Whether `progress` is the progress record that follows `definition`'s in the changelog."""
    return (
        progress.schedule_id == definition.schedule_id
        and definition.progress is None
        and definition.definition is not None
        and progress.definition is None
        and not progress.deleted
    )


def _restored_write(key: str, message: Message) -> StateWrite:
    value = message.value()
    if key.endswith(PROGRESS_SUFFIX):
        schedule_id = key[: -len(PROGRESS_SUFFIX)]
        if value is None:
            return StateWrite(schedule_id, None, None, None, deleted=True)
        return StateWrite(schedule_id, None, value, _due_from_headers(message))
    if value is None:
        return StateWrite(key, None, None, None, deleted=True)
    # A definition is always followed by its progress in the same transaction, which sets the
    # due entry; until then the schedule is not due.
    return StateWrite(key, value, None, None)


def due_ms(state: ScheduleState | None) -> int | None:
    if state is None:
        return None
    due = state.due_at
    return None if due is None else epoch_ms(due)


class StateWriteEncoder:
    """The `StateWrite`s of schedule states and floors: exactly the changelog's bytes."""

    def __init__(self, codecs: Codecs) -> None:
        self._state_codec = codecs.ticker_state
        self._progress_codec = codecs.ticker_progress
        self._progress = ProgressEncoder(codecs.ticker_progress)

    def state_write(
        self, schedule_id: str, state: ScheduleState | None, redefined: bool
    ) -> StateWrite:
        """The definition when it was redefined, the progress always; `None`: a deletion."""
        if state is None:
            return StateWrite(schedule_id, None, None, None, deleted=True)
        definition = self._state_codec.encode(state_record(state)) if redefined else None
        return StateWrite(schedule_id, definition, self._progress.encode(state), due_ms(state))

    def floor_write(self, schedule_id: str, floor: Floor) -> StateWrite:
        """A deletion that keeps the id's floor: its last decided occurrence and last owner."""
        progress = self._progress_codec.encode(floor_record(schedule_id, floor))
        return StateWrite(schedule_id, None, progress, None, deleted=True)


def state_from_stored(
    codecs: Codecs, definition: bytes, progress: bytes | None, calendars: CalendarLookup
) -> ScheduleState | None:
    """The state a store's (definition, progress) bytes hold; `None` for a deleted schedule."""
    return state_from_records(
        codecs.ticker_state.decode(definition),
        None if progress is None else codecs.ticker_progress.decode(progress),
        calendars,
    )


def quota_use_from_stored(codecs: Codecs, definition: bytes) -> tuple[str, Use] | None:
    """The owner of a store's definition bytes and what it takes of the owner's quota; `None`
    for a deleted or ownerless schedule. Decodes the record only: no schedule is built."""
    held = codecs.ticker_state.decode(definition)["definition"]
    if held is None or held["owner"] is None:
        return None
    every_ms = held["every_ms"]
    trigger = Trigger.of_fields(
        None if every_ms is None else timedelta(milliseconds=every_ms),
        held["cron"],
        held["timezone"],
        rolls=held["roll"] is not None,
        defers=bool(held["blackout"]) and held["blackout_action"] == "defer",
    )
    return held["owner"], schedule_use(trigger)


def floor_from_stored(codecs: Codecs, progress: bytes) -> Floor:
    """The floor a deleted schedule's stored progress keeps."""
    record = codecs.ticker_progress.decode(progress)
    return Floor(record["schedule_offset"], record["last_decided_nominal_at"], record["last_owner"])


def owner_from_stored(codecs: Codecs, definition: bytes) -> str | None:
    """The owner a store's definition bytes name, read from the record alone: it answers for a
    definition the schedule model no longer accepts (a quarantine after bounds tightened)."""
    held = codecs.ticker_state.decode(definition)["definition"]
    return None if held is None else held["owner"]


def state_record(state: ScheduleState) -> dict[str, Any]:
    """The changelog value of the definition a ticker holds (written when it changes)."""
    return {
        "schedule_id": state.schedule_id,
        "definition": definition_record(state.schedule, schedule_id=state.schedule_id),
        "schedule_offset": state.version,
        "rerun_request_id": None if state.rerun is None else state.rerun.request_id,
        "rerun_fired_through_at": None if state.rerun is None else state.rerun.fired_through,
        "reruns_done": list(state.reruns_done),
    }


def _rerun_progress(definition: dict[str, Any]) -> RerunProgress | None:
    request_id: str | None = definition["rerun_request_id"]
    through: datetime | None = definition["rerun_fired_through_at"]
    if request_id is None or through is None:
        return None
    return RerunProgress(request_id, through)


def progress_record(state: ScheduleState) -> dict[str, Any]:
    """The changelog value of a schedule's firing progress (what `ProgressEncoder` writes)."""
    return {
        "schedule_id": state.schedule_id,
        "schedule_offset": state.version,
        "last_decided_nominal_at": state.last_decided_nominal,
        "next_nominal_at": state.next_nominal,
        "settle_before_at": state.settle_before,
        "runs_fired": state.runs_fired,
        "waiting_nominals_at": list(state.waiting),
        "last_owner": None,
    }


def floor_record(schedule_id: str, floor: Floor) -> dict[str, Any]:
    """The progress a deleted schedule leaves: its last decided occurrence and last owner,
    nothing next."""
    return {
        "schedule_id": schedule_id,
        "schedule_offset": floor.version,
        "last_decided_nominal_at": floor.last_decided,
        "next_nominal_at": None,
        "settle_before_at": None,
        "runs_fired": 0,
        "waiting_nominals_at": [],
        "last_owner": floor.last_owner,
    }


def state_from_records(
    definition: dict[str, Any],
    progress: dict[str, Any] | None,
    calendars: CalendarLookup | None = None,
) -> ScheduleState | None:
    """A ticker's state from its two changelog values; `None` for a deleted schedule."""
    if definition["definition"] is None:
        return None
    schedule_id, schedule = shared_definition_of(definition["definition"])
    if progress is None or progress["schedule_offset"] != definition["schedule_offset"]:
        raise ValueError(
            f"schedule {schedule_id!r}: no progress recorded for version "
            f"{definition['schedule_offset']}; the changelog is incomplete"
        )
    return ScheduleState(
        schedule=schedule,
        schedule_id=schedule_id,
        version=definition["schedule_offset"],
        next_nominal=progress["next_nominal_at"],
        last_decided_nominal=progress["last_decided_nominal_at"],
        settle_before=progress["settle_before_at"],
        rerun=_rerun_progress(definition),
        reruns_done=tuple(definition["reruns_done"]),
        runs_fired=progress["runs_fired"],
        waiting=tuple(progress["waiting_nominals_at"]),
        calendars=calendars,
    )
