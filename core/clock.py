"""How far a ticker's clock is from the broker's, from the append times of its own records.

Pure: the ticker passes in its clock's readings and the broker's append timestamps. The
changelog topic stamps each record with the broker's clock when it is appended
(`message.timestamp.type=LogAppendTime`). A record is appended after it is produced, so if the
ticker's clock read `sent_ms` just before producing a record that the broker appended at
`appended_ms < sent_ms`, the ticker's clock is ahead by at least the difference; if a record was
appended later than the ticker's clock read when its delivery came back, the ticker is behind by
at least that much. Both are lower bounds: within one round trip the clocks cannot be told apart.
"""

from __future__ import annotations

from kairos.core.errors import KairosError

DEFAULT_MAX_CLOCK_AHEAD_MS = 1_000
"""How far ahead of the broker a ticker's clock may be before it refuses to fire (the default)."""


def clock_skew_ms(sent_ms: int, acked_ms: int, appended_ms: list[int]) -> int | None:
    """The ticker clock's skew against the broker's: > 0 ahead, < 0 behind, 0 indistinguishable.

    `None` when no append time was measured (a changelog topic with CreateTime timestamps).
    """
    if not appended_ms:
        return None
    ahead = sent_ms - min(appended_ms)
    if ahead > 0:
        return ahead
    behind = max(appended_ms) - acked_ms
    return -behind if behind > 0 else 0


class ClockAheadError(KairosError):
    """The ticker's clock is ahead of the broker's by more than it may be: firing would be early.

    `skew_ms` is the measured lower bound, `max_ms` the bound it exceeded.
    """

    retryable = True
    """Each attempt measures the clock again, and a corrected clock (NTP) passes."""

    def __init__(self, skew_ms: int, max_ms: int) -> None:
        self.skew_ms = skew_ms
        self.max_ms = max_ms
        super().__init__(
            f"this host's clock is at least {skew_ms} ms ahead of the Kafka broker's (at most "
            f"{max_ms} ms allowed): its fires would start early, so the transaction was "
            "aborted and nothing fired; fix the host's time synchronisation (chrony/NTP), or "
            "raise --max-clock-ahead-ms if the broker's clock is the wrong one"
        )
