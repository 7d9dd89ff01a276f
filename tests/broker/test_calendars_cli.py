"""`kairos calendars` and the calendars topic against a real broker: versions, history, refusals."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import holidays
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from typer.testing import CliRunner, Result

from kairos.cli.app import app
from kairos.core.business_calendar import load_calendars
from kairos.core.calendar_versions import CalendarBook
from kairos.streams.client.calendar_publisher import CalendarsClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.calendar_reader import (
    CalendarFeed,
    CalendarReadError,
    read_calendar_history,
    read_calendars,
)
from kairos.streams.wire.calendar_events import calendar_definition_record
from kairos.streams.wire.codec import make_codecs
from tests.helpers import eventually
from tests.kafka_helpers import read_topic

CODEC = make_codecs().calendar_event

FREEZE = {"start": "2026-12-20T00:00", "end": "2027-01-04T00:00", "name": "year-end freeze"}
MARKET_HOURS = {"cron": "30 9 * * MON-FRI", "duration": "6h30m", "name": "market hours"}


def kairos(settings: KafkaSettings, *args: str) -> Result:
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    return CliRunner().invoke(app, [*connection, "--topic-prefix", settings.topic_prefix, *args])


def seeded_file(tmp_path: Path, name: str = "calendars.yaml") -> Path:
    """A calendars file seeded by the CLI: US federal holidays and NYSE closing days."""
    path = tmp_path / name
    documents = []
    for options in (
        ["--country", "US", "--id", "us-federal"],
        ["--market", "NYSE", "--id", "nyse"],
    ):
        seeded = CliRunner().invoke(
            app, ["calendars", "seed", *options, "--owner", "treasury", "--years", "2026-2027"]
        )
        assert seeded.exit_code == 0, seeded.output
        documents += yaml.safe_load(seeded.stdout)["calendars"]
    documents[1]["timezone"] = "America/New_York"
    documents[1]["windows"] = [FREEZE, MARKET_HOURS]
    path.write_text(yaml.safe_dump({"calendars": documents}, sort_keys=False), encoding="utf-8")
    return path


def edit(path: Path, calendar_id: str, **fields: Any) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    for entry in document["calendars"]:
        if entry["id"] == calendar_id:
            entry.update(fields)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def calendar_records(settings: KafkaSettings) -> list[tuple[str | None, Any]]:
    topic = settings.layout.name(TopicRole.CALENDARS)
    return read_topic(settings.bootstrap_servers, topic, CODEC.decode)


def test_apply_publishes_versions_and_a_changed_file_a_new_version(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    path = seeded_file(tmp_path)

    applied = kairos(kafka_settings, "calendars", "apply", "-f", str(path), "--reason", "seed")

    assert applied.exit_code == 0, applied.output
    assert "create     us-federal  (version 0)" in applied.stdout
    assert "create     nyse  (version 1)" in applied.stdout
    listed = kairos(kafka_settings, "calendars", "list")
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert (rows["nyse"][2], rows["nyse"][6]) == ("America/New_York", "1")
    assert rows["us-federal"][6] == "0"
    owned = kairos(kafka_settings, "calendars", "list", "--owner", "treasury", "--json")
    assert owned.exit_code == 0, owned.output
    assert [c["calendar"]["id"] for c in json.loads(owned.stdout)] == ["nyse", "us-federal"]
    assert (
        json.loads(kairos(kafka_settings, "calendars", "list", "--owner", "x", "--json").stdout)
        == []
    )

    again = kairos(kafka_settings, "calendars", "apply", "-f", str(path))
    assert again.exit_code == 0, again.output
    assert "0 create, 0 update, 2 unchanged; nothing was published" in again.stdout
    assert len(calendar_records(kafka_settings)) == 2

    edit(path, "nyse", windows=[FREEZE])
    changed = kairos(kafka_settings, "calendars", "apply", "-f", str(path))
    assert changed.exit_code == 0, changed.output
    assert "update     nyse  (version 2)" in changed.stdout
    assert "unchanged  us-federal  (version 0)" in changed.stdout
    assert "windows: 0 added, 1 removed" in changed.stdout

    shown = kairos(kafka_settings, "calendars", "show", "nyse", "--json")
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["version"]["version"] == 2
    assert document["version"]["reason"] is None
    assert [w["name"] for w in document["calendar"]["windows"]] == ["year-end freeze"]
    good_friday = date(2026, 4, 3)
    closed = {h["date"]: h["name"] for h in document["calendar"]["holidays"]}
    assert closed[good_friday.isoformat()] == holidays.financial_holidays("NYSE")[good_friday]


def test_delete_and_the_readers_book_and_history(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    path = seeded_file(tmp_path)
    assert kairos(kafka_settings, "calendars", "apply", "-f", str(path)).exit_code == 0
    edit(path, "us-federal", description="federal holidays, checked by treasury")
    assert kairos(kafka_settings, "calendars", "apply", "-f", str(path)).exit_code == 0

    deleted = kairos(kafka_settings, "calendars", "delete", "nyse", "--changed-by", "bob")

    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.strip() == "deleted nyse  (version 3)"
    book = read_calendars(kafka_settings)
    assert list(book.versions) == ["us-federal"]
    current = book.versions["us-federal"]
    assert current.version == 2
    assert current.calendar.description == "federal holidays, checked by treasury"
    history = read_calendar_history(kafka_settings)
    assert [(c.calendar_id, c.version, c.change) for c in history] == [
        ("us-federal", 0, "upserted"),
        ("nyse", 1, "upserted"),
        ("us-federal", 2, "upserted"),
        ("nyse", 3, "deleted"),
        ("nyse", 4, "tombstone"),
    ]
    assert history[3].changed_by == "bob"
    before_the_edit = CalendarBook.replay(history, as_of=history[1].changed_at)
    assert {i: v.version for i, v in before_the_edit.versions.items()} == {
        "us-federal": 0,
        "nyse": 1,
    }
    assert [c.version for c in read_calendar_history(kafka_settings, calendar_id="nyse")] == [
        1,
        3,
        4,
    ]

    missing = kairos(kafka_settings, "calendars", "delete", "nyse")
    assert missing.exit_code == 2
    assert "no calendar 'nyse'" in missing.output
    assert kairos(kafka_settings, "calendars", "show", "nyse").exit_code == 2


def test_a_feed_folds_in_only_what_was_published_since_its_last_refresh(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    text = seeded_file(tmp_path).read_text(encoding="utf-8")
    federal, nyse = load_calendars(text, "yaml")
    with CalendarFeed(kafka_settings) as feed, CalendarsClient(kafka_settings, "alice") as client:
        assert feed.refresh().versions == {}
        client.upsert_all([federal, nyse])
        assert {i: v.version for i, v in feed.refresh().versions.items()} == {
            "us-federal": 0,
            "nyse": 1,
        }
        started = time.monotonic()
        assert feed.read() == []
        assert time.monotonic() - started < 5, "a caught-up feed waited for records"
        client.delete("nyse")
        client.upsert(federal.model_copy(update={"description": "v2"}))
        refreshed = feed.refresh()
    assert [c.version for c in read_calendar_history(kafka_settings)] == [0, 1, 2, 3, 4]
    assert {i: v.version for i, v in refreshed.versions.items()} == {"us-federal": 4}
    assert refreshed.versions["us-federal"].calendar.description == "v2"


def test_records_published_apart_and_fetched_in_one_batch_are_all_read(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """The consumer fetches ahead: two records published a second apart between two reads wait
    in its queue as one batch, each followed by the end it reached; the read takes both."""
    federal, nyse = load_calendars(seeded_file(tmp_path).read_text(encoding="utf-8"), "yaml")
    with CalendarFeed(kafka_settings) as feed, CalendarsClient(kafka_settings, "alice") as client:
        client.upsert(federal)
        assert list(feed.refresh().versions) == ["us-federal"]
        client.upsert(federal.model_copy(update={"description": "v1"}))
        time.sleep(1)
        client.upsert(nyse)
        time.sleep(1)
        read = [change.version for change in feed.read(timeout_s=5)]
        read += [change.version for change in feed.read(timeout_s=5)]
    assert read == [1, 2]


def test_an_invalid_file_publishes_nothing_and_names_each_problem(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    path = seeded_file(tmp_path)
    edit(path, "nyse", business_days=[], windows=[{**FREEZE, "end": "2026-12-19T00:00"}])

    refused = kairos(kafka_settings, "calendars", "apply", "-f", str(path))

    assert refused.exit_code == 2
    assert "2 problem(s); nothing was published" in refused.output
    assert "calendar 'nyse' (calendars[1]): field 'business_days': is empty" in refused.output
    assert calendar_records(kafka_settings) == []
    unreadable = tmp_path / "broken.yaml"
    unreadable.write_text("calendars: [", encoding="utf-8")
    broken = kairos(kafka_settings, "calendars", "apply", "-f", str(unreadable))
    assert broken.exit_code == 2
    assert "not a valid YAML calendars file" in broken.output
    assert calendar_records(kafka_settings) == []


def test_records_that_break_the_contract_are_skipped_and_reported(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    text = seeded_file(tmp_path).read_text(encoding="utf-8")
    [calendar] = [c for c in load_calendars(text, "yaml") if c.id == "us-federal"]
    with CalendarsClient(kafka_settings, changed_by="alice") as client:
        assert client.upsert(calendar) == 0
    hostile = {
        "calendar_id": "nyse",
        "event_id": uuid.uuid4(),
        "change": "upserted",
        "definition": calendar_definition_record(calendar),
        "changed_by": "mallory",
        "changed_at": datetime.now(UTC),
        "reason": None,
    }
    producer = Producer(kafka_settings.producer_config())
    topic = kafka_settings.layout.name(TopicRole.CALENDARS)
    producer.produce(topic, key=b"nyse", value=CODEC.encode(hostile))
    producer.produce(topic, key=b"us-federal", value=b"not avro")
    producer.produce(topic, key=b"nyse", value=CODEC.encode({**hostile, "definition": None}))
    assert producer.flush(30) == 0

    book = read_calendars(kafka_settings)

    assert {i: v.version for i, v in book.versions.items()} == {"us-federal": 0}
    assert [s.version for s in book.skipped] == [1, 2, 3]
    assert "differs from the key 'nyse'" in book.skipped[0].reason
    assert "bad_marker" in book.skipped[1].reason
    assert "must carry the whole definition" in book.skipped[2].reason
    listed = kairos(kafka_settings, "calendars", "list")
    assert listed.exit_code == 0, listed.output
    assert "warning: skipped 3 unreadable record(s)" in listed.output


def test_a_calendars_topic_grown_past_one_partition_is_refused_with_the_fix(
    kafka_settings: KafkaSettings, admin: AdminClient
) -> None:
    topic = kafka_settings.layout.name(TopicRole.CALENDARS)
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)

    def refused() -> Result:
        listed = kairos(kafka_settings, "calendars", "list")
        assert listed.exit_code == 2, listed.output
        return listed

    # The new partition reaches the broker's metadata asynchronously.
    listed = eventually(refused, timeout_s=15, message="the second partition never showed")
    assert "2 partitions, Kairos declares 1" in listed.output
    assert "version is its record's offset" in listed.output
    with pytest.raises(CalendarReadError, match="2 partitions, Kairos declares 1"):
        read_calendars(kafka_settings)
