"""`kairos apply` against a real broker: all-or-nothing validation, diffs, prune, paused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.client import KafkaSettings, SchedulesClient
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.kafka_helpers import read_topic

BILLING = """
schedules:
  - id: billing.nightly
    cron: "0 2 * * *"
    timezone: Europe/Paris
    owner: billing
  - id: billing.poll
    every: 90m
    start_at: 2027-01-01T00:00:00Z
    owner: billing
    job: {kind: shell, command: "echo poll"}
"""


def apply(
    settings: KafkaSettings, tmp_path: Path, text: str, *args: str, name: str = "schedules.yaml"
) -> Result:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    connection = [
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--topic-prefix",
        settings.topic_prefix,
    ]
    return CliRunner().invoke(app, [*connection, "apply", "-f", str(path), *args])


def records(settings: KafkaSettings) -> list[tuple[str | None, dict[str, object] | None]]:
    topic = settings.layout.name(TopicRole.SCHEDULES)
    return read_topic(settings.bootstrap_servers, topic, make_codecs().schedule_event.decode)


def test_one_invalid_schedule_publishes_nothing_and_names_it(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    text = (
        BILLING
        + """
  - id: billing.broken
    cron: "0 25 * * *"
    owner: billing
  - cron: "0 1 * * *"
    timezon: UTC
"""
    )
    result = apply(kafka_settings, tmp_path, text)
    assert result.exit_code == 2
    assert "nothing was published" in result.stderr
    assert "schedule 'billing.broken' (schedules[2]): field 'cron'" in result.stderr
    assert "schedule schedules[3]: field 'id': is required" in result.stderr
    assert "schedule schedules[3]: field 'timezon': unknown field" in result.stderr
    assert "did you mean 'timezone'?" in result.stderr
    assert "Traceback" not in result.output
    assert records(kafka_settings) == []


def test_a_legacy_fixed_zone_is_applied_with_a_warning_naming_location_zones(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    text = (
        BILLING
        + """
  - id: billing.hawaii
    cron: "0 6 * * *"
    timezone: HST
    owner: billing
"""
    )
    result = apply(kafka_settings, tmp_path, text)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "warning: schedule 'billing.hawaii': timezone 'HST' is a fixed UTC-10:00 offset with no "
        "daylight-saving time; if the schedule follows a place's clock, use Pacific/Honolulu"
    ]
    assert {key for key, _ in records(kafka_settings)} == {
        "billing.nightly",
        "billing.poll",
        "billing.hawaii",
    }


def test_a_second_apply_of_the_same_file_publishes_nothing(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    first = apply(kafka_settings, tmp_path, BILLING, "--changed-by", "ci", "--reason", "deploy")
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines() == [
        "create     billing.nightly",
        "create     billing.poll",
        "applied: 2 create, 0 update, 0 delete, 0 unchanged",
    ]
    published = records(kafka_settings)
    assert sorted(
        (key, value["change"], value["changed_by"], value["reason"])
        for key, value in published
        if value is not None
    ) == [
        ("billing.nightly", "upserted", "ci", "deploy"),
        ("billing.poll", "upserted", "ci", "deploy"),
    ]

    second = apply(kafka_settings, tmp_path, BILLING)
    assert second.exit_code == 0, second.output
    assert "applied: 0 create, 0 update, 0 delete, 2 unchanged" in second.stdout
    assert len(records(kafka_settings)) == len(published)


def test_only_the_changed_schedule_is_published_and_dry_run_publishes_nothing(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    assert apply(kafka_settings, tmp_path, BILLING).exit_code == 0
    before = len(records(kafka_settings))
    edited = BILLING.replace('cron: "0 2 * * *"', 'cron: "30 3 * * *"')

    dry = apply(kafka_settings, tmp_path, edited, "--dry-run")
    # Drift: exit 1, so that CI can fail on it.
    assert dry.exit_code == 1, dry.output
    assert dry.stdout.splitlines() == [
        "update     billing.nightly",
        '             cron: "0 2 * * *" → "30 3 * * *"',
        "dry run: 0 create, 1 update, 0 delete, 1 unchanged; nothing was published",
    ]
    assert len(records(kafka_settings)) == before

    real = apply(kafka_settings, tmp_path, edited)
    assert real.exit_code == 0, real.output
    in_sync = apply(kafka_settings, tmp_path, edited, "--dry-run")
    assert in_sync.exit_code == 0, in_sync.output
    assert in_sync.stdout.splitlines() == [
        "dry run: 0 create, 0 update, 0 delete, 2 unchanged; nothing was published"
    ]
    after = records(kafka_settings)
    assert len(after) == before + 1
    nightly = [value for key, value in after if key == "billing.nightly"]
    assert [(v["change"], v["revision"]) for v in nightly if v] == [
        ("upserted", 0),
        ("upserted", 1),
    ]


def test_prune_deletes_only_the_owners_schedules_missing_from_the_file(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    other_team = """
schedules:
  - id: ops.report
    cron: "0 8 * * 1"
    owner: ops
"""
    assert apply(kafka_settings, tmp_path, other_team, name="ops.yaml").exit_code == 0
    assert apply(kafka_settings, tmp_path, BILLING).exit_code == 0
    only_nightly = BILLING.split("  - id: billing.poll", maxsplit=1)[0]

    refused = apply(kafka_settings, tmp_path, only_nightly, "--prune")
    assert refused.exit_code == 2
    assert "--owner" in refused.stderr

    dry = apply(
        kafka_settings, tmp_path, only_nightly, "--prune", "--owner", "billing", "--dry-run"
    )
    assert dry.exit_code == 1, dry.output
    assert "delete     billing.poll  (--prune: not in the files)" in dry.stdout
    assert "ops.report" not in dry.stdout
    before = len(records(kafka_settings))
    assert before == 3

    pruned = apply(kafka_settings, tmp_path, only_nightly, "--prune", "--owner", "billing")
    assert pruned.exit_code == 0, pruned.output
    assert "applied: 0 create, 0 update, 1 delete, 1 unchanged" in pruned.stdout
    after = records(kafka_settings)
    assert len(after) == before + 2
    poll = [value and value["change"] for key, value in after if key == "billing.poll"]
    assert poll == ["upserted", "deleted", None]
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        assert [s.id for s in client.list()] == ["billing.nightly", "ops.report"]


def test_owner_must_match_every_schedule_of_the_file(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    result = apply(kafka_settings, tmp_path, BILLING, "--prune", "--owner", "ops")
    assert result.exit_code == 2
    assert "schedule 'billing.nightly' (schedules[0]): field 'owner'" in result.stderr
    assert records(kafka_settings) == []


@pytest.mark.parametrize("paused_line, stays_paused", [("", True), ("    paused: false\n", False)])
def test_apply_keeps_a_pause_unless_the_file_sets_paused(
    kafka_settings: KafkaSettings, tmp_path: Path, paused_line: str, stays_paused: bool
) -> None:
    assert apply(kafka_settings, tmp_path, BILLING).exit_code == 0
    with SchedulesClient(kafka_settings, changed_by="oncall") as client:
        client.pause("billing.nightly", reason="incident")
    text = BILLING.replace("    owner: billing\n", "    owner: billing\n" + paused_line, 1)

    result = apply(kafka_settings, tmp_path, text)
    assert result.exit_code == 0, result.output
    assert ("update     billing.nightly" in result.stdout) is not stays_paused
    if not stays_paused:
        assert "paused: true → false" in result.stdout
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        assert client.get("billing.nightly").schedule.paused is stays_paused


def test_json_files_are_read_by_extension_or_content(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    document = {"schedules": [{"id": "json.one", "cron": "0 * * * *"}]}
    by_extension = apply(kafka_settings, tmp_path, json.dumps(document), name="s.json")
    assert by_extension.exit_code == 0, by_extension.output
    by_content = apply(kafka_settings, tmp_path, json.dumps(document), name="schedules")
    assert by_content.exit_code == 0, by_content.output
    assert "applied: 0 create, 0 update, 0 delete, 1 unchanged" in by_content.stdout

    broken = apply(kafka_settings, tmp_path, '{"schedules": [', name="s.json")
    assert broken.exit_code == 2
    assert "not a valid JSON schedules file" in broken.stderr


CHAIN = """
schedules:
  - id: ledger.export
    cron: "0 7 * * *"
    owner: ledger
    upstream: [{schedule: payments.settle, match: same_instant}]
  - id: ledger.archive
    cron: "0 8 * * *"
    owner: ledger
    upstream: [{schedule: ledger.audit}]
  - id: ledger.audit
    cron: "0 9 * * *"
    owner: ledger
    upstream: [{schedule: ledger.archive}]
"""


def test_apply_refuses_what_a_schedule_cannot_wait_for_and_names_the_fix(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    missing = apply(kafka_settings, tmp_path, CHAIN)
    assert missing.exit_code == 2, missing.output
    assert "upstream payments.settle does not exist" in missing.stderr, missing.stderr
    assert "ledger.archive -> ledger.audit -> ledger.archive" in missing.stderr
    assert records(kafka_settings) == []

    settle = 'schedules: [{id: payments.settle, cron: "0 7 * * *", owner: payments}]'
    assert apply(kafka_settings, tmp_path, settle, name="payments.yaml").exit_code == 0
    export = CHAIN.split("  - id: ledger.archive", maxsplit=1)[0]
    refused = apply(kafka_settings, tmp_path, export)
    assert refused.exit_code == 2, refused.output
    assert "adds ledger to the downstream_teams of payments.settle" in refused.stderr

    granted = settle.replace("owner: payments", "owner: payments, downstream_teams: [ledger]")
    assert apply(kafka_settings, tmp_path, granted, name="payments.yaml").exit_code == 0
    taken = apply(kafka_settings, tmp_path, export)
    assert taken.exit_code == 0, taken.output
    shifted = export.replace('cron: "0 7 * * *"', 'cron: "30 7 * * *"')
    never = apply(kafka_settings, tmp_path, shifted)
    assert never.exit_code == 2, never.output
    assert "same_instant never matches" in never.stderr, never.stderr
