"""Lateness as the console keeps it: a count per bucket per minute, merged for any window.

A minute of fires is a fixed row whatever its rate, and percentiles of a window are read from
the merged counts. The price is resolution: a percentile is known only to its bucket, and the
console shows the bucket's upper bound (an upper estimate, never flattering). The bounds follow
the ticker's `kairos_ticker_fire_lateness_seconds` buckets so that the page and Prometheus agree.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

OVER_AN_HOUR = 2**62
"""The bound of the last bucket: later than the hour before it, by any amount."""

LATENESS_BOUNDS_MS: tuple[int, ...] = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    3_600_000,
    OVER_AN_HOUR,
)
"""The upper bound of each bucket, inclusive; the last catches everything later."""


def bucket_of(lateness_ms: int) -> int:
    return bisect_left(LATENESS_BOUNDS_MS, max(0, lateness_ms))


def merged(rows: Sequence[Sequence[int]]) -> list[int]:
    total = [0] * len(LATENESS_BOUNDS_MS)
    for row in rows:
        for index, count in enumerate(row):
            total[index] += count
    return total


def percentile_ms(counts: Sequence[int], quantile: float) -> int | None:
    """The upper bound of the bucket holding the `quantile`-th fire; `None` with no fires."""
    total = sum(counts)
    if total == 0:
        return None
    wanted = quantile * total
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= wanted and count:
            return LATENESS_BOUNDS_MS[index]
    return LATENESS_BOUNDS_MS[-1]
