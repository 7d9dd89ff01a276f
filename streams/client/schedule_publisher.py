"""Publishing schedule changes: validated before sending, acknowledged before returning.

A producer app needs three lines:

    settings = KafkaSettings(bootstrap_servers="broker:9092")
    with SchedulesClient(settings, changed_by="billing") as client:
        client.upsert(Schedule(id="settlement-report", cron="0 2 * * *", timezone="Europe/Paris"))
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

from confluent_kafka import KafkaError

from kairos.core.errors import KairosError
from kairos.core.ownership import Change
from kairos.core.rerun_request import RerunRequest
from kairos.core.run_id import RERUN_MARK
from kairos.core.schedule import Schedule, parse_schedule
from kairos.streams.client.change_precheck import OwnershipPrecheck
from kairos.streams.client.publisher import AcknowledgedPublisher
from kairos.streams.kafka.delivery import ANY_PARTITION, Outgoing, Undelivered
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.held_schedules import StoredSchedule
from kairos.streams.readers.schedule_reader import ScheduleReader
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.records import schedule_event_record
from kairos.streams.wire.schedule_events import IF_VERSION_HEADER, check_event_size

ChangeKind = Literal["upserted", "deleted", "paused", "resumed"]


class PublishError(KairosError):
    """The broker did not acknowledge a schedule change; nothing may be assumed published."""

    retryable = True
    """Publishing the same change again is safe: the schedule's last record wins."""

    def __init__(self, schedule_id: str, reason: str, kafka_error: KafkaError | None = None):
        super().__init__(f"schedule {schedule_id!r} was not published: {reason}")
        self.schedule_id = schedule_id
        self.reason = reason
        self.kafka_error = kafka_error


class ScheduleNotFoundError(KairosError):
    """No current schedule has this id on the schedules topic."""

    def __init__(self, schedule_id: str, topic: str) -> None:
        super().__init__(
            f"no schedule {schedule_id!r} on {topic}; `kairos schedules list` shows the schedules"
        )
        self.schedule_id = schedule_id
        self.topic = topic


@dataclass(frozen=True)
class ScheduleChange:
    """One schedule event to publish, checked against the schedules topic's contract.

    Every change but a delete carries the whole definition after the change, so that the
    latest record of a key is the schedule's state whatever compaction removed: a `paused`
    change's definition has `paused` set, a `resumed` one's has it clear. `revision` is the
    revision read before the change plus one, or 0 when the publisher did not read it.
    """

    change: ChangeKind
    schedule_id: str
    definition: Schedule | None = None
    revision: int = 0
    if_version: int | None = None
    """The version (schedules offset) of the definition it was made from: the ticker takes the
    change only while it holds that version (`IF_VERSION_HEADER`); `None`: unconditional."""

    def __post_init__(self) -> None:
        if (self.definition is None) != (self.change == "deleted"):
            raise ValueError(
                f"a {self.change} change of {self.schedule_id!r} must "
                f"{'not ' if self.change == 'deleted' else ''}carry a definition"
            )
        if self.definition is None:
            return
        if self.definition.id != self.schedule_id:
            raise ValueError(
                f"the definition's id {self.definition.id!r} differs from {self.schedule_id!r}"
            )
        if self.change in ("paused", "resumed") and self.definition.paused != (
            self.change == "paused"
        ):
            raise ValueError(
                f"a {self.change} change of {self.schedule_id!r} must carry paused="
                f"{self.change == 'paused'}"
            )


AWAIT_JUDGED_S = 10.0
"""How long a pause or resume waits for a signed ticker to judge the changes it read."""
AWAIT_POLL_S = 0.5


class ScheduleAwaitingTickerError(KairosError):
    """A schedule has changes its signed ticker has not judged: what it holds is not known."""

    retryable = True

    def __init__(self, schedule_id: str, offsets: Sequence[int], waited_s: float) -> None:
        self.schedule_id = schedule_id
        self.offsets = tuple(offsets)
        super().__init__(
            f"schedule {schedule_id!r} has {len(offsets)} change(s) its ticker has not judged "
            f"after {waited_s:g}s (offsets {', '.join(map(str, offsets))}): a pause or "
            "resume is made on the definition the ticker holds, which is not known until then. "
            "Retry once the ticker has caught up (`kairos partitions` shows each partition's "
            "owner and lag)"
        )


class SchedulesClient(AcknowledgedPublisher):
    """Publishes schedule events to the compacted schedules topic, and reads it back.

    Every change is validated before anything is sent, and every call that publishes returns
    only once the broker acknowledged every event (acks=all, idempotent producer); otherwise it
    raises `PublishError`. `pause`, `resume`, `delete` and `get` raise `ScheduleNotFoundError`
    for an id without a current schedule.
    """

    role = TopicRole.SCHEDULES

    def __init__(
        self,
        settings: KafkaSettings,
        changed_by: str,
        codecs: Codecs | None = None,
        timeout_s: float = 30.0,
        await_judged_s: float = AWAIT_JUDGED_S,
    ) -> None:
        super().__init__(settings, changed_by, codecs, timeout_s)
        self._partitions = settings.layout.schedules_partitions
        self._await_judged_s = await_judged_s
        self._precheck = (
            None
            if self._signer is None
            else OwnershipPrecheck(settings, self._signer.team, timeout_s)
        )
        self._reader = ScheduleReader(settings, self._codecs, timeout_s)

    def upsert(self, schedule: Schedule | dict[str, Any], reason: str | None = None) -> None:
        """Create or replace a schedule (a dict is validated as a `Schedule` first)."""
        valid = schedule if isinstance(schedule, Schedule) else parse_schedule(schedule)
        self.publish([ScheduleChange("upserted", valid.id, valid)], reason)

    def upsert_all(self, schedules: Iterable[Schedule], reason: str | None = None) -> None:
        """Create or replace many schedules with one wait for the broker's acknowledgements."""
        self.publish([ScheduleChange("upserted", s.id, s) for s in schedules], reason)

    def pause(self, schedule_id: str, reason: str | None = None) -> None:
        """Publish the current definition with `paused` set: no run fires until `resume`."""
        self._set_paused(schedule_id, True, reason)

    def resume(self, schedule_id: str, reason: str | None = None) -> None:
        """Publish the current definition with `paused` clear."""
        self._set_paused(schedule_id, False, reason)

    def delete(self, schedule_id: str, reason: str | None = None) -> None:
        """Delete a schedule: a `deleted` event for the audit trail, then a tombstone."""
        current = self._held(schedule_id, Change.DELETE)
        deleted = ScheduleChange("deleted", schedule_id, revision=current.revision + 1)
        self.publish([deleted], reason)

    def get(self, schedule_id: str) -> StoredSchedule:
        """The schedule's current state, reading only the partition it lives on."""
        stored = self._reader.read_one(schedule_id)
        if stored is None:
            raise ScheduleNotFoundError(schedule_id, self.topic)
        return stored

    def list(self) -> builtins.list[StoredSchedule]:
        """Every current schedule, by id."""
        return sorted(self._reader.read_all().schedules.values(), key=lambda s: s.id)

    def publish(self, changes: Sequence[ScheduleChange], reason: str | None = None) -> None:
        """Publish prepared changes in order; every one is encoded before the first is sent."""
        records: builtins.list[_Outgoing] = []
        for change in changes:
            sid = change.schedule_id
            marked = () if change.if_version is None else _if_version(change.if_version)
            records.append(_Outgoing(sid, sid, self._event(change, reason), headers=marked))
            if change.change == "deleted":
                records.append(_Outgoing(sid, sid, None))
        self._deliver_all(records)

    def request_rerun(self, request: RerunRequest) -> int:
        """Publish a re-run request for the ticker owning the schedule to fire; the partition.

        Keyed `<schedule id>~rerun-<request id>` on the schedule's own partition (see
        `kairos.streams.wire.schedule_events`); `ScheduleNotFoundError` when the schedule is gone.
        """
        self._held(request.schedule_id, Change.RERUN)
        event = schedule_event_record(
            request.schedule_id,
            "rerun_requested",
            None,
            changed_by=self.changed_by,
            changed_at=request.requested_at,
            reason=request.reason,
            rerun=request,
        )
        value = self._codecs.schedule_event.encode(event)
        partition = partition_for(request.schedule_id, self._partitions)
        key = f"{request.schedule_id}{RERUN_MARK}{request.request_id}"
        self._deliver_all([_Outgoing(request.schedule_id, key, value, partition)])
        return partition

    def _set_paused(self, schedule_id: str, paused: bool, reason: str | None) -> None:
        # Made from the definition the ticker holds, never from the key's latest record (which
        # may be another team's change its ticker refuses), and conditional on its version: a
        # change taken between the read and this one makes the ticker refuse this one (a
        # StaleChangeError dead letter) rather than overwrite it with the older definition.
        current = self._held(schedule_id, Change.PAUSE if paused else Change.RESUME)
        definition = current.schedule.model_copy(update={"paused": paused})
        change: ChangeKind = "paused" if paused else "resumed"
        publishing = ScheduleChange(
            change, schedule_id, definition, current.revision + 1, if_version=current.offset
        )
        self.publish([publishing], reason)

    def _held(self, schedule_id: str, change: Change) -> StoredSchedule:
        """The schedule its ticker holds once it judged every change of it read (a signed
        ticker's verdict on a change is not known before), waiting up to `await_judged_s`;
        `ChangeRefusedError` when a signed ticker would refuse this client's `change` of it."""
        deadline = time.monotonic() + self._await_judged_s
        while True:
            snapshot = self._reader.read_partition_of(schedule_id)
            awaiting = snapshot.awaiting.get(schedule_id, [])
            if not awaiting:
                break
            if time.monotonic() > deadline:
                raise ScheduleAwaitingTickerError(schedule_id, awaiting, self._await_judged_s)
            time.sleep(AWAIT_POLL_S)
        stored = snapshot.schedules.get(schedule_id)
        if stored is None:
            raise ScheduleNotFoundError(schedule_id, self.topic)
        if self._precheck is not None and snapshot.signed(stored.partition):
            carries_definition = change in (Change.PAUSE, Change.RESUME)
            owner = stored.schedule.owner if carries_definition else None
            self._precheck.check(schedule_id, change, stored, owner)
        return stored

    def _event(self, change: ScheduleChange, reason: str | None) -> bytes:
        event = schedule_event_record(
            change.schedule_id,
            change.change,
            change.definition,
            changed_by=self.changed_by,
            changed_at=datetime.now(UTC),
            reason=reason,
            revision=change.revision,
        )
        value = self._codecs.schedule_event.encode(event)
        # Refused here, before anything is sent, rather than by every consumer of the topic.
        check_event_size(change.schedule_id, value)
        return value

    def _deliver_all(self, records: Sequence[_Outgoing]) -> None:
        self._deliver(
            [
                Outgoing(record.key.encode("utf-8"), record.value, record.partition, record.headers)
                for record in records
            ],
            partial(self._failed, records),
        )

    def _failed(self, records: Sequence[_Outgoing], failure: Undelivered) -> PublishError:
        more = f" (and {failure.more} more events)" if failure.more else ""
        reason = failure.reason
        if reason is None:
            reason = f"no acknowledgement within {self._timeout_s}s"
        return PublishError(records[failure.index].schedule_id, reason + more, failure.kafka_error)


@dataclass(frozen=True)
class _Outgoing:
    schedule_id: str
    key: str
    value: bytes | None
    partition: int = ANY_PARTITION
    """The key's partition (murmur2), unless the record says where it belongs."""
    headers: tuple[tuple[str, bytes], ...] = ()


def _if_version(version: int) -> tuple[tuple[str, bytes], ...]:
    return ((IF_VERSION_HEADER, str(version).encode()),)
