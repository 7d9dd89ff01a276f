"""Business calendars answering questions: the business-day queries, blackout windows on wall
clocks with DST changes (New York; Lord Howe Island, whose clock moves by 30 minutes), and the
calendar in force at an instant. Validation of calendars files is in test_business_calendar.py.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from kairos.core.business_calendar import BusinessCalendar, CalendarQueryError, parse_calendar
from kairos.core.calendar_versions import CalendarBook, CalendarChange
from tests.unit.test_business_calendar import OWNER


def calendar(**fields: Any) -> BusinessCalendar:
    return parse_calendar({"id": "test-calendar", "owner": OWNER, **fields})


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


# December 2026 ends on a Thursday; 1 January 2027 is a Friday.
YEAR_END = calendar(
    holidays=[
        {"date": "2026-12-25", "name": "Christmas Day"},
        {"date": "2026-12-31", "name": "New Year's Eve"},
        {"date": "2027-01-01", "name": "New Year's Day"},
    ]
)


@pytest.mark.parametrize(
    ("day", "business", "holiday"),
    [
        pytest.param(date(2026, 12, 24), True, None, id="thursday"),
        pytest.param(date(2026, 12, 25), False, "Christmas Day", id="holiday"),
        pytest.param(date(2026, 12, 26), False, None, id="saturday"),
        pytest.param(date(2026, 12, 27), False, None, id="sunday"),
        pytest.param(date(2026, 12, 28), True, None, id="monday"),
    ],
)
def test_a_business_day_is_in_the_business_week_and_not_a_holiday(
    day: date, business: bool, holiday: str | None
) -> None:
    assert YEAR_END.is_business_day(day) is business
    assert YEAR_END.holiday_name(day) == holiday


@pytest.mark.parametrize(
    ("day", "following", "preceding"),
    [
        pytest.param(date(2026, 12, 24), date(2026, 12, 28), date(2026, 12, 23), id="over-holiday"),
        pytest.param(date(2026, 12, 30), date(2027, 1, 4), date(2026, 12, 29), id="over-year-end"),
        pytest.param(date(2027, 1, 4), date(2027, 1, 5), date(2026, 12, 30), id="back-over-year"),
        pytest.param(date(2026, 12, 26), date(2026, 12, 28), date(2026, 12, 24), id="from-weekend"),
    ],
)
def test_next_and_previous_business_days_are_strictly_after_and_before(
    day: date, following: date, preceding: date
) -> None:
    assert YEAR_END.next_business_day(day) == following
    assert YEAR_END.previous_business_day(day) == preceding


@pytest.mark.parametrize(
    ("year", "month", "n", "expected"),
    [
        pytest.param(2026, 12, 1, date(2026, 12, 1), id="first-of-december"),
        pytest.param(2026, 12, -1, date(2026, 12, 30), id="last-of-december-before-a-holiday"),
        pytest.param(2026, 12, -2, date(2026, 12, 29), id="second-last-of-december"),
        pytest.param(2026, 12, 20, date(2026, 12, 29), id="twentieth-of-december"),
        pytest.param(2026, 12, 21, date(2026, 12, 30), id="twenty-first-of-december"),
        pytest.param(2026, 12, 22, None, id="december-has-21"),
        pytest.param(2026, 12, -22, None, id="december-has-21-from-the-end"),
        pytest.param(2027, 1, 1, date(2027, 1, 4), id="first-of-january-after-a-holiday"),
        pytest.param(2027, 1, -1, date(2027, 1, 29), id="last-of-january-a-friday"),
        pytest.param(2027, 2, -1, date(2027, 2, 26), id="last-of-february"),
        pytest.param(2026, 5, -1, date(2026, 5, 29), id="month-ending-on-a-sunday"),
    ],
)
def test_the_nth_business_day_of_a_month_counts_from_either_end(
    year: int, month: int, n: int, expected: date | None
) -> None:
    assert YEAR_END.nth_business_day(year, month, n) == expected


def test_a_weekend_working_calendar_and_a_long_run_of_holidays() -> None:
    # Three years of holidays on every day but Saturdays: the bounded search still finds one.
    closed = [
        {"date": (date(2026, 1, 1) + timedelta(days=n)).isoformat(), "name": "closed"}
        for n in range(3 * 365)
        if (date(2026, 1, 1) + timedelta(days=n)).weekday() != 5
    ]
    weekend = calendar(business_days=["SAT", "SUN"], holidays=closed)

    assert weekend.next_business_day(date(2026, 1, 2)) == date(2026, 1, 3)
    assert weekend.next_business_day(date(2026, 1, 3)) == date(2026, 1, 10)
    assert weekend.previous_business_day(date(2026, 1, 10)) == date(2026, 1, 3)
    assert weekend.nth_business_day(2026, 2, -1) == date(2026, 2, 28)
    assert weekend.nth_business_day(2026, 2, 5) is None


@pytest.mark.parametrize(
    ("ask", "fragment"),
    [
        pytest.param(lambda c: c.is_business_day(datetime(2026, 12, 25)), "not a date", id="dt"),
        pytest.param(lambda c: c.nth_business_day(2026, 12, 0), "n is 0", id="n-zero"),
        pytest.param(lambda c: c.nth_business_day(2026, 13, 1), "month 13", id="month-13"),
        pytest.param(lambda c: c.window_at(datetime(2026, 12, 25)), "naive", id="naive"),
        pytest.param(lambda c: c.next_business_day(date.max), "no business day", id="date-max"),
    ],
)
def test_an_unusable_question_is_a_clear_error(ask: Any, fragment: str) -> None:
    with pytest.raises(CalendarQueryError, match=fragment):
        ask(YEAR_END)


SPRING = "across spring forward"
NEW_YORK = calendar(
    timezone="America/New_York",
    windows=[
        {"start": "2026-03-07T12:00", "end": "2026-03-09T12:00", "name": SPRING},
        {"cron": "30 9 * * MON-FRI", "duration": "6h30m", "name": "market hours"},
        {"cron": "0 1 8 3 *", "duration": "2h", "name": "over the jump"},
        {"start": "2026-11-01T01:30", "end": "2026-11-01T01:45", "name": "twice"},
    ],
)


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        # The fixed window's ends are read on the clock of their own dates: EST, then EDT.
        pytest.param(utc(2026, 3, 7, 16, 59), None, id="before-fixed"),
        pytest.param(
            utc(2026, 3, 7, 17), (SPRING, utc(2026, 3, 7, 17), utc(2026, 3, 9, 16)),
            id="fixed-starts-inclusive",
        ),
        pytest.param(utc(2026, 11, 1, 5, 45), None, id="fixed-ends-exclusive"),
        # Market hours are 09:30-16:00 on both sides of the change: 14:30Z, then 13:30Z.
        pytest.param(
            utc(2026, 3, 6, 20, 59), ("market hours", utc(2026, 3, 6, 14, 30), utc(2026, 3, 6, 21)),
            id="friday-est",
        ),
        pytest.param(utc(2026, 3, 6, 14, 29), None, id="friday-est-before-open"),
        pytest.param(
            utc(2026, 3, 9, 16, 30), ("market hours", utc(2026, 3, 9, 13, 30), utc(2026, 3, 9, 20)),
            id="monday-edt-after-the-fixed-window",
        ),
        pytest.param(utc(2026, 3, 9, 20), None, id="monday-edt-closed"),
        # 01:00 EST plus two hours of elapsed time is 04:00 EDT: the hour 02:00 never was.
        pytest.param(
            utc(2026, 3, 8, 7, 59), (SPRING, utc(2026, 3, 7, 17), utc(2026, 3, 9, 16)),
            id="overlap-earliest-start-wins",
        ),
        # A wall time that occurs twice means its first pass (EDT, 05:30Z).
        pytest.param(
            utc(2026, 11, 1, 5, 30), ("twice", utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 5, 45)),
            id="repeated-hour-first-pass",
        ),
        pytest.param(utc(2026, 11, 1, 6, 30), None, id="repeated-hour-second-pass-is-outside"),
    ],
)  # fmt: skip
def test_windows_in_new_york_across_dst_changes(
    instant: datetime, expected: tuple[str, datetime, datetime] | None
) -> None:
    window = NEW_YORK.window_at(instant)

    assert (None if window is None else (window.name, window.start, window.end)) == expected


def test_a_recurring_window_lasts_elapsed_time_across_the_jump() -> None:
    only_recurring = calendar(
        timezone="America/New_York",
        windows=[{"cron": "0 1 8 3 *", "duration": "2h", "name": "over the jump"}],
    )

    window = only_recurring.window_at(utc(2026, 3, 8, 7, 59))

    assert window is not None
    assert (window.start, window.end) == (utc(2026, 3, 8, 6), utc(2026, 3, 8, 8))
    assert window.end.astimezone(ZoneInfo("America/New_York")).hour == 4
    assert only_recurring.window_at(utc(2026, 3, 8, 8)) is None


LORD_HOWE = calendar(
    timezone="Australia/Lord_Howe",
    windows=[
        # 4 October 2026: the clock goes from 02:00 (+10:30) to 02:30 (+11:00).
        {"cron": "0 1 4 10 *", "duration": "2h", "name": "over the half-hour jump"},
        {"cron": "0 2 4 10 *", "duration": "90m", "name": "starts in the gap"},
        {"start": "2026-10-04T02:10", "end": "2026-10-04T02:40", "name": "fixed in the gap"},
        # 5 April 2026: the clock goes back from 02:00 (+11:00) to 01:30 (+10:30).
        {"cron": "45 1 5 4 *", "duration": "1h", "name": "in the repeated half hour"},
    ],
)


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        pytest.param(
            utc(2026, 10, 3, 16, 29), ("over the half-hour jump", utc(2026, 10, 3, 14, 30)),
            id="two-hours-elapsed-end-at-0330",
        ),
        pytest.param(
            utc(2026, 10, 3, 16, 30), ("starts in the gap", utc(2026, 10, 3, 15, 30)),
            id="gap-start-moves-to-the-jump",
        ),
        pytest.param(
            utc(2026, 10, 3, 15, 30), ("over the half-hour jump", utc(2026, 10, 3, 14, 30)),
            id="earliest-start-wins",
        ),
        pytest.param(utc(2026, 10, 3, 17), None, id="ninety-minutes-after-the-jump"),
        pytest.param(
            utc(2026, 4, 4, 15, 20), ("in the repeated half hour", utc(2026, 4, 4, 14, 45)),
            id="first-pass-counts",
        ),
        pytest.param(utc(2026, 4, 4, 15, 45), None, id="an-hour-later-it-ended"),
    ],
)  # fmt: skip
def test_windows_on_lord_howe_island_whose_clock_moves_half_an_hour(
    instant: datetime, expected: tuple[str, datetime] | None
) -> None:
    window = LORD_HOWE.window_at(instant)

    assert (None if window is None else (window.name, window.start)) == expected


def test_a_fixed_window_starting_in_a_gap_starts_at_the_jump() -> None:
    only_fixed = calendar(timezone="Australia/Lord_Howe", windows=[LORD_HOWE.windows[2]])

    window = only_fixed.window_at(utc(2026, 10, 3, 15, 30))

    assert window is not None
    assert (window.start, window.end) == (utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 15, 40))
    assert only_fixed.window_at(utc(2026, 10, 3, 15, 29, 59)) is None


def _change(version: int, at: datetime, holidays: list[str] | None) -> CalendarChange:
    definition = (
        None
        if holidays is None
        else calendar(holidays=[{"date": day, "name": "closed"} for day in holidays])
    )
    change = "deleted" if definition is None else "upserted"
    return CalendarChange("test-calendar", version, change, definition, at, "alice")


def test_a_book_replays_the_calendar_in_force_at_an_instant() -> None:
    history = [
        _change(0, utc(2026, 1, 1), ["2026-12-24"]),
        _change(1, utc(2026, 6, 1), ["2026-12-24", "2026-12-31"]),
        _change(2, utc(2026, 9, 1), None),
        _change(3, utc(2026, 10, 1), ["2026-12-31"]),
    ]

    def in_force(at: datetime | None) -> tuple[int, list[date]] | None:
        found = CalendarBook.replay(history, as_of=at).get("test-calendar")
        return None if found is None else (found.version, [h.date for h in found.calendar.holidays])

    assert in_force(utc(2025, 12, 31)) is None
    assert in_force(utc(2026, 1, 1)) == (0, [date(2026, 12, 24)])
    assert in_force(utc(2026, 7, 1)) == (1, [date(2026, 12, 24), date(2026, 12, 31)])
    assert in_force(utc(2026, 9, 15)) is None
    assert in_force(None) == (3, [date(2026, 12, 31)])
    assert "test-calendar" in CalendarBook.replay(history)
