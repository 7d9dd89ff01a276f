"""Reading topics in tests the way an auditor would: read_committed, everything, decoded."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.helpers import eventually, unique_name


def read_topic(
    bootstrap: str,
    topic: str,
    decode: Callable[[bytes], dict[str, Any]] | None = None,
    isolation: str = "read_committed",
    timeout_s: float = 30.0,
) -> list[tuple[str | None, Any]]:
    """Every (key, value) currently readable in `topic`, in partition order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("reader"),
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = list(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        found: list[tuple[str | None, Any]] = []
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition() or 0)
                        continue
                    raise AssertionError(error.str())
                at_end.discard(message.partition() or 0)
                key = message.key()
                value = message.value()
                found.append(
                    (
                        # Dead letters are keyed by the bytes of the record they copy.
                        key.decode(errors="replace") if key is not None else None,
                        decode(value) if decode and value is not None else value,
                    )
                )
        return found
    finally:
        consumer.close()


def wait_for_stable_group(
    bootstrap: str, group: str, members: int, timeout_s: float = 60
) -> dict[str, set[int]]:
    """Until `group` is Stable with `members` members that each own partitions; then each
    member's partitions, by its client id (a Kairos service's instance name).

    A member's first assignment log line can precede a second rebalance (the next member
    joining); records sent during that rebalance reach their consumers late and out of order.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def stable() -> dict[str, set[int]]:
        described = admin.describe_consumer_groups([group])[group].result(timeout=10)
        owning = [m for m in described.members if m.assignment.topic_partitions]
        assert described.state == ConsumerGroupState.STABLE, described.state
        assert len(owning) == members, f"{len(owning)} of {members} members own partitions"
        return {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in owning}

    return eventually(
        stable, timeout_s=timeout_s, interval_s=0.5, message=f"group {group} not stable"
    )
