"""Instants as the topics and the stores count them: whole milliseconds since the Unix epoch.

Computed with integers: `int(instant.timestamp() * 1000)` goes through a float and comes out a
millisecond short for some whole-millisecond instants (1,200 of the 5,000 milliseconds after
2038-06-01T00:00Z, none after 2027-06-01), so two places that computed it differently disagreed
on the same instant.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(instant: datetime) -> int:
    """`instant` (aware) in whole milliseconds since the epoch, rounded down."""
    return (instant - EPOCH) // _MS


def from_epoch_ms(ms: int) -> datetime:
    """The aware UTC instant `ms` milliseconds after the epoch."""
    return EPOCH + timedelta(milliseconds=ms)


def maybe_from_epoch_ms(ms: int | None) -> datetime | None:
    return None if ms is None else from_epoch_ms(ms)
