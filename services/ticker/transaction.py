"""One firing transaction: runs, skips, dead letters, changelog and the fencing offsets.

The numbered steps are the order the records enter the transaction; nothing is visible to a
read_committed reader unless all of them commit.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from kairos.core.clock import ClockAheadError, clock_skew_ms
from kairos.core.firing import ScheduleState, decide_ahead
from kairos.core.instants import epoch_ms
from kairos.services.ticker.lifecycle import after_last_run_records, ticker_change_records
from kairos.services.ticker.partition import Ahead
from kairos.services.ticker.quarantine import PoisonedScheduleError
from kairos.services.ticker.work import TransactionWork
from kairos.streams.kafka.delivery import produce_when_room
from kairos.streams.kafka.ports import GroupMember, TransactionalProducer
from kairos.streams.state.changelog import StateWriteEncoder, changelog_records
from kairos.streams.state.state_store import StateWrite
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.dead_letters import dead_letter_record
from kairos.streams.wire.records import skipped_run_event_record
from kairos.streams.wire.run_encoder import RunRequestedEncoder, UpstreamResolver
from kairos.streams.wire.schedule_events import RESTORES_HEADER

logger = logging.getLogger(__name__)

OffsetsFor = Callable[[dict[int, int]], list[TopicPartition]]
"""Builds a transaction's fencing offsets from the last changelog offset of each partition."""

_ANY_PARTITION = -1
"""librdkafka's RD_KAFKA_PARTITION_UA: let the configured partitioner choose."""
FLUSH_SLICE_S = 1.0
"""How long a flush waits before it asks for the metadata of the topics it writes again."""


@dataclass
class _ChangelogDeliveries:
    """What the brokers reported of a transaction's last changelog record on each partition."""

    ends: dict[int, int] = field(default_factory=dict)
    """The offset of each partition's last record."""
    appended_ms: list[int] = field(default_factory=list)
    """When the brokers appended them, for the clock check."""

    def on_last_delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            offset, partition = message.offset(), message.partition()
            assert offset is not None and partition is not None
            self.ends[partition] = offset
            kind, timestamp = message.timestamp()
            if kind == TIMESTAMP_LOG_APPEND_TIME:
                self.appended_ms.append(timestamp)


@dataclass(frozen=True)
class Topics:
    schedules: str
    changelog: str
    runs: str
    run_events: str
    dead_letters: str


class FiringTransactions:
    """Sends a `TransactionWork` as one Kafka transaction with the producer it owns."""

    def __init__(
        self,
        producer: TransactionalProducer,
        topics: Topics,
        codecs: Codecs,
        ticker_instance: str,
        timeout_s: float,
        *,
        clock: Callable[[], datetime],
        max_clock_ahead_ms: int,
        upstream: UpstreamResolver | None = None,
    ) -> None:
        self.producer = producer
        self.clock = clock
        self.max_clock_ahead_ms = max_clock_ahead_ms
        self.clock_skew_ms: int | None = None
        """The skew measured on the last transaction sent (`kairos.core.clock`)."""
        self.topics = topics
        self.codecs = codecs
        self.ticker_instance = ticker_instance
        self.timeout_s = timeout_s
        self.busy_since: float | None = None
        """`time.monotonic()` when the open transaction began; `None` between transactions."""
        self._runs = RunRequestedEncoder(codecs.run_requested, ticker_instance, upstream)
        self._state_writes = StateWriteEncoder(codecs)

    def prepare(self, state: ScheduleState, partition: int) -> Ahead | None:
        """Decide and encode what the schedule's next fire will need, before it is due."""
        outcome = decide_ahead(state)
        if outcome is None:
            self._runs.prepare(state, partition, None)
            return None
        self._runs.prepare(state, partition, outcome.decisions[0] if outcome.decisions else None)
        return Ahead(
            state, outcome, self._state_writes.state_write(state.schedule_id, outcome.state, False)
        )

    def forget_prepared(self, schedule_ids: list[str]) -> None:
        """Drop what was encoded ahead for these schedules (none of them is due soon)."""
        for schedule_id in schedule_ids:
            self._runs.forget(schedule_id)

    def state_writes(self, work: TransactionWork) -> dict[int, list[StateWrite]]:
        """What the stores will hold after the commit: exactly the changelog's bytes.

        Raises `PoisonedScheduleError` for a state that cannot be encoded.
        """
        writes: dict[int, list[StateWrite]] = {}
        for partition, states in work.states.items():
            redefined = work.redefined.get(partition, set())
            ahead = work.written_ahead.get(partition, {})
            floors = work.floors.get(partition, {})
            partition_writes = writes[partition] = []
            for sid, state in states.items():
                write = ahead.get(sid)
                if write is None:
                    try:
                        if sid in floors:
                            write = self._state_writes.floor_write(sid, floors[sid])
                        else:
                            write = self._state_writes.state_write(sid, state, sid in redefined)
                    except Exception as failure:
                        raise PoisonedScheduleError(partition, sid, "encode", failure) from failure
                partition_writes.append(write)
        return writes

    def encode_runs(self, work: TransactionWork, fired_at: datetime) -> list[tuple[bytes, str]]:
        """Each run's (value, key), encoded before the transaction opens.

        Raises `PoisonedScheduleError` for a run that cannot be encoded.
        """
        encode_run = self._runs.encode
        encoded = []
        for decision, owed_by, partition in work.runs:
            try:
                value = encode_run(decision, owed_by, fired_at=fired_at, partition=partition)
            except Exception as failure:
                raise PoisonedScheduleError(
                    partition, decision.schedule_id, "encode", failure
                ) from failure
            encoded.append((value, decision.run_id))
        return encoded

    def send(
        self,
        work: TransactionWork,
        writes: dict[int, list[StateWrite]],
        consumer: GroupMember,
        fired_at: datetime,
        *,
        runs: list[tuple[bytes, str]],
        checkpoints: dict[int, int],
        offsets_for: OffsetsFor,
    ) -> dict[int, int]:
        """Commit the transaction; returns the last changelog offset written per partition.

        `writes` and `runs` are what `state_writes` and `encode_runs` made of `work`.
        `checkpoints` maps each partition whose schedules offset moved to its new next offset;
        `offsets_for` builds the fencing offsets once the changelog's offsets are known (they
        go into the offsets' metadata). Raises `KafkaException` when the transaction could not
        be committed; the caller aborts.
        """
        self.busy_since = time.monotonic()
        try:
            producer = self.producer
            changelog = _ChangelogDeliveries()
            producer.begin_transaction()
            logger.debug(
                "transaction open instance=%s runs=%d skips=%d changes=%d",
                self.ticker_instance,
                len(work.runs),
                len(work.skips),
                len(writes),
            )
            # 1. and 2. The runs, the skipped misfires and the dead letters.
            self._produce_outcomes(work, runs, fired_at)
            # 3. The changelog, co-partitioned with the schedules topic: a definition only when
            #    it changed, the progress always (with the due instant in a header for restore),
            #    and the schedules-offset checkpoint when it moved. One partition's records are
            #    delivered in order, so the last one's offset is its end.
            sent_ms = self._clock_ms()
            self._produce_changelog(writes, checkpoints, changelog.on_last_delivered)
            self._flush()
            self._check_delivery(
                sent_ms, changelog.appended_ms, writes.keys() | checkpoints.keys(), changelog.ends
            )
            # 4. The offsets of every owned partition with the group metadata: the fence. Their
            #    metadata says where this transaction's changelog records end, for a later restore.
            producer.send_offsets_to_transaction(
                offsets_for(changelog.ends), consumer.consumer_group_metadata(), 30
            )
            # 5. Commit.
            self._commit_with_retries()
            return changelog.ends
        finally:
            self.busy_since = None

    def _flush(self) -> None:
        """Wait for every record's delivery, up to the timeout, asking for the topics' metadata
        each second that records remain.

        A producer whose partition leader dies keeps sending to it until its metadata names the
        new one, and nothing makes it ask: its records time out with the transaction although
        the cluster elected a new leader seconds before (measured: leaders moved 8 s after a
        broker's SIGKILL, the ticker's records timed out at 10 s). Asking routes them there.
        """
        producer = self.producer
        deadline = time.monotonic() + self.timeout_s

        def left_s() -> float:
            return max(0.0, min(FLUSH_SLICE_S, deadline - time.monotonic()))

        while producer.flush(left_s()) > 0:
            for topic in (self.topics.runs, self.topics.changelog, self.topics.run_events):
                if left_s() == 0.0:
                    return
                with contextlib.suppress(KafkaException):
                    producer.list_topics(topic, timeout=left_s())

    def _check_delivery(
        self,
        sent_ms: int,
        appended_ms: list[int],
        partitions: set[int],
        changelog_ends: dict[int, int],
    ) -> None:
        """Before the fence: the clock the work was decided on, and every changelog end known."""
        self.clock_skew_ms = clock_skew_ms(sent_ms, self._clock_ms(), appended_ms)
        if self.clock_skew_ms is not None and self.clock_skew_ms > self.max_clock_ahead_ms:
            # Decided on a clock that runs ahead: some fires would start early. Nothing of this
            # transaction may commit; the caller aborts it.
            raise ClockAheadError(self.clock_skew_ms, self.max_clock_ahead_ms)
        undelivered = partitions - changelog_ends.keys()
        if undelivered:
            # The offsets' metadata must say where the changelog ends: without the offset of a
            # partition's last record, committing could leave a restore short of it.
            raise KafkaException(
                KafkaError(
                    KafkaError._TIMED_OUT,
                    f"changelog records of partitions {sorted(undelivered)} not delivered "
                    f"within {self.timeout_s}s",
                )
            )

    def _produce_outcomes(
        self, work: TransactionWork, runs: list[tuple[bytes, str]], fired_at: datetime
    ) -> None:
        # 1. The runs, keyed by run id. Produced inline, with `_produce` only when the queue is
        #    full or the record refused: a herd produces two records a fire.
        runs_topic, produce = self.topics.runs, self.producer.produce
        for value, run_id in runs:
            try:
                produce(runs_topic, value, run_id, _ANY_PARTITION, None, None, 0, None)
            except (BufferError, KafkaException):
                self._produce(runs_topic, value, run_id)
        # 2. Skipped misfires, so an audit can tell a skip from a loss.
        for decision, owner in work.skips:
            record = skipped_run_event_record(
                decision, decided_at=fired_at, ticker_instance=self.ticker_instance, owner=owner
            )
            self._produce(
                self.topics.run_events, self.codecs.run_event.encode(record), decision.run_id
            )
        for key, value in work.dead_letters:
            self._produce(self.topics.dead_letters, value, key)
        # After a refused change: what the ticker holds, so the key's latest record says it.
        for (partition, key), (restoring, refused_offset) in work.restores.items():
            header: list[tuple[str, str | bytes | None]] = [
                (RESTORES_HEADER, str(refused_offset).encode())
            ]
            self._produce(self.topics.schedules, restoring, key, partition, headers=header)
        # After a schedule's last run (`max_runs`): its pause or delete, on its own partition.
        for partition, state in work.ran_out:
            for key, ended, marked in after_last_run_records(
                state, self.codecs, self.ticker_instance, fired_at
            ):
                self._produce(self.topics.schedules, ended, key, partition, headers=marked)
        # After `pause_on_failure` failed runs in a row: the schedule's pause.
        for partition, state, reason in work.failure_pauses:
            for key, paused, marked in ticker_change_records(
                state, self.codecs, self.ticker_instance, fired_at, delete=False, reason=reason
            ):
                self._produce(self.topics.schedules, paused, key, partition, headers=marked)

    def _produce_changelog(
        self,
        writes: dict[int, list[StateWrite]],
        checkpoints: dict[int, int],
        on_last: Callable[[KafkaError | None, Message], None],
    ) -> None:
        changelog, produce = self.topics.changelog, self.producer.produce
        for partition in writes.keys() | checkpoints.keys():
            records = changelog_records(writes.get(partition, []), checkpoints.get(partition))
            for key, value, headers, is_last in records:
                delivered = on_last if is_last else None
                try:  # inline, as the runs (`_produce_outcomes`)
                    produce(changelog, value, key, partition, delivered, None, 0, headers)
                except (BufferError, KafkaException):
                    self._produce(
                        changelog, value, key, partition, on_delivery=delivered, headers=headers
                    )

    def _clock_ms(self) -> int:
        return epoch_ms(self.clock())

    def abort(self) -> None:
        self.producer.abort_transaction(self.timeout_s)

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        key: str | bytes | None,
        partition: int = _ANY_PARTITION,
        *,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        # Positional: keyword arguments cost half as much again per record in a herd.
        # The fifth is `callback`, which wins over its alias `on_delivery` when not NULL.
        produce = partial(
            self.producer.produce, topic, value, key, partition, on_delivery, None, 0, headers
        )
        try:
            produce_when_room(self.producer, produce, poll_s=0.05)
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            refused_for_size = error.code() == KafkaError.MSG_SIZE_TOO_LARGE
            if not refused_for_size or topic not in (self.topics.runs, self.topics.run_events):
                raise
            self._dead_letter_instead(topic, value, key, partition, error)

    def _dead_letter_instead(
        self,
        topic: str,
        value: bytes | None,
        key: str | bytes | None,
        partition: int,
        error: KafkaError,
    ) -> None:
        """Put a run or run event too large to produce on the dead letters, in its place.

        Producing it again could never succeed: the transaction would abort and, after the
        rebuild, the same batch be decided again, forever. Only those two topics: the changelog
        must hold what the store holds, and a dead letter is bounded by its builder.
        """
        size = len(value or b"")
        logger.error(
            "instance=%s dead-lettering a %d-byte record for %s key=%s instead: %s",
            self.ticker_instance,
            size,
            topic,
            key,
            error.str(),
        )
        record = dead_letter_record(
            source_topic=topic,
            source_partition=partition,
            source_offset=-1,
            key=key.encode() if isinstance(key, str) else key,
            value=value,
            reason=f"a {size}-byte record is over the producer's message.max.bytes: {error.str()}",
            error_class=error.name(),
            dead_lettered_at=datetime.now(UTC),
            dead_lettered_by=f"ticker:{self.ticker_instance}",
        )
        encoded = self.codecs.dead_letter.encode(record)
        self._produce(self.topics.dead_letters, encoded, record["key"])

    def _commit_with_retries(self) -> None:
        while True:
            try:
                self.producer.commit_transaction(self.timeout_s)
                return
            except KafkaException as failure:
                error: KafkaError = failure.args[0]
                if error.retriable() and not error.txn_requires_abort() and not error.fatal():
                    logger.warning("commit retriable error, retrying: %s", error.str())
                    time.sleep(0.2)
                    continue
                raise
