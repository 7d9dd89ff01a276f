"""Quartz's day extensions (`L`, `L-n`, `LW`, `nW`, `nL`, `n#k`, `?`) with Kairos's DST rules.

Each row: a zone, an expression, the instant to start after, and the next fires as wall times
with their offsets (` moved`: a DST gap moved the fire to the jump; ` pass1`/` pass2`: the
pass of a repeated hour). The dates were worked out from the 2027 calendar (January starts on a
Friday, February on a Monday, May on a Saturday, August on a Sunday) and the transitions from
tzdata, which `test_transitions_are_the_ones_assumed` checks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from kairos.core.calendar import Fire, next_fires
from kairos.core.schedule import Schedule

pytestmark = pytest.mark.unit


def render(fire: Fire) -> str:
    text = fire.wall.isoformat(timespec="minutes")
    if fire.moved_by_dst_gap:
        text += " moved"
    if fire.repeated_hour_pass is not None:
        text += f" pass{fire.repeated_hour_pass}"
    return text


def fires(cron: str, zone: str, after: str, count: int, **policies: str) -> list[str]:
    schedule = Schedule.model_validate({"id": "x", "cron": cron, "timezone": zone, **policies})
    return [render(fire) for fire in next_fires(schedule, datetime.fromisoformat(after), count)]


DAY_RULES = [
    pytest.param(
        "0 18 L * *",
        "2027-01-01T00:00Z",
        ["2027-01-31", "2027-02-28", "2027-03-31", "2027-04-30"],
        id="L-last-day",
    ),
    pytest.param("0 18 L 2 *", "2027-03-01T00:00Z", ["2028-02-29", "2029-02-28"], id="L-leap-year"),
    pytest.param(
        "0 18 L-3 * *",
        "2027-01-01T00:00Z",
        ["2027-01-28", "2027-02-25", "2027-03-28", "2027-04-27"],
        id="L-minus-3-is-three-before-the-last",
    ),
    pytest.param(
        "0 18 LW * *",
        "2027-01-01T00:00Z",
        ["2027-01-29", "2027-02-26", "2027-03-31", "2027-04-30"],
        id="LW-last-weekday-sunday-ends-move-to-friday",
    ),
    pytest.param(
        "0 18 LW 7 *", "2027-01-01T00:00Z", ["2027-07-30"], id="LW-saturday-end-moves-to-friday"
    ),
    pytest.param(
        "0 18 15W 5,8 *",
        "2027-01-01T00:00Z",
        ["2027-05-14", "2027-08-16"],
        id="15W-saturday-to-friday-sunday-to-monday",
    ),
    pytest.param("0 18 1W 5 *", "2027-01-01T00:00Z", ["2027-05-03"], id="1W-never-crosses-back"),
    pytest.param(
        "0 18 31W * *",
        "2027-01-01T00:00Z",
        ["2027-01-29", "2027-03-31", "2027-05-31"],
        id="31W-skips-months-without-a-31st",
    ),
    pytest.param(
        "0 18 * * 5L", "2027-01-01T00:00Z", ["2027-01-29", "2027-02-26"], id="5L-last-friday"
    ),
    pytest.param(
        "0 18 * * FRIL", "2027-01-01T00:00Z", ["2027-01-29", "2027-02-26"], id="FRIL-last-friday"
    ),
    pytest.param(
        "0 18 ? * L5", "2027-01-01T00:00Z", ["2027-01-29", "2027-02-26"], id="L5-croniter-spelling"
    ),
    pytest.param(
        "0 18 * * FRI#3", "2027-01-01T00:00Z", ["2027-01-15", "2027-02-19"], id="FRI#3-third-friday"
    ),
    pytest.param(
        "0 18 ? * L", "2027-01-01T00:00Z", ["2027-01-02", "2027-01-09"], id="L-alone-is-saturday"
    ),
    pytest.param(
        "0 18 ? * 1#5",
        "2027-01-01T00:00Z",
        ["2027-03-29", "2027-05-31"],
        id="1#5-months-without-a-fifth-monday-skipped",
    ),
    pytest.param(
        "0 18 L * FRI#1",
        "2027-01-01T00:00Z",
        ["2027-01-01", "2027-01-31", "2027-02-05", "2027-02-28"],
        id="both-day-fields-restricted-either-matches",
    ),
    pytest.param(
        "0 18 */2 * FRIL",
        "2027-01-01T00:00Z",
        ["2027-01-29", "2027-06-25"],
        id="star-day-field-both-must-match",
    ),
]


@pytest.mark.parametrize(("cron", "after", "dates"), DAY_RULES)
def test_extension_days(cron: str, after: str, dates: list[str]) -> None:
    got = fires(cron, "UTC", after, len(dates))
    assert got == [f"{day}T18:00+00:00" for day in dates]


@pytest.mark.parametrize(
    ("zone", "cron", "after", "expected", "policies"),
    [
        pytest.param(
            "Australia/Lord_Howe",
            "15 2 * * SUN#1",
            "2027-09-01T00:00Z",
            ["2027-09-05T02:15+10:30", "2027-10-03T02:30+11:00 moved", "2027-11-07T02:15+11:00"],
            {},
            id="lord-howe-half-hour-gap-first-sunday-moved",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "15 2 * * SUN#1",
            "2027-09-01T00:00Z",
            ["2027-09-05T02:15+10:30", "2027-11-07T02:15+11:00", "2027-12-05T02:15+11:00"],
            {"dst_gap": "skip"},
            id="lord-howe-half-hour-gap-first-sunday-skipped",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "45 1 * * SUN#1",
            "2027-03-01T00:00Z",
            ["2027-03-07T01:45+11:00", "2027-04-04T01:45+11:00 pass1", "2027-05-02T01:45+10:30"],
            {},
            id="lord-howe-half-hour-repeat-once",
        ),
        pytest.param(
            "Australia/Lord_Howe",
            "45 1 * * SUN#1",
            "2027-04-01T00:00Z",
            ["2027-04-04T01:45+11:00 pass1", "2027-04-04T01:45+10:30 pass2"],
            {"dst_repeat": "both"},
            id="lord-howe-half-hour-repeat-both",
        ),
        pytest.param(
            "Pacific/Chatham",
            "0 3 * * SUNL",
            "2027-08-01T00:00Z",
            ["2027-08-29T03:00+12:45", "2027-09-26T03:45+13:45 moved", "2027-10-31T03:00+13:45"],
            {},
            id="chatham-1245-last-sunday-in-gap",
        ),
        pytest.param(
            "Pacific/Chatham",
            "0 3 ? * 0#1",
            "2027-03-20T00:00Z",
            ["2027-04-04T03:00+13:45 pass1", "2027-05-02T03:00+12:45"],
            {},
            id="chatham-1245-first-sunday-repeated",
        ),
        pytest.param(
            "America/New_York",
            "30 2 L-17 3 *",
            "2027-03-01T00:00Z",
            ["2027-03-14T03:00-04:00 moved", "2028-03-14T02:30-04:00"],
            {},
            id="new-york-L-minus-17-is-spring-forward-day",
        ),
        pytest.param(
            "America/New_York",
            "30 1 * 11 SUN#1",
            "2027-10-01T00:00Z",
            ["2027-11-07T01:30-04:00 pass1", "2028-11-05T01:30-04:00 pass1"],
            {},
            id="new-york-first-sunday-of-november-fixed-time-once",
        ),
    ],
)
def test_extensions_keep_the_dst_rules(
    zone: str, cron: str, after: str, expected: list[str], policies: dict[str, str]
) -> None:
    assert fires(cron, zone, after, len(expected), **policies) == expected


@pytest.mark.parametrize(
    ("zone", "first_instant", "before", "after"),
    [
        ("Australia/Lord_Howe", "2027-10-03T02:30+11:00", 10.5, 11),
        ("Australia/Lord_Howe", "2027-04-04T01:30+10:30", 11, 10.5),
        ("Pacific/Chatham", "2027-09-26T03:45+13:45", 12.75, 13.75),
        ("Pacific/Chatham", "2027-04-04T02:45+12:45", 13.75, 12.75),
        ("America/New_York", "2027-03-14T03:00-04:00", -5, -4),
    ],
)
def test_transitions_are_the_ones_assumed(
    zone: str, first_instant: str, before: float, after: float
) -> None:
    instant = datetime.fromisoformat(first_instant).astimezone(UTC)
    tz = ZoneInfo(zone)
    just_before = (instant - timedelta(seconds=1)).astimezone(tz).utcoffset()
    assert just_before == timedelta(hours=before)
    assert instant.astimezone(tz).utcoffset() == timedelta(hours=after)
