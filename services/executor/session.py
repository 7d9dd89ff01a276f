"""The executor's connected clients, opened together and closed together.

A session is open from the moment its store is checked against the fleet to the moment the
executor has published its last event: every client it holds exists for its whole life, so the
code that uses them never asks whether one is there. `open` either returns a whole session or
closes what it had opened and raises.

Closing happens in two steps because the shutdown needs the group left first (its partitions
move to the other executors at once) while the store and the producers keep serving the attempts
that finish in the grace period: `leave_group`, then `close`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kairos.services.executor.events import EventPublisher
from kairos.services.executor.fleet import StoreGuard, advertised_client_id, check_retention
from kairos.services.executor.rebalance import RebalanceCallback
from kairos.services.executor.settings import ExecutorSettings
from kairos.streams.authorization import RoleAccess
from kairos.streams.codec import Codecs
from kairos.streams.dedupe import open_dedupe_store
from kairos.streams.dedupe.base import DedupeStore
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole

logger = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 30.0
_LINGERING_MARGIN = timedelta(seconds=2)
"""Beyond a session timeout, how long a dead executor's member may take to leave the group."""


@dataclass(frozen=True, slots=True)
class ExecutorSession:
    store: DedupeStore
    guard: StoreGuard
    """Checks each assignment for a member on another store (`fleet`)."""
    consumer: Consumer
    """A member of the executors' group, read_committed: runs of an aborted ticker transaction
    were never fired. Created here, subscribed by `join`."""
    publisher: EventPublisher
    job_producer: Producer
    """Produces the records of `kafka` jobs; shared by the worker threads (librdkafka's producer
    is thread-safe)."""
    runs_topic: str

    @classmethod
    def open(
        cls, kafka: KafkaSettings, settings: ExecutorSettings, codecs: Codecs, access: RoleAccess
    ) -> ExecutorSession:
        """Open the store, refuse a fleet it cannot join, then connect the Kafka clients."""
        store = open_dedupe_store(settings.store_url)
        try:
            runs_topic = kafka.layout.name(TopicRole.RUNS)
            guard = _check_fleet(kafka, settings, store, access, runs_topic)
            publisher = EventPublisher(kafka, codecs, settings.instance, FLUSH_TIMEOUT_S)
            job_producer = Producer(kafka.producer_config(**{"linger.ms": 0}))
            client_id = advertised_client_id(settings.instance, store.store_id)
            consumer = Consumer(
                kafka.group_member_config(
                    settings.group(kafka), client_id, settings.session_timeout_ms
                )
            )
        except BaseException:
            store.close()
            raise
        return cls(store, guard, consumer, publisher, job_producer, runs_topic)

    def join(
        self,
        on_assign: RebalanceCallback,
        on_revoke: RebalanceCallback,
        on_lost: RebalanceCallback,
    ) -> None:
        """Subscribe to the runs topic; the callbacks must not raise (`rebalance.guarded`)."""
        self.consumer.subscribe(
            [self.runs_topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )

    def seek(self, partition: int, offset: int) -> None:
        self.consumer.seek(TopicPartition(self.runs_topic, partition, offset))

    def leave_group(self) -> None:
        """Close the consumer: its partitions move to the other executors at once."""
        self.consumer.close()

    def close(self) -> None:
        """Deliver what the producers hold, then close the store (after `leave_group`)."""
        try:
            self.publisher.close()
            self.job_producer.flush(FLUSH_TIMEOUT_S)
        finally:
            self.store.close()


def _check_fleet(
    kafka: KafkaSettings,
    settings: ExecutorSettings,
    store: DedupeStore,
    access: RoleAccess,
    runs_topic: str,
) -> StoreGuard:
    """Refuse a store that forgets too soon, or a group on another store (`fleet`)."""
    access.check()
    # Notices (level 6) off: the admin client's closing would log them as noise.
    admin = AdminClient(kafka.consumer_config(log_level=5))
    check_retention(admin, runs_topic, settings.retention)
    lingering = timedelta(milliseconds=settings.session_timeout_ms) + _LINGERING_MARGIN
    guard = StoreGuard(admin, settings.group(kafka), store, lingering)
    guard.check_before_joining()
    return guard
