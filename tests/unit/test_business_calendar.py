"""Business calendars: validation that names the calendar and the field, the business-day
queries, and blackout windows on wall clocks with DST changes (New York; Lord Howe Island,
whose clock moves by 30 minutes)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from kairos.core.business_calendar import (
    MAX_HOLIDAYS,
    MAX_RECURRING_WINDOWS,
    MAX_WINDOWS,
    BusinessCalendar,
    CalendarQueryError,
    CalendarsFileFormatError,
    CalendarsInvalidError,
    load_calendars,
    parse_calendar,
)
from kairos.core.calendar_versions import CalendarBook, CalendarChange

OWNER = "treasury-platform"


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


def problems(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, field) of every problem `load_calendars` finds in the document."""
    with pytest.raises(CalendarsInvalidError) as invalid:
        load_calendars(json.dumps(document), "json")
    return [(error.where, error.field) for error in invalid.value.errors]


def entry(**fields: Any) -> dict[str, Any]:
    return {"id": "us-federal", "owner": OWNER, **fields}


@pytest.mark.parametrize(
    ("fields", "field", "fragment"),
    [
        pytest.param({"id": "has space"}, "id", "not a valid id", id="bad-id"),
        pytest.param({"owner": " "}, "owner", "team", id="blank-owner"),
        pytest.param({"timezone": "Mars/Olympus"}, "timezone", "IANA", id="unknown-zone"),
        pytest.param({"business_days": []}, "business_days", "at least one", id="no-business-day"),
        pytest.param(
            {"business_days": ["MON", "mon"]}, "business_days", "more than once", id="repeated-day"
        ),
        pytest.param({"business_days": ["FUN"]}, "business_days.0", "not a day", id="unknown-day"),
        pytest.param(
            {"holidays": [{"date": "2026-12-25", "name": "a"},
                          {"date": "2026-12-25", "name": "b"}]},
            "holidays.1.date",
            "also holidays[0]",
            id="duplicate-date",
        ),
        pytest.param(
            {"holidays": [{"date": "2026-02-30", "name": "a"}]},
            "holidays.0.date",
            "valid date",
            id="impossible-date",
        ),
        pytest.param(
            {"holidays": [{"date": "2026-12-25", "name": "x" * 101}]},
            "holidays.0.name",
            "maximum, 100",
            id="long-name",
        ),
        pytest.param(
            {"holidays": [{"date": "2026-12-25"}]}, "holidays.0.name", "required", id="no-name"
        ),
        pytest.param(
            {"windows": [{"start": "2026-12-20T00:00", "name": "freeze"}]},
            "windows.0.end",
            "needs both start and end",
            id="window-without-end",
        ),
        pytest.param(
            {"windows": [{"cron": "0 9 * * *", "name": "m"}]},
            "windows.0.duration",
            "needs both cron and duration",
            id="recurring-without-duration",
        ),
        pytest.param(
            {"windows": [{"cron": "0 9 * * *", "duration": "1h", "end": "2026-01-01T00:00",
                          "name": "m"}]},
            "windows.0.cron",
            "either fixed",
            id="both-kinds",
        ),
        pytest.param(
            {"windows": [{"name": "m"}]}, "windows.0.start", "set start and end", id="no-kind"
        ),
        pytest.param(
            {"windows": [{"cron": "61 * * * *", "duration": "1h", "name": "m"}]},
            "windows.0.cron",
            "minute",
            id="bad-cron",
        ),
        pytest.param(
            {"windows": [{"cron": "0 0 31 2 *", "duration": "1h", "name": "m"}]},
            "windows.0.cron",
            "never starts",
            id="cron-never-matches",
        ),
        pytest.param(
            {"windows": [{"cron": "0 9 * * *", "duration": "0s", "name": "m"}]},
            "windows.0.duration",
            "longer than zero",
            id="empty-duration",
        ),
        pytest.param(
            {"windows": [{"cron": "0 9 * * *", "duration": "367d", "name": "m"}]},
            "windows.0.duration",
            "maximum, 366d",
            id="duration-too-long",
        ),
        pytest.param(
            {"windows": [{"start": "2026-12-20T00:00", "end": "2026-12-19T00:00", "name": "f"}]},
            "windows.0.end",
            "not after start",
            id="window-ends-before-it-starts",
        ),
        pytest.param(
            {"windows": [{"start": "2026-01-01T00:00", "end": "2027-01-03T00:00", "name": "f"}]},
            "windows.0.end",
            "maximum, 366d",
            id="fixed-window-too-long",
        ),
        pytest.param(
            {"windows": [{"start": "2026-12-20T00:00:00Z", "end": "2026-12-21T00:00",
                          "name": "f"}]},
            "windows.0.start",
            "without one",
            id="window-with-offset",
        ),
        pytest.param(
            {"windows": [{"start": "2026-12-20T00:00", "end": "2026-12-21", "name": "f",
                          "colour": "red"}]},
            "windows.0.colour",
            "the fields are name, start, end, cron, duration",
            id="unknown-window-field",
        ),
        pytest.param({"holiday": []}, "holiday", "unknown field", id="unknown-field"),
    ],
)  # fmt: skip
def test_a_problem_names_the_calendar_the_field_and_the_fix(
    fields: dict[str, Any], field: str, fragment: str
) -> None:
    with pytest.raises(CalendarsInvalidError) as invalid:
        load_calendars(json.dumps({"calendars": [entry(**fields)]}), "json")

    [error] = invalid.value.errors
    assert (error.field, error.calendar_id or "") == (field, "" if field == "id" else "us-federal")
    assert fragment in error.problem
    assert "calendars[0]" in str(error)


BACKWARDS = {"start": "2026-12-20T00:00", "end": "2026-12-19T00:00"}


def test_every_problem_of_every_calendar_is_reported_at_once() -> None:
    document = {
        "calendars": [
            entry(owner="", timezone="Nowhere/Place"),
            {"owner": OWNER},
            entry(id="freeze", owner="", windows=[{**BACKWARDS, "name": "w"}]),
            entry(),
            entry(),
            "a string",
        ]
    }

    assert problems(document) == [
        ("calendar 'us-federal' (calendars[0])", "owner"),
        ("calendar 'us-federal' (calendars[0])", "timezone"),
        ("calendar calendars[1]", "id"),
        ("calendar 'freeze' (calendars[2])", "owner"),
        ("calendar 'freeze' (calendars[2])", "windows.0.end"),
        ("calendar 'us-federal' (calendars[4])", "id"),
        ("calendar calendars[5]", ""),
    ]


def test_the_limits_on_holidays_and_windows_are_refused_with_the_maximum() -> None:
    many = [
        {"date": (date(2000, 1, 1) + timedelta(days=n)).isoformat(), "name": "h"}
        for n in range(MAX_HOLIDAYS + 1)
    ]
    windows = [{"cron": "0 9 * * *", "duration": "1h", "name": "w"}] * 201

    with pytest.raises(CalendarsInvalidError) as invalid:
        load_calendars(json.dumps({"calendars": [entry(holidays=many, windows=windows)]}), "json")

    messages = {error.field: error.problem for error in invalid.value.errors}
    assert "more than the maximum, 5000" in messages["holidays"]
    assert "more than the maximum, 200" in messages["windows"]


def test_recurring_windows_are_bounded_lower_than_windows() -> None:
    """Each recurring window is a cron search in the decisions naming the calendar; a fixed one
    a comparison: 32 recurring windows and 168 fixed ones are the most a calendar holds."""
    recurring = [{"cron": f"{n} 9 * * *", "duration": "1m", "name": f"r{n}"} for n in range(33)]
    fixed = [
        {"start": f"2027-01-01T{n // 60:02d}:{n % 60:02d}", "end": "2027-01-02", "name": f"f{n}"}
        for n in range(MAX_WINDOWS - MAX_RECURRING_WINDOWS)
    ]

    most = parse_calendar(entry(windows=recurring[:MAX_RECURRING_WINDOWS] + fixed))
    with pytest.raises(CalendarsInvalidError) as invalid:
        parse_calendar(entry(windows=recurring))

    assert len(most.windows) == MAX_WINDOWS
    [error] = invalid.value.errors
    assert error.field == "windows"
    assert error.problem.startswith(
        "has 33 recurring windows (cron and duration), more than the maximum, 32"
    )
    assert "list their occurrences as fixed windows" in error.problem


@pytest.mark.parametrize(
    ("text", "fmt", "fragment"),
    [
        pytest.param("calendars: [", "yaml", "line 1", id="broken-yaml"),
        pytest.param("{", "json", "line 1", id="broken-json"),
        pytest.param("schedules: []", "yaml", "exactly one key, 'calendars'", id="wrong-key"),
        pytest.param("calendars: {}", "yaml", "must be a list", id="not-a-list"),
        pytest.param(
            "calendars:\n- {id: a, owner: b, holidays: [{date: 2026-13-01, name: x}]}",
            "yaml",
            "does not exist",
            id="yaml-date-that-does-not-exist",
        ),
    ],
)
def test_a_file_of_the_wrong_shape_says_so(text: str, fmt: Any, fragment: str) -> None:
    with pytest.raises(CalendarsFileFormatError, match="calendars file") as error:
        load_calendars(text, fmt)

    assert fragment in str(error.value)


def test_yaml_and_json_files_read_the_same_calendar() -> None:
    yaml_text = """
calendars:
  - id: us-federal
    owner: treasury-platform
    timezone: America/New_York
    business_days: [mon, TUE, WED, THU, FRI]
    holidays:
      - {date: 2026-12-25, name: Christmas Day}
      - {date: 2026-01-01, name: New Year's Day}
    windows:
      - {start: "2026-12-20T00:00", end: 2027-01-04, name: year-end change freeze}
      - {cron: "30 9 * * MON-FRI", duration: 6h30m, name: market hours}
"""
    [from_yaml] = load_calendars(yaml_text, "yaml")
    [from_json] = load_calendars(json.dumps({"calendars": [from_yaml.model_dump(mode="json")]}),
                                 "json")  # fmt: skip

    assert from_json == from_yaml
    # Holidays are kept in date order, whatever order the file lists them in.
    assert [h.date for h in from_yaml.holidays] == [date(2026, 1, 1), date(2026, 12, 25)]


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
