"""Run ids: readable, canonical, and inverted exactly by the parser."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kairos.core.run_id import RunIdError, parse_run_id, run_id

pytestmark = pytest.mark.unit

NEW_YORK_SUMMER = timezone(timedelta(hours=-4))


@pytest.mark.parametrize(
    ("nominal", "text"),
    [
        pytest.param(
            datetime(2027, 3, 14, 3, tzinfo=NEW_YORK_SUMMER),
            "settlement-report@2027-03-14T07:00:00Z",
            id="converted-to-utc",
        ),
        pytest.param(
            datetime(2027, 3, 14, 7, 0, 1, 500_000, tzinfo=UTC),
            "settlement-report@2027-03-14T07:00:01.500Z",
            id="milliseconds",
        ),
        pytest.param(
            datetime(2027, 3, 14, 7, 0, 1, 5, tzinfo=UTC),
            "settlement-report@2027-03-14T07:00:01.000005Z",
            id="microseconds",
        ),
    ],
)
def test_format(nominal: datetime, text: str) -> None:
    assert run_id("settlement-report", nominal) == text
    assert parse_run_id(text) == ("settlement-report", nominal)


def test_naive_nominal_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        run_id("a", datetime(2027, 3, 14))


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("no-at-sign", id="no-separator"),
        pytest.param("@2027-03-14T07:00:00Z", id="empty-id"),
        pytest.param("a b@2027-03-14T07:00:00Z", id="bad-id"),
        pytest.param("a@2027-03-14 07:00:00Z", id="space-instead-of-T"),
        pytest.param("a@2027-03-14T07:00:00+00:00", id="offset-instead-of-Z"),
        pytest.param("a@2027-02-30T07:00:00Z", id="impossible-date"),
        pytest.param("a@2027-03-14T07:00:00.000Z", id="non-canonical-zero-fraction"),
        pytest.param("a@2027-03-14T07:00:00.500000Z", id="non-canonical-long-fraction"),
    ],
)
def test_parse_refuses(text: str) -> None:
    with pytest.raises(RunIdError):
        parse_run_id(text)


schedule_ids = st.text(alphabet="abcXYZ019._:/-", min_size=1, max_size=200)
instants = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


@given(schedule_ids, instants)
def test_round_trip(schedule_id: str, nominal: datetime) -> None:
    assert parse_run_id(run_id(schedule_id, nominal)) == (schedule_id, nominal)


@given(schedule_ids, instants, instants)
def test_distinct_occurrences_have_distinct_ids(
    schedule_id: str, first: datetime, second: datetime
) -> None:
    assert (run_id(schedule_id, first) == run_id(schedule_id, second)) is (first == second)
