"""Test helpers: waiting on conditions instead of sleeping, and unique names."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from kairos.core.schedule import Schedule
from kairos.streams.wire.records import definition_record

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


def just_after_a_second(lead: float = 0.2) -> datetime:
    """Sleep to `lead` seconds past the next whole second and return that instant.

    A delete or pause of an every-second schedule published at an arbitrary instant may land a
    millisecond before an occurrence the ticker is already firing: the window docs/audit.md
    ("Deletes and pauses are not edits") states, which a test about something else must not race.
    """
    now = datetime.now(UTC)
    instant = now.replace(microsecond=0) + timedelta(seconds=1 + lead)
    sleep_until(instant)
    return instant


def upserted_event(
    schedule: Schedule, changed_at: datetime, reason: str | None = None
) -> dict[str, Any]:
    """The `ScheduleEvent` record a producer publishes to create or replace `schedule`."""
    return {
        "schedule_id": schedule.id,
        "event_id": uuid.uuid4(),
        "change": "upserted",
        "definition": definition_record(schedule),
        "revision": 0,
        "changed_by": "test",
        "changed_at": changed_at,
        "reason": reason,
    }
