"""Suggestions offer close names only: a misleading suggestion is worse than none."""

from __future__ import annotations

import json

import pytest

from kairos.core.schedule import Schedule, SchedulesInvalidError, load_schedules
from kairos.core.suggestions import close_names, did_you_mean
from kairos.core.zones import zone_problem

pytestmark = pytest.mark.unit

FIELDS = list(Schedule.model_fields)


@pytest.mark.parametrize(
    "typed, offered",
    [
        ("timezon", ["timezone"]),
        ("cron_expresion", ["cron"]),
        ("max_attempt", ["max_attempts"]),
        ("retry_back_off", ["retry_backoff"]),
        ("start", ["start_at"]),
        ("Misfire", ["misfire"]),
    ],
)
def test_close_misspellings_of_field_names_are_offered(typed: str, offered: list[str]) -> None:
    assert close_names(typed, FIELDS)[: len(offered)] == offered


@pytest.mark.parametrize("typed", ["zone", "kind", "name", "url", "tz", "schedule"])
def test_names_that_are_not_close_get_no_suggestion(typed: str) -> None:
    # At difflib's default cutoff 'zone' was offered 'owner', 'kind' was offered 'id'.
    assert close_names(typed, FIELDS) == []


def test_a_known_name_needs_no_suggestion() -> None:
    assert close_names("timezone", FIELDS) == []


def test_the_suggestion_reads_as_one_clause() -> None:
    assert did_you_mean("lates", ["all", "latest", "skip"]) == "; did you mean 'latest'?"
    assert did_you_mean("utc", ["UTC", "Europe/London"]) == "; did you mean 'UTC'?"
    assert did_you_mean("zzz", ["all"]) == ""


@pytest.mark.parametrize(
    "field, value, suggestion",
    [
        ("timezone", "Europe/Londn", "did you mean 'Europe/London'?"),
        ("timezone", "utc", "did you mean 'UTC'?"),
        ("misfire", "lates", "did you mean 'latest'?"),
        ("overlap", "Queue", "did you mean 'queue'?"),
        ("roll", "next_busines_day", "did you mean 'next_business_day'?"),
        ("cron_expresion", "0 2 * * *", "unknown field; the fields are"),
        ("cron_expresion", "0 2 * * *", "did you mean 'cron'?"),
    ],
)
def test_schedules_files_get_suggestions_in_their_errors(
    field: str, value: str, suggestion: str
) -> None:
    entry = {"id": "billing.nightly", "at": "2027-01-01T00:00:00Z", field: value}
    with pytest.raises(SchedulesInvalidError) as invalid:
        load_schedules(json.dumps({"schedules": [entry]}), "json")
    (problem,) = invalid.value.errors
    assert problem.field == field
    assert suggestion in problem.problem
    # One best suggestion, not a list of lookalikes.
    assert (
        problem.problem.count("did you mean") <= 1
        and " or '" not in problem.problem.split("did you mean")[-1]
    )


def test_a_zone_nothing_like_a_real_one_gets_no_suggestion() -> None:
    assert "did you mean" not in (zone_problem("Mars/Olympus") or "")
