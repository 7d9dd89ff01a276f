"""The ticker against the real broker, run in this process for fast feedback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kairos.core.run_id import parse_run_id
from kairos.services.ticker.service import Ticker, TickerSettings
from kairos.streams.codec import make_codecs
from kairos.streams.schedule_publisher import SchedulesClient
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole
from tests.helpers import eventually
from tests.kafka_helpers import read_topic

CODECS = make_codecs()


@contextmanager
def running_ticker(settings: KafkaSettings, state_dir: Path, instance: str) -> Iterator[Ticker]:
    ticker = Ticker(
        settings,
        TickerSettings(instance=instance, state_dir=state_dir, session_timeout_ms=3000),
    )
    stop = threading.Event()
    thread = threading.Thread(target=ticker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield ticker
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the ticker did not stop"


def runs(settings: KafkaSettings) -> list[dict[str, object]]:
    topic = settings.layout.name(TopicRole.RUNS)
    return [
        value
        for _, value in read_topic(settings.bootstrap_servers, topic, CODECS.run_requested.decode)
    ]


def test_every_second_schedules_fire_each_occurrence_once(
    kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    ids = [f"tick-{n}" for n in range(8)]
    with SchedulesClient(kafka_settings, changed_by="test") as client:
        for schedule_id in ids:
            client.upsert({"id": schedule_id, "every": "1s", "start_at": start.isoformat()})

    with running_ticker(kafka_settings, tmp_path / "t1", "t1"):
        until = start + timedelta(seconds=4)

        def all_fired() -> bool:
            fired = {r["run_id"] for r in runs(kafka_settings)}
            return all(f"{i}@{until:%Y-%m-%dT%H:%M:%SZ}" in fired for i in ids)

        eventually(all_fired, timeout_s=60, interval_s=0.5, message="runs up to +4s not all fired")

    records = runs(kafka_settings)
    run_ids = [r["run_id"] for r in records]
    assert len(run_ids) == len(set(run_ids)), "a run id was committed twice"
    for schedule_id in ids:
        nominals = sorted(
            parse_run_id(str(r["run_id"]))[1] for r in records if r["schedule_id"] == schedule_id
        )
        # Every second from the start, none missing, none extra before the last one seen.
        expected = [start + timedelta(seconds=s) for s in range(len(nominals))]
        assert nominals == expected
        assert len(nominals) >= 5
