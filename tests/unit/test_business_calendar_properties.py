"""Properties of the business-day queries on generated calendars: they agree with a plain walk
over the dates."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.business_calendar import BusinessCalendar, Weekday, parse_calendar
from kairos.core.calendar_windows import resolve_wall_time

FIRST = date(2026, 1, 1)
SPAN_DAYS = 400

business_weeks = st.sets(st.sampled_from(list(Weekday)), min_size=1).map(
    lambda days: [day.value for day in days]
)
holiday_dates = st.sets(
    st.integers(0, SPAN_DAYS).map(lambda n: FIRST + timedelta(days=n)), max_size=200
)


@st.composite
def calendars(draw: st.DrawFn) -> BusinessCalendar:
    return parse_calendar(
        {
            "id": "generated",
            "owner": "tests",
            "business_days": draw(business_weeks),
            "holidays": [{"date": day, "name": "closed"} for day in draw(holiday_dates)],
        }
    )


def business(calendar: BusinessCalendar, day: date) -> bool:
    """The definition, walked plainly: a day of the week listed, not a listed holiday."""
    weekday = Weekday(("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")[day.weekday()])
    return weekday in calendar.business_days and day not in {h.date for h in calendar.holidays}


days = st.integers(0, SPAN_DAYS).map(lambda n: FIRST + timedelta(days=n))


@settings(max_examples=150, deadline=None)
@given(calendar=calendars(), day=days)
def test_the_next_and_previous_business_days_are_the_nearest_ones(
    calendar: BusinessCalendar, day: date
) -> None:
    following = calendar.next_business_day(day)
    preceding = calendar.previous_business_day(day)

    assert preceding < day < following
    assert business(calendar, following) and business(calendar, preceding)
    between = [preceding + timedelta(days=n) for n in range(1, (following - preceding).days)]
    assert [d for d in between if d != day and business(calendar, d)] == []
    assert calendar.is_business_day(day) is business(calendar, day)


@settings(max_examples=150, deadline=None)
@given(calendar=calendars(), month=st.integers(1, 12), n=st.integers(1, 31))
def test_the_nth_business_day_counts_the_months_business_days(
    calendar: BusinessCalendar, month: int, n: int
) -> None:
    walked = [
        FIRST.replace(month=month) + timedelta(days=k)
        for k in range(31)
        if (FIRST.replace(month=month) + timedelta(days=k)).month == month
    ]
    expected = [day for day in walked if business(calendar, day)]

    assert calendar.business_days_in(2026, month) == expected
    assert calendar.nth_business_day(2026, month, n) == (
        expected[n - 1] if n <= len(expected) else None
    )
    assert calendar.nth_business_day(2026, month, -n) == (
        expected[-n] if n <= len(expected) else None
    )


def daily_starts(zone: str, hour: int, minute: int, around: datetime) -> list[datetime]:
    """Each day's start of a daily window, by the wall-time rules (first pass, or the jump)."""
    first = around.date() - timedelta(days=5)
    walls = (datetime.combine(first + timedelta(days=n), time(hour, minute)) for n in range(11))
    return [resolve_wall_time(wall, ZoneInfo(zone)) for wall in walls]


@settings(max_examples=200, deadline=None)
@given(
    start_minute=st.integers(0, 24 * 60 - 1),
    length_minutes=st.integers(1, 3 * 24 * 60),
    probe_minutes=st.integers(0, 60 * 24 * 60),
    zone=st.sampled_from(["UTC", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham"]),
)
def test_a_recurring_window_holds_the_instants_within_its_duration_after_a_start(
    start_minute: int, length_minutes: int, probe_minutes: int, zone: str
) -> None:
    hour, minute = divmod(start_minute, 60)
    window_spec = {"cron": f"{minute} {hour} * * *", "duration": f"{length_minutes}m"}
    calendar = parse_calendar(
        {"id": "w", "owner": "tests", "timezone": zone, "windows": [{**window_spec, "name": "w"}]}
    )
    # Sixty days from March cover Lord Howe's and Chatham's April changes and New York's March.
    instant = datetime(2026, 3, 1, tzinfo=UTC) + timedelta(minutes=probe_minutes)
    duration = timedelta(minutes=length_minutes)

    window = calendar.window_at(instant)

    holding = [s for s in daily_starts(zone, hour, minute, instant) if s <= instant < s + duration]
    if not holding:
        assert window is None
        return
    assert window is not None
    assert (window.start, window.end) == (min(holding), min(holding) + duration)


window_specs = st.lists(
    st.one_of(
        st.tuples(st.integers(0, 23), st.integers(0, 59), st.integers(1, 36 * 60)).map(
            lambda spec: {"cron": f"{spec[1]} {spec[0]} * * *", "duration": f"{spec[2]}m"}
        ),
        st.tuples(st.integers(0, 30 * 24 * 60), st.integers(1, 3 * 24 * 60)).map(
            lambda spec: {
                "start": datetime(2026, 3, 1) + timedelta(minutes=spec[0]),
                "end": datetime(2026, 3, 1) + timedelta(minutes=spec[0] + spec[1]),
            }
        ),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    specs=window_specs,
    probes=st.lists(st.integers(0, 32 * 24 * 60), min_size=1, max_size=40),
    zone=st.sampled_from(["UTC", "America/New_York", "Australia/Lord_Howe"]),
)
def test_an_answer_does_not_depend_on_what_was_asked_before(
    specs: list[dict[str, object]], probes: list[int], zone: str
) -> None:
    """A calendar remembers each `window_at` answer over the span it holds: asked in any order,
    at window boundaries too, it answers as a copy asked only that instant."""
    windows = [{**spec, "name": f"w{n}"} for n, spec in enumerate(specs)]
    calendar = parse_calendar({"id": "w", "owner": "tests", "timezone": zone, "windows": windows})
    first = datetime(2026, 3, 1, tzinfo=UTC)
    instants = [first + timedelta(minutes=minutes) for minutes in probes]
    # Each answer's own bounds are boundaries: asked too, just before and at them.
    for instant in list(instants):
        found = calendar.window_at(instant)
        if found is not None:
            instants += [found.start, found.end - timedelta(microseconds=1), found.end]

    for instant in instants:
        assert calendar.window_at(instant) == calendar.model_copy().window_at(instant), instant
