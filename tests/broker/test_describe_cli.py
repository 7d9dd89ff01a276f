"""`kairos schedules describe` and `schedules list` filters against a real broker, with a real
ticker and executor firing and running the schedules described."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.schedule import JobSpec, Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from tests.helpers import eventually, unique_name
from tests.processes import start_executor, start_ticker

NIGHTLY = Schedule(
    id="billing.nightly",
    cron="30 2 * * *",
    timezone="Europe/Paris",
    owner="billing",
    labels={"team": "billing", "tier": "batch"},
)
REPORT = Schedule(id="ops.report", cron="0 8 * * 1", owner="ops", labels={"team": "ops"})
LEGACY = Schedule(
    id="billing.legacy", cron="0 3 * * *", owner="billing", labels={"team": "billing"}, paused=True
)


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


def listed(settings: KafkaSettings, *args: str) -> list[str]:
    result = kairos(settings, "schedules", "list", *args, "-o", "json")
    assert result.exit_code == 0, result.output
    return [entry["schedule"]["id"] for entry in json.loads(result.stdout)]


@pytest.fixture
def published(kafka_settings: KafkaSettings) -> KafkaSettings:
    with SchedulesClient(kafka_settings, changed_by="alice") as client:
        client.upsert_all([NIGHTLY, REPORT, LEGACY], reason="initial")
    return kafka_settings


def test_list_filters_by_labels_owner_and_state(published: KafkaSettings) -> None:
    assert listed(published, "-l", "team=billing") == [LEGACY.id, NIGHTLY.id]
    assert listed(published, "-l", "team==billing,tier!=batch") == [LEGACY.id]
    # `!=` also matches a schedule without the label, as in kubectl.
    assert listed(published, "-l", "tier!=batch") == [LEGACY.id, REPORT.id]
    assert listed(published, "-l", "tier") == [NIGHTLY.id]
    assert listed(published, "-l", "!tier") == [LEGACY.id, REPORT.id]
    assert listed(published, "--owner", "billing", "--active") == [NIGHTLY.id]
    assert listed(published, "--paused") == [LEGACY.id]

    as_yaml = kairos(published, "schedules", "list", "--owner", "ops", "-o", "yaml")
    assert as_yaml.exit_code == 0, as_yaml.output
    [only] = yaml.safe_load(as_yaml.stdout)
    assert Schedule.model_validate(only["schedule"]) == REPORT

    table = kairos(published, "schedules", "list", "-l", "team=ops")
    assert table.stdout.splitlines()[1].split()[0] == REPORT.id
    assert "team=ops" in table.stdout


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        ("team in (billing)", "set-based requirements (in, notin) are not supported"),
        ("team=billing,,tier", "has an empty requirement"),
        ("team=bill ing", "has an invalid value 'bill ing'"),
        ("=billing", "has no valid label key"),
    ],
)
def test_an_invalid_selector_is_a_clear_error(
    published: KafkaSettings, selector: str, says: str
) -> None:
    result = kairos(published, "schedules", "list", "-l", selector)
    assert result.exit_code == 2
    assert says in result.stderr
    assert "-l team=billing,tier!=batch" in result.stderr


def test_json_and_a_different_output_are_refused(published: KafkaSettings) -> None:
    result = kairos(published, "schedules", "get", NIGHTLY.id, "--json", "-o", "yaml")
    assert result.exit_code == 2
    assert "--json asks for json but -o asks for yaml" in result.output


def test_describe_a_schedule_nothing_fires_yet(published: KafkaSettings) -> None:
    result = kairos(published, "schedules", "describe", NIGHTLY.id, "-n", "3", "-o", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert Schedule.model_validate(document["schedule"]) == NIGHTLY
    assert (document["owner"], document["labels"]) == ("billing", NIGHTLY.labels)
    place = document["placement"]
    assert place["partition"] == partition_for(NIGHTLY.id, published.schedules_partitions)
    assert place["ticker"] is None
    # 02:30 every night, unless a DST gap moved it (the fire then says so).
    assert len(document["next_fires"]) == 3
    assert all(f["wall"][11:16] == "02:30" or f["dst"] for f in document["next_fires"])
    assert document["last_runs"] == []
    [change] = document["last_changes"]
    assert (change["changed_by"], change["reason"], change["change"]) == (
        "alice",
        "initial",
        "upserted",
    )


def test_describe_notes_the_dst_gap_of_a_next_fire(published: KafkaSettings) -> None:
    # 02:30 does not exist in Paris on 2027-03-28.
    after = "2027-03-27T00:00:00Z"
    result = kairos(published, "schedules", "describe", NIGHTLY.id, "-n", "2", "--from", after)
    assert result.exit_code == 0, result.output
    assert "2027-03-28T03:00:00+02:00  [DST gap: 02:30 does not exist that day" in result.stdout


def test_an_unknown_id_suggests_the_close_one(published: KafkaSettings) -> None:
    result = kairos(published, "schedules", "describe", "billing.nightyl")
    assert result.exit_code == 2
    assert "no schedule 'billing.nightyl'" in result.stderr
    assert "did you mean 'billing.nightly'?" in result.stderr
    assert "Traceback" not in result.output
    far = kairos(published, "schedules", "describe", "zzz")
    assert far.exit_code == 2 and "did you mean" not in far.stderr
    assert "never published" in far.stderr

    with SchedulesClient(published, changed_by="dave") as client:
        client.delete(REPORT.id, reason="replaced by ops.weekly")
    gone = kairos(published, "schedules", "describe", REPORT.id)
    assert gone.exit_code == 2
    assert "deleted at " in gone.stderr
    assert "by dave: replaced by ops.weekly" in gone.stderr


def describe(settings: KafkaSettings, schedule_id: str, *args: str) -> dict[str, Any]:
    result = kairos(settings, "schedules", "describe", schedule_id, "-o", "json", *args)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_describe_shows_the_ticker_and_the_runs_it_fired(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = unique_name("tickers")
    monkeypatch.setenv("KAIROS_TICKER_GROUP", group)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    fine = Schedule(id="fine", every=timedelta(seconds=1), start_at=start, owner="ops")
    broken = Schedule(
        id="broken",
        every=timedelta(seconds=2),
        start_at=start,
        job=JobSpec.model_validate({"kind": "shell", "command": "exit 3"}),
        max_attempts=2,
        retry_backoff=timedelta(milliseconds=200),
    )
    with SchedulesClient(kafka_settings, changed_by="carol") as client:
        client.upsert_all([fine, broken], reason="describe test")
    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path, group_id=group)
    executor = start_executor(kafka_settings, "e1", tmp_path / "e1", tmp_path)
    try:

        def finished(schedule_id: str, wanted: str) -> list[dict[str, Any]]:
            """The shown runs that ended `wanted`: the newest may still be running."""
            document = describe(kafka_settings, schedule_id, "--runs", "4")
            assert document["placement"]["ticker"] == "t1"
            runs = [run for run in document["last_runs"] if run["status"] == wanted]
            assert len(runs) >= 2, document["last_runs"]
            return runs

        succeeded = eventually(lambda: finished("fine", "succeeded"), timeout_s=60)
        assert all(run["lateness_ms"] is not None for run in succeeded)
        assert all(run["ticker_instance"] == "t1" for run in succeeded)
        assert all(run["attempts"] == 1 for run in succeeded)
        failed = eventually(lambda: finished("broken", "dead_lettered"), timeout_s=60)
        assert all(run["attempts"] == 2 for run in failed)
        human = kairos(kafka_settings, "schedules", "describe", "broken")
        assert human.exit_code == 0, human.output
        assert "ticker      t1 " in human.stdout
        assert "OUTCOME" in human.stdout and "dead_lettered" in human.stdout
    finally:
        executor.stop()
        ticker.stop()


@pytest.mark.parametrize(
    "command",
    [
        ["schedules", "list"],
        ["schedules", "get", NIGHTLY.id],
        ["schedules", "describe", NIGHTLY.id],
        ["runs", "list"],
        ["calendars", "list"],
        ["partitions", "--group-id", "describe-test-no-tickers"],
    ],
)
def test_every_read_command_prints_one_document_as_json_or_yaml(
    published: KafkaSettings, command: list[str]
) -> None:
    as_json = kairos(published, *command, "-o", "json")
    as_yaml = kairos(published, *command, "-o", "yaml")
    alias = kairos(published, *command, "--json")
    # partitions exits 1 when nobody owns a partition, here none has an owner: still printed.
    assert as_json.exit_code == as_yaml.exit_code == alias.exit_code, as_json.output
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout) == json.loads(alias.stdout)
