"""Shared fixtures: one real Kafka broker per test session, unique names per test."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from testcontainers.community.kafka import KafkaContainer

from kairos.devinfra.kafka_broker import LocalKafka
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import create_topics
from tests.helpers import unique_name

logger = logging.getLogger(__name__)

_TESTS_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder, so `-m unit` and `-m broker` select without per-file markers."""
    for item in items:
        relative = Path(str(item.fspath)).relative_to(_TESTS_DIR)
        if relative.parts[0] == "unit":
            item.add_marker(pytest.mark.unit)
        elif relative.parts[0] == "local":
            item.add_marker(pytest.mark.local)
        elif relative.parts[0] == "broker":
            item.add_marker(pytest.mark.broker)
        elif relative.parts[0] == "cluster":
            item.add_marker(pytest.mark.cluster)


def _docker_engine_answers() -> bool:
    try:
        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real broker: KAFKA_BOOTSTRAP_SERVERS, else testcontainers, else the local JVM broker."""
    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        logger.info("using the broker at KAFKA_BOOTSTRAP_SERVERS=%s", configured)
        yield configured
        return
    if _docker_engine_answers():
        with KafkaContainer().with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    broker = LocalKafka(data_dir=tmp_path_factory.mktemp("kafka"))
    status, _ = broker.start()
    assert status.bootstrap_servers is not None
    try:
        yield status.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def create_topic(admin: AdminClient) -> Callable[..., str]:
    """Create a uniquely named topic and wait until the broker has it."""

    def create(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique_name(prefix)
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
        )
        futures[name].result(timeout=30)
        return name

    return create


@pytest.fixture
def kafka_settings(kafka_bootstrap: str, admin: AdminClient) -> KafkaSettings:
    """A deployment of its own: unique topic prefix, topics created, 4 schedules partitions."""
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=unique_name("kairos") + ".",
        schedules_partitions=4,
    )
    create_topics(admin, settings.layout)
    return settings
