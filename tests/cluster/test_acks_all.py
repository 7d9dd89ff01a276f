"""A broker down on the secured cluster. Kairos's producers wait for every in-sync replica
(acks=all): with a topic that needs all three in sync, the schedule publisher gets no
acknowledgement where an acks=1 producer does, so an acknowledged schedule change is never on
one broker only; and `kairos topics check` reports every topic under-replicated."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from typer.testing import CliRunner

from kairos.cli.app import app
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import PublishError, SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from tests.cluster.conftest import SecureCluster
from tests.helpers import eventually, unique_name


def _root(settings: KafkaSettings, properties: Path) -> list[str]:
    return [
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--kafka-config",
        str(properties),
        "--topic-prefix",
        settings.topic_prefix,
        "--schedules-partitions",
        str(settings.schedules_partitions),
    ]


def _set_min_isr(admin: AdminClient, topic: str, value: str) -> None:
    entry = ConfigEntry("min.insync.replicas", value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def _isr(admin: AdminClient, topic: str) -> set[int]:
    try:
        metadata = admin.list_topics(topic, timeout=10)
    except KafkaException as error:
        # A metadata request can time out while a node is down or back: ask again.
        raise AssertionError(f"no metadata: {error}") from error
    return set(metadata.topics[topic].partitions[0].isrs)


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
    admin_file = secure_cluster.properties_file()
    created = CliRunner().invoke(app, [*_root(settings, admin_file), "topics", "create"])
    assert created.exit_code == 0, created.output
    # The schedules topic needs every replica in sync: a broker down stops its writes.
    topic = settings.layout.name(TopicRole.SCHEDULES)
    _set_min_isr(cluster_admin, topic, "3")
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
        # `topics check` sees the lost replica on every topic of the deployment.
        checked = CliRunner().invoke(
            app, [*_root(settings, admin_file), "topics", "check", "--json"]
        )
        assert checked.exit_code == 1, checked.output
        problems = json.loads(checked.stdout)["problems"]
        lagging = {p["topic"] for p in problems if p["kind"] == "under-replicated"}
        assert lagging == {settings.layout.name(role) for role in TopicRole}, problems
    finally:
        secure_cluster.cluster.start()
        eventually(
            lambda: _isr(cluster_admin, topic) == {1, 2, 3},
            timeout_s=120,
            message="the restarted node did not rejoin the ISR",
        )
