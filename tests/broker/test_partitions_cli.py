"""`kairos partitions` against a real broker and real tickers, a SIGKILL included."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from tests.helpers import eventually, unique_name
from tests.processes import start_ticker


def partitions(settings: KafkaSettings, group: str, *args: str) -> Result:
    return CliRunner().invoke(
        app,
        [
            "--bootstrap-servers",
            settings.bootstrap_servers,
            "--topic-prefix",
            settings.topic_prefix,
            "partitions",
            "--group-id",
            group,
            *args,
        ],
    )


def status(settings: KafkaSettings, group: str) -> dict[str, Any]:
    result = partitions(settings, group, "--json")
    assert result.exit_code in (0, 1), result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_without_a_ticker_every_partition_is_shown_without_owner(
    kafka_settings: KafkaSettings,
) -> None:
    group = unique_name("tickers")
    result = partitions(kafka_settings, group, "--json")
    assert result.exit_code == 1
    assert result.stdout, result.stderr
    document = json.loads(result.stdout)
    assert document["unowned"] == [0, 1, 2, 3]
    assert document["members"] == []
    assert all(p["owner"] is None and p["lag"] is None for p in document["partitions"])
    human = partitions(kafka_settings, group)
    assert human.exit_code == 1
    assert "NO OWNER for partition(s) 0, 1, 2, 3" in human.stdout


def test_a_teams_partitions_are_listed_with_how_many_of_its_schedules_each_holds(
    kafka_settings: KafkaSettings,
) -> None:
    payments = [f"payments-{n}" for n in range(6)]
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        client.upsert_all(Schedule(id=i, cron="0 3 * * *", owner="payments") for i in payments)
        client.upsert(Schedule(id="growth-0", cron="0 3 * * *", owner="growth"))
    expected = Counter(partition_for(i, kafka_settings.schedules_partitions) for i in payments)
    result = partitions(kafka_settings, unique_name("tickers"), "--team", "payments", "--json")
    assert result.exit_code == 1, result.output  # no ticker runs: its partitions have none
    document = json.loads(result.stdout)
    assert document["team"] == "payments"
    listed = {p["partition"]: p["team_schedules"] for p in document["partitions"]}
    assert listed == dict(expected)
    assert document["unowned"] == sorted(expected)
    none = partitions(kafka_settings, unique_name("tickers"), "--team", "nobody", "--json")
    assert json.loads(none.stdout)["partitions"] == [] and none.exit_code == 0


def test_partitions_show_the_owners_and_the_handover_after_a_sigkill(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = unique_name("tickers")
    monkeypatch.setenv("KAIROS_TICKER_GROUP", group)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
    count = 100
    with SchedulesClient(kafka_settings, changed_by="partitions-test") as client:
        client.upsert_all(
            [
                Schedule(id=f"job-{n:03d}", every=timedelta(seconds=2), start_at=start)
                for n in range(count)
            ]
        )
    killed = start_ticker(kafka_settings, "a", tmp_path / "a", tmp_path)
    survivor = start_ticker(kafka_settings, "b", tmp_path / "b", tmp_path)
    try:
        killed.wait_for_log("handover event=assigned")
        survivor.wait_for_log("handover event=assigned")

        def shared() -> dict[str, Any]:
            document = status(kafka_settings, group)
            owners = {p["owner"] for p in document["partitions"]}
            reported = all(p["reported_by"] == p["owner"] for p in document["partitions"])
            assert document["state"] == "stable" and owners == {"a", "b"} and reported, document
            # An owner's count is written with each commit, before that commit's own changes
            # reach its store: the commit taking the upserts still reports the count before them.
            assert sum(p["schedules"] for p in document["partitions"]) == count, document
            return document

        before = eventually(shared, timeout_s=60, interval_s=1, message="no stable split")
        assert sum(p["schedules"] for p in before["partitions"]) == count
        assert all(p["lag"] == 0 for p in before["partitions"])
        assert {m["instance"] for m in before["members"]} == {"a", "b"}
        assert all(p["next_due"] is not None for p in before["partitions"])
        moved = [p["partition"] for p in before["partitions"] if p["owner"] == "a"]

        killed.kill()
        killed_at = datetime.now(UTC)

        def taken_over() -> dict[str, Any]:
            document = status(kafka_settings, group)
            taken = [document["partitions"][p] for p in moved]
            assert all(p["owner"] == "b" and p["reported_by"] == "b" for p in taken), document
            return document

        after = eventually(taken_over, timeout_s=60, interval_s=1, message="no takeover")
        assert after["unowned"] == []
        assert [m["instance"] for m in after["members"]] == ["b"]
        assert all(
            p["since"] >= f"{killed_at:%Y-%m-%dT%H:%M:%S}"
            for p in (after["partitions"][p] for p in moved)
        )
        assert sum(p["schedules"] for p in after["partitions"]) == count
        human = partitions(kafka_settings, group)
        assert human.exit_code == 0, human.output
        assert "stable, 1 member" in human.stdout
        assert "NO OWNER" not in human.stdout
    finally:
        assert survivor.stop() == 0, survivor.log()[-3000:]
