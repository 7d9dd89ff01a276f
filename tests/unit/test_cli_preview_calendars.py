"""`kairos preview` with shared calendars from a file: skips, rolls and deferrals marked, runs
listed where they run, and the histogram counting runs, not occurrences."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.cli.preview_calendars import preview_calendars
from kairos.core.preview_histogram import count_fires
from kairos.core.schedule import parse_schedule

pytestmark = pytest.mark.unit

CALENDARS = """
calendars:
  - id: us
    owner: treasury
    timezone: America/New_York
    holidays:
      - {date: 2027-05-31, name: Memorial Day}
      - {date: 2027-07-05, name: Independence Day (observed)}
    windows:
      - {cron: "30 9 * * MON-FRI", duration: 6h30m, name: market hours}
"""

SCHEDULES = """
schedules:
  - id: standup
    cron: "0 9 * * MON-FRI"
    timezone: America/New_York
    exclude: [us]
  - id: month-end
    cron: "0 18 L * *"
    timezone: America/New_York
    exclude: [us]
    roll: previous_business_day
  - id: midday-report
    cron: "0 12 * * *"
    timezone: America/New_York
    blackout: [us]
    blackout_action: defer
"""


def run(tmp_path: Path, *args: str, calendars: str | None = CALENDARS) -> Result:
    schedules = tmp_path / "schedules.yaml"
    schedules.write_text(SCHEDULES, encoding="utf-8")
    options = []
    if calendars is not None:
        calendar_file = tmp_path / "calendars.yaml"
        calendar_file.write_text(calendars, encoding="utf-8")
        options = ["--calendars", str(calendar_file)]
    return CliRunner().invoke(app, ["preview", "-f", str(schedules), *options, *args])


def test_json_lists_where_each_run_runs(tmp_path: Path) -> None:
    result = run(tmp_path, "--from", "2027-07-02T14:00:00Z", "-n", "2", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "standup": ["2027-07-06T09:00:00-04:00", "2027-07-07T09:00:00-04:00"],
        "month-end": ["2027-07-30T18:00:00-04:00", "2027-08-31T18:00:00-04:00"],
        "midday-report": ["2027-07-02T16:00:00-04:00", "2027-07-03T12:00:00-04:00"],
    }


def test_text_marks_skips_rolls_and_deferrals(tmp_path: Path) -> None:
    result = run(tmp_path, "--from", "2027-05-27T00:00:00Z", "-n", "1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "  2027-05-27T09:00:00-04:00" in lines
    assert (
        "  2027-05-31T18:00:00-04:00  [runs at 2027-05-28T18:00:00-04:00: 2027-05-31 is not a "
        "business day in us v0; rolled to 2027-05-28 (previous_business_day)]" in lines
    )
    assert any(
        line.startswith("  2027-05-27T12:00:00-04:00  [runs at 2027-05-27T16:00:00-04:00: deferred")
        for line in lines
    ), lines


def test_a_holiday_skip_is_shown_with_the_calendar(tmp_path: Path) -> None:
    result = run(tmp_path, "--from", "2027-07-02T14:00:00Z", "-n", "1")
    assert "standup: cron '0 9 * * MON-FRI' in America/New_York [calendars us]" in result.stdout
    assert (
        "month-end: cron '0 18 L * *' in America/New_York [calendars us, rolled to the previous "
        "business day]" in result.stdout
    )
    assert (
        "  2027-07-05T09:00:00-04:00  [skipped: 2027-07-05 is 'Independence Day (observed)' "
        "in calendar us v0]" in result.stdout.splitlines()
    )


def test_a_calendar_missing_from_the_file_is_warned_about(tmp_path: Path) -> None:
    result = run(tmp_path, "--from", "2027-07-02T14:00:00Z", "--json", calendars="calendars: []\n")
    assert result.exit_code == 0, result.output
    assert "calendar 'us' is not in" in result.stderr
    assert json.loads(result.stdout)["standup"][0] == "2027-07-05T09:00:00-04:00"


def test_the_histogram_counts_runs_not_skipped_occurrences(tmp_path: Path) -> None:
    calendar_file = tmp_path / "calendars.yaml"
    calendar_file.write_text(CALENDARS, encoding="utf-8")
    schedules = [
        parse_schedule(
            {"id": f"s{n}", "cron": "0 9 * * *", "timezone": "America/New_York", "exclude": ["us"]}
        )
        for n in range(10)
    ]
    calendars = preview_calendars(None, calendar_file, schedules)  # type: ignore[arg-type]
    start = datetime(2027, 7, 3, 12, tzinfo=UTC)
    counted = count_fires(schedules, start, start + timedelta(days=3), calendars=calendars)
    # 4 and 6 July run, the observed holiday on the 5th does not.
    assert counted.total == 20
