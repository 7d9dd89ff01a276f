"""The ticker process: owns schedules partitions, fires due occurrences in fenced transactions.

One loop, one thread. Each turn consumes schedule changes, decides what is due (pure logic in
`kairos.core.firing`), and sends everything in one Kafka transaction together with the offsets
of every owned partition and the consumer's group metadata. Rebalance callbacks run only inside
`consume`, between transactions, so no transaction is ever open across an ownership change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from kairos.core.clock import ClockAheadError
from kairos.core.firing import MISFIRE_GRACE, ScheduleState, decide_due, holds_at
from kairos.services.ticker.calendar_feed import TickerCalendars
from kairos.services.ticker.changes import ScheduleChanges
from kairos.services.ticker.garbage import IdleCollector
from kairos.services.ticker.metrics import TickerMetrics
from kairos.services.ticker.partition import OwnedPartition, consumed_offsets, to_ms
from kairos.services.ticker.quarantine import PoisonedScheduleError, Quarantine
from kairos.services.ticker.rebuild import RebuildError, abandon
from kairos.services.ticker.settings import TickerSettings, ensure_state_dir
from kairos.services.ticker.state_room import CHECK_EVERY_S, StateRoom
from kairos.services.ticker.takeover import PartitionTopics, TakeOver
from kairos.services.ticker.transaction import FiringTransactions, Topics
from kairos.services.ticker.upcoming import (
    PREPARE_MIN_IDLE_S,
    prepare_upcoming,
    seconds_until_next_due,
)
from kairos.services.ticker.watchdog import Backoff, TransactionWatchdog
from kairos.services.ticker.work import TransactionWork
from kairos.streams.acls import DeploymentNames, Role
from kairos.streams.authorization import RoleAccess
from kairos.streams.calendar_reader import CalendarReadError
from kairos.streams.codec import Codecs, make_codecs
from kairos.streams.settings import TICKER_TRANSACTIONAL_ID, KafkaSettings
from kairos.streams.state_store import StateStoreError, StateWrite
from kairos.streams.topics import TopicRole

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]
_RebalanceCallback = Callable[[Consumer, list[TopicPartition]], None]

_PER_SCHEDULE_LIMIT = 100
"""Occurrences one schedule may decide per transaction; the rest of a backlog waits a turn."""


def utc_now() -> datetime:
    return datetime.now(UTC)


class Ticker:
    def __init__(
        self,
        kafka: KafkaSettings,
        settings: TickerSettings,
        clock: Clock = utc_now,
        codecs: Codecs | None = None,
    ) -> None:
        ensure_state_dir(settings.state_dir)
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
        self._changes = ScheduleChanges(self.codecs, f"ticker:{settings.instance}")
        self._calendars = TickerCalendars(kafka, self.codecs)
        self._quarantine = Quarantine(
            self.codecs, self.schedules_topic, f"ticker:{settings.instance}"
        )
        names = DeploymentNames.of(kafka, ticker_group=settings.group(kafka))
        self._access = RoleAccess(kafka, Role.TICKER, names)
        self._consumer: Consumer | None = None
        self._transactions: FiringTransactions | None = None
        self._partitions: TakeOver | None = None
        self._garbage = IdleCollector()
        self._callback_failure: Exception | None = None
        self._leaving = False
        """Set while the consumer closes: an assignment served by `close()` is not taken up."""

    @property
    def owned(self) -> dict[int, OwnedPartition]:
        """The partitions this ticker owns now (none between group sessions)."""
        return {} if self._partitions is None else self._partitions.owned

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Fire until `stop` is set; then leave the group and close the stores cleanly."""
        if self.settings.metrics_port is not None:
            self.metrics.serve(self.settings.metrics_port)
        limit_s = 2 * self.settings.transaction_timeout_ms / 1000 + 30
        watchdog = TransactionWatchdog(self.settings.instance, limit_s, lambda: self._transactions)
        threading.Thread(target=watchdog.run, args=(stop,), daemon=True).start()
        backoff = Backoff()
        room = StateRoom(self.settings.state_dir, self.settings.instance)
        try:
            while not stop.is_set():
                try:
                    if self._consumer is None:
                        if not room.enough():
                            stop.wait(CHECK_EVERY_S)
                            continue
                        self._connect()
                    self.turn()
                    backoff.reset()
                except (
                    RebuildError,
                    KafkaException,
                    StateStoreError,
                    CalendarReadError,
                ) as failure:
                    # Fenced, or the broker unreachable for longer than a client will wait:
                    # drop the partitions and rejoin. The stores hold only committed state, so
                    # nothing decided is lost and nothing is decided twice. Refused: stop.
                    self._access.raise_if_refused(failure)
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

    def _connect(self) -> None:
        s = self.settings
        self._access.check()
        self._calendars.start()
        producer = Producer(
            self.kafka.producer_config(
                **{
                    # Namespaced by the deployment: two deployments sharing a cluster must not fence
                    # each other's tickers of the same name.
                    "transactional.id": self.kafka.deployment_id(
                        TICKER_TRANSACTIONAL_ID + s.instance
                    ),
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
        self._partitions = TakeOver(
            self.kafka,
            s,
            PartitionTopics(self.schedules_topic, self.changelog_topic),
            codecs=self.codecs,
            metrics=self.metrics,
            clock=self.clock,
            calendars=self._calendars.lookup,
        )
        # read_committed: the offset fetch at assignment waits for a pending transaction of the
        # previous owner (KIP-447 require_stable); see _on_assign.
        self._consumer = Consumer(
            self.kafka.group_member_config(s.group(self.kafka), s.instance, s.session_timeout_ms)
        )
        self._changes.learn_partitions(self._consumer, self.kafka.layout)
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
        if self._partitions is not None:
            self._partitions.close()
            self._partitions = None
        if self._transactions is not None:
            try:
                self._transactions.producer.flush(10)
            except KafkaException as fatal:
                # A fenced or otherwise fatal producer raises here: nothing of it is wanted.
                logger.info("producer closed on %s", fatal.args[0].name())
            self._transactions = None
        self._calendars.close()

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
        # Paused until taken over (`TakeOver.settle`): waiting here, inside the callback, for a
        # previous owner's pending transaction would hold up every owned partition's fires.
        self._changes.check_assigned(partitions)
        assert self._partitions is not None
        self._partitions.assign(consumer, partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Callbacks run between transactions, so nothing is in flight to commit here.
        assert self._partitions is not None
        self._partitions.release(consumer, partitions, "revoked")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assert self._partitions is not None
        self._partitions.release(consumer, partitions, "lost")

    # -- one turn ----------------------------------------------------------------------------

    def turn(self) -> None:
        """Consume, decide, and commit one transaction (if there is anything to commit)."""
        consumer = self._consumer
        assert consumer is not None
        partitions = self._partitions
        assert partitions is not None
        if partitions.arriving:
            partitions.settle(consumer)
        self._calendars.follow(self.owned.values())
        until_due_s = seconds_until_next_due(self.owned, self.clock())
        wait_s = min(self.settings.max_wait_s, until_due_s)
        if wait_s > PREPARE_MIN_IDLE_S:
            # Idle until the next fire: decode and encode ahead what upcoming fires need, so a
            # herd spends its time sending, not computing.
            assert self._transactions is not None
            spent_s = prepare_upcoming(
                self.owned, self._transactions, self.clock, budget_s=wait_s * 0.8
            )
            wait_s -= spent_s
            until_due_s -= spent_s
        # Every turn, idle or not: a steady load leaves no idle time, and without freezing the
        # collector's automatic full walks over everything held stall it for seconds.
        self._garbage.idle(until_due_s)
        messages = consumer.consume(num_messages=10_000, timeout=max(0.0, wait_s))
        failure, self._callback_failure = self._callback_failure, None
        if failure is not None:
            raise RebuildError(f"rebalance callback failed: {failure}") from failure
        now = self.clock()
        work = TransactionWork(settle_room=self.settings.catchup_per_transaction)
        for message in messages:
            self._take_change(message, now, work)
        self._decide_due(now, work)
        if not work.empty:
            self._commit(work)
        for partition in work.held & self.owned.keys():  # read again: a change still settles
            offset = self.owned[partition].next_offset
            logger.info("schedule change held partition=%d offset=%d", partition, offset)
            consumer.seek(TopicPartition(self.schedules_topic, partition, offset))

    def _take_change(self, message: Message, now: datetime, work: TransactionWork) -> None:
        error = message.error()
        if error is not None:
            self._access.raise_if_refused(error, message.topic())
            logger.warning("instance=%s consumer error: %s", self.settings.instance, error.str())
            return
        partition = message.partition()
        offset = message.offset()
        assert partition is not None and offset is not None
        owned = self.owned.get(partition)
        if owned is None or offset < owned.next_offset or partition in work.held:
            # Not ours, or already in the state: the restored store reflects everything before
            # the committed offset, whichever offset the consumer starts from; or a change is held.
            return
        if self._changes.take(owned, message, offset, now, work):
            owned.next_offset = offset + 1
            work.consumed += 1

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
                    self._quarantine.take(work, poisoned, owned, changed.version, now)
        for lane_from, lane_limit in lanes:
            for owned in list(self.owned.values()):
                room = min(lane_limit, budget - work.decisions)
                if room <= 0:
                    return
                for _, schedule_id in owned.store.due(lane_from, now_ms, room):
                    try:
                        self._decide_one(owned, schedule_id, now, work)
                    except PoisonedScheduleError as poisoned:
                        self._quarantine.take(work, poisoned, owned, -1, now)

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
        writes, runs = self._quarantine.encode(transactions, work, self.owned, fired_at)
        checkpoints = {
            p: owned.next_offset
            for p, owned in self.owned.items()
            if owned.next_offset != owned.committed_offset
        }

        def offsets_for(changelog_ends: dict[int, int]) -> list[TopicPartition]:
            return consumed_offsets(
                self.schedules_topic, self.owned, self.settings.instance, changelog_ends
            )

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
        committed_at = self.clock()
        self._apply_committed(work, writes, checkpoints, changelog_ends)
        self._observe_commit(work, committed_at)

    def _apply_committed(
        self,
        work: TransactionWork,
        writes: dict[int, list[StateWrite]],
        checkpoints: dict[int, int],
        changelog_ends: dict[int, int],
    ) -> None:
        """Only after the commit do the local stores move, with the changelog offset they
        reflect."""
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

    def _observe_commit(self, work: TransactionWork, committed_at: datetime) -> None:
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
        abandon(self._transactions)
        raise RebuildError(str(ahead)) from ahead

    def _abort(self, failure: KafkaException) -> None:
        """Abandon the open transaction (`rebuild.abandon`), then rebuild the clients."""
        error: KafkaError = failure.args[0]
        self.metrics.aborts.labels(error.name()).inc()
        logger.warning(
            "instance=%s transaction aborted (%s); rebuilding from the last commit",
            self.settings.instance,
            error.str(),
        )
        if not error.fatal():
            abandon(self._transactions)
        raise RebuildError(error.str()) from failure
