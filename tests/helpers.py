"""Test helpers: waiting on conditions instead of sleeping, and unique names."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

T = TypeVar("T")


def unique_name(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def eventually(
    probe: Callable[[], T],
    timeout_s: float = 30.0,
    interval_s: float = 0.1,
    message: str = "condition not met",
) -> T:
    """Call `probe` until it returns a truthy value or stops raising AssertionError.

    Returns that value; after `timeout_s` fails with the last assertion's message, so a failing
    test says what it was waiting for.
    """
    deadline = time.monotonic() + timeout_s
    last_error: AssertionError | None = None
    while True:
        try:
            value = probe()
        except AssertionError as error:
            last_error = error
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            detail = f": {last_error}" if last_error else ""
            raise AssertionError(f"after {timeout_s:.1f}s, {message}{detail}")
        time.sleep(interval_s)


def sleep_until(instant: datetime) -> None:
    """Let wall-clock time reach `instant`: a scheduler's tests wait for time itself to pass."""
    remaining = (instant - datetime.now(UTC)).total_seconds()
    if remaining > 0:
        time.sleep(remaining)
