"""Retry decisions after a failed attempt: exponential backoff, capped, up to max_attempts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.retry import MAX_BACKOFF, after_failure, backoff_delay

T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("backoff", "failed_attempt", "delay"),
    [
        pytest.param(timedelta(seconds=10), 1, timedelta(seconds=10), id="first-waits-backoff"),
        pytest.param(timedelta(seconds=10), 2, timedelta(seconds=20), id="doubles"),
        pytest.param(timedelta(seconds=10), 4, timedelta(seconds=80), id="doubles-again"),
        pytest.param(timedelta(milliseconds=200), 3, timedelta(milliseconds=800), id="millis"),
        pytest.param(timedelta(minutes=20), 3, MAX_BACKOFF, id="capped"),
        pytest.param(timedelta(seconds=1), 10_000, MAX_BACKOFF, id="huge-attempt-no-overflow"),
        pytest.param(MAX_BACKOFF, 99, MAX_BACKOFF, id="longest-backoff-last-attempt-no-overflow"),
        pytest.param(timedelta(minutes=2), 60, MAX_BACKOFF, id="long-backoff-no-overflow"),
        pytest.param(timedelta(0), 5, timedelta(0), id="zero-backoff-retries-at-once"),
    ],
)
def test_backoff_doubles_per_failed_attempt_up_to_the_cap(
    backoff: timedelta, failed_attempt: int, delay: timedelta
) -> None:
    assert backoff_delay(backoff, failed_attempt) == delay


def test_attempts_are_numbered_from_one() -> None:
    with pytest.raises(ValueError, match="numbered from 1"):
        backoff_delay(timedelta(seconds=1), 0)


def test_a_failure_before_the_last_attempt_is_retried_after_the_backoff() -> None:
    decision = after_failure(attempt=2, max_attempts=3, backoff=timedelta(seconds=10), failed_at=T0)
    assert decision.retry
    assert decision.next_attempt_at == T0 + timedelta(seconds=20)


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_the_last_attempts_failure_exhausts_the_run(max_attempts: int) -> None:
    decision = after_failure(
        attempt=max_attempts, max_attempts=max_attempts, backoff=timedelta(seconds=10), failed_at=T0
    )
    assert not decision.retry
    assert decision.next_attempt_at is None
