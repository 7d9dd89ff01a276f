"""Broker answers that pass by themselves within seconds: the one list every waiter consults.

librdkafka flags some errors retriable; others, just as passing, it does not (its admin API
reports a group coordinator that is still loading as a plain error). Callers that wait an
obstacle out ask `passes` with the kind of obstacle they meet.
"""

from __future__ import annotations

from collections.abc import Collection

from confluent_kafka import KafkaError

LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)
"""A partition without a leader for a moment (just created, or its leader moving)."""

COORDINATOR_MOVING = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)
"""A group coordinator still starting, loading its offsets, or moving."""


def passes(error: KafkaError, obstacles: Collection[int]) -> bool:
    """True when asking again soon may succeed: librdkafka says so, or it is one of `obstacles`."""
    return bool(error.retriable()) or error.code() in obstacles
