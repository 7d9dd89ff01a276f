"""Business calendars as files: validation that names the calendar and the field (every problem
at once, with the limits on holidays and windows), and YAML and JSON files of the wrong shape or
reading the same calendar. Queries and blackout windows are in test_business_calendar_queries.py.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from typing import Any

import pytest

from kairos.core.business_calendar import (
    MAX_HOLIDAYS,
    MAX_RECURRING_WINDOWS,
    MAX_WINDOWS,
    CalendarsFileFormatError,
    CalendarsInvalidError,
    load_calendars,
    parse_calendar,
)

OWNER = "treasury-platform"


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
