"""`kairos apply` in CI: several files and directories, drift exit codes, -o json, job checks,
and a prune that would empty an owner; against a real broker."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.client import KafkaSettings, SchedulesClient
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.kafka_helpers import read_topic

NIGHTLY = """
schedules:
  - id: billing.nightly
    cron: "0 2 * * *"
    owner: billing
"""
POLL = """
schedules:
  - id: billing.poll
    every: 90m
    start_at: 2027-01-01T00:00:00Z
    owner: billing
    job: {kind: shell, command: "echo poll"}
"""


def kairos(settings: KafkaSettings, *args: str, stdin: str | None = None) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    connection += ["--topic-prefix", settings.topic_prefix]
    return CliRunner().invoke(app, [*connection, "apply", *args], input=stdin)


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def published(settings: KafkaSettings) -> list[str | None]:
    topic = settings.layout.name(TopicRole.SCHEDULES)
    return [
        key
        for key, _ in read_topic(
            settings.bootstrap_servers, topic, make_codecs().schedule_event.decode
        )
    ]


def test_several_files_directories_and_recursion_are_all_applied(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    nightly = write(tmp_path / "nightly.yaml", NIGHTLY)
    write(tmp_path / "teams" / "poll.yml", POLL)
    write(
        tmp_path / "teams" / "deeper" / "ops.json",
        json.dumps({"schedules": [{"id": "ops.report", "cron": "0 8 * * 1", "owner": "ops"}]}),
    )
    write(tmp_path / "teams" / "README.md", "not a schedules file")
    write(tmp_path / "teams" / ".hidden.yaml", "not: [valid")

    flat = kairos(kafka_settings, "-f", nightly, "-f", str(tmp_path / "teams"), "--dry-run")
    assert flat.exit_code == 1, flat.output
    assert flat.stdout.splitlines() == [
        "create     billing.nightly",
        "create     billing.poll",
        "dry run: 2 create, 0 update, 0 delete, 0 unchanged; nothing was published",
    ]
    deep = kairos(kafka_settings, "-f", nightly, "-f", str(tmp_path / "teams"), "-R")
    assert deep.exit_code == 0, deep.output
    assert "applied: 3 create, 0 update, 0 delete, 0 unchanged" in deep.stdout
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        assert [s.id for s in client.list()] == ["billing.nightly", "billing.poll", "ops.report"]
    # The same file named twice, by itself and through its directory, is read once.
    again = kairos(kafka_settings, "-f", nightly, "-f", str(tmp_path), "-R", "--dry-run")
    assert again.exit_code == 0, again.output


def test_an_id_in_two_files_names_both_and_publishes_nothing(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    first = write(tmp_path / "a.yaml", NIGHTLY)
    second = write(tmp_path / "b.yaml", POLL + NIGHTLY.replace("schedules:\n", ""))
    result = kairos(kafka_settings, "-f", first, "-f", second)
    assert result.exit_code == 2
    assert f"error: {second}: 1 problem(s); nothing was published:" in result.stderr
    assert (
        f"schedule 'billing.nightly' (schedules[1]): field 'id': also defined in {first} "
        "(schedules[0])"
    ) in result.stderr
    assert published(kafka_settings) == []


def test_stdin_is_read_with_other_files(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    poll = write(tmp_path / "poll.yaml", POLL)
    result = kairos(kafka_settings, "-f", "-", "-f", poll, stdin=NIGHTLY)
    assert result.exit_code == 0, result.output
    assert "applied: 2 create" in result.stdout
    twice = kairos(kafka_settings, "-f", "-", "-f", "-", stdin=NIGHTLY)
    assert twice.exit_code == 2
    assert "stdin, which can be read once" in twice.stderr


def test_an_empty_directory_is_a_usage_error_that_mentions_recursion(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    write(tmp_path / "nested" / "a.yaml", NIGHTLY)
    result = kairos(kafka_settings, "-f", str(tmp_path))
    assert result.exit_code == 2
    assert "holds no *.yaml, *.yml or *.json file (-R also reads its subdirectories)" in (
        result.stderr
    )


def test_dry_run_json_and_yaml_carry_the_whole_plan(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    nightly = write(tmp_path / "nightly.yaml", NIGHTLY)
    assert kairos(kafka_settings, "-f", nightly).exit_code == 0
    edited = write(tmp_path / "nightly.yaml", NIGHTLY.replace("0 2 * * *", "30 3 * * *"))
    poll = write(tmp_path / "poll.yaml", POLL)

    as_json = kairos(kafka_settings, "-f", edited, "-f", poll, "--dry-run", "-o", "json")
    assert as_json.exit_code == 1, as_json.output
    plan = json.loads(as_json.stdout)
    assert plan["dry_run"] is True and plan["changed"] is True
    assert plan["summary"] == {"create": 1, "update": 1, "delete": 0, "unchanged": 0}
    update, create = plan["changes"]
    assert update == {
        "action": "update",
        "id": "billing.nightly",
        "revision": 1,
        "fields": {"cron": {"old": "0 2 * * *", "new": "30 3 * * *"}},
    }
    assert create["action"] == "create" and create["definition"]["every"] == "1h30m"
    as_yaml = kairos(kafka_settings, "-f", edited, "-f", poll, "--dry-run", "-o", "yaml")
    assert as_yaml.exit_code == 1
    assert yaml.safe_load(as_yaml.stdout) == plan

    bad = kairos(kafka_settings, "-f", edited, "--dry-run", "-o", "xml")
    assert bad.exit_code == 2
    assert "'xml' is not one of" in bad.stderr


def test_an_invalid_file_exits_2_with_or_without_dry_run_never_1_for_drift(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    broken = write(tmp_path / "broken.yaml", NIGHTLY.replace("0 2 * * *", "0 25 * * *"))
    assert kairos(kafka_settings, "-f", broken).exit_code == 2
    assert kairos(kafka_settings, "-f", broken, "--dry-run").exit_code == 2


def test_jobs_that_do_not_fit_their_kind_are_refused_before_publishing(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    text = """
schedules:
  - id: no-command
    cron: "0 * * * *"
    job: {kind: shell}
  - id: no-url
    cron: "0 * * * *"
    job: {kind: http, method: GET}
  - id: typo
    cron: "0 * * * *"
    job: {kind: shel, command: "echo"}
"""
    result = kairos(kafka_settings, "-f", write(tmp_path / "jobs.yaml", text))
    assert result.exit_code == 2
    assert "3 problem(s); nothing was published" in result.stderr
    assert "schedule 'no-command' (schedules[0]): field 'job.command': is required" in (
        result.stderr
    )
    assert "schedule 'no-url' (schedules[1]): field 'job.url': is required" in result.stderr
    assert "did you mean 'shell'?" in result.stderr
    assert published(kafka_settings) == []


def test_a_prune_that_empties_an_owner_needs_yes(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    both = write(tmp_path / "billing.yaml", NIGHTLY + POLL.replace("schedules:\n", ""))
    assert kairos(kafka_settings, "-f", both).exit_code == 0
    empty = write(tmp_path / "empty.yaml", "schedules: []\n")
    prune = ["-f", empty, "--prune", "--owner", "billing"]

    dry = kairos(kafka_settings, *prune, "--dry-run")
    assert dry.exit_code == 1
    assert "deletes all 2 schedule(s) of owner 'billing'" in dry.stderr
    refused = kairos(kafka_settings, *prune)
    assert refused.exit_code == 2
    assert "add --yes; nothing was published" in refused.stderr
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        assert len(client.list()) == 2

    # A prune that keeps one of the owner's schedules needs no confirmation.
    keeps_one = kairos(kafka_settings, "-f", write(tmp_path / "n.yaml", NIGHTLY), *prune[2:])
    assert keeps_one.exit_code == 0, keeps_one.output
    confirmed = kairos(kafka_settings, *prune, "--yes")
    assert confirmed.exit_code == 0, confirmed.output
    assert "applied: 0 create, 0 update, 1 delete, 0 unchanged" in confirmed.stdout
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        assert client.list() == []


def _apply_on_a_terminal(settings: KafkaSettings, answer: str, *args: str) -> tuple[int, str]:
    """`kairos apply` in its own process whose stdin is a terminal, answering `answer`."""
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kairos.cli",
                "--bootstrap-servers",
                settings.bootstrap_servers,
                "--topic-prefix",
                settings.topic_prefix,
                "apply",
                *args,
            ],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(controller, answer.encode() + b"\n")
        _, stderr = process.communicate(timeout=60)
    finally:
        os.close(controller)
        os.close(terminal)
    return process.returncode, stderr


def test_on_a_terminal_a_prune_that_empties_an_owner_asks_first(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    assert kairos(kafka_settings, "-f", write(tmp_path / "n.yaml", NIGHTLY)).exit_code == 0
    prune = [
        "-f",
        write(tmp_path / "empty.yaml", "schedules: []\n"),
        "--prune",
        "--owner",
        "billing",
    ]

    declined, stderr = _apply_on_a_terminal(kafka_settings, "n", *prune)
    assert declined == 2
    assert "delete all 1 schedule(s) of owner 'billing', leaving it none? [y/N]" in stderr
    assert "not confirmed; nothing was published" in stderr
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        assert [s.id for s in client.list()] == ["billing.nightly"]

    confirmed, stderr = _apply_on_a_terminal(kafka_settings, "y", *prune)
    assert confirmed == 0, stderr
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        assert client.list() == []
