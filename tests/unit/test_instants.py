"""Instants in epoch milliseconds: exact, and the same everywhere Kairos writes one.

`int(instant.timestamp() * 1000)`, which the ticker's due index, the changelog and the console's
view once used, is a millisecond short for some whole-millisecond instants; the expected value
here is counted from the calendar fields, not through `timedelta` division.
"""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kairos.core.instants import epoch_ms, from_epoch_ms

pytestmark = pytest.mark.unit

_INSTANTS = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


def _counted(instant: datetime) -> int:
    return calendar.timegm(instant.utctimetuple()) * 1000 + instant.microsecond // 1000


@given(_INSTANTS)
def test_epoch_ms_counts_whole_milliseconds_exactly(instant: datetime) -> None:
    assert epoch_ms(instant) == _counted(instant)


@given(st.integers(min_value=0, max_value=7_258_118_400_000))
def test_from_epoch_ms_inverts_it(ms: int) -> None:
    assert epoch_ms(from_epoch_ms(ms)) == ms
    assert from_epoch_ms(ms).tzinfo is UTC


def test_an_instant_the_float_route_gets_wrong_is_counted_right() -> None:
    instant = datetime(2038, 6, 1, tzinfo=UTC)
    wrong = [
        moment
        for moment in (instant + timedelta(milliseconds=step) for step in range(2000))
        if int(moment.timestamp() * 1000) != _counted(moment)
    ]
    assert wrong, "the float route is exact here: pick instants it gets wrong"
    assert all(epoch_ms(moment) == _counted(moment) for moment in wrong)


def test_an_instant_in_another_offset_is_the_same_millisecond() -> None:
    paris = datetime(2027, 3, 14, 8, 0, tzinfo=timezone(timedelta(hours=1)))
    assert epoch_ms(paris) == epoch_ms(datetime(2027, 3, 14, 7, 0, tzinfo=UTC))
