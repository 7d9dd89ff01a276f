"""`kairos topics`: declared once, created idempotently and replicated as set, drift flagged,
problems checked; the ticker refuses a partition count other than the setting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole, create_topics
from tests.broker.test_ticker_failover import (
    assert_each_once,
    committed_runs,
    expected_run_ids,
    publish_every,
    wait_until_all_fired,
)
from tests.helpers import eventually, unique_name
from tests.processes import start_ticker


def test_create_is_idempotent_and_describe_flags_drift(
    kafka_bootstrap: str, admin: AdminClient
) -> None:
    prefix = unique_name("topics") + "."
    args = ["--bootstrap-servers", kafka_bootstrap, "--topic-prefix", prefix]
    args += ["--schedules-partitions", "4"]
    runner = CliRunner()

    first = runner.invoke(app, [*args, "topics", "create"])
    assert first.exit_code == 0, first.output
    assert f"created {prefix}schedules" in first.output
    assert f"created {prefix}ticker-changelog" in first.output
    assert f"created {prefix}calendars" in first.output

    second = runner.invoke(app, [*args, "topics", "create"])
    assert second.exit_code == 0
    assert "all topics exist" in second.output

    clean = runner.invoke(app, [*args, "topics", "describe", "--json"])
    assert clean.exit_code == 0, clean.output
    described = {entry["name"]: entry for entry in json.loads(clean.output)}
    assert described[f"{prefix}schedules"]["partitions"] == 4
    assert described[f"{prefix}ticker-changelog"]["partitions"] == 4
    assert described[f"{prefix}calendars"]["partitions"] == 1
    assert all(entry["drift"] == [] for entry in described.values())

    resource = ConfigResource(
        ResourceType.TOPIC,
        f"{prefix}schedules",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)

    def drift_reported() -> Result:
        result = runner.invoke(app, [*args, "topics", "describe"])
        assert result.exit_code == 1, result.output
        return result

    # Config changes reach the broker's metadata cache asynchronously.
    drifted = eventually(drift_reported, timeout_s=15, message="drift not reported")
    assert "DRIFT" in drifted.output
    assert "cleanup.policy: declared compact, broker has delete" in drifted.output


def test_unreachable_broker_is_a_clear_error() -> None:
    unreachable = ["--bootstrap-servers", "127.0.0.1:1", "--timeout", "2"]
    result = CliRunner().invoke(app, [*unreachable, "topics", "describe"], catch_exceptions=False)
    assert result.exit_code == 2
    assert "no Kafka broker answered at 127.0.0.1:1 (from --bootstrap-servers)" in result.output
    # Could not check (2), never "found problems" (1).
    checked = CliRunner().invoke(app, [*unreachable, "topics", "check"])
    assert checked.exit_code == 2
    assert "no Kafka broker answered at 127.0.0.1:1" in checked.output


def _set_config(admin: AdminClient, topic: str, key: str, value: str) -> None:
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def _created(kafka_bootstrap: str, admin: AdminClient, partitions: int = 4) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=unique_name("topology") + ".",
        schedules_partitions=partitions,
    )
    create_topics(admin, settings.layout)
    return settings


def _check(settings: KafkaSettings, *extra: str) -> Result:
    args = ["--bootstrap-servers", settings.bootstrap_servers, "--topic-prefix"]
    args += [settings.topic_prefix, "--schedules-partitions", str(settings.schedules_partitions)]
    return CliRunner().invoke(app, [*args, "topics", "check", *extra])


def test_check_passes_a_healthy_layout_and_reports_each_misconfiguration(
    kafka_bootstrap: str, admin: AdminClient
) -> None:
    settings = _created(kafka_bootstrap, admin)
    layout = settings.layout
    healthy = _check(settings, "--json")
    assert healthy.exit_code == 0, healthy.output
    report = json.loads(healthy.stdout)
    assert report["healthy"] is True and report["problems"] == []
    # The suite's broker is a single one: the production defaults could not be met, and it says so.
    assert (report["brokers"], report["replication_factor"], report["min_insync_replicas"]) == (
        1,
        1,
        1,
    )
    assert "not the production 3 and 2" in report["warnings"][0]

    _set_config(admin, layout.name(TopicRole.SCHEDULES), "min.insync.replicas", "2")
    _set_config(admin, layout.name(TopicRole.CHANGELOG), "cleanup.policy", "delete")
    _set_config(admin, layout.name(TopicRole.RUNS), "message.timestamp.type", "CreateTime")
    _set_config(admin, layout.name(TopicRole.RUN_EVENTS), "retention.ms", "3600000")
    dead_letters = layout.name(TopicRole.DEAD_LETTERS)
    admin.delete_topics([dead_letters])[dead_letters].result(timeout=30)
    runs = layout.name(TopicRole.RUNS)
    admin.create_partitions([NewPartitions(runs, 14)])[runs].result(timeout=30)
    calendars = layout.name(TopicRole.CALENDARS)
    admin.create_partitions([NewPartitions(calendars, 2)])[calendars].result(timeout=30)
    expected = {
        (calendars, "partitions"),
        (layout.name(TopicRole.SCHEDULES), "min-insync-replicas"),
        (layout.name(TopicRole.CHANGELOG), "config"),
        (runs, "config"),
        (runs, "partitions"),
        (layout.name(TopicRole.RUN_EVENTS), "retention"),
        (dead_letters, "missing"),
    }

    def all_reported() -> list[dict[str, object]]:
        result = _check(settings, "--json")
        assert result.exit_code == 1, result.output
        problems: list[dict[str, object]] = json.loads(result.stdout)["problems"]
        assert {(p["topic"], p["kind"]) for p in problems} == expected
        return problems

    # Config changes reach the broker's metadata cache asynchronously.
    eventually(all_reported, timeout_s=20, message="not every misconfiguration reported")
    text = _check(settings)
    assert text.exit_code == 1
    lines = [line for line in text.stdout.splitlines() if "; fix: " in line]
    assert len(lines) == len(expected), text.stdout
    assert (
        f"{runs}: message.timestamp.type is CreateTime, Kairos needs LogAppendTime; fix: "
        in text.stdout
    )
    assert "7 problems" in text.stdout


def test_create_refuses_replication_the_cluster_cannot_hold(
    kafka_bootstrap: str, admin: AdminClient
) -> None:
    prefix = unique_name("replication") + "."
    args = ["--bootstrap-servers", kafka_bootstrap, "--topic-prefix", prefix, "topics", "create"]
    too_many = CliRunner().invoke(app, [*args, "--replication-factor", "2"])
    assert too_many.exit_code == 2
    assert "replication factor 2 needs at least 2 brokers and the cluster has 1" in too_many.output
    impossible_isr = CliRunner().invoke(app, [*args, "--min-insync-replicas", "2"])
    assert impossible_isr.exit_code == 2
    assert "min.insync.replicas 2 exceeds the replication factor 1" in impossible_isr.output
    assert not any(name.startswith(prefix) for name in admin.list_topics(timeout=10).topics)

    explicit = CliRunner().invoke(
        app, [*args, "--replication-factor", "1", "--min-insync-replicas", "1"]
    )
    assert explicit.exit_code == 0, explicit.output
    assert f"created {prefix}runs (replication factor 1, min.insync.replicas 1)" in explicit.output
    # Explicit values are what the operator chose: no warning about the defaults.
    assert "warning" not in explicit.output


def test_ticker_refuses_a_grown_schedules_topic(
    kafka_bootstrap: str, admin: AdminClient, tmp_path: Path
) -> None:
    settings = _created(kafka_bootstrap, admin)
    schedules = settings.layout.name(TopicRole.SCHEDULES)
    admin.create_partitions([NewPartitions(schedules, 6)])[schedules].result(timeout=30)

    def grown_seen() -> bool:
        return len(admin.list_topics(schedules, timeout=10).topics[schedules].partitions) == 6

    eventually(grown_seen, timeout_s=15, message="the grown topic is not in the metadata")
    ticker = start_ticker(settings, "t1", tmp_path / "state", tmp_path)
    code = ticker.process.wait(timeout=60)
    ticker.stop()
    assert code == 2, ticker.log()
    assert (
        f"refusing to fire: {schedules}: 6 partitions, the deployment's setting is 4; fix: "
        in ticker.log()
    )
    assert "docs/topics.md#growing" in ticker.log()


def test_a_ticker_started_before_its_schedules_topic_waits_for_it_then_fires(
    kafka_bootstrap: str, admin: AdminClient, tmp_path: Path
) -> None:
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=unique_name("early") + ".",
        schedules_partitions=2,
    )
    calendars = settings.layout.name(TopicRole.CALENDARS)
    spec = next(s for s in settings.layout.specs() if s.name == calendars)
    created = admin.create_topics([NewTopic(spec.name, spec.partitions, 1, config=spec.config)])
    created[calendars].result(timeout=30)
    ticker = start_ticker(settings, "early", tmp_path / "state", tmp_path)
    try:
        schedules = settings.layout.name(TopicRole.SCHEDULES)
        ticker.wait_for_log(f"cannot learn the partition count of {schedules}")
        assert "create it with `kairos topics create`" in ticker.log()
        assert ticker.process.poll() is None, "the ticker gave up on a topic not created yet"

        create_topics(admin, settings.layout)
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=8)
        ids = publish_every(settings, count=3, period_s=2, start=start)
        expected = expected_run_ids(ids, start, 2, start + timedelta(seconds=2))
        wait_until_all_fired(settings, expected, 60, "the ticker did not fire once its topics came")
        assert_each_once(committed_runs(settings), expected)
    finally:
        assert ticker.stop(timeout_s=60) == 0, ticker.log()[-3000:]
