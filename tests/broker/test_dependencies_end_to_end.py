"""A chain across two teams, end to end: real broker, ticker and executor processes.

The ledger team's export waits for the payments team's settlement of the same instant, which
payments grants it. The settlement fails; the export is held; payments re-runs the settlement,
which succeeds, and the export is released and runs after it. The audit holds. A downstream run
that starts before its upstream succeeded (a RunRequested that does not say it waits, as a
faulty ticker would fire it) makes the audit fail.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.job_kinds import JobSpec
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import run_requested_record
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import start_executor, start_ticker

CODECS = make_codecs()


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


def _events(settings: KafkaSettings) -> list[tuple[str, str]]:
    topic = settings.layout.name(TopicRole.RUN_EVENTS)
    return [
        (value["run_id"], value["kind"])
        for _, value in read_topic(settings.bootstrap_servers, topic, CODECS.run_event.decode)
    ]


def _publish_chain(settings: KafkaSettings, at: datetime, flag: Path, ledger: Path) -> None:
    """payments' settlement (fails until `flag` exists) and ledger's export waiting for it."""
    settle = JobSpec.model_validate(
        {"kind": "shell", "command": f"test -e {flag} && echo settle >> {ledger}"}
    )
    export = JobSpec.model_validate({"kind": "shell", "command": f"echo export >> {ledger}"})
    with SchedulesClient(settings, changed_by="tests") as client:
        client.upsert(
            Schedule.model_validate(
                {"id": "payments.settle", "at": at, "owner": "payments", "job": settle,
                 "max_attempts": 1, "downstream_teams": ["ledger"]}
            )
        )  # fmt: skip
        client.upsert(
            Schedule.model_validate(
                {"id": "ledger.export", "at": at, "owner": "ledger", "job": export,
                 "upstream": [{"schedule": "payments.settle", "match": "same_instant"}],
                 "upstream_wait": "10m"}
            )
        )  # fmt: skip


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
    assert audit.exit_code in (0, 1), audit.output
    report: dict[str, Any] = json.loads(audit.stdout)
    return report


def test_a_failed_upstream_holds_its_downstream_until_a_rerun_succeeds_and_the_audit_holds(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    flag, ledger = tmp_path / "settlement-fixed", tmp_path / "ledger"
    began = datetime.now(UTC)
    at = (began + timedelta(seconds=8)).replace(microsecond=0)
    _publish_chain(kafka_settings, at, flag, ledger)
    settle, export = run_id("payments.settle", at), run_id("ledger.export", at)
    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path)
    executor = start_executor(kafka_settings, "e1", tmp_path / "e1", tmp_path)
    try:
        eventually(
            lambda: (settle, "dead_lettered") in _events(kafka_settings),
            timeout_s=60,
            message="the settlement failed",
        )
        assert [kind for run, kind in _events(kafka_settings) if run == export] == []
        flag.touch()
        rerun = kairos(kafka_settings, "schedules", "trigger", "payments.settle", "--at",
                       at.isoformat(), "--request-id", "fixed", "-o", "json")  # fmt: skip
        assert rerun.exit_code == 0, rerun.output
        eventually(
            lambda: (export, "succeeded") in _events(kafka_settings),
            timeout_s=60,
            message="the export was released and ran",
        )
    finally:
        executor.stop()
        ticker.stop()
    assert ledger.read_text().split() == ["settle", "export"]
    described = kairos(kafka_settings, "schedules", "describe", "ledger.export", "-o", "json")
    assert described.exit_code == 0, described.output
    (waits_for,) = json.loads(described.stdout)["waits_for"]
    assert waits_for["schedule"] == "payments.settle", waits_for
    assert waits_for["state"].startswith("succeeded at "), waits_for
    report = _audit(kafka_settings, began - timedelta(minutes=1))
    assert report["verdict"] == "holds", report


def _fire_without_its_wait(settings: KafkaSettings, at: datetime, ledger: Path) -> str:
    """ledger.export's run at `at`, fired now without saying what it waits for, as a faulty
    ticker would: the executor runs it at once."""
    export = JobSpec.model_validate({"kind": "shell", "command": f"echo export >> {ledger}"})
    schedule = Schedule.model_validate(
        {"id": "ledger.export", "at": at, "owner": "ledger", "job": export}
    )
    decision = Decision(run_id("ledger.export", at), "ledger.export", at, at, Action.FIRE)
    record = run_requested_record(
        decision,
        ScheduleState(schedule, 0, at),
        fired_at=datetime.now(UTC),
        partition=0,
        ticker_instance="faulty-ticker",
    )
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers})
    producer.produce(
        settings.layout.name(TopicRole.RUNS),
        CODECS.run_requested.encode(record),
        decision.run_id.encode(),
    )
    assert producer.flush(10) == 0
    return decision.run_id


def test_a_downstream_run_started_before_its_upstream_succeeded_fails_the_audit(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    flag, ledger = tmp_path / "never", tmp_path / "ledger"
    began = datetime.now(UTC)
    at = (began + timedelta(seconds=12)).replace(microsecond=0)
    _publish_chain(kafka_settings, at, flag, ledger)
    settle = run_id("payments.settle", at)
    executor = start_executor(kafka_settings, "e1", tmp_path / "e1", tmp_path)
    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path)
    try:
        export = _fire_without_its_wait(kafka_settings, at, ledger)
        eventually(
            lambda: (export, "succeeded") in _events(kafka_settings),
            timeout_s=60,
            message="the early export ran",
        )
        eventually(
            lambda: (settle, "dead_lettered") in _events(kafka_settings),
            timeout_s=60,
            message="the settlement failed",
        )
    finally:
        executor.stop()
        ticker.stop()
    report = _audit(kafka_settings, began - timedelta(minutes=1))
    assert report["verdict"] != "holds", report
    early = [f for f in report["findings"] if f["kind"] == "started_before_upstream"]
    assert [f["run_id"] for f in early] == [export], report["findings"]
    # The audit owes the wait from the schedule's definition, not from the record: the record
    # that dropped it is a finding of its own.
    dropped = [f for f in report["findings"] if f["kind"] == "fired_without_its_wait"]
    assert [f["run_id"] for f in dropped] == [export], report["findings"]
