"""`kairos schedules trigger` and `backfill` end to end: real broker, ticker and executor.

Each request is fired by the ticker owning the schedule, runs once in the executor under its own
re-run id, asking again with the same request id fires nothing new, and the audit counts the
re-runs as intentional: the window holds with no duplicate.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.job_kinds import JobSpec
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import start_executor, start_ticker

CODECS = make_codecs()
SCHEDULE = "ops.hourly-report"


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


def _runs(settings: KafkaSettings) -> list[dict[str, Any]]:
    topic = settings.layout.name(TopicRole.RUNS)
    return [
        value
        for _, value in read_topic(settings.bootstrap_servers, topic, CODECS.run_requested.decode)
        if value["schedule_id"] == SCHEDULE
    ]


def _succeeded(settings: KafkaSettings) -> list[str]:
    topic = settings.layout.name(TopicRole.RUN_EVENTS)
    return [
        value["run_id"]
        for _, value in read_topic(settings.bootstrap_servers, topic, CODECS.run_event.decode)
        if value["schedule_id"] == SCHEDULE and value["kind"] == "succeeded"
    ]


def _fired(settings: KafkaSettings, run_ids: set[str]) -> list[dict[str, Any]] | None:
    runs = [run for run in _runs(settings) if run["run_id"] in run_ids]
    return runs if {run["run_id"] for run in runs} == run_ids else None


def _requested(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _publish_hourly_noting_its_period(settings: KafkaSettings, told: Path) -> None:
    """The hourly schedule; each run writes down the period it was told it is for."""
    job = JobSpec.model_validate(
        {
            "kind": "shell",
            "command": 'echo "$KAIROS_RUN_ID $KAIROS_INTERVAL_START $KAIROS_INTERVAL_END" '
            f">> {told}",
        }
    )
    with SchedulesClient(settings, changed_by="ops") as client:
        client.upsert(Schedule(id=SCHEDULE, cron="0 * * * *", owner="ops", job=job))


def test_trigger_and_backfill_run_once_each_and_the_audit_counts_them(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    told = tmp_path / "told"
    _publish_hourly_noting_its_period(kafka_settings, told)
    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path)
    executor = start_executor(kafka_settings, "e1", tmp_path / "e1", tmp_path)
    try:
        began = datetime.now(UTC)
        # Three hourly occurrences in any minute of the hour, as absolute instants: the default
        # request id is made of them, so a retry is the same.
        last_hour = (began - timedelta(minutes=1)).replace(minute=0, second=0, microsecond=0)
        window = [
            (last_hour - timedelta(hours=2, minutes=30)).isoformat(),
            (last_hour + timedelta(seconds=30)).isoformat(),
        ]
        backfill = ["schedules", "backfill", SCHEDULE, "--from", window[0], "--to", window[1]]
        asked = _requested(kairos(kafka_settings, *backfill, "--reason", "incident", "-o", "json"))
        assert len(asked["runs"]) == 3, asked
        assert all("~rerun-backfill-" in run for run in asked["runs"]), asked
        triggered = _requested(
            kairos(kafka_settings, "schedules", "trigger", SCHEDULE, "-o", "json")
        )
        wanted = {*asked["runs"], *triggered["runs"]}
        eventually(lambda: _fired(kafka_settings, wanted), timeout_s=60, message="re-runs fired")
        eventually(
            lambda: wanted <= set(_succeeded(kafka_settings)) or None,
            timeout_s=60,
            message="every re-run executed",
        )

        # The same backfill again (a retried command), then a trigger with an id of its own:
        # the ticker takes the partition in order, so once the trigger fired the retry was seen.
        again = _requested(kairos(kafka_settings, *backfill, "-o", "json"))
        assert again["request_id"] == asked["request_id"]
        second = _requested(
            kairos(
                kafka_settings,
                "schedules",
                "trigger",
                SCHEDULE,
                "--request-id",
                "second",
                "-o",
                "json",
            )
        )
        assert second["runs"][0].endswith("~rerun-second")
        eventually(lambda: _fired(kafka_settings, set(second["runs"])), timeout_s=60)
        runs = [run["run_id"] for run in _runs(kafka_settings) if run["run_id"] in wanted]
        assert sorted(runs) == sorted(wanted), "a retried request fired its runs again"
        assert all(run["rerun_request_id"] for run in _fired(kafka_settings, wanted) or [])
        _assert_each_run_was_for_its_hour(kafka_settings, told, set(asked["runs"]))
    finally:
        executor.stop()
        ticker.stop()

    _assert_the_audit_counts_five_reruns(kafka_settings, began - timedelta(hours=4))


def _assert_the_audit_counts_five_reruns(settings: KafkaSettings, start: datetime) -> None:
    report = _audit(settings, start)
    assert report["verdict"] == "holds", report
    assert report["reruns"] == 5, report
    assert report["duplicates"] == 0 and report["lost"] == 0, report


def _audit(settings: KafkaSettings, start: datetime) -> dict[str, Any]:
    audit = kairos(
        settings,
        "audit",
        "verify",
        "--from",
        start.isoformat(),
        "--to",
        (datetime.now(UTC) - timedelta(seconds=1)).isoformat(),
        "--json",
    )
    assert audit.exit_code == 0, audit.output
    report: dict[str, Any] = json.loads(audit.stdout)
    return report


def test_a_rerun_of_a_schedule_that_does_not_exist_is_refused(
    kafka_settings: KafkaSettings,
) -> None:
    refused = kairos(kafka_settings, "schedules", "trigger", "nobody.here")
    assert refused.exit_code == 2
    assert "no schedule 'nobody.here'" in refused.stderr
    future = kairos(
        kafka_settings, "schedules", "trigger", SCHEDULE, "--at", "2999-01-01T00:00:00Z"
    )
    assert future.exit_code == 2
    assert "in the future" in future.stderr


def _assert_each_run_was_for_its_hour(settings: KafkaSettings, told: Path, runs: set[str]) -> None:
    """A backfilled hourly run is for the hour before its nominal instant, on the wire and in
    its job's environment, however late it ran."""
    for run in _fired(settings, runs) or []:
        assert run["interval_start"] == run["nominal_at"] - timedelta(hours=1), run
        assert run["timezone"] == "UTC", run
    lines = eventually(
        lambda: told.is_file() and [line.split() for line in told.read_text().splitlines()],
        timeout_s=30,
        message="the runs wrote down their periods",
    )
    periods = {run_id: (start, end) for run_id, start, end in lines if run_id in runs}
    assert set(periods) == runs, lines
    for run_id, (start, end) in periods.items():
        nominal = datetime.fromisoformat(run_id.split("@")[1].split("~")[0].replace("Z", "+00:00"))
        assert (datetime.fromisoformat(start), datetime.fromisoformat(end)) == (
            nominal - timedelta(hours=1),
            nominal,
        ), run_id
