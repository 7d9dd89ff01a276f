"""`kairos preview` reads stdin (`-f -`), relative `--from` as `replay` does, and checks jobs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from kairos.cli.app import app

pytestmark = pytest.mark.unit

HOURLY = "schedules:\n  - id: hourly\n    cron: '0 * * * *'\n"


def test_stdin_is_read_like_a_file() -> None:
    result = CliRunner().invoke(
        app,
        ["preview", "-f", "-", "--from", "2027-01-01T00:00:00Z", "-n", "2", "--json"],
        input=HOURLY,
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "hourly": ["2027-01-01T01:00:00+00:00", "2027-01-01T02:00:00+00:00"]
    }


def test_json_on_stdin_is_read_by_its_content() -> None:
    document = json.dumps({"schedules": [{"id": "daily", "cron": "@daily"}]})
    result = CliRunner().invoke(
        app,
        ["preview", "-f", "-", "--from", "2027-01-01T00:00:00Z", "-n", "1", "--json"],
        input=document,
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"daily": ["2027-01-02T00:00:00+00:00"]}


@pytest.mark.parametrize("relative, back", [("-1d", timedelta(days=1)), ("now", timedelta(0))])
def test_relative_from_counts_from_now(relative: str, back: timedelta) -> None:
    before = datetime.now(UTC).replace(microsecond=0) - back
    result = CliRunner().invoke(
        app, ["preview", "-f", "-", "--from", relative, "-n", "1", "--json"], input=HOURLY
    )
    after = datetime.now(UTC) - back
    assert result.exit_code == 0, result.output
    first = datetime.fromisoformat(json.loads(result.stdout)["hourly"][0])
    # The first top of the hour strictly after the start.
    assert before < first <= after.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    assert first.minute == 0 and first.second == 0


def test_a_job_that_does_not_fit_its_kind_is_refused() -> None:
    text = HOURLY + "    job: {kind: http, url: 'billing.internal/settle'}\n"
    result = CliRunner().invoke(app, ["preview", "-f", "-"], input=text)
    assert result.exit_code == 2
    assert (
        "schedule 'hourly' (schedules[0]): field 'job.url': must start with http:// or https://"
    ) in result.stderr
    assert result.stdout == ""
