"""`ask_until_answered`: a leader's request asked again while its failure passes, never past
its deadline, and never for an error that will not pass."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from kairos.streams.kafka.passing import BROKER_GONE, LEADER_MOVING, ask_until_answered

pytestmark = pytest.mark.unit


class FailingFirst:
    def __init__(self, failures: list[int]) -> None:
        self.failures = failures
        self.timeouts: list[float] = []

    def __call__(self, attempt_s: float) -> str:
        self.timeouts.append(attempt_s)
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        return "answered"


def test_a_request_to_a_leader_that_died_is_asked_again_and_answered() -> None:
    ask = FailingFirst([KafkaError._DESTROY_BROKER, KafkaError.NOT_LEADER_FOR_PARTITION])
    assert ask_until_answered(ask, 10, LEADER_MOVING | BROKER_GONE) == "answered"
    assert len(ask.timeouts) == 3
    assert max(ask.timeouts) <= 5.0, "one attempt must not use up the whole wait"


def test_an_error_that_does_not_pass_is_raised_at_once() -> None:
    ask = FailingFirst([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException) as raised:
        ask_until_answered(ask, 10, LEADER_MOVING | BROKER_GONE)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(ask.timeouts) == 1


def test_the_last_failure_is_raised_when_the_deadline_passes() -> None:
    ask = FailingFirst([KafkaError._TRANSPORT] * 1000)
    began = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        ask_until_answered(ask, 1.0, BROKER_GONE)
    assert raised.value.args[0].code() == KafkaError._TRANSPORT
    assert time.monotonic() - began < 2.0


def test_the_metadata_is_asked_for_before_each_new_attempt() -> None:
    ask = FailingFirst([KafkaError._TIMED_OUT, KafkaError._TIMED_OUT])
    refreshed: list[float] = []
    assert ask_until_answered(ask, 10, BROKER_GONE, refresh=refreshed.append) == "answered"
    assert len(refreshed) == 2
