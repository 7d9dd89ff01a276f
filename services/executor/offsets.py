"""The consumed offsets of the runs topic that are safe to commit, and their commit.

An offset is marked only once the claims (or dead letters) of the records before it are durable,
so committing it never loses a run; committing late only redelivers duplicates, which the store
suppresses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import timedelta

from confluent_kafka import KafkaException, TopicPartition

from kairos.streams.kafka.ports import GroupMember

logger = logging.getLogger(__name__)


class OffsetMarks:
    def __init__(self, runs_topic: str, commit_interval: timedelta) -> None:
        self._runs_topic = runs_topic
        self._interval_s = commit_interval.total_seconds()
        self._marked: dict[int, int] = {}
        """Per partition, the offset after the last record whose claim is durable."""
        self._last_commit = time.monotonic()

    def mark(self, positions: Iterable[tuple[int, int]]) -> None:
        """Mark (partition, offset) of records whose claims are durable, in consumed order."""
        self._marked.update({partition: offset + 1 for partition, offset in positions})

    def forget(self, partitions: set[int]) -> None:
        for partition in partitions:
            self._marked.pop(partition, None)

    def commit(
        self, consumer: GroupMember, force: bool = False, only: set[int] | None = None
    ) -> None:
        """Commit the marks (of the `only` partitions), at most every commit interval unless
        `force`d; a failed commit is logged and tried again later."""
        due = force or time.monotonic() - self._last_commit >= self._interval_s
        if not self._marked or not due:
            return
        offsets = [
            TopicPartition(self._runs_topic, p, o)
            for p, o in self._marked.items()
            if only is None or p in only
        ]
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            # Claims are durable; a failed commit only means more suppressed duplicates.
            logger.warning("executor offset commit failed: %s", error.args[0].str())
            return
        self._last_commit = time.monotonic()
        for tp in offsets:
            del self._marked[tp.partition]
