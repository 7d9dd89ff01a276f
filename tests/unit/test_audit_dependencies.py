"""The audit's own account of which upstream period a run waits for: each rule by hand (a New
York fall-back day included), its bounds, and agreement with the executors' code
(`kairos.core.dependencies`), which it shares nothing with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.audit_dependencies import (
    LOOK_BACKS,
    PeriodAnswer,
    brute_upstream_period,
    run_waiting,
)
from kairos.core.calendar import next_fire
from kairos.core.dependencies import upstream_period
from kairos.core.schedule import DstRepeatPolicy, Schedule
from kairos.core.schedule_dependencies import DEFAULT_UPSTREAM_WAIT, PeriodMatch

NEW_YORK = ZoneInfo("America/New_York")
UTC_ZONE = ZoneInfo("UTC")
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
LATEST_BEFORE, SAME_INSTANT, SAME_LOCAL_DATE = (
    PeriodMatch.LATEST_BEFORE,
    PeriodMatch.SAME_INSTANT,
    PeriodMatch.SAME_LOCAL_DATE,
)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _period(
    upstream: Schedule, match: PeriodMatch, nominal: datetime, zone: ZoneInfo = UTC_ZONE
) -> datetime | None:
    answer = brute_upstream_period(upstream, match, nominal, zone)
    assert answer.undecided is None
    return answer.period


# -- latest_before -------------------------------------------------------------------------------


def test_latest_before_is_the_last_occurrence_at_or_before_the_run() -> None:
    hourly = Schedule(id="extract", cron="0 * * * *")
    assert _period(hourly, LATEST_BEFORE, _utc("2027-01-04T05:30:00+00:00")) == _utc(
        "2027-01-04T05:00:00+00:00"
    )
    # At the run's own instant: that period (it ends at or before the run).
    assert _period(hourly, LATEST_BEFORE, _utc("2027-01-04T05:00:00+00:00")) == _utc(
        "2027-01-04T05:00:00+00:00"
    )


def test_latest_before_reaches_back_a_week_and_a_month() -> None:
    weekly = Schedule(id="weekly", cron="0 6 * * 1")  # Mondays 06:00 UTC
    sunday = _utc("2027-01-10T23:00:00+00:00")
    assert _period(weekly, LATEST_BEFORE, sunday) == _utc("2027-01-04T06:00:00+00:00")
    monthly = Schedule(id="monthly", cron="0 0 1 * *")
    assert _period(monthly, LATEST_BEFORE, _utc("2027-01-31T12:00:00+00:00")) == _utc(
        "2027-01-01T00:00:00+00:00"
    )


def test_latest_before_an_upstream_that_starts_later_is_none_and_beyond_a_year_undecided() -> None:
    later = Schedule(id="later", cron="0 * * * *", start_at=_utc("2027-02-01T00:00:00+00:00"))
    assert brute_upstream_period(
        later, LATEST_BEFORE, _utc("2027-01-10T00:00:00+00:00"), UTC_ZONE
    ) == PeriodAnswer(None)
    # 29 February: four years apart, so past the look-back: not judged, never "none".
    leap = Schedule(id="leap", cron="0 0 29 2 *")
    answer = brute_upstream_period(leap, LATEST_BEFORE, _utc("2027-06-01T00:00:00+00:00"), UTC_ZONE)
    assert answer.period is None
    assert answer.undecided == f"no occurrence within {LOOK_BACKS[-1].days} days before the run"


def test_a_one_shot_upstream_is_its_one_period() -> None:
    once = Schedule(id="once", at=_utc("2027-01-04T03:00:00+00:00"))
    assert _period(once, LATEST_BEFORE, _utc("2027-01-05T00:00:00+00:00")) == _utc(
        "2027-01-04T03:00:00+00:00"
    )
    assert _period(once, LATEST_BEFORE, _utc("2027-01-04T02:00:00+00:00")) is None


# -- same_instant --------------------------------------------------------------------------------


def test_same_instant_is_the_run_instant_or_none() -> None:
    hourly = Schedule(id="extract", cron="0 * * * *")
    on_the_hour = _utc("2027-01-04T05:00:00+00:00")
    assert _period(hourly, SAME_INSTANT, on_the_hour) == on_the_hour
    assert _period(hourly, SAME_INSTANT, on_the_hour + 30 * MINUTE) is None


# -- same_local_date -----------------------------------------------------------------------------


def test_same_local_date_on_a_new_york_fall_back_day_covers_its_25_hours() -> None:
    # 2027-11-07 in New York runs from 04:00Z (midnight EDT) to 05:00Z the next day (midnight
    # EST): its last hourly UTC occurrence is 04:00Z on 8 November, 23:00 EST.
    hourly_utc = Schedule(id="ticks", cron="0 * * * *")
    morning = _utc("2027-11-07T09:00:00-05:00")
    assert _period(hourly_utc, SAME_LOCAL_DATE, morning, NEW_YORK) == _utc(
        "2027-11-08T04:00:00+00:00"
    )
    # The day before is an ordinary 24-hour EDT day: its last one is 03:00Z, 23:00 EDT.
    saturday = _utc("2027-11-06T09:00:00-04:00")
    assert _period(hourly_utc, SAME_LOCAL_DATE, saturday, NEW_YORK) == _utc(
        "2027-11-07T03:00:00+00:00"
    )
    # Read on the downstream's clock: the same run in UTC waits for 23:00Z of 7 November.
    assert _period(hourly_utc, SAME_LOCAL_DATE, morning, UTC_ZONE) == _utc(
        "2027-11-07T23:00:00+00:00"
    )


def test_same_local_date_keeps_the_repeated_hours_second_pass() -> None:
    both = Schedule(
        id="night", cron="30 1 * * *", timezone="America/New_York", dst_repeat=DstRepeatPolicy.BOTH
    )
    first = both.model_copy(update={"dst_repeat": DstRepeatPolicy.FIRST})
    day_start = _utc("2027-11-07T00:00:00-04:00")
    assert _period(both, SAME_LOCAL_DATE, day_start, NEW_YORK) == _utc("2027-11-07T06:30:00+00:00")
    assert _period(first, SAME_LOCAL_DATE, day_start, NEW_YORK) == _utc("2027-11-07T05:30:00+00:00")


def test_same_local_date_may_be_after_the_run_and_is_none_on_a_day_without_one() -> None:
    settlement = Schedule(id="settlement", cron="0 22 * * 1-5", timezone="America/New_York")
    tuesday = _utc("2027-06-08T02:00:00-04:00")
    assert _period(settlement, SAME_LOCAL_DATE, tuesday, NEW_YORK) == _utc(
        "2027-06-08T22:00:00-04:00"
    )
    sunday = _utc("2027-06-13T12:00:00-04:00")
    assert _period(settlement, SAME_LOCAL_DATE, sunday, NEW_YORK) is None


def test_a_walk_too_dense_to_finish_is_undecided() -> None:
    every_second = Schedule(
        id="dense", every=timedelta(seconds=1), start_at=_utc("2027-01-01T00:00:00+00:00")
    )
    answer = brute_upstream_period(
        every_second, SAME_LOCAL_DATE, _utc("2027-01-04T12:00:00+00:00"), UTC_ZONE
    )
    assert answer.period is None
    assert answer.undecided is not None


def test_a_record_without_upstream_waits_for_nothing() -> None:
    assert run_waiting([], None, "fail", None) is None
    waiting = run_waiting(
        [{"schedule_id": "extract", "match": "same_instant"}], None, "skip", "UTC"
    )
    assert waiting is not None
    assert waiting.upstream == (("extract", "same_instant"),)
    assert waiting.wait == DEFAULT_UPSTREAM_WAIT


# -- agreement with the executors' code ----------------------------------------------------------

TRIGGERS = ["0 22 * * *", "30 * * * *", "*/20 * * * *", "0 0 * * *", "30 1 * * 0,6", "0 6 * * 1"]
ZONES = ["America/New_York", "UTC", "Australia/Lord_Howe", "Europe/London"]
AROUND = [_utc(t) for t in ("2027-11-07T06:00:00+00:00", "2027-03-14T07:00:00+00:00")]


@settings(max_examples=150, deadline=None)
@given(
    trigger=st.sampled_from(TRIGGERS),
    upstream_zone=st.sampled_from(ZONES),
    zone=st.sampled_from(ZONES),
    base=st.sampled_from(AROUND),
    minutes=st.integers(-3 * 24 * 60, 3 * 24 * 60),
    match=st.sampled_from(list(PeriodMatch)),
    snap=st.booleans(),
)
def test_the_audits_walk_agrees_with_the_executors_rule(
    trigger: str,
    upstream_zone: str,
    zone: str,
    base: datetime,
    minutes: int,
    match: PeriodMatch,
    snap: bool,
) -> None:
    upstream = Schedule(id="up", cron=trigger, timezone=upstream_zone)
    nominal = base + minutes * MINUTE
    if snap:
        fire = next_fire(upstream, nominal)
        assert fire is not None
        nominal = fire.nominal
    clock = ZoneInfo(zone)
    answer = brute_upstream_period(upstream, match, nominal, clock)
    assert answer.undecided is None
    assert answer.period == upstream_period(upstream, match, nominal, clock)
