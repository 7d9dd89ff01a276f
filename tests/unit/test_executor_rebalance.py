"""The executor's rebalance callbacks run guarded: a failure is kept, then raised by the loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from kairos.services.executor.rebalance import CallbackFailures


@pytest.fixture
def consumer() -> Iterator[Consumer]:
    """A consumer that never connects: the callbacks are called as librdkafka would call them."""
    unconnected = Consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "rebalance-test"})
    yield unconnected
    unconnected.close()


def test_a_failing_callback_does_not_raise_into_librdkafka_and_the_loop_raises_it_once(
    consumer: Consumer,
) -> None:
    failures = CallbackFailures("e1")
    seen: list[list[int]] = []

    def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
        seen.append([tp.partition for tp in partitions])
        raise RuntimeError(f"assign {len(seen)} failed")

    guarded = failures.guarded(on_assign)
    guarded(consumer, [TopicPartition("runs", 0), TopicPartition("runs", 3)])
    guarded(consumer, [TopicPartition("runs", 1)])
    assert seen == [[0, 3], [1]], "the callback ran each time"
    with pytest.raises(RuntimeError, match="assign 1 failed"):
        failures.raise_kept()  # the first failure: the one the rest may follow from
    failures.raise_kept()  # kept once: nothing more to raise


def test_nothing_is_raised_when_the_callbacks_succeed(consumer: Consumer) -> None:
    failures = CallbackFailures("e1")
    calls: list[int] = []
    failures.guarded(lambda _, partitions: calls.append(len(partitions)))(consumer, [])
    failures.raise_kept()
    assert calls == [0]
