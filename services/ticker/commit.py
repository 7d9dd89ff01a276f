"""The commit path: a turn's work sent as one fenced transaction, and only then in the stores.

The stores move after the commit returns, with the changelog offsets their records got, so they
hold committed state only: an aborted transaction leaves nothing behind but the clients it
rebuilds. A transaction decided on a clock ahead of the broker's is aborted before its fence.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kairos.core.clock import ClockAheadError
from kairos.services.ticker.metrics import TickerMetrics
from kairos.services.ticker.partition import OwnedPartition, consumed_offsets
from kairos.services.ticker.quarantine import Quarantine
from kairos.services.ticker.rebuild import RebuildError, abandon
from kairos.services.ticker.transaction import FiringTransactions
from kairos.services.ticker.work import TransactionWork
from kairos.streams.kafka.ports import GroupMember
from kairos.streams.state.state_store import StateWrite

logger = logging.getLogger(__name__)


class CommitPath:
    def __init__(
        self,
        instance: str,
        schedules_topic: str,
        quarantine: Quarantine,
        metrics: TickerMetrics,
        clock: Callable[[], datetime],
    ) -> None:
        self._instance = instance
        self._schedules_topic = schedules_topic
        self._quarantine = quarantine
        self._metrics = metrics
        self._clock = clock

    def commit(
        self,
        work: TransactionWork,
        owned: dict[int, OwnedPartition],
        transactions: FiringTransactions,
        member: GroupMember,
    ) -> None:
        """Send `work` in one transaction fenced by `member`'s generation; then move the stores.

        Raises `RebuildError` when the transaction did not commit (aborted first when the
        producer still can): the session is then rebuilt from the committed state.
        """
        fired_at = self._clock()
        writes, runs = self._quarantine.encode(transactions, work, owned, fired_at)
        checkpoints = {
            p: one.next_offset
            for p, one in owned.items()
            if one.next_offset != one.committed_offset
        }

        def offsets_for(changelog_ends: dict[int, int]) -> list[TopicPartition]:
            return consumed_offsets(self._schedules_topic, owned, self._instance, changelog_ends)

        started = time.monotonic()
        try:
            changelog_ends = transactions.send(
                work,
                writes,
                member,
                fired_at,
                runs=runs,
                checkpoints=checkpoints,
                offsets_for=offsets_for,
            )
        except KafkaException as failure:
            raise self._aborted(failure, transactions) from failure
        except ClockAheadError as ahead:
            raise self._refused_early(ahead, transactions) from ahead
        self._observe_clock(transactions.clock_skew_ms)
        self._metrics.commit_seconds.observe(time.monotonic() - started)
        logger.debug("transaction committed instance=%s runs=%d", self._instance, len(work.runs))
        committed_at = self._clock()
        self._apply_committed(
            work,
            owned,
            writes,
            checkpoints,
            changelog_ends,
            transactions=transactions,
            committed_at=committed_at,
        )
        self._observe_commit(work, owned, committed_at)

    def _apply_committed(
        self,
        work: TransactionWork,
        owned: dict[int, OwnedPartition],
        writes: dict[int, list[StateWrite]],
        checkpoints: dict[int, int],
        changelog_ends: dict[int, int],
        *,
        transactions: FiringTransactions,
        committed_at: datetime,
    ) -> None:
        """Only after the commit do the local stores move, with the changelog offset they
        reflect; what is not due soon leaves memory (`OwnedPartition.committed`)."""
        for partition, end in changelog_ends.items():
            one = owned[partition]
            one.changelog_end = end + 1
            one.store.apply(
                writes.get(partition, []),
                changelog_offset=end + 1,
                schedules_offset=checkpoints.get(partition),
            )
            dropped = one.committed(work.states.get(partition, {}), committed_at)
            if partition in work.recount_use:
                one.use.recount()
            else:
                one.use.committed(work.use_changes.get(partition, {}))
            transactions.forget_prepared(dropped)
        for one in owned.values():
            one.committed_offset = one.next_offset
        self._metrics.schedules_held.set(sum(o.store.count for o in owned.values()))

    def _observe_commit(
        self, work: TransactionWork, owned: dict[int, OwnedPartition], committed_at: datetime
    ) -> None:
        # Runs fired together share a few due instants: observe each instant once, counted.
        fired = Counter((decision.fire_at, partition) for decision, _, partition in work.runs)
        for (fire_at, partition), count in fired.items():
            lateness = max(0.0, (committed_at - fire_at).total_seconds())
            self._metrics.lateness.observe(lateness, count)
            one = owned[partition]
            if one.last_fire_at is None or fire_at >= one.last_fire_at:
                one.last_fire_at, one.last_fire_lateness_ms = fire_at, int(lateness * 1000)
        self._metrics.fires.inc(len(work.runs))
        self._metrics.decided_ahead.inc(sum(map(len, work.written_ahead.values())))
        self._metrics.skips.inc(len(work.skips))
        self._metrics.dead_letters.inc(len(work.dead_letters))
        self._metrics.quarantined.inc(work.quarantined)

    def _observe_clock(self, skew_ms: int | None) -> None:
        if skew_ms is not None:
            self._metrics.clock_skew.set(skew_ms / 1000)

    def _refused_early(
        self, ahead: ClockAheadError, transactions: FiringTransactions
    ) -> RebuildError:
        """Abort a transaction decided on a clock ahead of the broker's, and start over.

        The rebuild rejoins the group, so while this host's clock is wrong its partitions may
        move to a ticker with a good one; each attempt here measures the clock again.
        """
        self._observe_clock(ahead.skew_ms)
        self._metrics.aborts.labels("CLOCK_AHEAD").inc()
        logger.critical("instance=%s %s", self._instance, ahead)
        abandon(transactions)
        return RebuildError(str(ahead))

    def _aborted(self, failure: KafkaException, transactions: FiringTransactions) -> RebuildError:
        """Abandon the open transaction (`rebuild.abandon`); the caller rebuilds the clients."""
        error: KafkaError = failure.args[0]
        self._metrics.aborts.labels(error.name()).inc()
        logger.warning(
            "instance=%s transaction aborted (%s); rebuilding from the last commit",
            self._instance,
            error.str(),
        )
        if not error.fatal():
            abandon(transactions)
        return RebuildError(error.str())
