"""What happens after an attempt of a run fails: another attempt later, or the end of the run.

Pure: the failure instant is passed in. The executor's dedupe store applies the decision in the
same database transaction that records the failed attempt, so every executor sharing the store
sees the retry, and whichever is free when it is due runs it.

Rules (docs/executors.md states them for users):

- `max_attempts` counts attempts, the first included; a run with `max_attempts: 3` fails at most
  three times before it is dead-lettered.
- The delay after the n-th failed attempt is `retry_backoff × 2^(n-1)`: 10s, 20s, 40s, … for the
  default backoff, capped at `MAX_BACKOFF` so a run with many attempts still retries hourly.
- A zero backoff retries at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

MAX_BACKOFF = timedelta(hours=1)
"""The longest wait between two attempts, however many attempts failed."""

_MS = timedelta(milliseconds=1)
_MAX_BACKOFF_MS = MAX_BACKOFF // _MS


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """Another attempt at `next_attempt_at`, or (`retry` false) the run is exhausted."""

    retry: bool
    next_attempt_at: datetime | None = None


def backoff_delay(backoff: timedelta, failed_attempt: int) -> timedelta:
    """The wait after attempt number `failed_attempt` (1 for the first) failed."""
    if failed_attempt < 1:
        raise ValueError(f"attempts are numbered from 1, got {failed_attempt}")
    backoff_ms = backoff // _MS
    if backoff_ms <= 0:
        return timedelta(0)
    # Doubled in whole milliseconds, where nothing overflows, and stopped at the cap: a
    # timedelta of a long backoff doubled forty times is out of range.
    delay_ms = backoff_ms
    for _ in range(failed_attempt - 1):
        if delay_ms >= _MAX_BACKOFF_MS:
            break
        delay_ms *= 2
    return timedelta(milliseconds=min(delay_ms, _MAX_BACKOFF_MS))


def after_failure(
    *, attempt: int, max_attempts: int, backoff: timedelta, failed_at: datetime
) -> RetryDecision:
    """Decide what follows the failure of attempt number `attempt` at `failed_at`."""
    if attempt >= max_attempts:
        return RetryDecision(retry=False)
    return RetryDecision(retry=True, next_attempt_at=failed_at + backoff_delay(backoff, attempt))
