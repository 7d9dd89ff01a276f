"""DST and calendar rules as tables: each row a zone, an expression, a start and the next fires.

Expected fires are wall times in the schedule's zone with their offset; ` moved` marks a fire a
DST gap moved to the jump, ` pass1`/` pass2` a fire in a repeated hour. Transition dates are the
real ones from tzdata (checked by `test_transition_dates_are_real`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from kairos.core.calendar import Fire, next_fire, next_fires
from kairos.core.schedule import Schedule

pytestmark = pytest.mark.unit


def render(fire: Fire) -> str:
    text = fire.wall.isoformat()
    if fire.moved_by_dst_gap:
        text += " moved"
    if fire.repeated_hour_pass is not None:
        text += f" pass{fire.repeated_hour_pass}"
    return text


def fires(cron: str, zone: str, after: str, count: int, **policies: str) -> list[str]:
    schedule = Schedule.model_validate({"id": "t", "cron": cron, "timezone": zone, **policies})
    return [render(fire) for fire in next_fires(schedule, datetime.fromisoformat(after), count)]


# (zone, first instant with the new offset, offset before, offset after), from tzdata.
TRANSITIONS = [
    ("America/New_York", "2027-03-14T07:00:00Z", -5, -4),
    ("America/New_York", "2027-11-07T06:00:00Z", -4, -5),
    ("Europe/London", "2027-03-28T01:00:00Z", 0, 1),
    ("Europe/London", "2027-10-31T01:00:00Z", 1, 0),
    ("Europe/Berlin", "2026-03-29T01:00:00Z", 1, 2),
    ("Europe/Berlin", "2026-10-25T01:00:00Z", 2, 1),
    ("Australia/Sydney", "2026-10-03T16:00:00Z", 10, 11),
    ("Australia/Sydney", "2027-04-03T16:00:00Z", 11, 10),
    ("Australia/Lord_Howe", "2026-10-03T15:30:00Z", 10.5, 11),
    ("Australia/Lord_Howe", "2027-04-03T15:00:00Z", 11, 10.5),
    ("America/Santiago", "2026-09-06T04:00:00Z", -4, -3),
    ("America/Santiago", "2027-04-04T03:00:00Z", -3, -4),
    ("Pacific/Chatham", "2026-09-26T14:00:00Z", 12.75, 13.75),
    ("Pacific/Chatham", "2027-04-03T14:00:00Z", 13.75, 12.75),
]


@pytest.mark.parametrize(
    ("zone", "instant", "before", "after"),
    TRANSITIONS,
    ids=[f"{zone}-{instant[:10]}" for zone, instant, *_ in TRANSITIONS],
)
def test_transition_dates_are_real(zone: str, instant: str, before: float, after: float) -> None:
    at = datetime.fromisoformat(instant)
    tz = ZoneInfo(zone)
    assert (at - timedelta(seconds=1)).astimezone(tz).utcoffset() == timedelta(hours=before)
    assert at.astimezone(tz).utcoffset() == timedelta(hours=after)


CASES = [
    # New York, spring forward 2027-03-14: 02:00 EST -> 03:00 EDT (07:00Z).
    pytest.param(
        "30 2 * * *",
        "America/New_York",
        "2027-03-14T01:59:00-05:00",
        {},
        ["2027-03-14T03:00:00-04:00 moved", "2027-03-15T02:30:00-04:00"],
        id="new-york-spring-gap-fixed-0230-just-before",
    ),
    pytest.param(
        "30 2 * * *",
        "America/New_York",
        "2027-03-14T07:00:00+00:00",
        {},
        ["2027-03-15T02:30:00-04:00"],
        id="new-york-spring-gap-fixed-0230-at-jump-is-exclusive",
    ),
    pytest.param(
        "30 2 * * *",
        "America/New_York",
        "2027-03-14T06:59:59+00:00",
        {},
        ["2027-03-14T03:00:00-04:00 moved"],
        id="new-york-spring-gap-fixed-0230-second-before-jump",
    ),
    pytest.param(
        "30 2 * * *",
        "America/New_York",
        "2027-03-14T03:20:00-04:00",
        {},
        ["2027-03-15T02:30:00-04:00"],
        id="new-york-spring-gap-fixed-0230-after",
    ),
    pytest.param(
        "30 2 * * *",
        "America/New_York",
        "2027-03-13T00:00:00-05:00",
        {"dst_gap": "skip"},
        ["2027-03-13T02:30:00-05:00", "2027-03-15T02:30:00-04:00"],
        id="new-york-spring-gap-fixed-0230-skip-policy",
    ),
    pytest.param(
        "0,30 2 * * *",
        "America/New_York",
        "2027-03-14T00:00:00-05:00",
        {},
        ["2027-03-14T03:00:00-04:00 moved", "2027-03-15T02:00:00-04:00"],
        id="new-york-spring-gap-two-fixed-times-run-once",
    ),
    pytest.param(
        "0 2,3 * * *",
        "America/New_York",
        "2027-03-14T00:00:00-05:00",
        {},
        ["2027-03-14T03:00:00-04:00", "2027-03-15T02:00:00-04:00"],
        id="new-york-spring-gap-moved-meets-regular-0300-once",
    ),
    pytest.param(
        "*/30 * * * *",
        "America/New_York",
        "2027-03-14T01:00:00-05:00",
        {},
        ["2027-03-14T01:30:00-05:00", "2027-03-14T03:00:00-04:00", "2027-03-14T03:30:00-04:00"],
        id="new-york-spring-gap-wildcard-minute-no-extra-run",
    ),
    pytest.param(
        "30 * * * *",
        "America/New_York",
        "2027-03-14T01:00:00-05:00",
        {},
        ["2027-03-14T01:30:00-05:00", "2027-03-14T03:30:00-04:00"],
        id="new-york-spring-gap-wildcard-hour-skips-0230",
    ),
    # New York, fall back 2027-11-07: 02:00 EDT -> 01:00 EST (06:00Z); 01:00-01:59 twice.
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        "2027-11-07T00:00:00-04:00",
        {},
        ["2027-11-07T01:30:00-04:00 pass1", "2027-11-08T01:30:00-05:00"],
        id="new-york-fall-repeat-fixed-0130-first-pass-only",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        "2027-11-07T01:45:00-04:00",
        {},
        ["2027-11-08T01:30:00-05:00"],
        id="new-york-fall-repeat-fixed-0130-inside-first-pass",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        "2027-11-07T01:15:00-05:00",
        {},
        ["2027-11-08T01:30:00-05:00"],
        id="new-york-fall-repeat-fixed-0130-inside-second-pass",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        "2027-11-07T00:00:00-04:00",
        {"dst_repeat": "both"},
        [
            "2027-11-07T01:30:00-04:00 pass1",
            "2027-11-07T01:30:00-05:00 pass2",
            "2027-11-08T01:30:00-05:00",
        ],
        id="new-york-fall-repeat-fixed-0130-both-policy",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        "2027-11-07T01:15:00-05:00",
        {"dst_repeat": "both"},
        ["2027-11-07T01:30:00-05:00 pass2"],
        id="new-york-fall-repeat-fixed-0130-both-from-inside-second-pass",
    ),
    pytest.param(
        "30 1 * * *",
        "America/New_York",
        "2027-11-07T00:00:00-04:00",
        {"dst_repeat": "last"},
        ["2027-11-07T01:30:00-05:00 pass2", "2027-11-08T01:30:00-05:00"],
        id="new-york-fall-repeat-fixed-0130-last-policy",
    ),
    pytest.param(
        "*/30 * * * *",
        "America/New_York",
        "2027-11-07T00:45:00-04:00",
        {},
        [
            "2027-11-07T01:00:00-04:00 pass1",
            "2027-11-07T01:30:00-04:00 pass1",
            "2027-11-07T01:00:00-05:00 pass2",
            "2027-11-07T01:30:00-05:00 pass2",
            "2027-11-07T02:00:00-05:00",
        ],
        id="new-york-fall-repeat-wildcard-runs-both-passes",
    ),
    pytest.param(
        "*/30 * * * *",
        "America/New_York",
        "2027-11-07T01:10:00-05:00",
        {},
        ["2027-11-07T01:30:00-05:00 pass2", "2027-11-07T02:00:00-05:00"],
        id="new-york-fall-repeat-wildcard-inside-second-pass",
    ),
    pytest.param(
        "0 * * * *",
        "America/New_York",
        "2027-11-07T06:00:00+00:00",
        {},
        ["2027-11-07T02:00:00-05:00"],
        id="new-york-fall-repeat-wildcard-at-transition-is-exclusive",
    ),
    # London: 01:00 GMT -> 02:00 BST on 2027-03-28; 02:00 BST -> 01:00 GMT on 2027-10-31.
    pytest.param(
        "30 1 * * *",
        "Europe/London",
        "2027-03-27T12:00:00+00:00",
        {},
        ["2027-03-28T02:00:00+01:00 moved", "2027-03-29T01:30:00+01:00"],
        id="london-spring-gap-fixed-0130",
    ),
    pytest.param(
        "30 * * * *",
        "Europe/London",
        "2027-10-31T00:00:00+01:00",
        {},
        [
            "2027-10-31T00:30:00+01:00",
            "2027-10-31T01:30:00+01:00 pass1",
            "2027-10-31T01:30:00+00:00 pass2",
            "2027-10-31T02:30:00+00:00",
        ],
        id="london-fall-repeat-wildcard-hourly",
    ),
    pytest.param(
        "30 1 * * *",
        "Europe/London",
        "2027-10-31T01:10:00+00:00",
        {},
        ["2027-11-01T01:30:00+00:00"],
        id="london-fall-repeat-fixed-inside-second-pass",
    ),
    # Berlin: 02:00 -> 03:00 on 2026-03-29; 03:00 -> 02:00 on 2026-10-25.
    pytest.param(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00:00+01:00",
        {},
        ["2026-03-29T03:00:00+02:00 moved", "2026-03-30T02:30:00+02:00"],
        id="berlin-spring-gap-fixed-0230",
    ),
    pytest.param(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00:00+02:00",
        {},
        ["2026-10-25T02:30:00+02:00 pass1", "2026-10-26T02:30:00+01:00"],
        id="berlin-fall-repeat-fixed-0230-once-unlike-croniter",
    ),
    pytest.param(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-25T02:10:00+01:00",
        {},
        ["2026-10-26T02:30:00+01:00"],
        id="berlin-fall-repeat-fixed-0230-inside-second-pass",
    ),
    pytest.param(
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-25T03:00:00+01:00",
        {},
        ["2026-10-26T02:30:00+01:00"],
        id="berlin-fall-repeat-fixed-0230-after",
    ),
    # Sydney: 02:00 -> 03:00 on 2026-10-04; 03:00 -> 02:00 on 2027-04-04.
    pytest.param(
        "30 2 * * *",
        "Australia/Sydney",
        "2026-10-04T01:59:00+10:00",
        {},
        ["2026-10-04T03:00:00+11:00 moved", "2026-10-05T02:30:00+11:00"],
        id="sydney-spring-gap-fixed-0230",
    ),
    pytest.param(
        "30 2 * * *",
        "Australia/Sydney",
        "2027-04-04T00:00:00+11:00",
        {"dst_repeat": "last"},
        ["2027-04-04T02:30:00+10:00 pass2", "2027-04-05T02:30:00+10:00"],
        id="sydney-fall-repeat-fixed-0230-last",
    ),
    pytest.param(
        "30 2 * * *",
        "Australia/Sydney",
        "2027-04-04T00:00:00+11:00",
        {},
        ["2027-04-04T02:30:00+11:00 pass1", "2027-04-05T02:30:00+10:00"],
        id="sydney-fall-repeat-fixed-0230-first",
    ),
    # Lord Howe moves by 30 minutes: 02:00 -> 02:30 on 2026-10-04; 02:00 -> 01:30 on 2027-04-04.
    pytest.param(
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T12:00:00+10:30",
        {},
        ["2026-10-04T02:30:00+11:00 moved", "2026-10-05T02:15:00+11:00"],
        id="lord-howe-spring-half-hour-gap-fixed-0215",
    ),
    pytest.param(
        "45 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T12:00:00+10:30",
        {},
        ["2026-10-04T02:45:00+11:00"],
        id="lord-howe-spring-0245-outside-half-hour-gap",
    ),
    pytest.param(
        "*/15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-04T00:00:00+10:30",
        {},
        ["2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"],
        id="lord-howe-spring-wildcard-skips-gap",
    ),
    pytest.param(
        "*/15 1 * * *",
        "Australia/Lord_Howe",
        "2027-04-04T01:00:00+11:00",
        {},
        [
            "2027-04-04T01:15:00+11:00",
            "2027-04-04T01:30:00+11:00 pass1",
            "2027-04-04T01:45:00+11:00 pass1",
            "2027-04-04T01:30:00+10:30 pass2",
            "2027-04-04T01:45:00+10:30 pass2",
            "2027-04-05T01:00:00+10:30",
        ],
        id="lord-howe-fall-half-hour-repeat-wildcard",
    ),
    pytest.param(
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2027-04-04T01:35:00+10:30",
        {},
        ["2027-04-05T01:45:00+10:30"],
        id="lord-howe-fall-fixed-0145-inside-second-pass",
    ),
    # Santiago changes at midnight: 24:00 -> 01:00 on 2026-09-06; 24:00 -> 23:00 on 2027-04-03.
    pytest.param(
        "0 0 * * *",
        "America/Santiago",
        "2026-09-05T12:00:00-04:00",
        {},
        ["2026-09-06T01:00:00-03:00 moved", "2026-09-07T00:00:00-03:00"],
        id="santiago-spring-midnight-gap-daily",
    ),
    pytest.param(
        "30 23 * * *",
        "America/Santiago",
        "2027-04-03T12:00:00-03:00",
        {"dst_repeat": "both"},
        [
            "2027-04-03T23:30:00-03:00 pass1",
            "2027-04-03T23:30:00-04:00 pass2",
            "2027-04-04T23:30:00-04:00",
        ],
        id="santiago-fall-repeat-2330-both",
    ),
    pytest.param(
        "0 0 * * *",
        "America/Santiago",
        "2027-04-03T23:30:00-04:00",
        {},
        ["2027-04-04T00:00:00-04:00"],
        id="santiago-fall-daily-from-inside-second-pass",
    ),
    # Chatham (+12:45/+13:45): 02:45 -> 03:45 on 2026-09-27; 03:45 -> 02:45 on 2027-04-04.
    pytest.param(
        "0 3 * * *",
        "Pacific/Chatham",
        "2026-09-26T12:00:00+12:45",
        {},
        ["2026-09-27T03:45:00+13:45 moved", "2026-09-28T03:00:00+13:45"],
        id="chatham-spring-gap-fixed-0300",
    ),
    pytest.param(
        "0 3 * * *",
        "Pacific/Chatham",
        "2027-04-03T12:00:00+13:45",
        {"dst_repeat": "both"},
        [
            "2027-04-04T03:00:00+13:45 pass1",
            "2027-04-04T03:00:00+12:45 pass2",
            "2027-04-05T03:00:00+12:45",
        ],
        id="chatham-fall-repeat-fixed-0300-both",
    ),
    # No DST.
    pytest.param(
        "30 2 * * *",
        "Asia/Kolkata",
        "2027-03-14T00:00:00+05:30",
        {},
        ["2027-03-14T02:30:00+05:30", "2027-03-15T02:30:00+05:30"],
        id="kolkata-half-hour-offset-no-dst",
    ),
    pytest.param(
        "30 2 * * *",
        "UTC",
        "2027-03-14T02:30:00+00:00",
        {},
        ["2027-03-15T02:30:00+00:00"],
        id="utc-after-is-exclusive",
    ),
    # Day-of-month and day-of-week.
    pytest.param(
        "0 0 13 * FRI",
        "UTC",
        "2027-08-01T00:00:00+00:00",
        {},
        ["2027-08-06T00:00:00+00:00", "2027-08-13T00:00:00+00:00", "2027-08-20T00:00:00+00:00"],
        id="dom-and-dow-both-restricted-is-or",
    ),
    pytest.param(
        "0 0 */2 * FRI",
        "UTC",
        "2027-08-01T00:00:00+00:00",
        {},
        ["2027-08-13T00:00:00+00:00", "2027-08-27T00:00:00+00:00", "2027-09-03T00:00:00+00:00"],
        id="dom-starting-with-star-is-and",
    ),
    pytest.param(
        "0 0 1-7 * *",
        "UTC",
        "2027-08-06T00:00:00+00:00",
        {},
        ["2027-08-07T00:00:00+00:00", "2027-09-01T00:00:00+00:00"],
        id="dom-only",
    ),
    pytest.param(
        "0 12 * JAN,jul sun",
        "UTC",
        "2027-06-30T00:00:00+00:00",
        {},
        ["2027-07-04T12:00:00+00:00", "2027-07-11T12:00:00+00:00"],
        id="month-and-day-names",
    ),
    pytest.param(
        "0 0 29 2 *",
        "UTC",
        "2096-03-01T00:00:00+00:00",
        {},
        ["2104-02-29T00:00:00+00:00"],
        id="leap-day-across-century",
    ),
    pytest.param(
        "@weekly",
        "Europe/Berlin",
        "2027-03-24T00:00:00+01:00",
        {},
        ["2027-03-28T00:00:00+01:00", "2027-04-04T00:00:00+02:00"],
        id="weekly-macro-across-spring-forward",
    ),
]


@pytest.mark.parametrize(("cron", "zone", "after", "policies", "expected"), CASES)
def test_cron_fires(
    cron: str, zone: str, after: str, policies: dict[str, str], expected: list[str]
) -> None:
    assert fires(cron, zone, after, len(expected), **policies) == expected


def test_never_firing_expression_has_no_next_fire() -> None:
    schedule = Schedule.model_validate({"id": "never", "cron": "0 0 30 2 *"})
    assert next_fire(schedule, datetime(2027, 1, 1, tzinfo=UTC)) is None


def test_moved_fire_keeps_the_requested_wall_time() -> None:
    schedule = Schedule.model_validate(
        {"id": "t", "cron": "30 2 * * *", "timezone": "America/New_York"}
    )
    fire = next_fire(schedule, datetime(2027, 3, 14, 5, tzinfo=UTC))
    assert fire is not None
    assert fire.nominal == datetime(2027, 3, 14, 7, tzinfo=UTC)
    assert fire.requested_wall == datetime(2027, 3, 14, 2, 30)
