"""`schedules describe --view` and `runs late --view` answer from the console's view what the
topics answer: the same last runs, the same missed deadlines, and how far behind the view is."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kairos.cli.view_index import records_behind
from kairos.core.schedule import Schedule
from kairos.core.schedule_lifecycle import Deadline
from kairos.services.console.follower import ViewFollower
from kairos.services.console.view import ConsoleView
from kairos.streams.kafka.settings import KafkaSettings
from tests.broker.test_replay_audit import Topics, kairos
from tests.helpers import eventually

SECOND = timedelta(seconds=1)
_SHOWN = ("run_id", "nominal_at", "fired_at", "lateness_ms", "status", "attempts", "commits")


def _history(settings: KafkaSettings) -> tuple[Schedule, datetime]:
    """Six fires of a schedule that must start within a second: on time and done, started
    late (and reported so), never started, skipped (not fired), and two not reported on yet."""
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - 20 * SECOND
    schedule = Schedule(
        id="ops.deadline",
        every=2 * SECOND,
        start_at=start,
        owner="ops",
        deadline=Deadline(start_by=SECOND),
    )
    topics = Topics(settings)
    topics.schedule(schedule, start - 10 * SECOND, "oscar")
    nominals = [start + 2 * n * SECOND for n in range(6)]
    for nominal in nominals[:3] + nominals[4:]:
        topics.fire(schedule, nominal)
    topics.event(schedule, nominals[0], "started")
    topics.event(schedule, nominals[0], "succeeded")
    topics.event(
        schedule,
        nominals[1],
        "deadline_missed",
        reason=f"start_by 1s: not started by {nominals[1] + SECOND:%Y-%m-%dT%H:%M:%SZ}",
    )
    topics.event(schedule, nominals[3], "skipped", by="ticker-a", reason="misfire skip")
    topics.flush()
    return schedule, start


def _json(settings: KafkaSettings, *args: str) -> Any:
    result = kairos(settings, *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_describe_and_runs_late_answer_from_the_view_what_the_topics_answer(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    schedule, start = _history(kafka_settings)
    url = f"sqlite:///{tmp_path / 'view.sqlite'}"
    missing = kairos(kafka_settings, "runs", "late", "--view", url)
    assert missing.exit_code == 2 and "no console view at" in missing.output, missing.output
    # A database that holds no view is refused and left as it was: the console owns the view.
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).close()
    refused = kairos(kafka_settings, "runs", "late", "--view", f"sqlite:///{other}")
    assert refused.exit_code == 2 and "no console view there" in refused.output, refused.output
    with sqlite3.connect(other) as untouched:
        assert untouched.execute("SELECT name FROM sqlite_master").fetchall() == []

    view = ConsoleView(url)  # as the console creates it
    follower = ViewFollower(kafka_settings, view)
    follower.start()
    try:
        eventually(
            lambda: records_behind(view, kafka_settings) == 0,
            timeout_s=60,
            message="the console's view did not catch up with the topics",
        )
    finally:
        follower.stop()

    since = ["--since", f"{start:%Y-%m-%dT%H:%M:%SZ}"]
    from_topics = _json(kafka_settings, "runs", "late", *since, "--json")
    from_view = _json(kafka_settings, "runs", "late", *since, "--view", url, "--json")
    assert from_view == from_topics
    missed = {(row["run_id"], row["reported_by"]) for row in from_topics}
    assert len(missed) == 4, from_topics  # all but the one on time and the skipped one
    assert any(reporter == "exec-1" for _, reporter in missed), from_topics

    described = _json(
        kafka_settings, "schedules", "describe", schedule.id, "--runs", "4", "-o", "json"
    )
    indexed = _json(
        kafka_settings,
        "schedules",
        "describe",
        schedule.id,
        "--runs",
        "4",
        "--view",
        url,
        "-o",
        "json",
    )
    assert described["runs_from"] == "topics" and indexed["runs_from"] == "view"
    assert indexed["view_records_behind"] == 0
    shown = [{k: run[k] for k in _SHOWN} for run in described["last_runs"]]
    assert [{k: run[k] for k in _SHOWN} for run in indexed["last_runs"]] == shown
    assert [run["status"] for run in shown] == ["requested", "skipped", "requested", "requested"]
