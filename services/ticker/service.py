"""The ticker process: owns schedules partitions, fires due occurrences in fenced transactions.

One loop, one thread. Each turn consumes schedule changes, decides what is due (pure logic in
`kairos.core.firing`), and sends everything in one Kafka transaction together with the offsets
of every owned partition and the consumer's group metadata. Rebalance callbacks run only inside
`consume`, between transactions, so no transaction is ever open across an ownership change.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from pydantic import BaseModel, ConfigDict, Field

from kairos.core.clock import DEFAULT_MAX_CLOCK_AHEAD_MS, ClockAheadError
from kairos.core.firing import (
    MISFIRE_GRACE,
    ScheduleState,
    decide_due,
    holds_at,
)
from kairos.services.ticker.changes import ScheduleChanges
from kairos.services.ticker.garbage import IdleCollector
from kairos.services.ticker.metrics import TickerMetrics
from kairos.services.ticker.partition import OwnedPartition, to_ms
from kairos.services.ticker.quarantine import PoisonedScheduleError, Quarantine
from kairos.services.ticker.transaction import FiringTransactions, Topics
from kairos.services.ticker.work import TransactionWork
from kairos.streams.codec import Codecs, make_codecs
from kairos.streams.ownership import OwnershipInfo
from kairos.streams.settings import KafkaSettings
from kairos.streams.state_store import PartitionStore
from kairos.streams.topics import TopicRole

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]
_RebalanceCallback = Callable[[Consumer, list[TopicPartition]], None]

EXIT_STUCK = 75
"""Exit code (EX_TEMPFAIL) when librdkafka hangs in a transaction call: restart the ticker."""

_PREPARE_AHEAD_MS = 120_000
"""How far ahead idle time prepares upcoming fires (decoded states, encoded templates)."""
_PREPARE_MIN_IDLE_S = 0.02
_PREPARE_SLICE = 256
"""Schedules prepared between two looks at the clock."""

_SETTLE_WAIT_S = (0.02, 0.25)
"""How long a turn waits for an arriving partition's committed offset before it fires: the first
wait, doubled after each turn that settled none (a broker far away may need more) up to the last."""
_NOT_SETTLED = (KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT)
_NOT_LED_YET = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
)
"""Errors of a partition without a leader for a moment (just created, or moving)."""

_PER_SCHEDULE_LIMIT = 100
"""Occurrences one schedule may decide per transaction; the rest of a backlog waits a turn."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class TickerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    instance: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    state_dir: Path
    group_id: str = "kairos-tickers"
    session_timeout_ms: int = Field(default=10_000, ge=500)
    transaction_timeout_ms: int = Field(default=10_000, ge=1_000)
    max_decisions_per_transaction: int = Field(default=50_000, ge=1)
    catchup_per_transaction: int = Field(default=2_000, ge=1)
    max_wait_s: float = Field(default=0.1, gt=0)
    restore_timeout_s: float = Field(default=300, gt=0)
    max_clock_ahead_ms: int = Field(default=DEFAULT_MAX_CLOCK_AHEAD_MS, ge=0)
    metrics_port: int | None = None


class Ticker:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: TickerSettings,
        clock: Clock = utc_now,
        codecs: Codecs | None = None,
    ) -> None:
        self.kafka = kafka
        self.settings = settings
        self.clock = clock
        self.codecs = codecs or make_codecs()
        self.metrics = TickerMetrics()
        layout = kafka.layout
        self.schedules_topic = layout.name(TopicRole.SCHEDULES)
        self.changelog_topic = layout.name(TopicRole.CHANGELOG)
        self.runs_topic = layout.name(TopicRole.RUNS)
        self.run_events_topic = layout.name(TopicRole.RUN_EVENTS)
        self.dead_letters_topic = layout.name(TopicRole.DEAD_LETTERS)
        self.owned: dict[int, OwnedPartition] = {}
        self._changes = ScheduleChanges(self.codecs, f"ticker:{settings.instance}")
        self._quarantine = Quarantine(
            self.codecs, self.schedules_topic, f"ticker:{settings.instance}"
        )
        self._consumer: Consumer | None = None
        self._transactions: FiringTransactions | None = None
        self._restorer: Consumer | None = None
        self._admin: AdminClient | None = None
        self._garbage = IdleCollector()
        self._callback_failure: Exception | None = None
        self._leaving = False
        """Set while the consumer closes: an assignment served by `close()` is not taken up."""
        self._arriving: dict[int, float] = {}
        """Partitions assigned, paused and not taken over yet: `time.monotonic()` at assignment."""
        self._settle_wait_s = _SETTLE_WAIT_S[0]

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Fire until `stop` is set; then leave the group and close the stores cleanly."""
        if self.settings.metrics_port is not None:
            self.metrics.serve(self.settings.metrics_port)
        threading.Thread(target=self._watch_transactions, args=(stop,), daemon=True).start()
        backoff = _Backoff()
        try:
            while not stop.is_set():
                try:
                    if self._consumer is None:
                        self._connect()
                    self.turn()
                    backoff.reset()
                except (_RebuildError, KafkaException) as failure:
                    # Fenced, or the broker unreachable for longer than a client will wait:
                    # drop the partitions and rejoin. The stores hold only committed state, so
                    # nothing decided is lost and nothing is decided twice.
                    logger.error(
                        "instance=%s %s; dropping partitions and rejoining in %.1fs",
                        self.settings.instance,
                        failure,
                        backoff.delay_s,
                    )
                    self._disconnect()
                    stop.wait(backoff.next())
        finally:
            self._disconnect()

    def _watch_transactions(self, stop: threading.Event) -> None:
        """Exit if a transaction call never returns, so a supervisor restarts a clean process.

        librdkafka's `send_offsets_to_transaction` can block past its timeout, forever, when the
        group coordinator goes away mid-call (librdkafka issues 5456 and 5511). No Python code
        can interrupt it; the stores hold only committed state, so a restart loses nothing.
        """
        limit_s = 2 * self.settings.transaction_timeout_ms / 1000 + 30
        while not stop.wait(1.0):
            transactions = self._transactions
            busy_since = transactions.busy_since if transactions is not None else None
            if busy_since is not None and time.monotonic() - busy_since > limit_s:
                logger.critical(
                    "instance=%s a transaction call has not returned for %.0fs (librdkafka "
                    "#5456); exiting with code %d for a supervisor to restart this ticker",
                    self.settings.instance,
                    limit_s,
                    EXIT_STUCK,
                )
                logging.shutdown()
                os._exit(EXIT_STUCK)

    def _connect(self) -> None:
        s = self.settings
        producer = Producer(
            self.kafka.client_config(
                **{
                    "transactional.id": f"kairos-ticker-{s.instance}",
                    "transaction.timeout.ms": s.transaction_timeout_ms,
                    "linger.ms": 5,
                    "queue.buffering.max.messages": 2_000_000,
                    "queue.buffering.max.kbytes": 1_048_576,
                }
            )
        )
        producer.init_transactions(30)
        self._transactions = FiringTransactions(
            producer,
            Topics(
                schedules=self.schedules_topic,
                changelog=self.changelog_topic,
                runs=self.runs_topic,
                run_events=self.run_events_topic,
                dead_letters=self.dead_letters_topic,
            ),
            self.codecs,
            s.instance,
            s.transaction_timeout_ms / 1000,
            clock=self.clock,
            max_clock_ahead_ms=s.max_clock_ahead_ms,
        )
        self._admin = AdminClient(self.kafka.client_config())
        self._restorer = Consumer(
            self.kafka.consumer_config(
                **{
                    "group.id": f"kairos-restore-{s.instance}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    # The end of a partition is only noticed when an empty fetch returns: do not
                    # let the broker hold it for the default half second.
                    "fetch.wait.max.ms": 10,
                }
            )
        )
        # read_committed: the offset fetch at assignment waits for a pending transaction of the
        # previous owner (KIP-447 require_stable); see _on_assign.
        self._consumer = Consumer(
            self.kafka.group_member_config(s.group_id, s.instance, s.session_timeout_ms)
        )
        self._consumer.subscribe(
            [self.schedules_topic],
            on_assign=self._guarded(self._on_assign),
            on_revoke=self._guarded(self._on_revoke),
            on_lost=self._guarded(self._on_lost),
        )

    def _disconnect(self) -> None:
        if self._consumer is not None:
            # Leaves the group (on_revoke closes the stores) so a survivor takes over at once.
            self._leaving = True
            try:
                self._consumer.close()
            finally:
                self._leaving = False
            self._consumer = None
        for owned in self.owned.values():
            owned.store.close()
        self.owned.clear()
        self._arriving.clear()
        if self._restorer is not None:
            self._restorer.close()
            self._restorer = None
        self._admin = None
        if self._transactions is not None:
            self._transactions.producer.flush(10)
            self._transactions = None

    # -- rebalance ---------------------------------------------------------------------------

    def _guarded(self, callback: _RebalanceCallback) -> _RebalanceCallback:
        """Keep a rebalance callback's failure from escaping into librdkafka.

        An exception raised inside a callback comes out of `consume()` mangled (a bare
        `KafkaError`, which no `except` clause catches), killing the loop. It is kept instead,
        and `turn` raises it once `consume()` returns, so the ticker rebuilds and rejoins.
        """

        def guarded(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            try:
                callback(consumer, partitions)
            except Exception as failure:
                logger.exception("instance=%s rebalance callback failed", self.settings.instance)
                self._callback_failure = failure

        return guarded

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._leaving:
            # A rebalance finished while the ticker was leaving the group, and `close()` serves
            # its callback. Restoring would wait out the whole restore timeout: the offset fetch
            # of a closing consumer never returns. The partitions go to the other members once
            # the close has left the group.
            logger.info(
                "handover event=declined instance=%s partitions=%s (leaving the group)",
                self.settings.instance,
                sorted(tp.partition for tp in partitions),
            )
            return
        # Paused until taken over (`_take_over`): waiting here, inside the callback, for a
        # previous owner's pending transaction would hold up every owned partition's fires.
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)
        assigned_at = time.monotonic()
        for tp in partitions:
            self._arriving[tp.partition] = assigned_at
        self._take_over(consumer)

    def _take_over(self, consumer: Consumer) -> None:
        """Restore and start consuming the arriving partitions whose offsets are settled.

        With read_committed, the committed-offset fetch does not answer while a transaction of
        the previous owner is pending (KIP-447 require_stable); a SIGKILLed owner's lasts until
        the broker aborts it, seconds later. Each turn asks for the partitions one by one, the
        one that last went unanswered last, and stops at the first that does not answer within
        the wait: the partitions already owned keep firing meanwhile.
        """
        assert self._restorer is not None
        settled: list[TopicPartition] = []
        for partition in list(self._arriving):
            asked = TopicPartition(self.schedules_topic, partition)
            try:
                (answer,) = consumer.committed([asked], timeout=self._settle_wait_s)
            except KafkaException as failure:
                if failure.args[0].code() not in _NOT_SETTLED:
                    raise
                answer = None
            if answer is None or answer.error is not None:
                # Still pending: asked last next turn, and this turn has spent its wait.
                self._arriving[partition] = self._arriving.pop(partition)
                break
            settled.append(answer)
        if not settled:
            self._settle_wait_s = min(2 * self._settle_wait_s, _SETTLE_WAIT_S[1])
            return
        self._settle_wait_s = _SETTLE_WAIT_S[0]
        for tp in settled:
            try:
                self._take_over_one(consumer, tp, time.monotonic() - self._arriving[tp.partition])
            except KafkaException as failure:
                error: KafkaError = failure.args[0]
                if not (error.retriable() or error.code() in _NOT_LED_YET):
                    raise
                # A just-created or moving partition may have no leader for a moment: try this
                # partition again next turn instead of rebuilding the whole ticker.
                logger.warning(
                    "instance=%s partition=%d: take-over postponed (%s)",
                    self.settings.instance,
                    tp.partition,
                    error.str(),
                )
                owned = self.owned.pop(tp.partition, None)
                if owned is not None:
                    owned.store.close()
                continue
            del self._arriving[tp.partition]
        self.metrics.owned_partitions.set(len(self.owned))
        self.metrics.schedules_held.set(sum(o.store.count for o in self.owned.values()))

    def _take_over_one(self, consumer: Consumer, tp: TopicPartition, waited_s: float) -> None:
        """Restore a settled partition to its committed state and start consuming it."""
        assert self._restorer is not None
        previous = OwnershipInfo.decode(tp.metadata)
        # Restore the store from the changelog up to where the last committed transaction's
        # records end (the offset's metadata says where), however long an open one holds the
        # last stable offset back.
        path = self.settings.state_dir / self.schedules_topic / str(tp.partition)
        owned = OwnedPartition(tp.partition, PartitionStore(path), self.codecs, self.clock())
        # Held from the start, so a failure further on still closes its store (_disconnect).
        self.owned[tp.partition] = owned
        report = owned.restore(
            self._restorer,
            self.changelog_topic,
            self.settings.restore_timeout_s,
            must_reach=None if previous is None else previous.changelog_offset,
            end_offset=self._changelog_end(tp.partition),
        )
        owned.changelog_end = owned.store.changelog_offset
        self.metrics.restore_seconds.labels(report.mode).observe(report.seconds)
        self.metrics.restored_records.labels(report.mode).inc(report.records)
        start = self._start_offset(consumer, tp, owned)
        # A valid offset for every owned partition, always: librdkafka sends no offset commit
        # (and so no fencing) in a transaction whose offsets are all invalid.
        owned.committed_offset = owned.next_offset = start
        # The consumer starts from the committed offset too (its own fetch of it waits for the
        # same settled transaction); records below `start` are skipped by `_take_change`.
        consumer.resume([TopicPartition(self.schedules_topic, tp.partition)])
        logger.info(
            "handover event=assigned instance=%s partition=%d offset=%d settled_after=%.3f "
            "restore=%s records=%d seconds=%.3f",
            self.settings.instance,
            tp.partition,
            start,
            waited_s,
            report.mode,
            report.records,
            report.seconds,
        )

    def _start_offset(self, consumer: Consumer, tp: TopicPartition, owned: OwnedPartition) -> int:
        """Where the partition's schedule changes resume: never below what the state applied.

        The group's committed offset is the fence, not the only memory: under a new group id,
        or after the group's offsets expired, the store's checkpoint (restored from the
        changelog on a fresh host) keeps every change from being applied a second time.
        """
        applied = owned.store.schedules_offset
        committed = tp.offset if tp.offset >= 0 else None
        if applied is not None and (committed is None or applied > committed):
            logger.warning(
                "instance=%s partition=%d: the group's committed offset is %s but the state "
                "already applied the schedules topic up to %d; resuming there",
                self.settings.instance,
                tp.partition,
                "missing" if committed is None else committed,
                applied,
            )
            return applied
        if committed is not None:
            return committed
        low, _ = consumer.get_watermark_offsets(tp, timeout=30)
        return int(low)

    def _changelog_end(self, partition: int) -> int:
        """The changelog partition's end, uncommitted records included."""
        assert self._admin is not None
        asked = TopicPartition(self.changelog_topic, partition)
        futures = self._admin.list_offsets(
            # confluent-kafka ships OffsetSpec's factories without annotations.
            {asked: OffsetSpec.latest()},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_UNCOMMITTED,
            request_timeout=30,
        )
        return int(futures[asked].result().offset)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Callbacks run between transactions, so nothing is in flight to commit here.
        self._release(consumer, partitions, "revoked")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._release(consumer, partitions, "lost")

    def _release(self, consumer: Consumer, partitions: list[TopicPartition], event: str) -> None:
        try:
            consumer.incremental_unassign(partitions)
        finally:
            for tp in partitions:
                self._arriving.pop(tp.partition, None)
                owned = self.owned.pop(tp.partition, None)
                if owned is not None:
                    # The store stays on disk: a later assignment restarts warm from it.
                    owned.store.close()
                    logger.info(
                        "handover event=%s instance=%s partition=%d",
                        event,
                        self.settings.instance,
                        tp.partition,
                    )
            self.metrics.owned_partitions.set(len(self.owned))

    # -- one turn ----------------------------------------------------------------------------

    def turn(self) -> None:
        """Consume, decide, and commit one transaction (if there is anything to commit)."""
        consumer = self._consumer
        assert consumer is not None
        if self._arriving:
            self._take_over(consumer)
        until_due_s = self._until_next_due_s()
        wait_s = min(self.settings.max_wait_s, until_due_s)
        if wait_s > _PREPARE_MIN_IDLE_S:
            # Idle until the next fire: decode and encode ahead what upcoming fires need, so a
            # herd spends its time sending, not computing.
            spent_s = self._prepare_upcoming(budget_s=wait_s * 0.8)
            wait_s -= spent_s
            until_due_s -= spent_s
        # Every turn, idle or not: a steady load leaves no idle time, and without freezing the
        # collector's automatic full walks over everything held stall it for seconds.
        self._garbage.idle(until_due_s)
        messages = consumer.consume(num_messages=10_000, timeout=max(0.0, wait_s))
        failure, self._callback_failure = self._callback_failure, None
        if failure is not None:
            raise _RebuildError(f"rebalance callback failed: {failure}") from failure
        now = self.clock()
        work = TransactionWork()
        for message in messages:
            self._take_change(message, now, work)
        self._decide_due(now, work)
        if not work.empty:
            self._commit(work)

    def _prepare_upcoming(self, budget_s: float) -> float:
        transactions = self._transactions
        assert transactions is not None
        started = time.monotonic()
        now_ms = to_ms(self.clock())
        horizon = now_ms + _PREPARE_AHEAD_MS
        for owned in self.owned.values():
            from_ms, position = owned.prepared_cursor
            if from_ms < now_ms:
                from_ms, position = now_ms, 0
            for instant, schedule_ids in owned.store.due_instants(from_ms, horizon):
                if instant > from_ms:
                    position = 0
                while position < len(schedule_ids):
                    if time.monotonic() - started >= budget_s:
                        owned.prepared_cursor = (instant, position)
                        return time.monotonic() - started
                    for schedule_id in schedule_ids[position : position + _PREPARE_SLICE]:
                        state = owned.state(schedule_id)
                        if state is not None and owned.decided_ahead(state) is None:
                            ahead = transactions.prepare(state, owned.partition)
                            if ahead is not None:
                                owned.keep_ahead(ahead)
                    position += _PREPARE_SLICE
                owned.prepared_cursor = (instant, len(schedule_ids))
        return time.monotonic() - started

    def _until_next_due_s(self) -> float:
        """Seconds until the earliest due fire of any owned partition (infinite: none)."""
        nearest: int | None = None
        for owned in self.owned.values():
            due = owned.store.next_due_ms()
            if due is not None and (nearest is None or due < nearest):
                nearest = due
        if nearest is None:
            return float("inf")
        return max(0.0, (nearest - to_ms(self.clock())) / 1000)

    def _take_change(self, message: Message, now: datetime, work: TransactionWork) -> None:
        error = message.error()
        if error is not None:
            logger.warning("instance=%s consumer error: %s", self.settings.instance, error.str())
            return
        partition = message.partition()
        offset = message.offset()
        assert partition is not None and offset is not None
        owned = self.owned.get(partition)
        if owned is None or offset < owned.next_offset:
            # Not ours, or already in the state: the restored store reflects everything before
            # the committed offset, whichever offset the consumer starts from.
            return
        owned.next_offset = offset + 1
        work.consumed += 1
        self._changes.take(owned, message, offset, now, work)

    def _decide_due(self, now: datetime, work: TransactionWork) -> None:
        now_ms = to_ms(now)
        on_time_from = now_ms - int(MISFIRE_GRACE.total_seconds() * 1000)
        budget = self.settings.max_decisions_per_transaction
        # On-time occurrences first; then a bounded slice of the backlog, so a catch-up after
        # downtime never delays the fires that are due right now.
        lanes = [(on_time_from, budget), (0, self.settings.catchup_per_transaction)]
        for owned in list(self.owned.values()):
            for changed in work.changed_due_by(owned.partition, now):
                try:
                    self._decide(owned, changed, now, work)
                except PoisonedScheduleError as poisoned:
                    self._quarantine.take(work, poisoned, changed.version, now)
        for lane_from, lane_limit in lanes:
            for owned in list(self.owned.values()):
                room = min(lane_limit, budget - work.decisions)
                if room <= 0:
                    return
                for _, schedule_id in owned.store.due(lane_from, now_ms, room):
                    try:
                        self._decide_one(owned, schedule_id, now, work)
                    except PoisonedScheduleError as poisoned:
                        self._quarantine.take(work, poisoned, -1, now)

    def _decide_one(
        self, owned: OwnedPartition, schedule_id: str, now: datetime, work: TransactionWork
    ) -> None:
        """Decide one schedule found due in the index; its failure is confined to it."""
        in_this_work = work.states.get(owned.partition, {})
        if schedule_id in in_this_work:
            pending = in_this_work[schedule_id]
            if pending is None or pending.due_at is None or pending.due_at > now:
                return
        else:
            # Committed and in the due index up to now: due, no need to ask.
            try:
                pending = owned.state(schedule_id)
            except Exception as failure:
                raise PoisonedScheduleError(
                    owned.partition, schedule_id, "decode", failure
                ) from failure
            if pending is None:
                return
        self._decide(owned, pending, now, work)

    def _decide(
        self, owned: OwnedPartition, state: ScheduleState, now: datetime, work: TransactionWork
    ) -> None:
        try:
            self._decide_state(owned, state, now, work)
        except Exception as failure:
            raise PoisonedScheduleError(
                owned.partition, state.schedule.id, "decide", failure
            ) from failure

    def _decide_state(
        self, owned: OwnedPartition, state: ScheduleState, now: datetime, work: TransactionWork
    ) -> None:
        ahead = owned.decided_ahead(state)
        if ahead is not None and holds_at(ahead.outcome, now):
            work.record(
                owned.partition, state.schedule.id, ahead.outcome, state, written_ahead=ahead.write
            )
            return
        outcome = decide_due(state, until=now, now=now, limit=_PER_SCHEDULE_LIMIT)
        work.record(owned.partition, state.schedule.id, outcome, state)

    # -- the transaction ---------------------------------------------------------------------

    def _commit(self, work: TransactionWork) -> None:
        transactions, consumer = self._transactions, self._consumer
        assert transactions is not None and consumer is not None
        fired_at = self.clock()
        while True:
            try:
                writes = transactions.state_writes(work)
                runs = transactions.encode_runs(work, fired_at)
                break
            except PoisonedScheduleError as poisoned:
                self._quarantine.take(work, poisoned, -1, fired_at)
        checkpoints = {
            p: owned.next_offset
            for p, owned in self.owned.items()
            if owned.next_offset != owned.committed_offset
        }

        def offsets_for(changelog_ends: dict[int, int]) -> list[TopicPartition]:
            # A valid offset for every owned partition, with who owns it in the metadata.
            return [
                TopicPartition(
                    self.schedules_topic,
                    p,
                    owned.next_offset,
                    metadata=self._ownership(owned, changelog_ends.get(p)).encode(),
                )
                for p, owned in self.owned.items()
            ]

        started = time.monotonic()
        try:
            changelog_ends = transactions.send(
                work,
                writes,
                consumer,
                fired_at,
                runs=runs,
                checkpoints=checkpoints,
                offsets_for=offsets_for,
            )
        except KafkaException as failure:
            self._abort(failure)
            return
        except ClockAheadError as ahead:
            self._refuse_early(ahead)
        self._observe_clock(transactions.clock_skew_ms)
        self.metrics.commit_seconds.observe(time.monotonic() - started)
        logger.debug(
            "transaction committed instance=%s runs=%d", self.settings.instance, len(work.runs)
        )
        # Only now do the local stores move, with the changelog offset they reflect.
        committed_at = self.clock()
        for partition, end in changelog_ends.items():
            owned = self.owned[partition]
            owned.changelog_end = end + 1
            owned.store.apply(
                writes.get(partition, []),
                changelog_offset=end + 1,
                schedules_offset=checkpoints.get(partition),
            )
            owned.committed(work.states.get(partition, {}))
        for owned in self.owned.values():
            owned.committed_offset = owned.next_offset
        self.metrics.schedules_held.set(sum(o.store.count for o in self.owned.values()))
        # Runs fired together share a few due instants: observe each instant once, counted.
        fired = Counter((decision.fire_at, partition) for decision, _, partition in work.runs)
        for (fire_at, partition), count in fired.items():
            lateness = max(0.0, (committed_at - fire_at).total_seconds())
            self.metrics.lateness.observe(lateness, count)
            owned = self.owned[partition]
            if owned.last_fire_at is None or fire_at >= owned.last_fire_at:
                owned.last_fire_at, owned.last_fire_lateness_ms = fire_at, int(lateness * 1000)
        self.metrics.fires.inc(len(work.runs))
        self.metrics.skips.inc(len(work.skips))
        self.metrics.dead_letters.inc(len(work.dead_letters))
        self.metrics.quarantined.inc(work.quarantined)

    def _ownership(self, owned: OwnedPartition, changelog_last: int | None) -> OwnershipInfo:
        next_due = owned.store.next_due_ms()
        changelog_end = owned.changelog_end if changelog_last is None else changelog_last + 1
        return OwnershipInfo(
            instance=self.settings.instance,
            host=socket.gethostname(),
            since=owned.owned_since,
            schedules=owned.store.count,
            next_due=None if next_due is None else datetime.fromtimestamp(next_due / 1000, UTC),
            last_fire_lateness_ms=owned.last_fire_lateness_ms,
            changelog_offset=changelog_end,
        )

    def _observe_clock(self, skew_ms: int | None) -> None:
        if skew_ms is not None:
            self.metrics.clock_skew.set(skew_ms / 1000)

    def _refuse_early(self, ahead: ClockAheadError) -> None:
        """Abort a transaction decided on a clock ahead of the broker's, and start over.

        The rebuild rejoins the group, so while this host's clock is wrong its partitions may
        move to a ticker with a good one; each attempt here measures the clock again.
        """
        self._observe_clock(ahead.skew_ms)
        self.metrics.aborts.labels("CLOCK_AHEAD").inc()
        logger.critical("instance=%s %s", self.settings.instance, ahead)
        transactions = self._transactions
        if transactions is not None:
            try:
                transactions.abort()
            except KafkaException as abort_failure:
                logger.warning("abort failed (%s)", abort_failure.args[0].str())
        raise _RebuildError(str(ahead)) from ahead

    def _abort(self, failure: KafkaException) -> None:
        """Abandon the open transaction, then rebuild the clients from committed state.

        A fresh producer with the same transactional id is the one path that works after every
        failure (librdkafka can hang reusing a producer whose transaction failed mid-way while
        the broker was away): its `init_transactions` bumps the epoch and aborts whatever the
        old one left open. The stores never saw the abandoned work, and the new consumer
        resumes from the committed offsets.
        """
        error: KafkaError = failure.args[0]
        self.metrics.aborts.labels(error.name()).inc()
        logger.warning(
            "instance=%s transaction aborted (%s); rebuilding from the last commit",
            self.settings.instance,
            error.str(),
        )
        transactions = self._transactions
        if transactions is not None and not error.fatal():
            try:
                transactions.abort()
            except KafkaException as abort_failure:
                logger.warning("abort failed (%s)", abort_failure.args[0].str())
        raise _RebuildError(error.str()) from failure


class _Backoff:
    """Exponential backoff between attempts, from 0.2 s up to 5 s."""

    def __init__(self) -> None:
        self.delay_s = 0.2

    def next(self) -> float:
        delay = self.delay_s
        self.delay_s = min(5.0, self.delay_s * 2)
        return delay

    def reset(self) -> None:
        self.delay_s = 0.2


class _RebuildError(Exception):
    """A transaction failed or the producer is fenced: drop everything and rejoin the group."""
