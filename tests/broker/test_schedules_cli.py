"""`kairos schedules list|get|delete|pause|resume` against a real broker, dead letters included."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.client import KafkaSettings, Schedule, SchedulesClient
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import definition_record
from tests.kafka_helpers import read_topic

CODECS = make_codecs()
NIGHTLY = Schedule(id="billing.nightly", cron="0 2 * * *", timezone="Europe/Paris", owner="billing")
REPORT = Schedule(id="ops.report", cron="0 8 * * 1", owner="ops")


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


@pytest.fixture
def published(kafka_settings: KafkaSettings) -> KafkaSettings:
    with SchedulesClient(kafka_settings, changed_by="alice") as client:
        client.upsert_all([NIGHTLY, REPORT], reason="initial")
    return kafka_settings


def event(schedule_id: str, change: str, definition: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "schedule_id": schedule_id,
        "event_id": uuid.uuid4(),
        "change": change,
        "definition": definition,
        "revision": 0,
        "changed_by": "mallory",
        "changed_at": datetime.now(UTC),
        "reason": None,
    }


def test_list_shows_the_current_schedules(published: KafkaSettings) -> None:
    table = kairos(published, "schedules", "list")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["ID", "TRIGGER", "TIMEZONE"]
    assert [line.split()[0] for line in lines[1:]] == ["billing.nightly", "ops.report"]
    assert "alice" in lines[1]

    owned = kairos(published, "schedules", "list", "--owner", "ops", "--json")
    assert owned.exit_code == 0, owned.output
    [only] = json.loads(owned.stdout)
    assert only["schedule"] == REPORT.model_dump(mode="json")
    assert only["last_change"]["changed_by"] == "alice"
    assert only["last_change"]["reason"] == "initial"


def test_get_shows_the_definition_and_the_last_change(published: KafkaSettings) -> None:
    shown = kairos(published, "schedules", "get", NIGHTLY.id, "--json")
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert Schedule.model_validate(document["schedule"]) == NIGHTLY
    assert document["last_change"]["change"] == "upserted"

    text = kairos(published, "schedules", "get", NIGHTLY.id)
    assert text.exit_code == 0, text.output
    assert "cron: 0 2 * * *" in text.stdout
    assert "changed_by: alice" in text.stdout


def test_pause_resume_and_delete_are_audited(published: KafkaSettings) -> None:
    who = ["--changed-by", "bob", "--reason", "incident 42"]
    paused = kairos(published, "schedules", "pause", NIGHTLY.id, *who)
    assert paused.exit_code == 0, paused.output
    listed = kairos(published, "schedules", "list", "--json")
    states = {e["schedule"]["id"]: e["schedule"]["paused"] for e in json.loads(listed.stdout)}
    assert states == {NIGHTLY.id: True, REPORT.id: False}

    assert kairos(published, "schedules", "resume", NIGHTLY.id, *who).exit_code == 0
    assert kairos(published, "schedules", "delete", REPORT.id, *who).exit_code == 0

    topic = published.layout.name(TopicRole.SCHEDULES)
    records = read_topic(published.bootstrap_servers, topic, CODECS.schedule_event.decode)
    # Order holds within a key (one partition), not across keys.
    changes = [(key, value["change"] if value else None) for key, value in records]
    nightly = [change for key, change in changes if key == NIGHTLY.id]
    assert nightly[-2:] == ["paused", "resumed"]
    report = [change for key, change in changes if key == REPORT.id]
    assert report[-2:] == ["deleted", None]
    audited = [value for _, value in records if value and value["changed_by"] == "bob"]
    assert len(audited) == 3 and {v["reason"] for v in audited} == {"incident 42"}
    shown = json.loads(kairos(published, "schedules", "get", NIGHTLY.id, "--json").stdout)
    assert shown["schedule"]["paused"] is False


@pytest.mark.parametrize("command", ["get", "delete", "pause", "resume"])
def test_an_unknown_id_is_a_clear_error(published: KafkaSettings, command: str) -> None:
    result = kairos(published, "schedules", command, "no.such.schedule")
    assert result.exit_code == 2
    assert "no schedule 'no.such.schedule'" in result.stderr
    assert "Traceback" not in result.output


def test_a_missing_topic_is_a_clear_error(kafka_bootstrap: str) -> None:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix="never-created.")
    result = kairos(settings, "schedules", "list")
    assert result.exit_code == 2
    assert "kairos topics create" in result.stderr


def test_list_skips_unreadable_records_and_writes_nothing(published: KafkaSettings) -> None:
    """A read by the CLI or the SDK never writes: the ticker is the one that dead-letters."""
    topic = published.layout.name(TopicRole.SCHEDULES)
    valid = CODECS.schedule_event.encode(
        event("x.ok", "upserted", definition_record(Schedule(id="x.ok", cron="* * * * *")))
    )
    bad_cron = definition_record(Schedule(id="x.cron", cron="* * * * *")) | {"cron": "61 * * * *"}
    bad = {
        "x.garbage": b"not avro at all",
        # A schema no Kairos version has: a valid header with a fingerprint nobody knows.
        "x.unknown": b"\xc3\x01" + bytes(8) + valid[10:],
        "x.cron": CODECS.schedule_event.encode(event("x.cron", "upserted", bad_cron)),
        "x.key": CODECS.schedule_event.encode(event("x.other", "upserted", None)),
    }
    producer = Producer(published.client_config())
    for schedule_id, value in bad.items():
        producer.produce(topic, key=schedule_id.encode(), value=value)
    producer.produce(topic, key=b"x.ok", value=valid)
    assert producer.flush(30) == 0

    first = kairos(published, "schedules", "list", "--json")
    assert first.exit_code == 0, first.output
    listed = [entry["schedule"]["id"] for entry in json.loads(first.stdout)]
    assert listed == [NIGHTLY.id, REPORT.id, "x.ok"]
    assert "skipped 4 unreadable record(s)" in first.stderr
    assert "as the ticker does" in first.stderr
    assert kairos(published, "schedules", "get", "x.cron").exit_code == 2

    dead_letters_topic = published.layout.name(TopicRole.DEAD_LETTERS)
    assert read_topic(published.bootstrap_servers, dead_letters_topic) == []
