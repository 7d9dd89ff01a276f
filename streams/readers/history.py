"""Everything the topics remember, read for replay and audit: every record, in topic order.

Unlike `kairos.streams.readers.schedule_reader`, which folds the schedules topic into current state,
this reader keeps each event: the schedules topic is compacted only after
`min.compaction.lag.ms` (90 days by default), so until then it is the complete change history.
Every read is read_committed (aborted fires of a fenced ticker are never seen) and ends at each
partition's end as of the read. It starts at the beginning of each partition, or, given `since`,
at the first record the broker appended at or after it (`offsets_for_times` over the append
times the runs, run-events and dead-letter topics stamp), so that a read of a recent window
costs the window, not the history. A topic whose records carry their producers' clocks instead
(created by an older release) is read from the beginning, with a warning: a producer's clock
cannot say where a window starts.

The reader never writes: records that are not valid events are reported in `rejected` (the
ticker dead-letters them), and skipped exactly as the ticker skips them: schedule events are
read through `kairos.streams.wire.schedule_events`, as the ticker reads them. Each change's signing
team is what the tickers' group committed says a signed ticker verified (`Judged`), not what
the reader makes of the signature: keys registered then may be gone now.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from kairos.core.audit import (
    AdmissionDeadLetter,
    FiredRun,
    HistoryEvent,
    OpenTransaction,
    RequestedRerun,
    RunEventRecord,
)
from kairos.core.run_id import run_id_prefix
from kairos.core.schedule import Schedule
from kairos.streams.kafka.ownership import NOT_JUDGED, Judged
from kairos.streams.kafka.partition_status import PartitionStatusError, read_judged
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import TICKER_GROUP, KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.topic_scan import ProgressCallback, TopicScan
from kairos.streams.wire.codec import Codecs, DecodeError, make_codecs
from kairos.streams.wire.dead_letters import NOTIFICATION_FAILED, REFUSED_CHANGES
from kairos.streams.wire.history_records import (
    InvalidRecordError,
    RefusedChange,
    TopicRecord,
    admission_dead_letter,
    fired_run,
    history_event,
    record_value,
    refused_change,
    run_event,
)
from kairos.streams.wire.schedule_events import (
    RejectedEvent,
    RerunRemoved,
    RerunRequested,
    ScheduleUpserted,
    is_restoration,
    read_schedule_event,
)

logger = logging.getLogger(__name__)

_T = TypeVar("_T", FiredRun, RunEventRecord)


@dataclass(frozen=True)
class RejectedRecord:
    """A record that is not a valid event of its topic; it was skipped."""

    topic: str
    partition: int
    offset: int
    reason: str


class HistoryReader:
    """Reads the schedules, runs and run-events topics of one deployment from the beginning.

    `on_progress` is called after every batch of each read. A read fails with
    `HistoryReadError` when the broker sends nothing for `idle_timeout_s`. Rejected records
    accumulate in `rejected` across reads, and the partitions an `..._and_unsettled` read found
    held up by an open transaction in `open_transactions`.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        codecs: Codecs | None = None,
        on_progress: ProgressCallback | None = None,
        idle_timeout_s: float = 30.0,
    ) -> None:
        self._settings = settings
        self._scan = TopicScan(settings, on_progress, idle_timeout_s)
        # The deployment's own: a reader knows no other (the tickers' --group-id).
        self._ticker_group = settings.deployment_id(TICKER_GROUP)
        self._codecs = codecs or make_codecs()
        self._idle_timeout_s = idle_timeout_s
        self.rejected: list[RejectedRecord] = []
        self.reruns: list[RequestedRerun] = []
        """The re-run requests `schedule_events` read, in topic order per partition."""
        self.open_transactions: list[OpenTransaction] = []

    def topic(self, role: TopicRole) -> str:
        return self._settings.layout.name(role)

    def schedule_events(
        self, schedule_id: str | None = None, refusals: list[RefusedChange] | None = None
    ) -> list[HistoryEvent]:
        """Every valid schedule event, each schedule's in topic order; one schedule's only when
        `schedule_id` is given (reading just the partition its id hashes to). `refusals` are
        what `refused_changes()` returned, when the caller has read them already."""
        topic = self.topic(TopicRole.SCHEDULES)
        found: list[HistoryEvent] = []
        # What the tickers did not take: changes they refused, and their own restorations.
        taken_back = self.refused_changes() if refusals is None else refusals
        refused = {(c.source_partition, c.source_offset) for c in taken_back}
        judged = self._judged()
        held: dict[str, Schedule | None] = {}
        for record in self._read(topic, schedule_id):
            change = read_schedule_event(
                self._codecs.schedule_event,
                key=record.key,
                value=record.value,
                partition=record.partition,
                offset=record.offset,
                timestamp=record.timestamp,
                partitions=record.partitions,
            )
            if isinstance(change, RejectedEvent):
                self._reject(topic, record, change.reason)
            elif (
                (schedule_id is not None and change.schedule_id != schedule_id)
                or (record.partition, record.offset) in refused
                or is_restoration(record.restores, change, held.get(change.schedule_id))
            ):
                continue
            elif isinstance(change, RerunRequested):
                self.reruns.append(
                    RequestedRerun(
                        change.partition, change.offset, change.request, change.appended_at
                    )
                )
            elif not isinstance(change, RerunRemoved):
                verdict = judged.get(record.partition, NOT_JUDGED)
                found.append(
                    history_event(change, verdict.verified_team(record.offset, record.team))
                )
                held[change.schedule_id] = (
                    change.schedule if isinstance(change, ScheduleUpserted) else None
                )
        return found

    def _judged(self) -> dict[int, Judged]:
        """What the tickers' group committed per partition; none (no change shows a signing
        team) when it cannot be read, with a warning naming the grant."""
        try:
            return read_judged(self._settings, self._ticker_group, self._idle_timeout_s)
        except PartitionStatusError as error:
            logger.warning(
                "no signing team is shown: %s (a reader needs DESCRIBE on the tickers' group "
                "%s; `kairos acls` lists it)",
                error,
                self._ticker_group,
            )
            return {}

    def runs(
        self,
        run_id: str | None = None,
        keep: Callable[[FiredRun], bool] | None = None,
        since: datetime | None = None,
        schedule_id: str | None = None,
    ) -> list[FiredRun]:
        """Every committed `RunRequested` (of `run_id` only, when given) that `keep` accepts,
        appended at or after `since` when given; of one schedule only with `schedule_id`, whose
        run ids alone are decoded."""
        return self._committed(
            TopicRole.RUNS, self._as_run, run_id, keep, since, key_prefix=_run_ids_of(schedule_id)
        )

    def runs_and_unsettled(
        self,
        keep: Callable[[FiredRun], bool] | None = None,
        since: datetime | None = None,
        keep_unsettled: Callable[[FiredRun], bool] | None = None,
        schedule_id: str | None = None,
    ) -> tuple[list[FiredRun], list[FiredRun]]:
        """The committed `RunRequested`s `keep` accepts, and those past the last stable offset
        `keep_unsettled` (or else `keep`) accepts.

        A partition whose last stable offset is below its high watermark as the read begins
        holds records of a transaction still open (or behind one): the reader reads them
        read_uncommitted, since they may yet be committed or aborted, and notes the partition
        in `open_transactions`.
        """
        return self._with_unsettled(
            TopicRole.RUNS,
            self._as_run,
            (keep, keep_unsettled or keep),
            since,
            _run_ids_of(schedule_id),
        )

    def run_events(
        self,
        run_id: str | None = None,
        keep: Callable[[RunEventRecord], bool] | None = None,
        since: datetime | None = None,
        schedule_id: str | None = None,
    ) -> list[RunEventRecord]:
        """Every committed run event (of `run_id` only, when given) that `keep` accepts,
        appended at or after `since` when given; of one schedule only with `schedule_id`."""
        return self._committed(
            TopicRole.RUN_EVENTS,
            self._as_run_event,
            run_id,
            keep,
            since,
            key_prefix=_run_ids_of(schedule_id),
        )

    def run_events_and_unsettled(
        self,
        keep: Callable[[RunEventRecord], bool] | None = None,
        since: datetime | None = None,
        schedule_id: str | None = None,
    ) -> tuple[list[RunEventRecord], list[RunEventRecord]]:
        """As `runs_and_unsettled`, for the run-events topic (where tickers record skips)."""
        return self._with_unsettled(
            TopicRole.RUN_EVENTS, self._as_run_event, (keep, keep), since, _run_ids_of(schedule_id)
        )

    def admission_dead_letters(self, since: datetime | None = None) -> list[AdmissionDeadLetter]:
        """Every committed dead letter of a runs-topic record (a fire an executor refused),
        appended at or after `since` when given."""
        runs = self.topic(TopicRole.RUNS)
        return [
            admission_dead_letter(letter)
            for letter in self._dead_letters(since)
            if letter["source_topic"] == runs
        ]

    def refused_changes(self, team: str | None = None) -> list[RefusedChange]:
        """Every schedule change a ticker refused, by the ownership rules or a quota, and every
        notice no route took (reported to `team`, if given)."""
        schedules = self.topic(TopicRole.SCHEDULES)
        return [
            refused_change(letter)
            for letter in self._dead_letters()
            if (
                (letter["source_topic"] == schedules and letter["error_class"] in REFUSED_CHANGES)
                or letter["error_class"] == NOTIFICATION_FAILED
            )
            and (team is None or letter["reported_to"] == team)
        ]

    def _dead_letters(self, since: datetime | None = None) -> Iterator[dict[str, Any]]:
        topic = self.topic(TopicRole.DEAD_LETTERS)
        for record in self._read(topic, None, since=since):
            try:
                yield self._codecs.dead_letter.decode(record_value(record))
            except (DecodeError, InvalidRecordError) as problem:
                self._reject(topic, record, str(problem))

    def _as_run(self, record: TopicRecord) -> FiredRun:
        return fired_run(self._codecs, record)

    def _as_run_event(self, record: TopicRecord) -> RunEventRecord:
        return run_event(self._codecs, record)

    def _committed(
        self,
        role: TopicRole,
        convert: Callable[[TopicRecord], _T],
        run_id: str | None,
        keep: Callable[[_T], bool] | None,
        since: datetime | None,
        *,
        key_prefix: bytes | None,
    ) -> list[_T]:
        def wanted(item: _T) -> bool:
            return (run_id is None or item.run_id == run_id) and (keep is None or keep(item))

        topic = self.topic(role)
        read = self._read(topic, run_id, since=since, key_prefix=key_prefix)
        return self._decoded(topic, read, convert, wanted)

    def _with_unsettled(
        self,
        role: TopicRole,
        convert: Callable[[TopicRecord], _T],
        keeps: tuple[Callable[[_T], bool] | None, Callable[[_T], bool] | None],
        since: datetime | None,
        key_prefix: bytes | None,
    ) -> tuple[list[_T], list[_T]]:
        """`keeps`: what to keep of the committed records, and of those past them."""
        keep, keep_unsettled = keeps
        topic = self.topic(role)
        beyond: list[TopicRecord] = []
        read = self._read(topic, None, beyond, since, key_prefix)
        committed = self._decoded(topic, read, convert, keep)
        # Records past a last stable offset may be aborted garbage: skipped, not reported.
        return committed, self._decoded(topic, beyond, convert, keep_unsettled, reject=False)

    def _decoded(
        self,
        topic: str,
        records: Iterable[TopicRecord],
        convert: Callable[[TopicRecord], _T],
        keep: Callable[[_T], bool] | None,
        *,
        reject: bool = True,
    ) -> list[_T]:
        """Each valid record `keep` accepts; invalid ones are skipped (`rejected` if `reject`)."""
        found: list[_T] = []
        for record in records:
            try:
                item = convert(record)
            except (DecodeError, InvalidRecordError) as problem:
                if reject:
                    self._reject(topic, record, str(problem))
                continue
            if keep is None or keep(item):
                found.append(item)
        return found

    def _reject(self, topic: str, record: TopicRecord, reason: str) -> None:
        self.rejected.append(RejectedRecord(topic, record.partition, record.offset, reason))

    def _read(
        self,
        topic: str,
        key: str | None,
        beyond: list[TopicRecord] | None = None,
        since: datetime | None = None,
        key_prefix: bytes | None = None,
    ) -> Iterator[TopicRecord]:
        """Every committed record of `topic` to the end of each partition, as of the read, from
        the first one appended at or after `since` when given.

        With a `key`, only the partition Kairos producers (murmur2) put that key on. With
        `beyond`, the records a read_committed read cannot reach, from each partition's last
        stable offset to its high watermark as the read began, are added to it once the
        committed records are read, and each such partition to `open_transactions`.
        """
        records = self._read_from(topic, key, beyond, since, key_prefix)
        first = next(records, None)
        if first is None:
            return
        if since is not None and not first.appended:
            records.close()
            logger.warning(
                "%s stamps records with their producers' clocks (CreateTime), which cannot say "
                "where a window starts: reading it from the beginning; `kairos topics check` "
                "says how to set message.timestamp.type=LogAppendTime",
                topic,
            )
            yield from self._read_from(topic, key, beyond, None, key_prefix)
            return
        yield first
        yield from records

    def _read_from(
        self,
        topic: str,
        key: str | None,
        beyond: list[TopicRecord] | None,
        since: datetime | None,
        key_prefix: bytes | None,
    ) -> Generator[TopicRecord]:
        consumer = self._scan.consumer("read_committed")
        try:
            count = self._scan.partition_count(consumer, topic)
            partitions = [partition_for(key, count)] if key is not None else list(range(count))
            low, stable = self._scan.watermarks(consumer, topic, partitions)
            if since is not None:
                low = self._scan.offsets_at(consumer, topic, since, low, stable)
            if beyond is None:
                yield from self._scan.consume(
                    consumer, topic, count, low, stable, bounded=False, key_prefix=key_prefix
                )
                return
            uncommitted = self._scan.consumer("read_uncommitted")
            try:
                # Taken right after the stable offsets, so that a gap is a transaction open as
                # the read began, not records written while it went on.
                _, high = self._scan.watermarks(uncommitted, topic, partitions)
                yield from self._scan.consume(
                    consumer, topic, count, low, stable, bounded=False, key_prefix=key_prefix
                )
                held = [p for p in partitions if high[p] > stable[p]]
                if held:
                    found = list(
                        self._scan.consume(
                            uncommitted,
                            topic,
                            count,
                            {p: stable[p] for p in held},
                            {p: high[p] for p in held},
                            bounded=True,
                            key_prefix=key_prefix,
                        )
                    )
                    beyond += found
                    self.open_transactions += [
                        _open_transaction(topic, p, stable[p], high[p], found) for p in held
                    ]
            finally:
                uncommitted.close()
        finally:
            consumer.close()


def _open_transaction(
    topic: str, partition: int, stable: int, high: int, found: list[TopicRecord]
) -> OpenTransaction:
    first = next((r for r in found if r.partition == partition), None)
    return OpenTransaction(topic, partition, stable, high, first.timestamp if first else None)


def _run_ids_of(schedule_id: str | None) -> bytes | None:
    """The key prefix of the schedule's runs and run events (keyed by run id)."""
    return None if schedule_id is None else run_id_prefix(schedule_id).encode()
