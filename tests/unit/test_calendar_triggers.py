"""`at`, `every`, bounds, jitter, never-firing schedules and the compiled-expression cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.calendar import (
    CalendarError,
    compile_cron,
    fire_instant_with_jitter,
    fires_between,
    never_fires_reason,
    next_fire,
    next_fires,
)
from kairos.core.schedule import Schedule

pytestmark = pytest.mark.unit

T = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def make(**fields: object) -> Schedule:
    return Schedule.model_validate({"id": "settlement-report", **fields})


def nominals(schedule: Schedule, after: datetime, count: int = 10) -> list[datetime]:
    return [fire.nominal for fire in next_fires(schedule, after, count)]


def test_at_fires_once_and_after_is_exclusive() -> None:
    schedule = make(at="2027-03-14T03:00:00-04:00", timezone="America/New_York")
    fire = next_fire(schedule, T - timedelta(seconds=1))
    assert fire is not None
    assert fire.nominal == T
    assert fire.wall.isoformat() == "2027-03-14T03:00:00-04:00"
    assert next_fire(schedule, T) is None
    assert nominals(schedule, T - timedelta(days=1)) == [T]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"at": "2027-03-14T07:00:00Z", "start_at": "2027-03-14T07:00:00Z"},
            [T],
            id="at-equal-to-start-counts",
        ),
        pytest.param(
            {"at": "2027-03-14T07:00:00Z", "start_at": "2027-03-14T07:00:01Z"},
            [],
            id="at-before-start-never",
        ),
        pytest.param(
            {"at": "2027-03-14T07:00:00Z", "end_at": "2027-03-14T07:00:00Z"},
            [T],
            id="at-equal-to-end-counts",
        ),
        pytest.param(
            {"at": "2027-03-14T07:00:00Z", "end_at": "2027-03-14T06:59:59Z"},
            [],
            id="at-after-end-never",
        ),
        pytest.param(
            {
                "cron": "0 7 * * *",
                "start_at": "2027-03-14T07:00:00Z",
                "end_at": "2027-03-16T07:00:00Z",
            },
            [T, T + timedelta(days=1), T + timedelta(days=2)],
            id="cron-bounds-inclusive-both-ends",
        ),
        pytest.param(
            {
                "cron": "0 7 * * *",
                "start_at": "2027-03-14T07:00:00.001Z",
                "end_at": "2027-03-16T06:59:59Z",
            },
            [T + timedelta(days=1)],
            id="cron-bounds-just-missing-both-ends",
        ),
        pytest.param(
            {"every": "1h", "start_at": "2027-03-14T07:00:00Z", "end_at": "2027-03-14T09:30:00Z"},
            [T, T + timedelta(hours=1), T + timedelta(hours=2)],
            id="every-from-start-to-end",
        ),
    ],
)
def test_bounds(fields: dict[str, object], expected: list[datetime]) -> None:
    assert nominals(make(**fields), T - timedelta(days=1)) == expected


def test_every_counts_elapsed_time_across_spring_forward() -> None:
    schedule = make(every="30m", start_at="2027-03-14T06:00:00Z", timezone="America/New_York")
    walls = [fire.wall.isoformat() for fire in next_fires(schedule, T - timedelta(hours=2), 4)]
    assert walls == [
        "2027-03-14T01:00:00-05:00",
        "2027-03-14T01:30:00-05:00",
        "2027-03-14T03:00:00-04:00",
        "2027-03-14T03:30:00-04:00",
    ]


def test_every_marks_passes_of_a_repeated_hour_but_moves_nothing() -> None:
    schedule = make(every="45m", start_at="2027-11-07T04:00:00Z", timezone="America/New_York")
    found = next_fires(schedule, datetime(2027, 11, 7, 4, 30, tzinfo=UTC), 3)
    assert [
        (fire.wall.isoformat(), fire.repeated_hour_pass, fire.moved_by_dst_gap) for fire in found
    ] == [
        ("2027-11-07T00:45:00-04:00", None, False),
        ("2027-11-07T01:30:00-04:00", 1, False),
        ("2027-11-07T01:15:00-05:00", 2, False),
    ]


def test_every_with_milliseconds_keeps_them() -> None:
    schedule = make(every="1500ms", start_at="2027-03-14T07:00:00Z")
    assert nominals(schedule, T, 2) == [T + timedelta(milliseconds=1500), T + timedelta(seconds=3)]


def test_fires_between_is_exclusive_then_inclusive() -> None:
    schedule = make(cron="0 * * * *")
    found = [fire.nominal for fire in fires_between(schedule, T, T + timedelta(hours=2))]
    assert found == [T + timedelta(hours=1), T + timedelta(hours=2)]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        pytest.param({"cron": "0 0 30 2 *"}, "matches no calendar date", id="february-30"),
        pytest.param(
            {"cron": "0 0 31 4,6,9,11 *"}, "matches no calendar date", id="short-months-31"
        ),
        pytest.param({"cron": "0 0 * * *", "end_at": "2027-01-01T00:00:00Z"}, "ended", id="ended"),
        pytest.param({"at": "2027-01-01T00:00:00Z"}, "is not after", id="at-in-the-past"),
        pytest.param(
            {
                "cron": "0 0 1 1 *",
                "start_at": "2027-06-01T00:00:00Z",
                "end_at": "2027-12-01T00:00:00Z",
            },
            "between start_at and end_at",
            id="no-occurrence-inside-bounds",
        ),
    ],
)
def test_never_fires_reason(fields: dict[str, object], reason: str) -> None:
    schedule = make(**fields)
    assert next_fire(schedule, T - timedelta(days=60)) is None
    explanation = never_fires_reason(schedule, T - timedelta(days=60))
    assert explanation is not None and reason in explanation


def test_a_firing_schedule_has_no_never_fires_reason() -> None:
    assert never_fires_reason(make(cron="0 0 29 2 *"), T) is None


def test_naive_after_is_refused_clearly() -> None:
    with pytest.raises(CalendarError, match="naive"):
        next_fire(make(cron="* * * * *"), datetime(2027, 3, 14))


def test_schedules_sharing_an_expression_share_one_compiled_calendar() -> None:
    first = make(cron="0  9 * * 1-5", timezone="Europe/Berlin")
    second = Schedule.model_validate(
        {"id": "other", "cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"}
    )
    assert first.cron == second.cron == "0 9 * * 1-5"
    assert next_fire(first, T) == next_fire(second, T)
    compiled = compile_cron(first.cron, first.timezone, first.dst_gap, first.dst_repeat)
    assert compiled is compile_cron(second.cron, second.timezone, second.dst_gap, second.dst_repeat)


def test_jitter_is_zero_without_jitter() -> None:
    schedule = make(cron="* * * * *")
    assert fire_instant_with_jitter(schedule.id, schedule, T) == T


def test_jitter_is_stable_and_pinned() -> None:
    schedule = make(cron="* * * * *", jitter="10m")
    # Pinned: a change of hashing would move every jittered run, so it must not go unnoticed.
    assert fire_instant_with_jitter(schedule.id, schedule, T) - T == timedelta(milliseconds=185_065)
    assert fire_instant_with_jitter(schedule.id, schedule, T) == fire_instant_with_jitter(
        schedule.id, schedule, T
    )


@settings(max_examples=200, deadline=None)
@given(
    minutes=st.integers(min_value=0, max_value=10**6),
    jitter_ms=st.integers(min_value=1, max_value=86_400_000),
)
def test_jitter_lies_in_range(minutes: int, jitter_ms: int) -> None:
    schedule = make(cron="* * * * *", jitter=timedelta(milliseconds=jitter_ms))
    nominal = T + timedelta(minutes=minutes)
    offset = fire_instant_with_jitter(schedule.id, schedule, nominal) - nominal
    assert timedelta(0) <= offset < timedelta(milliseconds=jitter_ms)


def test_jitter_spreads_a_herd() -> None:
    herd = [
        Schedule.model_validate({"id": f"job-{i}", "cron": "0 0 * * *", "jitter": "1m"})
        for i in range(1000)
    ]
    offsets = {fire_instant_with_jitter(schedule.id, schedule, T) - T for schedule in herd}
    assert len(offsets) > 900


@pytest.mark.parametrize(
    ("cron", "fields", "count"),
    [
        pytest.param("30 2 * * *", {}, 365, id="fixed-daily-once-a-day-all-year"),
        pytest.param("30 2 * * *", {"dst_gap": "skip"}, 364, id="fixed-daily-gap-skip"),
        pytest.param("30 1 * * *", {"dst_repeat": "both"}, 366, id="fixed-daily-repeat-both"),
        pytest.param("*/30 * * * *", {}, 365 * 48, id="wildcard-real-time-all-year"),
    ],
)
def test_a_year_in_new_york(cron: str, fields: dict[str, object], count: int) -> None:
    # 2027 loses two half-hours in March and gains two in November: real time nets out.
    schedule = make(cron=cron, timezone="America/New_York", **fields)
    start = datetime(2027, 1, 1, 5, tzinfo=UTC)
    year = list(
        fires_between(
            schedule,
            start - timedelta(seconds=1),
            datetime(2028, 1, 1, 5, tzinfo=UTC) - timedelta(seconds=1),
        )
    )
    assert len(year) == count
    assert len({fire.nominal for fire in year}) == count
