"""The ground Kairos stands on: transactions and read_committed isolation on the real broker."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, Producer

from tests.helpers import eventually, unique_name


def _read_all(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("ground"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []

    def collected_enough() -> bool:
        for message in consumer.consume(num_messages=100, timeout=0.5):
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None
            seen.append(value)
        return len(seen) >= expected

    try:
        eventually(collected_enough, timeout_s=30, message=f"expected {expected} records")
        # Anything beyond the expected count would show up in one more poll.
        collected_enough()
    finally:
        consumer.close()
    return seen


def test_read_committed_sees_exactly_the_committed_records(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    topic = create_topic("ground", partitions=3)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("ground-tx")}
    )
    producer.init_transactions(30)

    producer.begin_transaction()
    for value in (b"a", b"b", b"c"):
        producer.produce(topic, key=value, value=value)
    producer.commit_transaction(30)

    producer.begin_transaction()
    for value in (b"aborted-1", b"aborted-2"):
        producer.produce(topic, key=value, value=value)
    producer.flush(30)
    producer.abort_transaction(30)

    producer.begin_transaction()
    producer.produce(topic, key=b"d", value=b"d")
    producer.commit_transaction(30)

    committed = _read_all(kafka_bootstrap, topic, "read_committed", expected=4)
    assert sorted(committed) == [b"a", b"b", b"c", b"d"]

    # The aborted records did reach the log: isolation, not absence, hides them.
    everything = _read_all(kafka_bootstrap, topic, "read_uncommitted", expected=6)
    assert sorted(everything) == [b"a", b"aborted-1", b"aborted-2", b"b", b"c", b"d"]
