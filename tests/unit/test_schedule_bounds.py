"""The bounds of the schedule model: each value beyond one is refused, naming the bound and the fix.

Every value here was accepted before the bounds existed, and made something downstream raise
(an instant or a jittered fire instant out of `datetime`'s range, a duration out of
`timedelta`'s, `max_attempts` out of Avro's `int`) or ask a ticker for unbounded work.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from kairos.core import limits
from kairos.core.schedule import Schedule, SchedulesInvalidError, parse_schedule
from kairos.core.zones import legacy_fixed_zone_warning
from kairos.streams.wire.records import definition_record, schedule_from_definition

START = "2027-01-01T00:00:00Z"


def cron(**fields: Any) -> dict[str, Any]:
    return {"id": "a", "cron": "@daily", **fields}


def every(period: str, **fields: Any) -> dict[str, Any]:
    return {"id": "a", "every": period, "start_at": START, **fields}


REFUSED = [
    pytest.param(
        cron(jitter="1d1ms"),
        "jitter",
        ["longer than the maximum, 1d", "for 'cron' and 'at' schedules", "shorten it"],
        id="cron-jitter-over-a-day",
    ),
    pytest.param(
        {"id": "a", "at": START, "jitter": "2d"},
        "jitter",
        ["longer than the maximum, 1d"],
        id="at-jitter-over-a-day",
    ),
    pytest.param(
        every("10m", jitter="10m1ms"),
        "jitter",
        ["longer than the maximum, 10m", "the schedule's 'every'"],
        id="every-jitter-over-its-period",
    ),
    pytest.param(
        cron(jitter="99999999d"),
        "jitter",
        ["longer than 36500d, the longest"],
        id="jitter-past-any-duration",
    ),
    pytest.param(
        every("999ms"),
        "every",
        ["999ms is shorter than the minimum, 1s", "lengthen it"],
        id="every-under-a-second",
    ),
    pytest.param(
        every("1ms", catchup_window="1d"),
        "every",
        ["shorter than the minimum, 1s"],
        id="every-millisecond",
    ),
    pytest.param(
        every("3650d1ms"),
        "every",
        ["longer than the maximum, 3650d", "use 'at'"],
        id="every-over-ten-years",
    ),
    pytest.param(
        cron(catchup_window="3651d"),
        "catchup_window",
        ["longer than the maximum, 3650d", "leave it unset"],
        id="catchup-over-ten-years",
    ),
    pytest.param(
        cron(timeout="30d1ms"),
        "timeout",
        ["longer than the maximum, 30d"],
        id="timeout-over-thirty-days",
    ),
    pytest.param(
        cron(timeout="9999999999999w"),
        "timeout",
        ["longer than 36500d"],
        id="timeout-past-timedelta",
    ),
    pytest.param(
        cron(timeout="P" + "9" * 5000 + "D"),
        "timeout",
        ["longer than 36500d"],
        id="duration-of-five-thousand-digits",
    ),
    pytest.param(
        cron(retry_backoff="1h1ms"),
        "retry_backoff",
        ["longer than the maximum, 1h", "capped at it"],
        id="backoff-over-the-cap",
    ),
    pytest.param(
        cron(max_attempts=101),
        "max_attempts",
        ["101 is more than the maximum, 100", "lower it"],
        id="attempts-over-a-hundred",
    ),
    pytest.param(
        cron(max_attempts=2**31),
        "max_attempts",
        ["more than the maximum, 100"],
        id="attempts-past-avro-int",
    ),
    pytest.param(
        {"id": "a", "at": "1969-12-31T23:59:59.999Z"},
        "at",
        [
            "outside the instants a schedule may name",
            "from 1970-01-01T00:00:00Z",
            "up to (not including) 9900-01-01T00:00:00Z",
            "pick an instant in that range",
        ],
        id="at-before-the-epoch",
    ),
    pytest.param(
        {"id": "a", "at": "9900-01-01T00:00:00Z"},
        "at",
        ["outside the instants"],
        id="at-at-the-latest-bound",
    ),
    pytest.param(
        {"id": "a", "at": "9999-12-31T23:00:00-05:00"},
        "at",
        ["outside the instants"],
        id="at-whose-utc-is-past-year-9999",
    ),
    pytest.param(
        {"id": "a", "at": "0001-01-01T00:00:00+01:00"},
        "at",
        ["outside the instants"],
        id="at-whose-utc-is-before-year-1",
    ),
    pytest.param(
        cron(start_at="9999-12-30T00:00:00Z"),
        "start_at",
        ["outside the instants"],
        id="cron-start-past-the-latest",
    ),
    pytest.param(
        cron(end_at="1960-01-01T00:00:00Z"),
        "end_at",
        ["outside the instants"],
        id="end-before-the-epoch",
    ),
    pytest.param(
        cron(timezone="localtime"),
        "timezone",
        [
            "'localtime' means the zone of whichever host",
            "hosts would disagree",
            "name the zone, such as 'UTC'",
        ],
        id="zone-localtime",
    ),
    pytest.param(
        cron(timezone="posixrules"),
        "timezone",
        ["'posixrules' means", "name the zone"],
        id="zone-posixrules",
    ),
    pytest.param(
        cron(timezone="Factory"),
        "timezone",
        ["'Factory' is tzdata's placeholder"],
        id="zone-factory",
    ),
    pytest.param(
        cron(timezone="right/UTC"),
        "timezone",
        ["not a known IANA time zone"],
        id="zone-leap-second-path",
    ),
    pytest.param(
        cron(timezone="posix/Europe/Berlin"),
        "timezone",
        ["not a known IANA time zone"],
        id="zone-posix-path",
    ),
    pytest.param(
        cron(description="caf\ud800"),
        "description",
        ["contains '\\ud800' at position 3", "UTF-8 cannot carry", "remove it"],
        id="description-with-a-lone-surrogate",
    ),
    pytest.param(
        cron(owner="\udfff"), "owner", ["UTF-8 cannot carry"], id="owner-with-a-lone-surrogate"
    ),
    pytest.param(
        cron(job={"kind": "shell\ud800"}),
        "job.kind",
        ["UTF-8 cannot carry"],
        id="job-kind-with-a-lone-surrogate",
    ),
    pytest.param(
        cron(labels={"tier": "\ud800"}),
        "labels.tier",
        ["UTF-8 cannot carry"],
        id="label-with-a-lone-surrogate",
    ),
]


@pytest.mark.parametrize(("data", "field", "fragments"), REFUSED)
def test_values_beyond_a_bound_are_refused_with_the_bound_and_the_fix(
    data: dict[str, Any], field: str, fragments: list[str]
) -> None:
    with pytest.raises(SchedulesInvalidError) as caught:
        parse_schedule(data)
    [error] = caught.value.errors
    assert error.field == field
    for fragment in fragments:
        assert fragment in error.problem


ACCEPTED = [
    pytest.param(cron(jitter="1d"), id="cron-jitter-of-a-day"),
    pytest.param(every("10m", jitter="10m"), id="every-jitter-of-its-period"),
    pytest.param(every("1s"), id="every-second"),
    pytest.param(every("1500ms"), id="every-with-milliseconds"),
    pytest.param(every("3650d"), id="every-ten-years"),
    pytest.param(
        cron(catchup_window="3650d", timeout="30d", retry_backoff="1h", max_attempts=100),
        id="every-duration-at-its-maximum",
    ),
    pytest.param({"id": "a", "at": "1970-01-01T00:00:00Z"}, id="at-the-epoch"),
    pytest.param(
        {
            "id": "a",
            "at": "9899-12-31T23:59:59.999Z",
            "jitter": "1d",
            "timezone": "Pacific/Kiritimati",
        },
        id="at-the-last-millisecond",
    ),
    pytest.param({"id": "a", "at": "1970-01-01T01:00:00+01:00"}, id="at-the-epoch-at-an-offset"),
    pytest.param(cron(timezone="EST"), id="legacy-fixed-zone"),
    pytest.param(cron(timezone="EST5EDT"), id="legacy-zone-with-dst"),
]


@pytest.mark.parametrize("data", ACCEPTED)
def test_values_at_a_bound_are_accepted(data: dict[str, Any]) -> None:
    parse_schedule(data)


@pytest.mark.parametrize(
    ("field", "milliseconds", "fragment"),
    [
        pytest.param("timeout_ms", 2**62, "longer than 36500d", id="timeout-2-to-the-62"),
        pytest.param("jitter_ms", 2**63 - 1, "longer than 36500d", id="jitter-largest-long"),
        pytest.param("every_ms", -1, "cannot be negative", id="negative"),
        pytest.param("retry_backoff_ms", 2**31, "longer than the maximum, 1h", id="over-a-bound"),
    ],
)
def test_a_definition_record_beyond_a_bound_is_a_validation_error_of_its_field(
    field: str, milliseconds: int, fragment: str
) -> None:
    record = definition_record(Schedule.model_validate(every("1m")))
    record[field] = milliseconds
    with pytest.raises(ValidationError) as caught:
        schedule_from_definition(record)
    [error] = caught.value.errors()
    assert error["loc"] == (field.removesuffix("_ms"),)
    assert fragment in error["msg"]


def test_a_definition_record_round_trips_at_the_bounds() -> None:
    schedule = Schedule(
        id="a",
        every=limits.LONGEST_EVERY,
        jitter=limits.LONGEST_EVERY,
        start_at=limits.LATEST_INSTANT - timedelta(milliseconds=1),
        timeout=limits.LONGEST_TIMEOUT,
        max_attempts=limits.MAX_ATTEMPTS,
    )
    assert schedule_from_definition(definition_record(schedule)) == schedule


@pytest.mark.parametrize(
    ("zone", "fragments"),
    [
        pytest.param(
            "EST", ["fixed UTC-05:00 offset", "America/New_York", "America/Panama"], id="EST"
        ),
        pytest.param(
            "MST", ["fixed UTC-07:00 offset", "America/Denver", "America/Phoenix"], id="MST"
        ),
        pytest.param("HST", ["fixed UTC-10:00 offset", "Pacific/Honolulu"], id="HST"),
    ],
)
def test_legacy_fixed_zones_get_a_warning_that_names_location_zones(
    zone: str, fragments: list[str]
) -> None:
    warning = legacy_fixed_zone_warning(zone)
    assert warning is not None
    for fragment in fragments:
        assert fragment in warning
    # Fixed all year, as the warning says.
    offsets = {
        datetime(2027, month, 1, tzinfo=UTC)
        .astimezone(Schedule(id="a", cron="@daily", timezone=zone).zone)
        .utcoffset()
        for month in (1, 7)
    }
    assert len(offsets) == 1


@pytest.mark.parametrize("zone", ["UTC", "EST5EDT", "America/New_York", "Etc/GMT+5", "Japan"])
def test_other_zones_get_no_warning(zone: str) -> None:
    assert legacy_fixed_zone_warning(zone) is None
