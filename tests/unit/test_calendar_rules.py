"""What shared calendars do to occurrences, decided the way a ticker decides them.

Each row creates the schedule at `created`, decides everything due up to `until` with the
calendars given, and lists the decisions as `local nominal -> action[@ local fire instant]`.
Dates are 2027's (1 May is a Saturday, 31 May Memorial Day, 31 December the observed New Year's
Day, 5 July the observed Independence Day).
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from kairos.core.business_calendar import BusinessCalendar, parse_calendar
from kairos.core.calendar_rules import CalendarLookup, as_of_history, latest, next_occurrence
from kairos.core.calendar_versions import CalendarChange, CalendarVersion
from kairos.core.firing import Action, Decision, decide_due, upserted
from kairos.core.schedule import Schedule, SchedulesInvalidError, parse_schedule

pytestmark = pytest.mark.unit

US = parse_calendar(
    {
        "id": "us",
        "owner": "treasury",
        "timezone": "America/New_York",
        "holidays": [
            {"date": "2027-05-31", "name": "Memorial Day"},
            {"date": "2027-07-05", "name": "Independence Day (observed)"},
            {"date": "2027-12-31", "name": "New Year's Day (observed)"},
        ],
    }
)
MARKET = parse_calendar(
    {
        "id": "market",
        "owner": "trading",
        "timezone": "America/New_York",
        "windows": [
            {"cron": "30 9 * * MON-FRI", "duration": "6h30m", "name": "market hours"},
            {"start": "2027-12-20T00:00", "end": "2027-12-22T10:00", "name": "year-end freeze"},
        ],
    }
)


def versions(*calendars: BusinessCalendar, version: int = 7) -> CalendarLookup:
    changed = datetime(2027, 1, 1, tzinfo=UTC)
    return latest(
        {calendar.id: CalendarVersion(calendar, version, changed, "t") for calendar in calendars}
    )


def decided(
    fields: dict[str, object],
    created: str,
    until: str,
    calendars: CalendarLookup | None,
    zone: str = "America/New_York",
) -> list[str]:
    schedule = parse_schedule({"id": "s", "timezone": zone, **fields})
    start, end = datetime.fromisoformat(created), datetime.fromisoformat(until)
    state = upserted(None, schedule, 1, start, start, calendars=calendars).state
    assert state is not None
    outcome = decide_due(state, until=end, now=end, limit=None)
    return [_line(decision, ZoneInfo(zone)) for decision in outcome.decisions]


def _line(decision: Decision, zone: ZoneInfo) -> str:
    text = f"{decision.nominal.astimezone(zone):%m-%d %H:%M} -> {decision.action.value}"
    if decision.moved_to is not None:
        text += f"@{decision.fire_at.astimezone(zone):%m-%d %H:%M%z}"
    return text


ROWS = [
    pytest.param(
        {"cron": "0 9 * * MON-FRI", "exclude": ["us"]},
        "2027-07-01T14:00Z",
        "2027-07-07T00:00Z",
        ["07-02 09:00 -> fire", "07-05 09:00 -> skip", "07-06 09:00 -> fire"],
        id="exclude-skips-a-holiday-weekends-untouched-by-mon-fri",
    ),
    pytest.param(
        {"cron": "0 9 * * *", "exclude": ["us"]},
        "2027-07-02T14:00Z",
        "2027-07-06T00:00Z",
        ["07-03 09:00 -> fire", "07-04 09:00 -> fire", "07-05 09:00 -> skip"],
        id="exclude-skips-holidays-only-not-weekends",
    ),
    pytest.param(
        {"cron": "0 18 15 * *", "exclude": ["us"], "roll": "next_business_day"},
        "2027-05-01T00:00Z",
        "2027-05-18T00:00Z",
        ["05-15 18:00 -> fire@05-17 18:00-0400"],
        id="roll-next-saturday-to-monday-same-wall-time",
    ),
    pytest.param(
        {"cron": "0 18 L * *", "exclude": ["us"], "roll": "previous_business_day"},
        "2027-05-01T00:00Z",
        "2027-05-29T00:00Z",
        ["05-31 18:00 -> fire@05-28 18:00-0400"],
        id="roll-previous-decided-before-its-nominal-instant",
    ),
    pytest.param(
        {"cron": "0 18 * * *", "business_day": -1, "exclude": ["us"]},
        "2027-11-01T00:00Z",
        "2028-01-04T00:00Z",
        ["11-30 18:00 -> fire", "12-30 18:00 -> fire"],
        id="last-business-day-skips-the-observed-new-year",
    ),
    pytest.param(
        {"cron": "0 8 * * *", "business_day": 1, "exclude": ["us"]},
        "2027-12-01T00:00Z",
        "2028-01-05T00:00Z",
        ["12-01 08:00 -> fire", "01-03 08:00 -> fire"],
        id="first-business-day-january-1-is-a-saturday",
    ),
    pytest.param(
        {"cron": "0 12 * * *", "blackout": ["market"]},
        "2027-03-05T00:00Z",
        "2027-03-08T00:00Z",
        ["03-05 12:00 -> skip", "03-06 12:00 -> fire", "03-07 12:00 -> fire"],
        id="blackout-skips-inside-market-hours",
    ),
    pytest.param(
        {"cron": "0 10,11,15,17 * * *", "blackout": ["market"], "blackout_action": "defer"},
        "2027-03-05T00:00Z",
        "2027-03-06T00:00Z",
        [
            "03-05 10:00 -> skip",
            "03-05 11:00 -> skip",
            "03-05 15:00 -> fire@03-05 16:00-0500",
            "03-05 17:00 -> fire",
        ],
        id="blackout-defer-coalesces-into-one-run-at-the-end",
    ),
    pytest.param(
        {"cron": "0 12 * * *", "blackout": ["market"], "blackout_action": "defer"},
        "2027-12-19T00:00Z",
        "2027-12-23T00:00Z",
        [
            "12-19 12:00 -> fire",
            "12-20 12:00 -> skip",
            "12-21 12:00 -> skip",
            "12-22 12:00 -> fire@12-22 16:00-0500",
        ],
        id="blackout-defer-chains-a-freeze-into-market-hours",
    ),
    pytest.param(
        {"cron": "0 9 * * *", "pause_until": "2027-03-03T00:00:00Z"},
        "2027-03-01T00:00Z",
        "2027-03-04T00:00Z",
        ["03-01 09:00 -> skip", "03-02 09:00 -> skip", "03-03 09:00 -> fire"],
        id="pause-until-skips-then-resumes-by-itself",
    ),
]


@pytest.mark.parametrize(("fields", "created", "until", "expected"), ROWS)
def test_calendar_rules(
    fields: dict[str, object], created: str, until: str, expected: list[str]
) -> None:
    assert decided(fields, created, until, versions(US, MARKET)) == expected


def test_skip_reasons_name_the_calendar_its_version_and_why() -> None:
    schedule = parse_schedule(
        {"id": "s", "cron": "0 9 * * *", "timezone": "America/New_York", "exclude": ["us"]}
    )
    start = datetime(2027, 7, 4, 14, tzinfo=UTC)
    state = upserted(None, schedule, 1, start, start, calendars=versions(US, version=12)).state
    assert state is not None
    end = datetime(2027, 7, 6, tzinfo=UTC)
    (decision,) = decide_due(state, until=end, now=end, limit=None).decisions
    assert decision.action is Action.SKIP
    assert decision.reason == "2027-07-05 is 'Independence Day (observed)' in calendar us v12"


def test_a_calendar_nobody_published_loses_no_occurrence() -> None:
    assert decided(
        {"cron": "0 9 * * *", "exclude": ["nobody"]},
        "2027-07-04T14:00Z",
        "2027-07-06T00:00Z",
        calendars=versions(US),
    ) == ["07-05 09:00 -> fire"]


def test_the_audit_reads_the_version_in_force_at_each_occurrence() -> None:
    without = US.model_copy(update={"holidays": ()})
    changes = [
        CalendarChange("us", 3, "upserted", without, datetime(2027, 1, 1, tzinfo=UTC), "t"),
        CalendarChange("us", 9, "upserted", US, datetime(2027, 7, 5, 12, tzinfo=UTC), "t"),
    ]
    # The holiday arrives at 08:00 New York on the day: the 09:00 occurrence is skipped by v9.
    assert decided(
        {"cron": "0 4,9 * * *", "exclude": ["us"]},
        "2027-07-05T00:00Z",
        "2027-07-06T00:00Z",
        as_of_history(changes),
    ) == ["07-05 04:00 -> fire", "07-05 09:00 -> skip"]


def test_business_day_occurrences_follow_start_and_end() -> None:
    schedule = parse_schedule(
        {
            "id": "s",
            "cron": "0 18 * * *",
            "timezone": "America/New_York",
            "business_day": -1,
            "start_at": "2027-06-01T00:00:00Z",
            "end_at": "2027-07-01T00:00:00Z",
        }
    )
    first = next_occurrence(schedule, datetime(2027, 1, 1, tzinfo=UTC), None)
    assert first is not None and first.wall.isoformat() == "2027-06-30T18:00:00-04:00"
    assert next_occurrence(schedule, first.nominal, None) is None


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        pytest.param({"roll": "next_business_day"}, "roll", "name them in 'exclude'", id="roll"),
        pytest.param({"business_day": 0}, "business_day", "1 to 23", id="business-day-zero"),
        pytest.param({"business_day": 24}, "business_day", "1 to 23", id="business-day-24"),
        pytest.param(
            {"business_day": 1, "cron": "0 9 1 * *"}, "cron", "'*' in both day fields", id="days"
        ),
        pytest.param({"blackout_action": "defer"}, "blackout_action", "'blackout'", id="defer"),
        pytest.param({"exclude": ["us", "us"]}, "exclude", "twice", id="twice"),
        pytest.param({"exclude": ["no space"]}, "exclude", "not a calendar id", id="bad-id"),
        pytest.param({"roll": "sideways", "exclude": ["us"]}, "roll", "sideways", id="roll-value"),
    ],
)
def test_calendar_fields_refused_with_the_fix(
    fields: dict[str, object], field: str, problem: str
) -> None:
    with pytest.raises(SchedulesInvalidError) as caught:
        parse_schedule({"id": "s", "cron": "0 9 * * *", **fields})
    (error,) = caught.value.errors
    assert error.field.split(".")[0] == field
    assert problem in error.problem


def test_plain_schedules_carry_no_calendar_fields() -> None:
    schedule = Schedule(id="s", cron="0 9 * * *")
    assert (schedule.exclude, schedule.blackout, schedule.roll) == ((), (), None)


LORD_HOWE = parse_calendar(
    {
        "id": "lh",
        "owner": "island",
        "business_days": ["SUN", "MON", "TUE", "WED", "THU"],
        "holidays": [{"date": "2027-10-04", "name": "Labour Day"}],
    }
)
CHATHAM = parse_calendar(
    {
        "id": "nz",
        "owner": "island",
        "holidays": [
            {"date": "2027-12-27", "name": "Christmas Day (observed)"},
            {"date": "2027-12-31", "name": "Year's end"},
        ],
    }
)


@pytest.mark.parametrize(
    ("zone", "fields", "created", "until", "expected"),
    [
        pytest.param(
            "Australia/Lord_Howe",
            {"cron": "15 2 2 10 *", "exclude": ["lh"], "roll": "next_business_day"},
            "2027-09-01T00:00Z",
            "2027-10-04T00:00Z",
            ["10-02 02:15 -> fire@10-03 02:30+1100"],
            id="lord-howe-roll-onto-the-half-hour-gap-runs-at-the-jump",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            {"cron": "0 9 * * *", "business_day": 1, "exclude": ["lh"]},
            "2027-09-15T00:00Z",
            "2027-11-02T00:00Z",
            ["10-03 09:00 -> fire", "11-01 09:00 -> fire"],
            id="lord-howe-first-business-day-is-a-sunday",
        ),
        pytest.param(
            "Pacific/Chatham",
            {"cron": "0 8 * * *", "exclude": ["nz"]},
            "2027-12-25T19:00Z",
            "2027-12-27T20:00Z",
            ["12-27 08:00 -> skip", "12-28 08:00 -> fire"],
            id="chatham-the-holiday-is-the-local-date-not-the-utc-one",
        ),
        pytest.param(
            "Pacific/Chatham",
            {"cron": "0 18 * * *", "business_day": -1, "exclude": ["nz"]},
            "2027-12-01T00:00Z",
            "2028-01-01T00:00Z",
            ["12-30 18:00 -> fire"],
            id="chatham-last-business-day-before-a-holiday",
        ),
    ],
)
def test_calendar_rules_in_odd_zones(
    zone: str, fields: dict[str, object], created: str, until: str, expected: list[str]
) -> None:
    assert decided(fields, created, until, versions(LORD_HOWE, CHATHAM), zone) == expected
