"""The executor's rebalance callbacks, and the guard that keeps their failures out of librdkafka.

An exception raised inside a rebalance callback comes out of `consume()` mangled (a bare
`KafkaError`, which no `except` clause catches). So each callback runs guarded: its failure is
logged and kept, and the loop raises it once `consume()` returns (as the ticker does).
"""

from __future__ import annotations

import logging

from confluent_kafka import TopicPartition

from kairos.services.executor.clients import AssignmentCheck
from kairos.services.executor.offsets import OffsetMarks
from kairos.streams.kafka.ports import GroupMember, RebalanceCallback

logger = logging.getLogger(__name__)


class CallbackFailures:
    """Runs rebalance callbacks guarded; `raise_kept` raises the first failure they kept."""

    def __init__(self, instance: str) -> None:
        self._instance = instance
        self._kept: Exception | None = None

    def guarded(self, callback: RebalanceCallback) -> RebalanceCallback:
        def guarded(consumer: GroupMember, partitions: list[TopicPartition]) -> None:
            try:
                callback(consumer, partitions)
            except Exception as failure:
                logger.exception("executor instance=%s rebalance callback failed", self._instance)
                if self._kept is None:
                    self._kept = failure

        return guarded

    def raise_kept(self) -> None:
        """Raise what a callback failed with, once, from outside librdkafka."""
        kept, self._kept = self._kept, None
        if kept is not None:
            raise kept


class ExecutorRebalance:
    """What the executor does when partitions of the runs topic come, go, or are lost."""

    def __init__(self, guard: AssignmentCheck, marks: OffsetMarks, instance: str) -> None:
        self._guard = guard
        self._marks = marks
        self._instance = instance

    def on_assign(self, _: GroupMember, partitions: list[TopicPartition]) -> None:
        # Raises when a member is on another store: the loop stops before it admits a record
        # of these partitions.
        self._guard.check_assignment()
        logger.info(
            "executor instance=%s partitions assigned: %s",
            self._instance,
            sorted(tp.partition for tp in partitions),
        )

    def on_revoke(self, consumer: GroupMember, partitions: list[TopicPartition]) -> None:
        # Everything consumed from these partitions is claimed: commit it, so the next owner
        # does not redeliver it.
        revoked = {tp.partition for tp in partitions}
        self._marks.commit(consumer, force=True, only=revoked)
        self._marks.forget(revoked)

    def on_lost(self, _: GroupMember, partitions: list[TopicPartition]) -> None:
        # Not ours any more: another owner redelivers from the last commit, and the store
        # suppresses what we already claimed.
        self._marks.forget({tp.partition for tp in partitions})
