"""Taking over schedules partitions: wait for the previous owner's offsets, restore, resume.

Shaped like quix-streams' recovery manager: this room owns the partitions of one group session
from assignment to release. A partition is assigned paused and moves, one turn at a time:

1. *arriving*: its committed offset is asked for each turn (`settle`) until it answers: with
   read_committed the offset fetch waits while a transaction of the previous owner is pending
   (KIP-447 require_stable), and waiting inside the rebalance callback would hold up every
   owned partition's fires;
2. *restoring*: its store is brought to the committed state from the changelog
   (`PartitionRestore`), a slice per turn, so the partitions already owned keep firing;
3. *owned*: schedule changes resume where that state left off, and it fires.

A passing obstacle (a leader moving, an open transaction holding the changelog back, a restore
that failed) postpones the partition; the others go on meanwhile. A partition last committed in
another ownership mode is refused (`OwnershipModeError`): one deployment runs one mode.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kairos.core.calendar_rules import CalendarLookup
from kairos.core.errors import KairosError
from kairos.services.ticker.metrics import TickerMetrics
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.restore import PartitionRestore, RestoreHeldBackError, RestoreReport
from kairos.services.ticker.settings import TickerSettings
from kairos.streams.kafka.ownership import OwnershipInfo, judged_from, mode_refusal
from kairos.streams.kafka.passing import BROKER_GONE, LEADER_MOVING, ask_until_answered, passes
from kairos.streams.kafka.ports import EndOffsets, GroupMember, PartitionReader
from kairos.streams.state.changelog import RestoreError
from kairos.streams.state.state_store import PartitionStore, StoreMemory
from kairos.streams.wire.codec import Codecs

logger = logging.getLogger(__name__)

_SETTLE_WAIT_S = (0.02, 0.25)
"""How long a turn waits for an arriving partition's committed offset before it fires: the first
wait, doubled after each turn that settled none (a broker far away may need more) up to the last."""
_NOT_SETTLED = (KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT)
_RETRY_S = 0.5
"""How soon a take-over held up by a passing obstacle is tried again."""
_RETRY_AFTER_FAILURE_S = 5.0
"""How soon a take-over whose restore failed is tried again."""


class OwnershipModeError(KairosError):
    """A partition last committed in another ownership mode than the ticker's: taking it would
    judge its changes by other rules than its previous owner did, and nothing else notices a
    ticker started without its deployment's mode. Not retryable: the ticker leaves the group, so
    the partition goes to the tickers of the deployment's mode, and exits 2 (could not run) for
    its supervisor to report."""

    def __init__(self, partition: int, reason: str) -> None:
        self.partition = partition
        super().__init__(reason)


class PartitionTopics:
    """The two topics a take-over reads: schedule changes and the changelog of their state."""

    def __init__(self, schedules: str, changelog: str) -> None:
        self.schedules = schedules
        self.changelog = changelog


class TakeOver:
    """The partitions of one group session: arriving, restoring and owned.

    Owns the changelog reader it restores with; `close` releases it.
    """

    def __init__(
        self,
        settings: TickerSettings,
        topics: PartitionTopics,
        *,
        codecs: Codecs,
        metrics: TickerMetrics,
        clock: Callable[[], datetime],
        calendars: CalendarLookup,
        reader: PartitionReader,
        ends: EndOffsets,
    ) -> None:
        self._settings = settings
        self._calendars = calendars
        self._store_memory = StoreMemory(settings.state_store_memory_mb)
        self._topics = topics
        self._codecs = codecs
        self._metrics = metrics
        self._clock = clock
        self._ends = ends
        self._reader = reader
        self.owned: dict[int, OwnedPartition] = {}
        self.arriving: dict[int, float] = {}
        """Partitions assigned, paused and not owned yet: `time.monotonic()` at assignment."""
        self._restores: dict[int, PartitionRestore] = {}
        """Arriving partitions whose offsets settled, restoring in this order."""
        self._settle_wait_s = _SETTLE_WAIT_S[0]
        self._postponed_until: dict[int, float] = {}
        """Arriving partitions not tried again before this `time.monotonic()`."""
        self._held_back: set[int] = set()
        """Restoring partitions whose changelog an open transaction holds back."""

    @property
    def restoring(self) -> bool:
        """Whether a restore waits for the turns' time (the turn should not idle then)."""
        now = time.monotonic()
        return any(self._postponed_until.get(p, 0.0) <= now for p in self._restores)

    def assign(self, consumer: GroupMember, partitions: list[TopicPartition]) -> None:
        """Take `partitions` paused; each is taken over by the turns' `settle`."""
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)
        assigned_at = time.monotonic()
        for tp in partitions:
            self.arriving[tp.partition] = assigned_at

    def close(self) -> None:
        """Close every store and the reader."""
        for one in [*self.owned.values(), *(r.owned for r in self._restores.values())]:
            one.store.close()
        self.owned.clear()
        self._restores.clear()
        self.arriving.clear()
        self._postponed_until.clear()
        self._held_back.clear()
        self._reader.close()

    def settle(self, consumer: GroupMember, budget_s: float) -> None:
        """Move arriving partitions on: ask the unsettled for their offsets, then restore for
        up to `budget_s` and resume those restored."""
        if len(self._restores) < len(self.arriving):
            self._ask_offsets(consumer)
        deadline = time.monotonic() + budget_s
        for partition in list(self._restores):
            # Owning nothing yet, nothing waits to fire: restore at full speed.
            until = deadline if self.owned else math.inf
            if time.monotonic() >= until:
                break
            if self._postponed_until.get(partition, 0.0) > time.monotonic():
                continue
            report = self._restore_step(partition, until)
            if report is not None:
                self._resume(consumer, self._restores.pop(partition), report)
        self._metrics.owned_partitions.set(len(self.owned))
        self._metrics.schedules_held.set(sum(o.store.count for o in self.owned.values()))

    def _ask_offsets(self, consumer: GroupMember) -> None:
        """Plan the restore of each arriving partition whose committed offset answers.

        With read_committed, the committed-offset fetch does not answer while a transaction of
        the previous owner is pending (KIP-447 require_stable); a SIGKILLed owner's lasts until
        the broker aborts it, seconds later. Each turn asks for the partitions one by one, the
        one that last went unanswered last, and stops at the first that does not answer within
        the wait: the partitions already owned keep firing meanwhile.
        """
        settled_any = False
        now = time.monotonic()
        for partition in list(self.arriving):
            if partition in self._restores or self._postponed_until.get(partition, 0.0) > now:
                continue
            asked = TopicPartition(self._topics.schedules, partition)
            try:
                (answer,) = consumer.committed([asked], timeout=self._settle_wait_s)
            except KafkaException as failure:
                if failure.args[0].code() not in _NOT_SETTLED:
                    raise
                answer = None
            if answer is None or answer.error is not None:
                # Still pending: asked last next turn, and this turn has spent its wait.
                self.arriving[partition] = self.arriving.pop(partition)
                break
            settled_any = True
            self._plan(answer)
        if settled_any:
            self._settle_wait_s = _SETTLE_WAIT_S[0]
        else:
            self._settle_wait_s = min(2 * self._settle_wait_s, _SETTLE_WAIT_S[1])

    def _plan(self, tp: TopicPartition) -> None:
        """Open the partition's store and plan its restore; postponed on a passing obstacle.
        Raises `OwnershipModeError` for a partition last committed in another mode."""
        previous = OwnershipInfo.decode(tp.metadata)
        s = self._settings
        refused = mode_refusal(tp.partition, previous, s.ownership, s.ownership_from)
        if refused is not None:
            raise OwnershipModeError(tp.partition, refused)
        path = self._settings.state_dir / self._topics.schedules / str(tp.partition)
        owned = OwnedPartition(
            tp.partition,
            PartitionStore(path, self._store_memory),
            self._codecs,
            self._clock(),
            self._calendars,
        )
        restore = PartitionRestore(
            owned, self._topics.changelog, self._settings.restore_timeout_s, tp
        )
        # Held from the start, so a failure further on still closes its store (`close`).
        self._restores[tp.partition] = restore
        try:
            # The changelog is restored up to where the last committed transaction's records
            # end (the offset's metadata says where), however long an open one holds the last
            # stable offset back.
            restore.plan(
                self._reader,
                must_reach=None if previous is None else previous.changelog_offset,
                end_offset=self._changelog_end(tp.partition),
            )
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            if not passes(error, LEADER_MOVING):
                raise
            self._give_up(tp.partition, _RETRY_S, error.str())
        except RestoreError as failure:
            self._give_up(tp.partition, _RETRY_AFTER_FAILURE_S, str(failure))

    def _restore_step(self, partition: int, deadline: float) -> RestoreReport | None:
        restore = self._restores[partition]
        try:
            report = restore.step(self._reader, deadline)
        except RestoreHeldBackError as held:
            # The store keeps what it restored so far, open: the next attempt resumes there.
            self._postpone(partition, str(held), quiet=partition in self._held_back)
            self._held_back.add(partition)
            return None
        except RestoreError as failure:
            self._give_up(partition, _RETRY_AFTER_FAILURE_S, str(failure))
            return None
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            if not passes(error, LEADER_MOVING):
                raise
            restore.stop_reading(self._reader)
            self._postpone(partition, error.str())
            return None
        self._held_back.discard(partition)
        return report

    def _postpone(
        self, partition: int, reason: str, *, delay_s: float = _RETRY_S, quiet: bool = False
    ) -> None:
        """Try the partition again after `delay_s`; a restore kept resumes where it stopped."""
        log = logger.debug if quiet else logger.warning
        log(
            "instance=%s partition=%d: take-over postponed %.1fs (%s)",
            self._settings.instance,
            partition,
            delay_s,
            reason,
        )
        self._postponed_until[partition] = time.monotonic() + delay_s

    def _give_up(self, partition: int, delay_s: float, reason: str) -> None:
        """Drop the restore and close its store; the offsets are asked again after `delay_s`."""
        restore = self._restores.pop(partition)
        restore.stop_reading(self._reader)
        restore.owned.store.close()
        self._held_back.discard(partition)
        self._postpone(partition, reason, delay_s=delay_s)

    def _resume(
        self, consumer: GroupMember, restore: PartitionRestore, report: RestoreReport
    ) -> None:
        """Own the restored partition and start consuming its schedule changes."""
        tp, owned = restore.committed, restore.owned
        owned.changelog_end = owned.store.changelog_offset
        self._metrics.restore_seconds.labels(report.mode).observe(report.seconds)
        self._metrics.restored_records.labels(report.mode).inc(report.records)
        start = self._start_offset(consumer, tp, owned)
        # A valid offset for every owned partition, always: librdkafka sends no offset commit
        # (and so no fencing) in a transaction whose offsets are all invalid.
        owned.committed_offset = owned.next_offset = start
        mode = self._settings.ownership
        owned.judged_in = (mode, judged_from(OwnershipInfo.decode(tp.metadata), mode, start))
        self.owned[tp.partition] = owned
        waited_s = time.monotonic() - self.arriving.pop(tp.partition)
        self._postponed_until.pop(tp.partition, None)
        # The consumer starts from the committed offset too (its own fetch of it waits for the
        # same settled transaction); records below `start` are skipped by the planner.
        consumer.resume([TopicPartition(self._topics.schedules, tp.partition)])
        logger.info(
            "handover event=assigned instance=%s partition=%d offset=%d settled_after=%.3f "
            "restore=%s records=%d seconds=%.3f",
            self._settings.instance,
            tp.partition,
            start,
            waited_s - report.seconds,
            report.mode,
            report.records,
            report.seconds,
        )

    def _start_offset(
        self, consumer: GroupMember, tp: TopicPartition, owned: OwnedPartition
    ) -> int:
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
                self._settings.instance,
                tp.partition,
                "missing" if committed is None else committed,
                applied,
            )
            return applied
        if committed is not None:
            return committed
        low, _ = ask_until_answered(
            lambda attempt_s: consumer.get_watermark_offsets(tp, timeout=attempt_s),
            30,
            LEADER_MOVING | BROKER_GONE,
            refresh=lambda attempt_s: consumer.list_topics(tp.topic, timeout=attempt_s),
        )
        return int(low)

    def _changelog_end(self, partition: int) -> int:
        """The changelog partition's end, uncommitted records included."""
        return self._ends.end_offset(TopicPartition(self._topics.changelog, partition), 30)

    def release(self, consumer: GroupMember, partitions: list[TopicPartition], event: str) -> None:
        """Stop owning `partitions` (revoked or lost); their stores stay on disk for later."""
        try:
            consumer.incremental_unassign(partitions)
        finally:
            for tp in partitions:
                self.arriving.pop(tp.partition, None)
                self._postponed_until.pop(tp.partition, None)
                self._held_back.discard(tp.partition)
                restore = self._restores.pop(tp.partition, None)
                if restore is not None:
                    restore.stop_reading(self._reader)
                    restore.owned.store.close()
                owned = self.owned.pop(tp.partition, None)
                if owned is not None:
                    # The store stays on disk: a later assignment restarts warm from it.
                    owned.store.close()
                    logger.info(
                        "handover event=%s instance=%s partition=%d",
                        event,
                        self._settings.instance,
                        tp.partition,
                    )
            self._metrics.owned_partitions.set(len(self.owned))
