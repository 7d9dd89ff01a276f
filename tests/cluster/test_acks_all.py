"""Kairos's producers wait for every in-sync replica (acks=all): with a broker down and a topic
that needs all three replicas in sync, the schedule publisher is refused where an acks=1
producer is not, so an acknowledged schedule change is never on one broker only."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kairos.core.schedule import Schedule
from kairos.streams.schedule_publisher import PublishError, SchedulesClient
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole
from tests.cluster.conftest import SecureCluster
from tests.helpers import eventually, unique_name


def _isr(admin: AdminClient, topic: str) -> set[int]:
    partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    return set(partition.isrs)


def _acks_1_delivers(config: dict[str, Any], topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer({**config, "acks": 1, "enable.idempotence": False})
    producer.produce(topic, key=b"k", value=b"v", on_delivery=lambda e, _: errors.append(e))
    producer.flush(30)
    return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)


def test_with_a_broker_down_a_schedule_needing_every_replica_is_refused_not_half_written(
    secure_cluster: SecureCluster, cluster_admin: AdminClient, tmp_path: Path
) -> None:
    settings = KafkaSettings(
        bootstrap_servers=secure_cluster.bootstrap_servers,
        topic_prefix=unique_name("acks") + ".",
        schedules_partitions=1,
        properties={
            k: str(v) for k, v in secure_cluster.client_config().items() if k != "bootstrap.servers"
        },
    )
    topic = settings.layout.name(TopicRole.SCHEDULES)
    new = NewTopic(topic, 1, replication_factor=3, config={"min.insync.replicas": "3"})
    cluster_admin.create_topics([new])[topic].result(timeout=30)
    schedule = Schedule(id="acks-all", cron="0 2 * * *")
    with SchedulesClient(settings, changed_by="acks-test", timeout_s=20) as client:
        client.upsert(schedule)  # all three replicas in sync: acknowledged

    down = secure_cluster.cluster.status().nodes[2]
    assert down.pid is not None
    os.kill(down.pid, signal.SIGKILL)
    try:
        eventually(
            lambda: down.node_id not in _isr(cluster_admin, topic),
            timeout_s=60,
            message=f"node {down.node_id} still in the ISR",
        )
        with (
            SchedulesClient(settings, changed_by="acks-test", timeout_s=20) as client,
            pytest.raises(PublishError, match="was not published"),
        ):
            # librdkafka retries NOT_ENOUGH_REPLICAS until the change's timeout: no ack, ever.
            client.upsert(schedule.model_copy(update={"cron": "0 3 * * *"}))
        # The same write with acks=1 is taken by the leader alone: what acks=all rules out.
        assert _acks_1_delivers(secure_cluster.client_config(), topic) is None
    finally:
        secure_cluster.cluster.start()
        eventually(
            lambda: _isr(cluster_admin, topic) == {1, 2, 3},
            timeout_s=120,
            message="the restarted node did not rejoin the ISR",
        )
