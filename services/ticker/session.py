"""One membership of the ticker group: the clients opened together and closed together.

A session exists only connected: its producer has initialised its transactions (fencing any
earlier one of the same transactional id), its member has learnt the topics' partition counts and
subscribed. Any failure rebuilds a whole new session; nothing of an old one is reused.

Rebalance callbacks run inside `consume()` (and `close()`); the session routes them to the
take-over and keeps their failures: an exception raised inside a callback comes out of
`consume()` mangled (a bare `KafkaError`, which no `except` clause catches), killing the loop, so
it is kept instead and raised once `consume()` returned (`raise_callback_failure`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from kairos.core.calendar_rules import CalendarLookup
from kairos.services.ticker.changes import ScheduleChanges
from kairos.services.ticker.clients import TickerClients
from kairos.services.ticker.metrics import TickerMetrics
from kairos.services.ticker.rebuild import RebuildError
from kairos.services.ticker.settings import TickerSettings
from kairos.services.ticker.takeover import PartitionTopics, TakeOver
from kairos.services.ticker.transaction import FiringTransactions, Topics
from kairos.streams.kafka.ports import GroupMember, RebalanceCallback
from kairos.streams.kafka.settings import RESTORE_GROUP, TICKER_TRANSACTIONAL_ID, KafkaSettings
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.run_encoder import UpstreamResolver

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionParts:
    """What every session of one ticker is opened with."""

    kafka: KafkaSettings
    settings: TickerSettings
    topics: Topics
    codecs: Codecs
    metrics: TickerMetrics
    clock: Callable[[], datetime]
    calendars: CalendarLookup
    changes: ScheduleChanges
    upstream: UpstreamResolver
    """What runs of schedules naming upstream schedules wait for (`upstream_book`)."""


class TickerSession:
    def __init__(
        self, member: GroupMember, transactions: FiringTransactions, take_over: TakeOver
    ) -> None:
        self.member = member
        self.transactions = transactions
        self.take_over = take_over
        self._callback_failure: Exception | None = None
        self._leaving = False
        """Set while the member closes: an assignment served by `close()` is not taken up."""
        self.assigned = False
        """Whether the group gave this member its partitions, none perhaps (a standby): set by
        the first assignment, which librdkafka serves even when it is empty."""

    @classmethod
    def open(cls, clients: TickerClients, parts: SessionParts) -> TickerSession:
        """Connect: producer first (its `init_transactions` fences an earlier incarnation), then
        the take-over's reader, then the member, which subscribes last."""
        opened: list[Callable[[], object]] = []
        try:
            transactions = _transactions(clients, parts)
            opened.append(lambda: transactions.producer.flush(0))
            take_over = _take_over(clients, parts)
            opened.append(take_over.close)
            s = parts.settings
            member = clients.group_member(
                parts.kafka.group_member_config(
                    s.group(parts.kafka), s.instance, s.session_timeout_ms
                )
            )
            opened.append(member.close)
            parts.changes.learn_partitions(member, parts.kafka.layout)
        except BaseException:
            for close in reversed(opened):
                with contextlib.suppress(Exception):
                    close()
            raise
        session = cls(member, transactions, take_over)
        session._subscribe(parts)
        return session

    def _subscribe(self, parts: SessionParts) -> None:
        changes, instance = parts.changes, parts.settings.instance

        def on_assign(_: Any, partitions: list[TopicPartition]) -> None:
            if self._leaving:
                # A rebalance finished while the ticker was leaving the group, and `close()`
                # serves its callback. Restoring would wait out the whole restore timeout: the
                # offset fetch of a closing consumer never returns. The partitions go to the
                # other members once the close has left the group.
                logger.info(
                    "handover event=declined instance=%s partitions=%s (leaving the group)",
                    instance,
                    sorted(tp.partition for tp in partitions),
                )
                return
            changes.check_assigned(partitions)
            # Paused until taken over (`TakeOver.settle`): waiting here, inside the callback,
            # for a previous owner's pending transaction would hold up every owned partition.
            self.take_over.assign(self.member, partitions)
            self.assigned = True

        def on_revoke(_: Any, partitions: list[TopicPartition]) -> None:
            # Callbacks run between transactions, so nothing is in flight to commit here.
            self.take_over.release(self.member, partitions, "revoked")

        def on_lost(_: Any, partitions: list[TopicPartition]) -> None:
            self.take_over.release(self.member, partitions, "lost")

        self.member.subscribe(
            [parts.topics.schedules],
            on_assign=self._guarded(on_assign, instance),
            on_revoke=self._guarded(on_revoke, instance),
            on_lost=self._guarded(on_lost, instance),
        )

    def _guarded(self, callback: RebalanceCallback, instance: str) -> RebalanceCallback:
        def guarded(consumer: Any, partitions: list[TopicPartition]) -> None:
            try:
                callback(consumer, partitions)
            except Exception as failure:
                logger.exception("instance=%s rebalance callback failed", instance)
                self._callback_failure = failure

        return guarded

    def raise_callback_failure(self) -> None:
        """Raise (as `RebuildError`) what a rebalance callback failed with, once."""
        failure, self._callback_failure = self._callback_failure, None
        if failure is not None:
            raise RebuildError(f"rebalance callback failed: {failure}") from failure

    def close(self) -> None:
        """Leave the group (the revocation closes the stores, so a survivor takes over at once),
        close the take-over's reader and let the producer go."""
        self._leaving = True
        try:
            self.member.close()
        finally:
            self._leaving = False
            self.take_over.close()
            try:
                self.transactions.producer.flush(10)
            except KafkaException as fatal:
                # A fenced or otherwise fatal producer raises here: nothing of it is wanted.
                logger.info("producer closed on %s", fatal.args[0].name())


def _transactions(clients: TickerClients, parts: SessionParts) -> FiringTransactions:
    s, kafka = parts.settings, parts.kafka
    producer = clients.transactional_producer(
        kafka.producer_config(
            **{
                # Namespaced by the deployment: two deployments sharing a cluster must not fence
                # each other's tickers of the same name.
                "transactional.id": kafka.deployment_id(TICKER_TRANSACTIONAL_ID + s.instance),
                "transaction.timeout.ms": s.transaction_timeout_ms,
                "linger.ms": 5,
                "queue.buffering.max.messages": 2_000_000,
                "queue.buffering.max.kbytes": 1_048_576,
            }
        )
    )
    producer.init_transactions(30)
    return FiringTransactions(
        producer,
        parts.topics,
        parts.codecs,
        s.instance,
        s.transaction_timeout_ms / 1000,
        clock=parts.clock,
        max_clock_ahead_ms=s.max_clock_ahead_ms,
        upstream=parts.upstream,
    )


def _take_over(clients: TickerClients, parts: SessionParts) -> TakeOver:
    s, kafka = parts.settings, parts.kafka
    reader = clients.partition_reader(
        kafka.consumer_config(
            **{
                "group.id": kafka.deployment_id(RESTORE_GROUP + s.instance),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                # The end of a partition is only noticed when an empty fetch returns: do not
                # let the broker hold it for the default half second.
                "fetch.wait.max.ms": 10,
            }
        )
    )
    return TakeOver(
        s,
        PartitionTopics(parts.topics.schedules, parts.topics.changelog),
        codecs=parts.codecs,
        metrics=parts.metrics,
        clock=parts.clock,
        calendars=parts.calendars,
        reader=reader,
        ends=clients.end_offsets(),
    )
