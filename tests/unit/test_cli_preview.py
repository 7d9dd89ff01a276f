"""`kairos preview`: exact JSON, DST marks, warnings, and errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kairos.cli.app import app

pytestmark = pytest.mark.unit

SCHEDULES = """
schedules:
  - id: settlement-report
    cron: "30 2 * * *"
    timezone: America/New_York
  - id: feb-30
    cron: "0 0 30 2 *"
  - id: poll
    every: 90m
    start_at: 2027-03-14T05:00:00Z
    timezone: America/New_York
    end_at: 2027-03-14T08:00:00Z
"""


def run(tmp_path: Path, text: str, *args: str, name: str = "schedules.yaml") -> Result:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return CliRunner().invoke(app, ["preview", "-f", str(path), *args])


def test_json_is_exact(tmp_path: Path) -> None:
    result = run(tmp_path, SCHEDULES, "--from", "2027-03-13T12:00:00Z", "-n", "3", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "settlement-report": [
            "2027-03-14T03:00:00-04:00",
            "2027-03-15T02:30:00-04:00",
            "2027-03-16T02:30:00-04:00",
        ],
        "feb-30": [],
        "poll": [
            "2027-03-14T00:00:00-05:00",
            "2027-03-14T01:30:00-05:00",
            "2027-03-14T04:00:00-04:00",
        ],
    }
    assert result.stdout.startswith('{"settlement-report": ["2027-03-14T03:00:00-04:00", ')
    assert "warning: schedule 'feb-30' never fires" in result.stderr
    assert "matches no calendar date" in result.stderr


def test_json_file_and_default_count(tmp_path: Path) -> None:
    text = json.dumps({"schedules": [{"id": "hourly", "cron": "@hourly"}]})
    result = run(tmp_path, text, "--from", "2027-01-01T00:00:00+00:00", "--json", name="s.json")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["hourly"]) == 5


def test_human_output_marks_dst_effects(tmp_path: Path) -> None:
    text = """
schedules:
  - id: settlement-report
    cron: "30 2 * * *"
    timezone: America/New_York
  - id: half-hourly
    cron: "*/30 1 * * *"
    timezone: America/New_York
    paused: true
"""
    spring = run(tmp_path, text, "--from", "2027-03-14T00:00:00Z", "-n", "1")
    assert spring.exit_code == 0, spring.output
    assert "settlement-report: cron '30 2 * * *' in America/New_York" in spring.stdout
    assert (
        "2027-03-14T03:00:00-04:00  [DST gap: 02:30 does not exist that day; moved to the jump]"
    ) in spring.stdout
    fall = run(tmp_path, text, "--from", "2027-11-07T05:50:00Z", "-n", "2")
    assert "half-hourly: cron '*/30 1 * * *' in America/New_York [paused]" in fall.stdout
    assert (
        "2027-11-07T01:00:00-05:00  [DST repeated hour, pass 2 of 2, doubled: runs in both passes]"
    ) in fall.stdout
    assert "2027-11-08T02:30:00-05:00\n" in fall.stdout


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "schedules:\n  - id: a\n    cron: '61 * * * *'\n",
            "schedule 'a' (schedules[0]): field 'cron': invalid cron '61 * * * *': "
            "minute field: 61 is out of range 0–59",
            id="bad-cron-field",
        ),
        pytest.param(
            "schedules:\n  - id: a\n    cron: '@daily'\n    timezone: Mars/Base\n",
            "field 'timezone': 'Mars/Base' is not a known IANA time zone",
            id="unknown-zone",
        ),
        pytest.param(
            "schedules:\n  - id: a\n    cron: '@daily'\n    at: 2027-01-01T00:00:00Z\n",
            "field 'at': a schedule has exactly one trigger",
            id="cron-and-at",
        ),
        pytest.param(
            "schedules:\n  - id: a\n    at: 2027-01-01T00:00:00Z\n"
            "    start_at: 2027-02-01T00:00:00Z\n    end_at: 2027-01-01T00:00:00Z\n",
            "field 'end_at': end_at",
            id="end-before-start",
        ),
        pytest.param(
            "schedules:\n  - id: a\n    every: 15 minutes\n    start_at: 2027-01-01T00:00:00Z\n",
            "field 'every': invalid duration '15 minutes'",
            id="malformed-duration",
        ),
        pytest.param(
            "schedules:\n  - id: a\n    at: 2027-01-01 00:00:00\n",
            "field 'at': 2027-01-01T00:00:00 has no UTC offset",
            id="naive-datetime",
        ),
        pytest.param(
            "schedules:\n  - id: 'a b'\n    cron: '@daily'\n",
            "schedule schedules[0]: field 'id': 'a b' is not a valid id",
            id="bad-id",
        ),
        pytest.param(
            "schedules:\n  - id: a\n    cron: '@daily'\n  - id: a\n    cron: '@daily'\n",
            "schedule 'a' (schedules[1]): field 'id': duplicate id",
            id="duplicate-id",
        ),
        pytest.param("schedules: [\n", "not a valid YAML schedules file", id="broken-yaml"),
        pytest.param("hello\n", "exactly one key, 'schedules'", id="not-a-schedules-file"),
    ],
)
def test_invalid_input_is_reported_without_traceback(
    tmp_path: Path, text: str, expected: str
) -> None:
    result = run(tmp_path, text, "--from", "2027-01-01T00:00:00Z")
    assert result.exit_code == 2
    assert expected in result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["--from", "yesterday"],
            "--from: invalid time 'yesterday': not an ISO-8601 instant",
            id="unreadable-from",
        ),
        pytest.param(["--from", "2027-01-01T00:00:00"], "has no UTC offset", id="naive-from"),
        pytest.param(
            ["--from", "9999-12-30T00:00:00Z"],
            "outside the instants schedules name",
            id="from-past-the-latest-instant",
        ),
        pytest.param(
            ["--from", "0001-01-01T00:00:00+01:00"],
            "outside the years 1 to 9999",
            id="from-before-year-1-in-utc",
        ),
    ],
)
def test_bad_from(tmp_path: Path, args: list[str], expected: str) -> None:
    result = run(tmp_path, SCHEDULES, *args)
    assert result.exit_code == 2
    assert expected in result.stderr
    assert "Traceback" not in result.output


def test_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["preview", "-f", str(tmp_path / "absent.yaml")])
    assert result.exit_code == 2
    assert "cannot read schedules file" in result.stderr
    assert "Traceback" not in result.output


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"schedules: []\n# caf\xe9\n")
    result = CliRunner().invoke(app, ["preview", "-f", str(path)])
    assert result.exit_code == 2
    assert "cannot read schedules file" in result.stderr


def test_a_legacy_fixed_zone_is_previewed_with_a_warning_naming_location_zones(
    tmp_path: Path,
) -> None:
    text = """
schedules:
  - id: us-east-report
    cron: "0 9 * * *"
    timezone: EST
  - id: new-york-report
    cron: "0 9 * * *"
    timezone: America/New_York
"""
    result = run(tmp_path, text, "--from", "2027-07-01T00:00:00Z", "-n", "1", "--json")
    assert result.exit_code == 0, result.output
    # EST is UTC-05:00 in July too, an hour off New York's clock: the warning says so.
    assert json.loads(result.stdout) == {
        "us-east-report": ["2027-07-01T09:00:00-05:00"],
        "new-york-report": ["2027-07-01T09:00:00-04:00"],
    }
    assert result.stderr.splitlines() == [
        "warning: schedule 'us-east-report': timezone 'EST' is a fixed UTC-05:00 offset with no "
        "daylight-saving time; if the schedule follows a place's clock, use America/New_York "
        "(with DST) or America/Panama (UTC-05:00 all year)"
    ]


@pytest.mark.parametrize("zone", ["localtime", "posixrules", "Factory"])
def test_a_zone_that_means_the_hosts_own_is_refused(tmp_path: Path, zone: str) -> None:
    result = run(tmp_path, f"schedules:\n  - id: a\n    cron: '@daily'\n    timezone: {zone}\n")
    assert result.exit_code == 2
    assert f"schedule 'a' (schedules[0]): field 'timezone': '{zone}'" in result.stderr
    assert "name the zone, such as 'UTC'" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param([], "nothing to preview: give a schedules file (-f FILE)", id="no-source"),
        pytest.param(
            ["-f", "schedules.yaml", "--id", "a"],
            "give one source: -f reads a file",
            id="file-and-id",
        ),
        pytest.param(
            ["-f", "schedules.yaml", "--owner", "ops"],
            "give one source: -f reads a file",
            id="file-and-owner",
        ),
        pytest.param(
            ["-f", "schedules.yaml", "--histogram", "-n", "3"],
            "-n/--count is the listing's",
            id="count-with-histogram",
        ),
        pytest.param(
            ["-f", "schedules.yaml", "--horizon", "24h"],
            "--horizon and --top apply to --histogram",
            id="horizon-without-histogram",
        ),
        pytest.param(
            ["-f", "schedules.yaml", "--top", "5"],
            "--horizon and --top apply to --histogram",
            id="top-without-histogram",
        ),
        pytest.param(
            ["-f", "schedules.yaml", "--histogram", "--json", "--top", "5"],
            "--json prints every minute",
            id="top-with-json",
        ),
        pytest.param(
            ["-f", "schedules.yaml", "--histogram", "--top", "0"],
            "Invalid value for '--top'",
            id="top-zero",
        ),
    ],
)
def test_options_that_do_not_fit_together_are_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schedules.yaml").write_text(SCHEDULES, encoding="utf-8")
    # No broker is configured: a usage error is found before any connection is tried.
    result = CliRunner().invoke(
        app, ["--bootstrap-servers", "127.0.0.1:1", "--timeout", "0.2", "preview", *args]
    )
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.output
