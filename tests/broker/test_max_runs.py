"""`max_runs` and `after_last_run` end to end: real broker and ticker process.

A schedule fires exactly its `max_runs` runs; the ticker that fired the last one pauses or
deletes it on the schedules topic in the same transaction, so every reader sees it end.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import Producer

from kairos.core.firing import ScheduleState
from kairos.core.schedule import Schedule
from kairos.services.ticker.lifecycle import after_last_run_records
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.history import HistoryReader
from kairos.streams.readers.schedule_reader import ScheduleReader
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.dead_letters import STALE_CHANGE
from tests.helpers import eventually
from tests.kafka_helpers import read_topic
from tests.processes import start_ticker

CODECS = make_codecs()


def _fired(settings: KafkaSettings, schedule_id: str) -> list[str]:
    topic = settings.layout.name(TopicRole.RUNS)
    return [
        value["run_id"]
        for _, value in read_topic(settings.bootstrap_servers, topic, CODECS.run_requested.decode)
        if value["schedule_id"] == schedule_id
    ]


def test_a_schedule_fires_max_runs_then_pauses_or_deletes_itself(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    campaign = Schedule(
        id="ops.campaign",
        every=timedelta(seconds=1),
        start_at=start,
        max_runs=3,
        after_last_run="delete",
    )
    trial = Schedule(id="ops.trial", every=timedelta(seconds=1), start_at=start, max_runs=2)
    with SchedulesClient(kafka_settings, changed_by="ops") as client:
        client.upsert_all([campaign, trial])
    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path)
    try:
        reader = ScheduleReader(kafka_settings)
        eventually(
            lambda: reader.read_one("ops.campaign") is None or None,
            timeout_s=60,
            message="the campaign deleted after its last run",
        )
        paused = eventually(
            lambda: (
                ((s := reader.read_one("ops.trial")) is not None and s.schedule.paused and s)
                or None
            ),
            timeout_s=60,
            message="the trial paused after its last run",
        )
        time.sleep(3)  # three more periods: nothing more fires
    finally:
        ticker.stop()
    assert len(_fired(kafka_settings, "ops.campaign")) == 3
    assert len(_fired(kafka_settings, "ops.trial")) == 2
    assert paused.changed_by == "ticker:t1"
    assert paused.reason == "max_runs 2 reached (after_last_run: pause)"
    history = HistoryReader(kafka_settings).schedule_events("ops.campaign")
    assert [event.change for event in history][-2:] == ["deleted", "tombstone"]


def test_the_tickers_ending_never_overwrites_a_later_edit(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    """M5, open mode: the owner raises `max_runs` just as the ticker ends the schedule, so the
    edit is appended between what the ticker had read and its own pause. The pause holds only
    at the version it ended (`kairos-if-version`): the ticker refuses it and restores the key,
    and the history the audit replays skips it."""
    start = datetime.now(UTC).replace(microsecond=0)
    trial = Schedule(id="ops.trial", every=timedelta(hours=1), start_at=start, max_runs=2)
    raised = trial.model_copy(update={"max_runs": 10})
    with SchedulesClient(kafka_settings, changed_by="ops") as client:
        client.upsert(trial)
        (created,) = HistoryReader(kafka_settings).schedule_events(trial.id)
        client.upsert(raised)
    # The pause a ticker publishes once version `created.offset` ran out, as it publishes it.
    ended = ScheduleState(trial, created.offset, next_nominal=None, runs_fired=2)
    ((key, pause, headers),) = after_last_run_records(ended, CODECS, "t0", datetime.now(UTC))
    producer = Producer(kafka_settings.client_config())
    topic = kafka_settings.layout.name(TopicRole.SCHEDULES)
    producer.produce(topic, pause, key, created.partition, headers=headers)
    assert producer.flush(30) == 0

    ticker = start_ticker(kafka_settings, "t1", tmp_path / "t1", tmp_path)
    try:
        refused = eventually(
            lambda: [
                letter
                for _, letter in read_topic(
                    kafka_settings.bootstrap_servers,
                    kafka_settings.layout.name(TopicRole.DEAD_LETTERS),
                    CODECS.dead_letter.decode,
                )
                if letter["error_class"] == STALE_CHANGE
            ],
            timeout_s=60,
            message="the stale pause was taken",
        )
        reader = ScheduleReader(kafka_settings)
        eventually(
            lambda: (stored := reader.read_one(trial.id)) is not None and stored.schedule == raised,
            timeout_s=30,
            message="the key was not restored to the owner's edit",
        )
    finally:
        ticker.stop()
    assert [letter["source_offset"] for letter in refused] == [created.offset + 2]
    history = HistoryReader(kafka_settings).schedule_events(trial.id)
    assert [event.definition for event in history] == [trial, raised]
