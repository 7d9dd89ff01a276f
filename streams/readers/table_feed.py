"""A compacted single-partition topic read as a table: the calendars, the teams.

A read consumes the topic from its beginning to its end as of the read, read_committed; a feed
goes on from where its last read ended, so a long-lived process (a ticker) follows the topic
without reading it again. Each record is turned into the caller's type by the reader function
the topic's contract module owns (`calendar_events`, `team_events`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import TopicMetadata

from kairos.core.errors import KairosError
from kairos.streams.kafka.passing import BROKER_GONE, LEADER_MOVING, ask_until_answered
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topic_check import TopicProblem
from kairos.streams.kafka.topics import TopicLayout, TopicRole

logger = logging.getLogger(__name__)

Record = TypeVar("Record")

_ELECTING = frozenset({KafkaError.LEADER_NOT_AVAILABLE})


class TopicReadError(KairosError):
    """A topic could not be read to its end: the broker or the topic is unavailable.

    Raised as the topic's own subclass, which names its `kind` and marks it retryable.
    """

    kind: ClassVar[str]
    """What the topic holds, as the message names it: schedules, calendars, teams."""

    def __init__(self, topic: str, reason: str, kafka_error: KafkaError | None = None) -> None:
        self.topic = topic
        self.reason = reason
        self.kafka_error = kafka_error
        super().__init__(f"cannot read {self.kind} topic {topic}: {reason}")


class TableFeed(Generic[Record]):
    """Follows one single-partition topic. Not thread-safe: one thread reads.

    Raises `read_error`, the topic's own `TopicReadError`, when the topic cannot be read
    (missing, refused, or of another partition count than one).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        role: TopicRole,
        *,
        group: str,
        read_record: Callable[[Message], Record],
        read_error: type[TopicReadError],
        partition_problem: Callable[[TopicLayout, int], TopicProblem | None],
        timeout_s: float = 30.0,
    ) -> None:
        self.topic = settings.layout.name(role)
        self._read_record = read_record
        self._read_error = read_error
        self._timeout_s = timeout_s
        self._partition = TopicPartition(self.topic, 0)
        self._next_offset = 0
        self._unreturned: list[Record] = []
        """Records a failed read took, returned by the next read."""
        self._consumer = Consumer(
            settings.consumer_config(
                **{
                    # Assigned, never subscribed and never committed: the client requires a
                    # group id, but no group is ever joined.
                    "group.id": settings.deployment_id(group),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    # A read to the end: the broker would hold a caught-up fetch for 500 ms.
                    "fetch.wait.max.ms": 10,
                }
            )
        )
        try:
            self._check_partitions(settings.layout, partition_problem, timeout_s)
            self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        except BaseException:
            self._consumer.close()
            raise

    def read_new(self, timeout_s: float | None = None) -> list[Record]:
        """The records after those read before (all, the first time), up to the end now.

        A read that fails keeps what it took for the next one, so a caller that reads again
        misses no record."""
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        try:
            # A topic just created, or whose leader is moving, answers "not leader" for a
            # moment: asked again, it answers.
            _, end = ask_until_answered(
                lambda attempt_s: self._consumer.get_watermark_offsets(
                    self._partition, timeout=attempt_s, cached=False
                ),
                timeout_s,
                LEADER_MOVING | BROKER_GONE,
                refresh=lambda attempt_s: self._consumer.list_topics(self.topic, timeout=attempt_s),
            )
        except KafkaException as error:
            raise self._read_error(
                self.topic, f"the broker did not answer: {error}", None
            ) from error
        deadline = time.monotonic() + timeout_s
        # librdkafka reports the end once per arrival at it: with nothing new since the last
        # read there is no report to wait for, hence the watermark.
        start = self._next_offset
        while self._next_offset < end:
            if time.monotonic() > deadline:
                raise self._read_error(self.topic, f"not read to its end in {timeout_s:g}s", None)
            if self._consume_batch(self._unreturned, start, end):
                break
        records, self._unreturned = self._unreturned, []
        return records

    def close(self) -> None:
        self._consumer.close()

    def _consume_batch(self, records: list[Record], start: int, end: int) -> bool:
        """Append one batch's records; whether the end (of committed records) was reached.

        The whole batch is taken even past an end: records published just after it arrive in
        the same batch, and the consumer delivers none of them again."""
        # consume() waits its whole timeout unless the batch fills: keep the timeout short.
        reached_end = False
        for message in self._consumer.consume(num_messages=1000, timeout=0.05):
            error = message.error()
            offset = message.offset()
            if error is None:
                records.append(self._read_record(message))
                assert offset is not None  # set on every record
                self._next_offset = offset + 1
            elif error.code() == KafkaError._PARTITION_EOF:
                # An end reported where the last read stopped is that read's, still queued;
                # one further on is this read's (below the watermark when a transaction is open).
                if offset is not None and (offset > start or offset >= end):
                    self._next_offset = max(self._next_offset, offset)
                    reached_end = True
            elif error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise self._read_error(self.topic, error.str(), error)
            else:
                # librdkafka retries transient errors itself; the deadline bounds the wait.
                logger.warning("reading %s: %s", self.topic, error.str())
        return reached_end

    def _check_partitions(
        self,
        layout: TopicLayout,
        partition_problem: Callable[[TopicLayout, int], TopicProblem | None],
        timeout_s: float,
    ) -> None:
        topic = self.topic

        def ask(attempt_s: float) -> TopicMetadata | None:
            found: TopicMetadata | None = self._consumer.list_topics(
                topic, timeout=attempt_s
            ).topics.get(topic)
            if found is not None and found.error is not None and found.error.code() in _ELECTING:
                raise KafkaException(found.error)  # a topic just created, its leader not elected
            return found

        try:
            found = ask_until_answered(ask, timeout_s, _ELECTING | BROKER_GONE)
        except KafkaException as error:
            raise self._read_error(topic, f"the broker did not answer: {error}", None) from error
        if found is not None and found.error is not None:
            if found.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                # Refused (not authorized), not absent: the metadata hides a topic it may not show.
                raise self._read_error(topic, found.error.str(), found.error)
            found = None
        if found is None or not found.partitions:
            raise self._read_error(
                topic, "the topic does not exist; create it with `kairos topics create`", None
            )
        problem = partition_problem(layout, len(found.partitions))
        if problem is not None:
            raise self._read_error(topic, f"{problem.message}; fix: {problem.fix}", None)
