"""Taking over schedules partitions: wait for the previous owner's offsets, restore, resume.

A partition is assigned paused and taken over by `settle`, called every turn, once its committed
offset answers: with read_committed the offset fetch waits while a transaction of the previous
owner is pending (KIP-447 require_stable), and waiting inside the rebalance callback would hold
up every owned partition's fires. The restore then brings the store to the committed state
(`OwnedPartition.restore`), and schedule changes resume where that state left off.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kairos.core.calendar_rules import CalendarLookup
from kairos.services.ticker.metrics import TickerMetrics
from kairos.services.ticker.partition import OwnedPartition, RestoreError, RestoreHeldBackError
from kairos.services.ticker.settings import TickerSettings
from kairos.streams.codec import Codecs
from kairos.streams.ownership import OwnershipInfo
from kairos.streams.passing import BROKER_GONE, LEADER_MOVING, ask_until_answered, passes
from kairos.streams.ports import EndOffsets, GroupMember, PartitionReader
from kairos.streams.state_store import PartitionStore

logger = logging.getLogger(__name__)

_SETTLE_WAIT_S = (0.02, 0.25)
"""How long a turn waits for an arriving partition's committed offset before it fires: the first
wait, doubled after each turn that settled none (a broker far away may need more) up to the last."""
_NOT_SETTLED = (KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT)
_RETRY_S = 0.5
"""How soon a take-over held up by a passing obstacle is tried again."""
_RETRY_AFTER_FAILURE_S = 5.0
"""How soon a take-over whose restore failed is tried again."""


class PartitionTopics:
    """The two topics a take-over reads: schedule changes and the changelog of their state."""

    def __init__(self, schedules: str, changelog: str) -> None:
        self.schedules = schedules
        self.changelog = changelog


class TakeOver:
    """The partitions of one group session: those arriving and those owned.

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
        self._topics = topics
        self._codecs = codecs
        self._metrics = metrics
        self._clock = clock
        self.owned: dict[int, OwnedPartition] = {}
        self.arriving: dict[int, float] = {}
        """Partitions assigned, paused and not taken over yet: `time.monotonic()` at assignment."""
        self._settle_wait_s = _SETTLE_WAIT_S[0]
        self._postponed_until: dict[int, float] = {}
        """Arriving partitions not asked for again before this `time.monotonic()`."""
        self._held_back: set[int] = set()
        """Arriving partitions whose restore an open changelog transaction holds back."""
        self._restoring: dict[int, OwnedPartition] = {}
        """Held-back partitions' stores, kept open between attempts (opening loads the index)."""
        self._ends = ends
        self._restorer = reader

    def assign(self, consumer: GroupMember, partitions: list[TopicPartition]) -> None:
        """Take `partitions` paused, and take over at once those whose offsets are settled."""
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)
        assigned_at = time.monotonic()
        for tp in partitions:
            self.arriving[tp.partition] = assigned_at
        self.settle(consumer)

    def close(self) -> None:
        """Close every owned store and the session's clients."""
        for owned in [*self.owned.values(), *self._restoring.values()]:
            owned.store.close()
        self.owned.clear()
        self._restoring.clear()
        self.arriving.clear()
        self._postponed_until.clear()
        self._held_back.clear()
        self._restorer.close()

    def settle(self, consumer: GroupMember) -> None:
        """Restore and start consuming the arriving partitions whose offsets are settled.

        With read_committed, the committed-offset fetch does not answer while a transaction of
        the previous owner is pending (KIP-447 require_stable); a SIGKILLed owner's lasts until
        the broker aborts it, seconds later. Each turn asks for the partitions one by one, the
        one that last went unanswered last, and stops at the first that does not answer within
        the wait: the partitions already owned keep firing meanwhile.
        """
        settled = self._settled_offsets(consumer)
        if not settled:
            self._settle_wait_s = min(2 * self._settle_wait_s, _SETTLE_WAIT_S[1])
            return
        self._settle_wait_s = _SETTLE_WAIT_S[0]
        for tp in settled:
            if self._take_over_or_postpone(consumer, tp):
                del self.arriving[tp.partition]
                self._postponed_until.pop(tp.partition, None)
        self._metrics.owned_partitions.set(len(self.owned))
        self._metrics.schedules_held.set(sum(o.store.count for o in self.owned.values()))

    def _settled_offsets(self, consumer: GroupMember) -> list[TopicPartition]:
        settled: list[TopicPartition] = []
        now = time.monotonic()
        for partition in list(self.arriving):
            if self._postponed_until.get(partition, 0.0) > now:
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
            settled.append(answer)
        return settled

    def _take_over_or_postpone(self, consumer: GroupMember, tp: TopicPartition) -> bool:
        """Take `tp` over; on a passing obstacle postpone it (True: taken over).

        A partition without a leader for a moment, or whose changelog an open transaction holds
        back, is tried again in a later turn; the other partitions keep firing meanwhile.
        """
        partition = tp.partition
        try:
            self._take_over(consumer, tp, time.monotonic() - self.arriving[partition])
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            if not passes(error, LEADER_MOVING):
                raise
            self._postpone(partition, _RETRY_S, error.str())
            return False
        except RestoreHeldBackError as held:
            # The store keeps what it restored so far, open: the next attempt resumes there.
            self._postpone(
                partition, _RETRY_S, str(held), quiet=partition in self._held_back, keep=True
            )
            self._held_back.add(partition)
            return False
        except RestoreError as failure:
            self._postpone(partition, _RETRY_AFTER_FAILURE_S, str(failure))
            return False
        self._held_back.discard(partition)
        return True

    def _postpone(
        self,
        partition: int,
        delay_s: float,
        reason: str,
        *,
        quiet: bool = False,
        keep: bool = False,
    ) -> None:
        log = logger.debug if quiet else logger.warning
        log(
            "instance=%s partition=%d: take-over postponed %.1fs (%s)",
            self._settings.instance,
            partition,
            delay_s,
            reason,
        )
        owned = self.owned.pop(partition, None)
        if owned is not None and keep:
            self._restoring[partition] = owned
        elif owned is not None:
            owned.store.close()
        self._postponed_until[partition] = time.monotonic() + delay_s

    def _take_over(self, consumer: GroupMember, tp: TopicPartition, waited_s: float) -> None:
        """Restore a settled partition to its committed state and start consuming it."""
        previous = OwnershipInfo.decode(tp.metadata)
        # Restore the store from the changelog up to where the last committed transaction's
        # records end (the offset's metadata says where), however long an open one holds the
        # last stable offset back.
        owned = self._restoring.pop(tp.partition, None)
        if owned is None:
            path = self._settings.state_dir / self._topics.schedules / str(tp.partition)
            owned = OwnedPartition(
                tp.partition, PartitionStore(path), self._codecs, self._clock(), self._calendars
            )
        # Held from the start, so a failure further on still closes its store (_disconnect).
        self.owned[tp.partition] = owned
        report = owned.restore(
            self._restorer,
            self._topics.changelog,
            self._settings.restore_timeout_s,
            must_reach=None if previous is None else previous.changelog_offset,
            end_offset=self._changelog_end(tp.partition),
        )
        owned.changelog_end = owned.store.changelog_offset
        self._metrics.restore_seconds.labels(report.mode).observe(report.seconds)
        self._metrics.restored_records.labels(report.mode).inc(report.records)
        start = self._start_offset(consumer, tp, owned)
        # A valid offset for every owned partition, always: librdkafka sends no offset commit
        # (and so no fencing) in a transaction whose offsets are all invalid.
        owned.committed_offset = owned.next_offset = start
        # The consumer starts from the committed offset too (its own fetch of it waits for the
        # same settled transaction); records below `start` are skipped by `_take_change`.
        consumer.resume([TopicPartition(self._topics.schedules, tp.partition)])
        logger.info(
            "handover event=assigned instance=%s partition=%d offset=%d settled_after=%.3f "
            "restore=%s records=%d seconds=%.3f",
            self._settings.instance,
            tp.partition,
            start,
            waited_s,
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
                restoring = self._restoring.pop(tp.partition, None)
                if restoring is not None:
                    restoring.store.close()
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
