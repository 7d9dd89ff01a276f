"""Whether a failure is worth trying again: Kairos errors by class, the broker's by its flags."""

from __future__ import annotations

import importlib
import pkgutil
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

import kairos
from kairos.core.clock import ClockAheadError
from kairos.core.errors import KairosError
from kairos.services.executor.events import RunEventsPublishError
from kairos.services.executor.fleet import DedupeRetentionError, FleetCheckError
from kairos.services.executor.service import ExecutorConfigError
from kairos.services.ticker.changes import SchedulesTopicUnknownError
from kairos.services.ticker.rebuild import RebuildError
from kairos.services.ticker.restore import RestoreHeldBackError
from kairos.streams.client.calendar_publisher import CalendarPublishError
from kairos.streams.client.schedule_publisher import PublishError as SchedulePublishError
from kairos.streams.client.schedule_publisher import ScheduleAwaitingTickerError
from kairos.streams.dedupe.base import DedupeStoreError, LeaseLostError
from kairos.streams.kafka.authorization import NotAuthenticatedError
from kairos.streams.kafka.failures import REFUSALS, Remedy, is_retryable, remedy
from kairos.streams.kafka.partition_status import PartitionStatusError
from kairos.streams.readers.calendar_reader import CalendarReadError
from kairos.streams.readers.schedule_reader import ScheduleReadError
from kairos.streams.readers.team_events import TeamPublishError, TeamReadError
from kairos.streams.readers.topic_scan import HistoryReadError
from kairos.streams.state.changelog import RestoreError
from kairos.streams.state.state_store import StateStoreError
from kairos.streams.wire.codec import DecodeError, DecodeFailure

RETRYABLE = [
    DedupeStoreError("sqlite:///x", "database is locked"),
    StateStoreError(Path("/state/p0"), "disk I/O error"),
    CalendarReadError("kairos.calendars", "broker unavailable"),
    ScheduleReadError("kairos.schedules", "broker unavailable"),
    HistoryReadError("kairos.run-events", "broker unavailable"),
    PartitionStatusError("consumer group kairos-ticker", "timed out"),
    SchedulePublishError("billing", "timed out"),
    ScheduleAwaitingTickerError("billing", [41], 10.0),
    CalendarPublishError("holidays", "timed out"),
    TeamReadError("kairos.teams", "broker unavailable"),
    TeamPublishError("team 'payments' was not published: timed out"),
    RunEventsPublishError("kairos.run-events", "timed out"),
    FleetCheckError("topic kairos.runs", "no answer"),
    ClockAheadError(5_000, 1_000),
    RebuildError("fenced"),
    RestoreError(3, "the leader is moving"),
    RestoreHeldBackError(3, 10, 12),
    SchedulesTopicUnknownError("kairos.schedules", "unknown topic or partition"),
]
"""Every Kairos error marked retryable, one of each class (`test_the_list_is_complete`)."""


@pytest.mark.parametrize("error", RETRYABLE, ids=lambda e: type(e).__name__)
def test_errors_of_an_unavailable_broker_store_or_clock_are_retried(error: KairosError) -> None:
    assert type(error).retryable
    assert remedy(error) is Remedy.RETRY
    assert is_retryable(error)


@pytest.mark.parametrize(
    "error",
    [
        ExecutorConfigError("python jobs need handlers"),
        DedupeRetentionError("kairos.runs", "forever", timedelta(days=1)),
        LeaseLostError("billing@2027-03-14T07:00:00Z", "e2", 1),
        DecodeError(DecodeFailure.MALFORMED, "RunRequested", "not Avro"),
        NotAuthenticatedError(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED)),
        KairosError("a bad input"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_that_need_a_fix_stop(error: KairosError) -> None:
    assert not type(error).retryable
    assert remedy(error) is Remedy.STOP
    assert not is_retryable(error)


def test_the_list_is_complete() -> None:
    """Marking a class retryable anywhere means listing it above: one place says which."""
    for module in pkgutil.walk_packages(kairos.__path__, "kairos."):
        if not module.name.endswith(".__main__"):  # runs the CLI
            importlib.import_module(module.name)
    marked = {cls for cls in _subclasses(KairosError) if cls.retryable}
    listed = {type(error) for error in RETRYABLE}
    assert marked == listed, f"marked but not listed: {marked - listed}; listed: {listed - marked}"


def _subclasses(root: type[KairosError]) -> set[type[KairosError]]:
    found = set(root.__subclasses__())
    for child in list(found):
        found |= _subclasses(child)
    return found


@pytest.mark.parametrize(
    ("kafka_error", "expected"),
    [
        pytest.param(KafkaError(KafkaError._TRANSPORT), Remedy.RETRY, id="transport"),
        pytest.param(
            KafkaError(KafkaError.REQUEST_TIMED_OUT, retriable=True), Remedy.RETRY, id="retriable"
        ),
        pytest.param(KafkaError(KafkaError._ALL_BROKERS_DOWN), Remedy.RETRY, id="brokers-down"),
        pytest.param(
            KafkaError(KafkaError.PRODUCER_FENCED, fatal=True), Remedy.REBUILD, id="fatal-fenced"
        ),
        pytest.param(
            KafkaError(KafkaError._FENCED, fatal=True, retriable=True), Remedy.REBUILD, id="fatal"
        ),
        pytest.param(
            KafkaError(KafkaError._STATE, txn_requires_abort=True),
            Remedy.ABORT,
            id="txn-requires-abort",
        ),
        *(
            pytest.param(KafkaError(code, retriable=True), Remedy.STOP, id=f"refused-{code}")
            for code in sorted(REFUSALS)
        ),
    ],
)
def test_broker_errors_by_their_flags(kafka_error: KafkaError, expected: Remedy) -> None:
    failure = KafkaException(kafka_error)
    assert remedy(failure) is expected
    assert is_retryable(failure) is (expected is not Remedy.STOP)


def test_a_retryable_error_carrying_a_refusal_stops() -> None:
    refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert not is_retryable(SchedulePublishError("billing", "refused", refused))
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    assert is_retryable(SchedulePublishError("billing", "timed out", timed_out))


def test_a_retryable_error_caused_by_a_refusal_stops() -> None:
    error = DedupeStoreError("postgresql://db/kairos", "refused")
    error.__cause__ = KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    assert remedy(error) is Remedy.STOP


def test_what_is_neither_a_kairos_nor_a_broker_error_is_a_bug() -> None:
    assert remedy(ValueError("a bug")) is Remedy.STOP
    assert remedy(KafkaException("no KafkaError")) is Remedy.STOP
