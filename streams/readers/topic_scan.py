"""Reading a topic's partitions from given offsets to their end, as the readers of history do.

The plumbing `kairos.streams.readers.history` stands on: assigned consumers that never join a
group, each partition's watermarks, the first offset appended at or after an instant
(`offsets_for_times`, exact on topics the broker stamps with LogAppendTime), and a read that
ends at each partition's end as the read finds it, or at given offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kairos.core.errors import KairosError
from kairos.core.instants import epoch_ms
from kairos.streams.kafka.settings import HISTORY_READERS_GROUP, KafkaSettings
from kairos.streams.wire.history_records import TopicRecord, topic_record

logger = logging.getLogger(__name__)

NO_TOPIC = (
    "the topic does not exist; check --bootstrap-servers and --topic-prefix, or create the "
    "topics with `kairos topics create`"
)


@dataclass(frozen=True)
class ReadProgress:
    """How far a read of `topic` got: offsets passed of the offsets there were when it began."""

    topic: str
    done: int
    total: int


ProgressCallback = Callable[[ReadProgress], None]


class HistoryReadError(KairosError):
    """A topic could not be read to its end: the broker or the topic is unavailable."""

    retryable = True

    def __init__(self, topic: str, reason: str) -> None:
        self.topic = topic
        self.reason = reason
        super().__init__(f"cannot read {topic}: {reason}")


class TopicScan:
    """Reads partitions of one deployment's topics; `on_progress` is told after every batch of
    an unbounded read, and a read fails with `HistoryReadError` when the broker sends nothing
    for `idle_timeout_s`."""

    def __init__(
        self,
        settings: KafkaSettings,
        on_progress: ProgressCallback | None,
        idle_timeout_s: float,
    ) -> None:
        self._settings = settings
        self._on_progress = on_progress
        self._idle_timeout_s = idle_timeout_s

    def consumer(self, isolation: str) -> Consumer:
        return Consumer(self.consumer_config(isolation))

    def offsets_at(
        self,
        consumer: Consumer,
        topic: str,
        since: datetime,
        low: dict[int, int],
        end: dict[int, int],
    ) -> dict[int, int]:
        """Each partition's first offset appended at or after `since` (its end when none is)."""
        at_ms = epoch_ms(since)
        asked = [TopicPartition(topic, p, at_ms) for p in sorted(low)]
        try:
            found = consumer.offsets_for_times(asked, timeout=self._idle_timeout_s)
        except KafkaException as failure:
            raise HistoryReadError(topic, f"no offsets by time: {failure}") from None
        starts: dict[int, int] = {}
        for answer in found:
            if answer.error is not None:
                raise HistoryReadError(
                    topic, f"no offset by time for partition {answer.partition}: {answer.error}"
                )
            # -1: nothing was appended at or after `since`.
            offset = answer.offset if answer.offset >= 0 else end[answer.partition]
            starts[answer.partition] = max(offset, low[answer.partition])
        return starts

    def consumer_config(self, isolation: str) -> dict[str, Any]:
        return self._settings.consumer_config(
            **{
                # Assigned, never subscribed and never committed: the group id is required by
                # the client but no group is ever joined.
                "group.id": self._settings.deployment_id(HISTORY_READERS_GROUP),
                "enable.auto.commit": False,
                # A start removed by retention since it was looked up: the oldest kept instead.
                "auto.offset.reset": "earliest",
                "isolation.level": isolation,
                "enable.partition.eof": True,
                # A caught-up partition answers at once instead of holding the fetch 500 ms.
                "fetch.wait.max.ms": 10,
            }
        )

    def partition_count(self, consumer: Consumer, topic: str) -> int:
        try:
            metadata = consumer.list_topics(topic, timeout=self._idle_timeout_s)
        except KafkaException as error:
            raise HistoryReadError(topic, f"the broker did not answer: {error}") from error
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise HistoryReadError(topic, NO_TOPIC)
        return len(found.partitions)

    def watermarks(
        self, consumer: Consumer, topic: str, partitions: list[int]
    ) -> tuple[dict[int, int], dict[int, int]]:
        """Each partition's low and high offsets; high is the last stable offset for a
        read_committed consumer, the high watermark for a read_uncommitted one."""
        low: dict[int, int] = {}
        high: dict[int, int] = {}
        for p in partitions:
            try:
                low[p], high[p] = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=self._idle_timeout_s
                )
            except KafkaException as failure:
                raise HistoryReadError(topic, f"no offsets for partition {p}: {failure}") from None
        return low, high

    def consume(
        self,
        consumer: Consumer,
        topic: str,
        count: int,
        low: dict[int, int],
        high: dict[int, int],
        *,
        bounded: bool,
        key_prefix: bytes | None = None,
    ) -> Iterator[TopicRecord]:
        """The records of each partition from `low`, to its end as the read finds it, or with
        `bounded` only those before `high` (the unsettled ones, past a last stable offset).

        With `key_prefix`, records whose key does not start with it are passed over unread (a
        record without a key is kept, for its reader to reject): a reader of one schedule's runs
        skips every other schedule's before building or decoding anything."""
        partitions = sorted(low)
        consumer.assign([TopicPartition(topic, p, low[p]) for p in partitions])
        position = dict(low)
        done: set[int] = set()
        total = sum(high[p] - low[p] for p in partitions)
        last_heard = time.monotonic()
        while len(done) < len(partitions):
            if time.monotonic() - last_heard > self._idle_timeout_s:
                missing = sorted(set(partitions) - done)
                raise HistoryReadError(
                    topic, f"partitions {missing} sent nothing for {self._idle_timeout_s:.0f}s"
                )
            # A batch call waits its whole timeout unless the batch fills, so a read's last
            # (partial) batch costs the timeout: short, or a small read is mostly waiting.
            messages = consumer.consume(num_messages=5000, timeout=0.05)
            if messages:
                last_heard = time.monotonic()
            for message in messages:
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    _raise_unless_transient(topic, error)
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None  # set on records and EOFs
                if partition in done:
                    continue
                if error is None:
                    position[partition] = offset + 1
                    if (not bounded or offset < high[partition]) and _has_prefix(
                        message.key(), key_prefix
                    ):
                        yield topic_record(message, count)
                    if not bounded or offset + 1 < high[partition]:
                        continue
                # The end as of now: later records were written after the read began.
                done.add(partition)
                consumer.pause([TopicPartition(topic, partition)])
                position[partition] = high[partition]
            if self._on_progress is not None and not bounded:
                passed = sum(min(position[p], high[p]) - low[p] for p in partitions)
                self._on_progress(ReadProgress(topic, passed, total))


def _raise_unless_transient(topic: str, error: KafkaError) -> None:
    if error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        raise HistoryReadError(topic, error.str())
    # librdkafka retries transient errors itself; the idle timeout bounds it.
    logger.warning("reading %s: %s", topic, error.str())


def _has_prefix(key: bytes | None, prefix: bytes | None) -> bool:
    return prefix is None or key is None or key.startswith(prefix)
