"""Fixtures of the broker tests: PostgreSQL (tests/postgres.py) and the executors' runs topic.

Executor tests publish `RunRequested` records themselves, as a ticker would, and read what the
executors published back: run events and dead letters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kairos.core.run_id import run_id
from kairos.core.schedule import JobSpec
from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import job_record
from tests.kafka_helpers import read_topic
from tests.postgres import postgres_cluster, postgres_url
from tests.processes import ServiceProcess, start_executor

__all__ = ["launch_executor", "postgres_cluster", "postgres_url", "runs_topic", "store_url"]

CODECS = make_codecs()


class RunsTopic:
    """The runs topic of a test deployment, and the topics executors write."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.runs = settings.layout.name(TopicRole.RUNS)
        self._producer = Producer(settings.client_config())

    def request(
        self,
        schedule_id: str,
        nominal: datetime,
        job: dict[str, Any],
        *,
        overlap: str = "allow",
        max_attempts: int = 3,
        timeout_ms: int = 30_000,
        retry_backoff_ms: int = 200,
    ) -> dict[str, Any]:
        """A `RunRequested` record as a ticker fires it for `nominal`."""
        return {
            "run_id": run_id(schedule_id, nominal),
            "schedule_id": schedule_id,
            "nominal_at": nominal,
            "due_at": nominal,
            "fired_at": datetime.now(UTC),
            "lateness_ms": 0,
            "job": job_record(JobSpec.model_validate(job)),
            "attempt": 1,
            "max_attempts": max_attempts,
            "timeout_ms": timeout_ms,
            "retry_backoff_ms": retry_backoff_ms,
            "overlap": overlap,
            "schedules_partition": 0,
            "schedule_offset": 0,
            "ticker_instance": "test",
            "owner": None,
        }

    def publish(self, *records: dict[str, Any]) -> None:
        """Publish each record keyed by its run id, as the ticker does."""
        self.publish_raw([(r["run_id"].encode(), CODECS.run_requested.encode(r)) for r in records])

    def publish_raw(self, pairs: Sequence[tuple[bytes | None, bytes | None]]) -> None:
        for key, value in pairs:
            self._producer.produce(self.runs, key=key, value=value)
        assert self._producer.flush(30) == 0, "the test's records were not delivered"

    def events(self) -> list[dict[str, Any]]:
        return self._read(TopicRole.RUN_EVENTS, CODECS.run_event.decode)

    def steps(self, run: str) -> list[tuple[str, int]]:
        """(kind, attempt) of each event of the run, in order."""
        return [(e["kind"], e["attempt"]) for e in self.events() if e["run_id"] == run]

    def distinct_steps(self, run: str) -> list[tuple[str, int]]:
        """`steps`, each distinct event counted once.

        Run events are published at least once (docs/executors.md): an executor killed after it
        published an outbox event and before it deleted it leaves the event to be published
        again, identical, by the survivor. A republished event is the same record.
        """
        distinct: list[dict[str, Any]] = []
        for event in self.events():
            if event["run_id"] == run and event not in distinct:
                distinct.append(event)
        return [(e["kind"], e["attempt"]) for e in distinct]

    def dead_letters(self) -> list[dict[str, Any]]:
        return self._read(TopicRole.DEAD_LETTERS, CODECS.dead_letter.decode)

    def _read(self, role: TopicRole, decode: Any) -> list[dict[str, Any]]:
        topic = self.settings.layout.name(role)
        return [value for _, value in read_topic(self.settings.bootstrap_servers, topic, decode)]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A dedupe store executors share: one SQLite file on this host, or a PostgreSQL database."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "shared" / "dedupe.sqlite3")
        open_dedupe_store(url).close()
        return url
    shared: str = request.getfixturevalue("postgres_url")
    return shared


@pytest.fixture
def runs_topic(kafka_settings: KafkaSettings) -> RunsTopic:
    return RunsTopic(kafka_settings)


Launcher = Callable[..., ServiceProcess]


@pytest.fixture
def launch_executor(runs_topic: RunsTopic, tmp_path: Path) -> Iterator[Launcher]:
    """Start executor processes of the test's deployment (`start_executor` options); whatever
    a failed test left running is killed at teardown."""
    started: list[ServiceProcess] = []

    def launch(instance: str, state_dir: Path | None = None, **options: Any) -> ServiceProcess:
        """`state_dir`: the instance's own directory unless given (another's, to share it)."""
        process = start_executor(
            runs_topic.settings, instance, state_dir or tmp_path / instance, tmp_path, **options
        )
        started.append(process)
        return process

    yield launch
    for process in started:
        if process.process.poll() is None:
            process.kill()
