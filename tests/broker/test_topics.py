"""`kairos topics`: declared once, created idempotently, drift flagged."""

from __future__ import annotations

import json

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from tests.helpers import eventually, unique_name


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

    second = runner.invoke(app, [*args, "topics", "create"])
    assert second.exit_code == 0
    assert "all topics exist" in second.output

    clean = runner.invoke(app, [*args, "topics", "describe", "--json"])
    assert clean.exit_code == 0, clean.output
    described = {entry["name"]: entry for entry in json.loads(clean.output)}
    assert described[f"{prefix}schedules"]["partitions"] == 4
    assert described[f"{prefix}ticker-changelog"]["partitions"] == 4
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
    result = CliRunner().invoke(
        app,
        ["--bootstrap-servers", "127.0.0.1:1", "--timeout", "2", "topics", "describe"],
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    assert "no Kafka broker answered at 127.0.0.1:1 (from --bootstrap-servers)" in result.output
