"""The secured three-broker cluster does what a production cluster does: replicates, refuses
strangers, enforces ACLs and runs transactions across brokers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    PartitionMetadata,
    ResourcePatternType,
    ResourceType,
)

from kairos.devinfra.kafka_cluster_users import ROLE_USERS
from tests.helpers import eventually, unique_name

ConfigFor = Callable[..., dict[str, Any]]


def _create_topic(admin: AdminClient, partitions: int = 3) -> str:
    name = unique_name("cluster")
    new = NewTopic(name, partitions, replication_factor=3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[name].result(timeout=30)
    _whole_partitions(admin, name, partitions)
    return name


def _whole_partitions(admin: AdminClient, topic: str, partitions: int) -> list[PartitionMetadata]:
    """The topic's partitions once a metadata answer shows all of them led and fully replicated.

    The controller answers a creation before every broker has read the topic from the metadata
    log, and each metadata request may go to another broker: one that has not caught up lists
    the topic with no partitions. So a test reads the partitions only through this wait, even
    after an earlier wait passed on another broker.
    """

    def listed_whole() -> list[PartitionMetadata]:
        listed = list(admin.list_topics(topic, timeout=10).topics[topic].partitions.values())
        whole = len(listed) == partitions and all(
            p.leader >= 0 and len(p.isrs) == 3 for p in listed
        )
        return listed if whole else []

    return eventually(
        listed_whole,
        message=f"{topic} never showed {partitions} partitions, each with a leader and 3 replicas",
    )


def _produce(config: dict[str, Any], topic: str, count: int) -> list[KafkaError | None]:
    """Produce `count` records and return each one's delivery error (None when delivered)."""
    errors: list[KafkaError | None] = []
    producer = Producer({**config, "acks": "all", "message.timeout.ms": 15000})
    for index in range(count):
        producer.produce(
            topic, value=f"v{index}".encode(), on_delivery=lambda e, _: errors.append(e)
        )
    producer.flush(30)
    return errors


def _read_all(config: dict[str, Any], topic: str, partitions: int, expected: int) -> list[bytes]:
    """Read `expected` committed records of `topic`'s `partitions` from the beginning."""
    consumer = Consumer(
        {
            **config,
            "group.id": unique_name("reader"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        # Assigned by number, not from a metadata answer that a lagging broker may leave empty.
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=100, timeout=0.5):
                assert message.error() is None, message.error()
                values.append(message.value() or b"")
        return values
    finally:
        consumer.close()


def _refusals(config: dict[str, Any]) -> list[KafkaError]:
    """Ask for metadata with `config`, which must fail for want of a usable connection; the
    errors the client reported."""
    errors: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    with pytest.raises(KafkaException) as refused:
        admin.list_topics(timeout=5)
    assert refused.value.args[0].code() == KafkaError._TRANSPORT, refused.value
    # Error callbacks are served by poll, not by the metadata request.
    admin.poll(1)
    return errors


def test_replicated_topic_takes_acks_all_writes(
    cluster_admin: AdminClient, cluster_client_config: ConfigFor
) -> None:
    topic = _create_topic(cluster_admin)
    described = _whole_partitions(cluster_admin, topic, 3)
    assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in described)

    assert _produce(cluster_client_config(), topic, 30) == [None] * 30
    assert len(_read_all(cluster_client_config(), topic, 3, 30)) == 30


def test_a_wrong_password_is_refused(cluster_client_config: ConfigFor) -> None:
    errors = _refusals(cluster_client_config(**{"sasl.password": "not-the-one"}))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("invalid credentials" in e.str() for e in errors), errors


def test_a_client_without_credentials_gets_nothing(cluster_client_config: ConfigFor) -> None:
    anonymous = {
        key: value for key, value in cluster_client_config().items() if not key.startswith("sasl.")
    }
    # TLS alone: the broker waits for a SASL handshake and closes the connection.
    _refusals({**anonymous, "security.protocol": "SSL"})
    # Plain text on the TLS listener does not even get a TLS session.
    _refusals({**anonymous, "security.protocol": "PLAINTEXT"})


def test_role_users_authenticate_and_see_no_topic_without_acls(
    cluster_admin: AdminClient, cluster_client_config: ConfigFor
) -> None:
    topic = _create_topic(cluster_admin)
    for role in ROLE_USERS:
        metadata = AdminClient(cluster_client_config(role)).list_topics(timeout=10)
        assert len(metadata.brokers) == 3, role
        assert topic not in metadata.topics, f"{role} may not describe {topic} without an ACL"


def test_a_user_is_denied_until_the_admin_grants_an_acl(
    cluster_admin: AdminClient,
    cluster_client_config: ConfigFor,
    cluster_create_user: Callable[..., str],
) -> None:
    topic = _create_topic(cluster_admin)
    user = cluster_create_user("writer")

    denied = _produce(cluster_client_config(user), topic, 1)
    assert [e.code() if e else None for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    grants = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for future in cluster_admin.create_acls(grants).values():
        future.result(timeout=30)
    listed = cluster_admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=30)
    assert {binding.operation for binding in listed} == {AclOperation.WRITE, AclOperation.DESCRIBE}

    # Each broker learns the ACLs from the metadata log, a moment after the controller has them.
    eventually(
        lambda: _produce(cluster_client_config(user), topic, 1) == [None],
        message=f"{user} still cannot write to {topic} after the grant",
    )


def test_a_transaction_commits_across_the_three_brokers(
    cluster_admin: AdminClient, cluster_client_config: ConfigFor
) -> None:
    topic = _create_topic(cluster_admin, partitions=6)
    leaders = {p.leader for p in _whole_partitions(cluster_admin, topic, 6)}
    assert leaders == {1, 2, 3}, "the topic's partitions must be led by every broker"

    producer = Producer(cluster_client_config(**{"transactional.id": unique_name("tx")}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(6):
        producer.produce(topic, value=f"p{partition}".encode(), partition=partition)
    producer.commit_transaction(30)

    values = _read_all(cluster_client_config(), topic, 6, 6)
    assert sorted(values) == [f"p{p}".encode() for p in range(6)]
