"""The bounds on what a schedule may say, so that everything computed from it can be computed.

A schedule the model accepts must be decidable by every ticker that reads it: no instant
arithmetic may leave `datetime`'s range (years 1–9999), no duration may leave `timedelta`'s or
an Avro `long` of milliseconds, and no schedule may ask a ticker for unbounded work. The model
(`kairos.core.schedule`) refuses values outside these bounds with the bound in the message;
docs/defaults.md states them for users.

The margin below `LATEST_INSTANT` covers the most any computation adds to an instant: a cron
search looks 41 years ahead (`calendar.HORIZON_DAYS`), an `every` period and its jitter add at
most 10 years each, and a zone's offset at most a day. 100 years is ample.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kairos.core.retry import MAX_BACKOFF

EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest `at`, `start_at` or `end_at`: instants travel as milliseconds since the epoch."""

LATEST_INSTANT = datetime(9900, 1, 1, tzinfo=UTC)
"""Every instant of a schedule is before this one (99 years short of `datetime.max`)."""

INSTANT_RANGE = (
    f"from {EARLIEST_INSTANT:%Y-%m-%dT%H:%M:%SZ} up to (not including) "
    f"{LATEST_INSTANT:%Y-%m-%dT%H:%M:%SZ}"
)
"""The range of instants, as messages state it."""

SHORTEST_EVERY = timedelta(seconds=1)
"""A shorter interval would make one schedule a thousand runs a second, and one behind by a day
86 million decisions: a load no ticker should take from one schedule."""

LONGEST_EVERY = timedelta(days=3650)
"""About ten years; a longer interval is better written as `at`."""

LONGEST_CALENDAR_JITTER = timedelta(days=1)
"""Jitter of a `cron` or `at` schedule; an `every` schedule's jitter is at most its interval."""

LONGEST_CATCHUP_WINDOW = timedelta(days=3650)
"""A window this long is no limit at all; leave `catchup_window` unset instead."""

LONGEST_TIMEOUT = timedelta(days=30)
"""Per attempt; a job that runs longer is not a scheduled job but a service."""

LONGEST_RETRY_BACKOFF = MAX_BACKOFF
"""The wait between attempts never exceeds `MAX_BACKOFF`, so a longer backoff would be ignored."""

MAX_ATTEMPTS = 100
"""With waits capped at an hour, 100 attempts already retry for about four days."""
