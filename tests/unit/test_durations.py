"""Durations: short forms and ISO-8601 in, one canonical short form out."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kairos.core.durations import LONGEST, DurationError, format_duration, parse_duration

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("15m", timedelta(minutes=15), id="minutes"),
        pytest.param("1h30m", timedelta(hours=1, minutes=30), id="hours-minutes"),
        pytest.param("90s", timedelta(seconds=90), id="seconds"),
        pytest.param("2d", timedelta(days=2), id="days"),
        pytest.param("1w", timedelta(weeks=1), id="weeks"),
        pytest.param("250ms", timedelta(milliseconds=250), id="milliseconds"),
        pytest.param("1m500ms", timedelta(minutes=1, milliseconds=500), id="minutes-milliseconds"),
        pytest.param(" 5m ", timedelta(minutes=5), id="surrounding-space"),
        pytest.param("PT15M", timedelta(minutes=15), id="iso-minutes"),
        pytest.param("P1D", timedelta(days=1), id="iso-day"),
        pytest.param("P1DT2H", timedelta(days=1, hours=2), id="iso-day-hours"),
        pytest.param("P2W", timedelta(weeks=2), id="iso-weeks"),
        pytest.param("PT0.25S", timedelta(milliseconds=250), id="iso-fraction"),
        pytest.param("pt1h", timedelta(hours=1), id="iso-lowercase"),
        pytest.param("0s", timedelta(0), id="zero"),
    ],
)
def test_parse(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param("", "empty", id="empty"),
        pytest.param("15", "units", id="no-unit-string"),
        pytest.param(15, "needs a unit", id="bare-int"),
        pytest.param(True, "needs a unit", id="bool"),
        pytest.param("30m1h", "largest first", id="wrong-order"),
        pytest.param("1.5h", "whole numbers", id="fraction-short-form"),
        pytest.param("15 minutes", "units", id="words"),
        pytest.param("-5m", "units", id="negative-short-form"),
        pytest.param(timedelta(seconds=-1), "negative", id="negative-timedelta"),
        pytest.param(timedelta(microseconds=1500), "millisecond precision", id="sub-ms-timedelta"),
        pytest.param("PT0.0001S", "millisecond precision", id="sub-ms-iso"),
        pytest.param("P1M", "no fixed length", id="iso-month"),
        pytest.param("P1Y", "no fixed length", id="iso-year"),
        pytest.param("PT", "not an ISO-8601 duration", id="iso-empty-time"),
        pytest.param("P", "not an ISO-8601 duration", id="iso-empty"),
    ],
)
def test_parse_refuses_with_reason_and_examples(value: object, problem: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(value)
    assert problem in caught.value.problem
    assert "'15m'" in str(caught.value)


@pytest.mark.parametrize(
    ("duration", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(minutes=15), "15m"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(days=9, milliseconds=5), "9d5ms"),
    ],
)
def test_format(duration: timedelta, text: str) -> None:
    assert format_duration(duration) == text


@given(st.integers(min_value=0, max_value=LONGEST // timedelta(milliseconds=1)))
def test_canonical_form_round_trips(milliseconds: int) -> None:
    duration = timedelta(milliseconds=milliseconds)
    assert parse_duration(format_duration(duration)) == duration
