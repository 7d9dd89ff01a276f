"""A shared calendar published, referenced by a schedule, changed, and audited: real broker,
real ticker process.

The calendar first makes today (and tomorrow, for a run near midnight) a holiday, so every
occurrence of the schedule is recorded as skipped with the calendar's version as the reason.
The calendar is then changed to have no holidays: the occurrences not yet decided fire. The
audit replays the version in force at each occurrence and finds nothing lost or doubled.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import start_ticker

CODECS = make_codecs()
CALENDAR = "ops-holidays"
SCHEDULE = "ops.every-two-seconds"


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


def calendar_file(tmp_path: Path, holidays: list[dict[str, str]]) -> Path:
    path = tmp_path / f"calendars-{len(holidays)}.yaml"
    document = {"calendars": [{"id": CALENDAR, "owner": "ops", "holidays": holidays}]}
    path.write_text(yaml.safe_dump(document))
    return path


def read(settings: KafkaSettings, role: TopicRole, decode: Any) -> list[dict[str, Any]]:
    topic = settings.layout.name(role)
    return [
        value
        for _, value in read_topic(settings.bootstrap_servers, topic, decode)
        if value["schedule_id"] == SCHEDULE
    ]


def test_a_calendar_published_referenced_changed_and_audited(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    start = _publish_holiday_and_schedule(kafka_settings, tmp_path)
    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path)
    try:
        skipped = eventually(
            lambda: _skipped(kafka_settings, 3),
            timeout_s=90,
            message="three occurrences skipped by the calendar",
        )
        assert read(kafka_settings, TopicRole.RUNS, CODECS.run_requested.decode) == []
        first_version = _version_of(kafka_settings)
        assert all(
            f"in calendar {CALENDAR} v{first_version}" in event["reason"]
            and "'Kairos Test Day'" in event["reason"]
            for event in skipped
        ), skipped

        changed = kairos(
            kafka_settings, "calendars", "apply", "-f", str(calendar_file(tmp_path, []))
        )
        assert changed.exit_code == 0, changed.output
        changed_at = datetime.now(UTC)
        fired = eventually(
            lambda: _fired(kafka_settings, 3),
            timeout_s=90,
            message="occurrences fire once the holiday is gone",
        )
    finally:
        ticker.stop()

    assert _version_of(kafka_settings) > first_version
    assert all(run["nominal_at"] > changed_at - timedelta(seconds=4) for run in fired)
    decided = [event["nominal_at"] for event in skipped] + [run["nominal_at"] for run in fired]
    assert len(decided) == len(set(decided)), "an occurrence was both skipped and fired"

    _assert_audit_holds(kafka_settings, start, max(decided) - timedelta(seconds=1))


def _publish_holiday_and_schedule(settings: KafkaSettings, tmp_path: Path) -> datetime:
    """Today and tomorrow a holiday; a schedule every two seconds excluding it, from a few
    seconds on (returned)."""
    today = datetime.now(UTC).date()
    holidays = [
        {"date": day.isoformat(), "name": "Kairos Test Day"}
        for day in (today, today + timedelta(days=1))
    ]
    applied = kairos(settings, "calendars", "apply", "-f", str(calendar_file(tmp_path, holidays)))
    assert applied.exit_code == 0, applied.output
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
    schedule = {
        "id": SCHEDULE,
        "every": "2s",
        "start_at": start.isoformat(),
        "exclude": [CALENDAR],
        "owner": "ops",
    }
    schedules = tmp_path / "schedules.yaml"
    schedules.write_text(yaml.safe_dump({"schedules": [schedule]}))
    published = kairos(settings, "apply", "-f", str(schedules))
    assert published.exit_code == 0, published.output
    return start


def _assert_audit_holds(settings: KafkaSettings, start: datetime, end: datetime) -> None:
    audit = kairos(
        settings, "audit", "verify", "--from", start.isoformat(), "--to", end.isoformat(), "--json"
    )
    report = json.loads(audit.stdout)
    assert audit.exit_code == 0, audit.output
    assert report["verdict"] == "holds", report


def _version_of(settings: KafkaSettings) -> int:
    shown = kairos(settings, "calendars", "show", CALENDAR, "--json")
    assert shown.exit_code == 0, shown.output
    return int(json.loads(shown.stdout)["version"]["version"])


def _skipped(settings: KafkaSettings, at_least: int) -> list[dict[str, Any]] | None:
    events = read(settings, TopicRole.RUN_EVENTS, CODECS.run_event.decode)
    skipped = [event for event in events if event["kind"] == "skipped"]
    return skipped if len(skipped) >= at_least else None


def _fired(settings: KafkaSettings, at_least: int) -> list[dict[str, Any]] | None:
    runs = read(settings, TopicRole.RUNS, CODECS.run_requested.decode)
    return runs if len(runs) >= at_least else None


def test_apply_refuses_a_schedule_naming_an_unpublished_calendar(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    schedules = tmp_path / "schedules.yaml"
    schedules.write_text(
        yaml.safe_dump(
            {"schedules": [{"id": SCHEDULE, "cron": "0 9 * * *", "exclude": ["nobody"]}]}
        )
    )
    refused = kairos(kafka_settings, "apply", "-f", str(schedules))
    assert refused.exit_code == 2
    assert "calendar 'nobody' is not published" in refused.stderr
    assert "kairos calendars apply" in refused.stderr
    listed = kairos(kafka_settings, "schedules", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert SCHEDULE not in listed.stdout
