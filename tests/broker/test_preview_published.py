"""`kairos preview --id/--owner` against a real broker: the schedules `kairos apply` published."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.ownership import Team
from kairos.core.quotas import Quota
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.team_events import publish_team_change

SCHEDULES = """
schedules:
  - id: billing.settle
    cron: "30 2 * * *"
    timezone: America/New_York
    owner: billing
  - id: billing.close
    cron: "0 0 * * *"
    owner: billing
    jitter: 10m
  - id: billing.retired
    cron: "0 0 * * *"
    owner: billing
  - id: ops.report
    cron: "0 0 * * *"
    owner: ops
"""
FROM = "2027-03-13T12:00:00Z"


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = [
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--topic-prefix",
        settings.topic_prefix,
        "--schedules-partitions",
        str(settings.schedules_partitions),
    ]
    return CliRunner().invoke(app, [*connection, *args])


def preview_json(settings: KafkaSettings, *args: str) -> Any:
    result = kairos(settings, "preview", "--from", FROM, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def published(kafka_settings: KafkaSettings, tmp_path: Path) -> KafkaSettings:
    path = tmp_path / "schedules.yaml"
    path.write_text(SCHEDULES, encoding="utf-8")
    applied = kairos(kafka_settings, "apply", "-f", str(path))
    assert applied.exit_code == 0, applied.output
    deleted = kairos(kafka_settings, "schedules", "delete", "billing.retired")
    assert deleted.exit_code == 0, deleted.output
    return kafka_settings


def test_preview_by_id_shows_the_published_definition(published: KafkaSettings) -> None:
    assert preview_json(published, "--id", "billing.settle", "-n", "2") == {
        "billing.settle": ["2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"]
    }
    both = preview_json(published, "--id", "ops.report", "--id", "billing.settle", "-n", "1")
    assert list(both) == ["ops.report", "billing.settle"]

    text = kairos(published, "preview", "--from", FROM, "--id", "billing.settle", "-n", "1")
    assert text.exit_code == 0, text.output
    assert text.stdout.splitlines() == [
        "billing.settle: cron '30 2 * * *' in America/New_York",
        "  2027-03-14T03:00:00-04:00  [DST gap: 02:30 does not exist that day; moved to the jump]",
    ]


def test_preview_by_owner_shows_the_teams_live_schedules(published: KafkaSettings) -> None:
    # billing.retired was deleted: it is not shown.
    assert preview_json(published, "--owner", "billing", "-n", "1") == {
        "billing.close": ["2027-03-14T00:00:00+00:00"],
        "billing.settle": ["2027-03-14T03:00:00-04:00"],
    }
    together = preview_json(published, "--owner", "billing", "--id", "ops.report", "-n", "1")
    assert list(together) == ["ops.report", "billing.close", "billing.settle"]


def test_unknown_and_deleted_ids_are_named(published: KafkaSettings) -> None:
    for ids in (["billing.retired"], ["billing.settle", "billing.nope", "billing.retired"]):
        arguments = [argument for schedule_id in ids for argument in ("--id", schedule_id)]
        result = kairos(published, "preview", *arguments)
        assert result.exit_code == 2
        assert result.stdout == ""
        unknown = ", ".join(repr(i) for i in ids if i != "billing.settle")
        assert f"error: no schedule {unknown} on {published.topic_prefix}schedules" in (
            result.stderr
        )
        assert "(never published, or deleted)" in result.stderr


def test_an_owner_without_schedules_is_named(published: KafkaSettings) -> None:
    result = kairos(published, "preview", "--owner", "payments")
    assert result.exit_code == 2
    assert "has owner 'payments'" in result.stderr


def test_the_histogram_of_a_team_shows_its_midnight_herd(published: KafkaSettings) -> None:
    shown = preview_json(published, "--owner", "billing", "--histogram")
    assert (shown["from"], shown["to"]) == (FROM, "2027-03-14T12:00:00Z")
    assert shown["schedules"] == 2
    midnight = shown["minutes"]["2027-03-14T00:00:00Z"]
    assert (midnight["fires"], midnight["schedules"]) == (1, 1)
    assert shown["minutes"]["2027-03-14T07:00:00Z"]["fires"] == 1
    assert shown["total"] == 2


def test_the_text_histogram_of_a_team_says_where_it_stands_against_its_quota(
    published: KafkaSettings,
) -> None:
    unlimited = kairos(published, "preview", "--from", FROM, "--owner", "billing", "--histogram")
    assert unlimited.exit_code == 0, unlimited.output
    assert unlimited.stdout.rstrip().endswith("team billing is not registered: it has no quota")
    key = Team("billing", (bytes(32),), quota=Quota(max_fires_per_minute=40))
    publish_team_change(published, "billing", key, "admin")
    limited = kairos(published, "preview", "--from", FROM, "--owner", "billing", "--histogram")
    assert limited.exit_code == 0, limited.output
    assert (
        "quota of team billing: no limit of schedules, at most 40 fires a minute; its 2 "
        "schedules count 2 fires a minute against it"
    ) in limited.stdout


def test_published_schedules_need_a_broker_that_answers() -> None:
    # A closed port: the connection is refused within --timeout, before any read.
    result = CliRunner().invoke(
        app, ["--bootstrap-servers", "127.0.0.1:1", "--timeout", "0.5", "preview", "--id", "a"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert "127.0.0.1:1" in result.stderr
    assert "Traceback" not in result.output
