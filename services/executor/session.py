"""The executor's connected clients, opened together and closed together.

A session is open from the moment its store is checked against the fleet to the moment the
executor has published its last event: every client it holds exists for its whole life, so the
code that uses them never asks whether one is there. `open` either returns a whole session or
closes what it had opened and raises. The clients come from an `ExecutorClients` factory
(`clients`), behind the ports of `kairos.streams.kafka.ports`.

Closing happens in two steps because the shutdown needs the group left first (its partitions
move to the other executors at once) while the store and the producers keep serving the attempts
that finish in the grace period: `leave_group`, then `close`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from kairos.services.executor.clients import AssignmentCheck, ExecutorClients
from kairos.services.executor.events import EventPublisher
from kairos.services.executor.fleet import advertised_client_id
from kairos.services.executor.kafka_job import JobProducer
from kairos.services.executor.pool_watch import pools_tagged
from kairos.services.executor.settings import ExecutorSettings
from kairos.streams.dedupe import open_dedupe_store
from kairos.streams.dedupe.base import DedupeStore
from kairos.streams.kafka.ports import GroupMember, RebalanceCallback
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codecs

logger = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class ExecutorSession:
    store: DedupeStore
    guard: AssignmentCheck
    """Checks each assignment for a member on another store (`fleet`)."""
    consumer: GroupMember
    """A member of the executors' group, read_committed: runs of an aborted ticker transaction
    were never fired. Created here, subscribed by `join`."""
    publisher: EventPublisher
    job_producer: JobProducer
    """Produces the records of `kafka` jobs."""
    runs_topic: str

    @classmethod
    def open(
        cls,
        clients: ExecutorClients,
        kafka: KafkaSettings,
        settings: ExecutorSettings,
        codecs: Codecs,
    ) -> ExecutorSession:
        """Open the store, refuse a fleet it cannot join, then connect the Kafka clients."""
        store = open_dedupe_store(settings.store_url)
        try:
            runs_topic = kafka.layout.name(TopicRole.RUNS)
            clients.check_access()
            guard = clients.check_fleet(settings, store)
            # Idempotent: a retried send keeps each run's events in order, without duplicates.
            events_producer = clients.producer(kafka.producer_config(**{"linger.ms": 5}))
            publisher = EventPublisher(
                kafka, codecs, settings.instance, FLUSH_TIMEOUT_S, events_producer
            )
            job_producer = JobProducer(
                clients.producer(kafka.producer_config(**{"linger.ms": 0})), kafka.layout
            )
            client_id = advertised_client_id(
                pools_tagged(settings.instance, settings.pools), store.store_id
            )
            consumer = clients.group_member(
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
            self.job_producer.producer.flush(FLUSH_TIMEOUT_S)
        finally:
            self.store.close()
