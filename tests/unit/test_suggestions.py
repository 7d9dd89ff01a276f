"""Suggestions offer close names only: a misleading suggestion is worse than none."""

from __future__ import annotations

import pytest

from kairos.core.schedule import Schedule
from kairos.core.suggestions import close_names, did_you_mean

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
