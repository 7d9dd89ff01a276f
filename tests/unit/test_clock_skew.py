"""The skew of a ticker's clock from the broker's append times (kairos.core.clock)."""

from __future__ import annotations

import pytest

from kairos.core.clock import ClockAheadError, clock_skew_ms


@pytest.mark.parametrize(
    ("sent_ms", "acked_ms", "appended_ms", "skew"),
    [
        pytest.param(1_000, 1_020, [1_005, 1_010], 0, id="appended within the round trip"),
        pytest.param(31_000, 31_020, [1_005, 1_010], 29_995, id="ahead: appended before sent"),
        pytest.param(1_000, 1_020, [31_005, 31_010], -29_990, id="behind: appended after acked"),
        pytest.param(1_000, 1_020, [], None, id="no append time (CreateTime topic)"),
    ],
)
def test_the_skew_is_a_lower_bound_from_the_round_trip(
    sent_ms: int, acked_ms: int, appended_ms: list[int], skew: int | None
) -> None:
    assert clock_skew_ms(sent_ms, acked_ms, appended_ms) == skew


def test_the_refusal_says_how_far_ahead_and_how_to_fix_it() -> None:
    error = ClockAheadError(29_995, 1_000)
    assert (error.skew_ms, error.max_ms) == (29_995, 1_000)
    assert "29995 ms ahead" in str(error) and "NTP" in str(error)
