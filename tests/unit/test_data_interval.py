"""The period a run is for, checked against a brute-force walk of the wall clock and by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.calendar import next_fire
from kairos.core.data_interval import DataInterval, data_interval
from kairos.core.preview_listing import fire_document, upcoming
from kairos.core.schedule import Schedule

NEW_YORK = ZoneInfo("America/New_York")
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def test_a_daily_new_york_job_covers_25_hours_across_fall_back_and_23_across_spring_forward() -> (
    None
):
    daily = Schedule(id="ledger.export", cron="0 2 * * *", timezone="America/New_York")
    fall_back = data_interval(daily, _utc("2027-11-08T02:00:00-05:00"))
    assert fall_back == DataInterval(
        _utc("2027-11-07T02:00:00-05:00"), _utc("2027-11-08T02:00:00-05:00")
    )
    # 2027-11-07 is the fall-back day: its 02:00 is after the repeated hour, in EST.
    across = data_interval(daily, _utc("2027-11-07T02:00:00-05:00"))
    assert across.end - across.start == 25 * HOUR
    # 2027-03-14 springs forward at 02:00: the wall time does not exist, the run is at 03:00
    # EDT (the default dst_gap), and the interval of the day after starts there.
    spring = data_interval(daily, _utc("2027-03-15T02:00:00-04:00"))
    assert spring.start == _utc("2027-03-14T03:00:00-04:00")
    assert spring.end - spring.start == 23 * HOUR


def test_the_first_run_starts_at_start_at_or_at_itself() -> None:
    start = _utc("2027-01-04T08:30:00+00:00")
    hourly = Schedule(id="ops.hourly", cron="0 * * * *", start_at=start)
    first = _utc("2027-01-04T09:00:00+00:00")
    assert data_interval(hourly, first) == DataInterval(start, first)
    assert data_interval(hourly, first + HOUR) == DataInterval(first, first + HOUR)
    unbounded = Schedule(id="ops.hourly", cron="0 * * * *")
    assert data_interval(unbounded, first) == DataInterval(first - HOUR, first)
    every = Schedule(id="ops.every", every=90 * timedelta(seconds=1), start_at=start)
    assert data_interval(every, start) == DataInterval(start, start)
    later = start + 3 * 90 * timedelta(seconds=1)
    assert data_interval(every, later) == DataInterval(later - 90 * timedelta(seconds=1), later)
    once = Schedule(id="ops.once", at=first)
    assert data_interval(once, first) == DataInterval(first, first)


def test_calendars_do_not_move_an_interval_but_business_days_are_its_occurrences() -> None:
    rolled = Schedule(
        id="ops.close",
        cron="0 18 * * *",
        timezone="America/New_York",
        exclude=["nyse"],
        roll="previous_business_day",
    )
    saturday = _utc("2027-03-13T18:00:00-05:00")
    assert data_interval(rolled, saturday).start == _utc("2027-03-12T18:00:00-05:00")
    monthly = Schedule(
        id="ops.month", cron="0 9 * * *", timezone="America/New_York", business_day=1
    )
    # Without calendars the business week is Monday to Friday: March 1st 2027 is a Monday,
    # February 1st a Monday too.
    assert data_interval(monthly, _utc("2027-03-01T09:00:00-05:00")) == DataInterval(
        _utc("2027-02-01T09:00:00-05:00"), _utc("2027-03-01T09:00:00-05:00")
    )


def _brute_previous(hour: int, minute: int, weekdays: set[int], nominal: datetime) -> datetime:
    """Walk back minute by minute in UTC until New York's wall clock shows the cron's time."""
    at = nominal - MINUTE
    while True:
        wall = at.astimezone(NEW_YORK)
        if (wall.hour, wall.minute) == (hour, minute) and wall.isoweekday() % 7 in weekdays:
            return at
        at -= MINUTE


@settings(max_examples=40, deadline=None)
@given(
    hour=st.sampled_from([0, 4, 9, 13, 23]),  # never inside a New York DST gap or repeat
    minute=st.integers(0, 59),
    weekdays=st.sets(st.integers(0, 6), min_size=1),
    offset_days=st.integers(0, 800),
)
def test_the_previous_occurrence_is_the_last_wall_time_before_the_run(
    hour: int, minute: int, weekdays: set[int], offset_days: int
) -> None:
    days = ",".join(str(d) for d in sorted(weekdays))
    schedule = Schedule(
        id="ops.brute", cron=f"{minute} {hour} * * {days}", timezone="America/New_York"
    )
    after = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=offset_days)
    fire = next_fire(schedule, after)  # the run: the schedule's first occurrence after `after`
    assert fire is not None
    found = data_interval(schedule, fire.nominal)
    assert found.end == fire.nominal
    assert found.start == _brute_previous(hour, minute, weekdays, fire.nominal)


@pytest.mark.parametrize("cron", ["*/15 * * * *", "0 0 1 1 *", "0 0 29 2 *"])
def test_sparse_and_dense_crons_find_their_previous_occurrence(cron: str) -> None:
    schedule = Schedule(id="ops.sparse", cron=cron)
    nominal = _utc("2028-02-29T00:00:00+00:00")
    expected = {
        "*/15 * * * *": nominal - 15 * MINUTE,
        "0 0 1 1 *": _utc("2028-01-01T00:00:00+00:00"),
        "0 0 29 2 *": _utc("2024-02-29T00:00:00+00:00"),
    }[cron]
    assert data_interval(schedule, nominal).start == expected


def test_dense_triggers_find_their_previous_occurrence_across_a_long_gap() -> None:
    # Every minute of the first business day: the run at its first minute follows the last
    # minute of the month before's (a walk of one lookup per minute took seconds).
    dense = Schedule(id="ops.dense", cron="* * * * *", business_day=1)
    first = _utc("2027-03-01T00:00:00+00:00")
    assert data_interval(dense, first).start == _utc("2027-02-01T23:59:00+00:00")
    # `every` counts from start_at, and stops at end_at.
    start = _utc("2027-01-01T00:00:00+00:00")
    ticking = Schedule(
        id="ops.tick", every=timedelta(seconds=7), start_at=start, end_at=start + HOUR
    )
    assert data_interval(ticking, start + 70 * timedelta(seconds=1)).start == start + 63 * (
        timedelta(seconds=1)
    )
    assert data_interval(ticking, start + 2 * HOUR).start == start + 3598 * timedelta(seconds=1)


def test_the_next_fires_shown_by_describe_and_the_console_say_which_period_each_is_for() -> None:
    daily = Schedule(id="ledger.export", cron="0 2 * * *", timezone="America/New_York")
    fires = upcoming(daily, _utc("2027-11-06T12:00:00-04:00"), 3, None)
    shown = [(f["wall"], f["interval_start"]) for f in (fire_document(p, daily) for p in fires)]
    assert shown == [
        ("2027-11-07T02:00:00-05:00", "2027-11-06T02:00:00-04:00"),  # across fall-back: 25 h
        ("2027-11-08T02:00:00-05:00", "2027-11-07T02:00:00-05:00"),
        ("2027-11-09T02:00:00-05:00", "2027-11-08T02:00:00-05:00"),
    ]
