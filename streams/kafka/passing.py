"""Broker answers that pass by themselves within seconds: the one list every waiter consults.

librdkafka flags some errors retriable; others, just as passing, it does not (its admin API
reports a group coordinator that is still loading as a plain error). Callers that wait an
obstacle out ask `passes` with the kind of obstacle they meet.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

T = TypeVar("T")

LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        # The client's own metadata lacks the partition for a moment: a metadata answer given
        # during a leader election (seen 27 s after a broker's SIGKILL).
        KafkaError._UNKNOWN_PARTITION,
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


BROKER_GONE = frozenset({KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT})
"""A request that went to a broker which died: it times out, or librdkafka drops it when the
broker leaves the cluster's metadata. Asked again, it goes to the partition's new leader."""

ATTEMPT_S = 5.0
"""One attempt's bound in `ask_until_answered`: a request to a dead leader must not use up the
whole wait; the broker fences a dead one and elects new leaders within about ten seconds."""


def passes(error: KafkaError, obstacles: Collection[int]) -> bool:
    """True when asking again soon may succeed: librdkafka says so, or it is one of `obstacles`."""
    return bool(error.retriable()) or error.code() in obstacles


def ask_until_answered(
    ask: Callable[[float], T],
    timeout_s: float,
    obstacles: Collection[int],
    refresh: Callable[[float], object] | None = None,
) -> T:
    """`ask(attempt_timeout_s)` again while it fails with an error that `passes`, until
    `timeout_s` has gone; the last failure is raised. For requests to a partition's leader,
    whose first answer during a failover is often an error from the leader that just died.

    `refresh(timeout_s)` runs before each new attempt: a metadata request, so that the client
    sends the next one to the new leader instead of the dead one its cache still names (a
    consumer with nothing to fetch from that partition has no other reason to ask)."""
    deadline = time.monotonic() + timeout_s
    while True:
        attempt_s = max(0.1, min(ATTEMPT_S, deadline - time.monotonic()))
        try:
            return ask(attempt_s)
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            if time.monotonic() + 0.2 >= deadline or not passes(error, obstacles):
                raise
            time.sleep(0.2)
            if refresh is not None:
                # A failed refresh changes nothing: the next attempt says if the cluster answers.
                with contextlib.suppress(KafkaException):
                    refresh(attempt_s)
