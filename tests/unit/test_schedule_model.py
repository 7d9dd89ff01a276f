"""The schedule model and the schedules-file parser: defaults, canonical form, every error."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from kairos.core.errors import KairosError
from kairos.core.schedule import (
    DstGapPolicy,
    DstRepeatPolicy,
    JobSpec,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
    SchedulesInvalidError,
    ScheduleValidationError,
    load_schedules,
    parse_schedule,
)
from kairos.core.schedule_text import SchedulesFileFormatError

pytestmark = pytest.mark.unit


def test_defaults() -> None:
    schedule = Schedule.model_validate({"id": "nightly", "cron": "@daily"})
    assert schedule.timezone == "UTC"
    assert schedule.misfire is MisfirePolicy.ALL
    assert schedule.overlap is OverlapPolicy.ALLOW
    assert schedule.dst_gap is DstGapPolicy.RUN_AT_TRANSITION
    assert schedule.dst_repeat is DstRepeatPolicy.FIRST
    assert schedule.job == JobSpec(kind="noop")
    assert (schedule.max_attempts, schedule.timeout, schedule.retry_backoff) == (
        3,
        timedelta(hours=1),
        timedelta(seconds=10),
    )
    assert (schedule.paused, schedule.labels, schedule.jitter, schedule.catchup_window) == (
        False,
        {},
        None,
        None,
    )


def test_full_schedule_serialises_to_a_canonical_form_and_back() -> None:
    schedule = Schedule.model_validate(
        {
            "id": "billing/settlement-report.v2",
            "cron": "30 2 * * *",
            "timezone": "America/New_York",
            "start_at": "2027-01-01T00:00:00+01:00",
            "end_at": "2028-01-01T00:00:00Z",
            "jitter": "PT90S",
            "misfire": "latest",
            "catchup_window": "P1D",
            "overlap": "queue",
            "dst_gap": "skip",
            "dst_repeat": "both",
            "paused": True,
            "job": {"kind": "shell", "command": "echo hi", "env": {"A": "1"}},
            "max_attempts": 5,
            "timeout": "1h30m",
            "retry_backoff": "250ms",
            "owner": "payments",
            "labels": {"tier": "gold"},
            "description": "Nightly settlement",
        }
    )
    dumped = schedule.model_dump(mode="json")
    assert dumped["start_at"] == "2026-12-31T23:00:00Z"
    assert (
        dumped["jitter"],
        dumped["catchup_window"],
        dumped["timeout"],
        dumped["retry_backoff"],
    ) == ("1m30s", "1d", "1h30m", "250ms")
    assert dumped["job"] == {"kind": "shell", "command": "echo hi", "env": {"A": "1"}}
    assert Schedule.model_validate(json.loads(json.dumps(dumped))) == schedule


def test_model_is_frozen() -> None:
    schedule = Schedule.model_validate({"id": "a", "cron": "* * * * *"})
    with pytest.raises(ValidationError):
        schedule.paused = True


INVALID = [
    pytest.param({"id": "a b", "cron": "* * * * *"}, "id", "not a valid id", id="bad-id-space"),
    pytest.param({"id": "", "cron": "* * * * *"}, "id", "not a valid id", id="bad-id-empty"),
    pytest.param({"id": "x" * 201, "cron": "* * * * *"}, "id", "1–200", id="bad-id-long"),
    pytest.param({"cron": "* * * * *"}, "id", "required", id="missing-id"),
    pytest.param(
        {"id": "a", "cron": "60 * * * *"},
        "cron",
        "minute field: 60 is out of range",
        id="bad-cron-minute",
    ),
    pytest.param({"id": "a", "cron": "* * * * * *"}, "cron", "no seconds", id="bad-cron-six"),
    pytest.param(
        {"id": "a", "cron": "0 0 L-31 * *"}, "cron", "must be 1–30", id="bad-cron-L-minus"
    ),
    pytest.param(
        {"id": "a", "cron": "0/x * * * *"},
        "cron",
        "the step after '/' must be a whole number",
        id="bad-cron-step-word",
    ),
    pytest.param(
        {"id": "a", "cron": "0 0 * FOO *"},
        "cron",
        "'FOO' is not a number",
        id="bad-cron-month-name",
    ),
    pytest.param(
        {"id": "a", "cron": "0 0 * * FRI#6"}, "cron", "after '#' must be 1–5", id="bad-cron-week"
    ),
    pytest.param({"id": "a", "cron": "@reboot"}, "cron", "unknown macro", id="bad-cron-macro"),
    pytest.param(
        {"id": "a", "cron": "* * * * *", "timezone": "Mars/Olympus"},
        "timezone",
        "not a known IANA time zone",
        id="unknown-zone",
    ),
    pytest.param(
        {"id": "a", "cron": "* * * * *", "timezone": "../../etc/passwd"},
        "timezone",
        "not a known IANA time zone",
        id="zone-path-traversal",
    ),
    pytest.param(
        {"id": "a", "cron": "* * * * *", "at": "2027-03-14T07:00:00Z"},
        "at",
        "exactly one trigger",
        id="cron-and-at",
    ),
    pytest.param({"id": "a"}, "cron", "no trigger", id="no-trigger"),
    pytest.param({"id": "a", "at": "2027-03-14T07:00:00"}, "at", "no UTC offset", id="naive-at"),
    pytest.param(
        {"id": "a", "cron": "@daily", "start_at": "2027-03-14"},
        "start_at",
        "no UTC offset",
        id="naive-date-start",
    ),
    pytest.param(
        {"id": "a", "at": "2027-03-14T07:00:00.000001Z"},
        "at",
        "more precise than a millisecond",
        id="sub-millisecond-instant",
    ),
    pytest.param(
        {
            "id": "a",
            "cron": "@daily",
            "start_at": "2027-03-14T00:00:00Z",
            "end_at": "2027-03-13T00:00:00Z",
        },
        "end_at",
        "is not after start_at",
        id="end-before-start",
    ),
    pytest.param(
        {"id": "a", "every": "15m"},
        "start_at",
        "'every' counts from start_at",
        id="every-without-start",
    ),
    pytest.param(
        {"id": "a", "every": "0s", "start_at": "2027-03-14T00:00:00Z"},
        "every",
        "longer than zero",
        id="every-zero",
    ),
    pytest.param(
        {"id": "a", "every": "15 minutes", "start_at": "2027-03-14T00:00:00Z"},
        "every",
        "invalid duration",
        id="malformed-duration",
    ),
    pytest.param(
        {"id": "a", "every": "P1M", "start_at": "2027-03-14T00:00:00Z"},
        "every",
        "no fixed length",
        id="duration-in-months",
    ),
    pytest.param(
        {"id": "a", "every": 90, "start_at": "2027-03-14T00:00:00Z"},
        "every",
        "needs a unit",
        id="duration-bare-number",
    ),
    pytest.param(
        {"id": "a", "cron": "@daily", "timeout": "0s"},
        "timeout",
        "longer than zero",
        id="timeout-zero",
    ),
    pytest.param(
        {"id": "a", "cron": "@daily", "max_attempts": 0},
        "max_attempts",
        "greater than or equal to 1",
        id="max-attempts-zero",
    ),
    pytest.param(
        {"id": "a", "cron": "@daily", "misfire": "sometimes"},
        "misfire",
        "'all', 'latest' or 'skip'",
        id="unknown-misfire",
    ),
    pytest.param(
        {"id": "a", "cron": "@daily", "overlap": "wait"},
        "overlap",
        "'allow', 'skip', 'queue' or 'replace'",
        id="unknown-overlap",
    ),
    pytest.param(
        {"id": "a", "cron": "@daily", "job": {"command": "x"}},
        "job.kind",
        "required",
        id="job-without-kind",
    ),
    pytest.param(
        {"id": "a", "cron": "@daily", "job": {"kind": " "}},
        "job.kind",
        "must name the kind",
        id="job-blank-kind",
    ),
    pytest.param(
        {"id": "a", "cron": "@daily", "crontab": "x"},
        "crontab",
        "unknown field",
        id="unknown-field",
    ),
]


@pytest.mark.parametrize(("data", "field", "problem"), INVALID)
def test_invalid_schedule_names_field_and_problem(
    data: dict[str, object], field: str, problem: str
) -> None:
    with pytest.raises(SchedulesInvalidError) as caught:
        parse_schedule(data, index=4)
    [error] = caught.value.errors
    assert isinstance(error, ScheduleValidationError) and isinstance(error, KairosError)
    assert (error.field, error.index) == (field, 4)
    assert problem in error.problem
    # Only a valid id can name the schedule; otherwise its position does.
    assert error.schedule_id == ("a" if data.get("id") == "a" else None)
    assert field in str(caught.value) and "schedules[4]" in str(caught.value)


FILE = """
schedules:
  - id: settlement-report
    cron: "30 2 * * *"
    timezone: America/New_York
  - id: poll
    every: 15m
    start_at: 2027-03-14T00:00:00Z
  - id: once
    at: "2027-03-14T03:00:00-04:00"
"""


def test_load_yaml() -> None:
    schedules = load_schedules(FILE, "yaml")
    assert [s.id for s in schedules] == ["settlement-report", "poll", "once"]
    assert schedules[1].start_at == datetime(2027, 3, 14, tzinfo=UTC)
    assert schedules[2].at == datetime(2027, 3, 14, 7, tzinfo=UTC)


def test_load_json() -> None:
    text = json.dumps({"schedules": [{"id": "a", "cron": "@hourly"}]})
    assert [s.cron for s in load_schedules(text, "json")] == ["@hourly"]


def test_load_collects_every_error_of_every_schedule() -> None:
    text = """
schedules:
  - id: ok
    cron: "@daily"
  - id: bad-cron
    cron: "61 * * * *"
    timezone: Nowhere/City
  - cron: "@daily"
  - id: ok
    cron: "@hourly"
  - just a string
"""
    with pytest.raises(SchedulesInvalidError) as caught:
        load_schedules(text, "yaml")
    found = [(e.schedule_id, e.index, e.field) for e in caught.value.errors]
    assert found == [
        ("bad-cron", 1, "cron"),
        ("bad-cron", 1, "timezone"),
        (None, 2, "id"),
        ("ok", 3, "id"),
        (None, 4, ""),
    ]
    assert "duplicate id, also used by schedules[0]" in caught.value.errors[3].problem


@pytest.mark.parametrize(
    ("text", "fmt", "problem"),
    [
        pytest.param("schedules: [\n  - id: a\n", "yaml", "line", id="broken-yaml"),
        pytest.param('{"schedules": [', "json", "line 1", id="broken-json"),
        pytest.param("- id: a\n", "yaml", "exactly one key, 'schedules'", id="top-level-list"),
        pytest.param("schedules: []\nextra: 1\n", "yaml", "exactly one key", id="extra-top-key"),
        pytest.param("schedules: {id: a}\n", "yaml", "must be a list", id="schedules-not-list"),
        pytest.param("", "yaml", "exactly one key", id="empty-file"),
        # Found by bench.fuzz: both parsers recursed out of the stack, a RecursionError traceback.
        pytest.param(
            "schedules: " + "[" * 5000 + "]" * 5000, "yaml", "nested too deeply", id="deep-yaml"
        ),
        pytest.param(
            '{"schedules": ' + "[" * 5000 + "]" * 5000 + "}",
            "json",
            "nested too deeply",
            id="deep-json",
        ),
    ],
)
def test_malformed_files(text: str, fmt: str, problem: str) -> None:
    with pytest.raises(SchedulesFileFormatError, match=problem):
        load_schedules(text, fmt)  # type: ignore[arg-type]


def test_empty_schedule_list_is_valid() -> None:
    assert load_schedules("schedules: []\n", "yaml") == []
