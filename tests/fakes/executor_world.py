"""Executors on the in-memory cluster, sharing a real SQLite dedupe store: turns without a broker.

The executors are the real `Executor` (session, intake, offsets, rebalance callbacks, worker
threads, outbox); only Kafka is the fake of `tests/fakes/kafka.py`. Attempts run on the real
worker threads, so a test turns until what it waits for happened (`turn_until`), within seconds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kairos.core.run_id import run_id
from kairos.core.schedule import JobSpec
from kairos.services.executor import Handlers, RunContext
from kairos.services.executor.clients import AssignmentCheck
from kairos.services.executor.service import Executor
from kairos.services.executor.settings import ExecutorSettings
from kairos.streams.dedupe import sqlite_url
from kairos.streams.dedupe.base import DedupeStore
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codecs, make_codecs
from kairos.streams.wire.records import job_record
from tests.fakes.kafka import FakeClock, FakeGroupMember, FakePlainProducer
from tests.fakes.kafka_log import FakeKafka

NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
HANDLER = "count"
"""The `python` handler every run of these tests runs: it counts its executions."""


class FakeFleet:
    """An `AssignmentCheck` that passes, unless a test gave it a failure for the next one."""

    def __init__(self) -> None:
        self.failures: list[Exception] = []
        self.checks = 0

    def check_assignment(self) -> None:
        self.checks += 1
        if self.failures:
            raise self.failures.pop(0)


class FakeExecutorClients:
    """`ExecutorClients` over one `FakeKafka`; remembers what it made, for tests to look at."""

    def __init__(self, kafka: FakeKafka, clock: FakeClock) -> None:
        self.kafka = kafka
        self.clock = clock
        self.fleet = FakeFleet()
        self.members: list[FakeGroupMember] = []

    def check_access(self) -> None:
        """The fake cluster grants everything."""

    def check_fleet(self, settings: ExecutorSettings, store: DedupeStore) -> AssignmentCheck:
        return self.fleet

    def group_member(self, config: dict[str, Any]) -> FakeGroupMember:
        member = FakeGroupMember(self.kafka, self.clock, config["group.id"])
        self.members.append(member)
        return member

    def producer(self, config: dict[str, Any]) -> FakePlainProducer:
        return FakePlainProducer(self.kafka)


@dataclass
class ExecutorWorld:
    root: Path
    clock: FakeClock = field(default_factory=lambda: FakeClock(datetime.now(UTC)))
    codecs: Codecs = field(default_factory=make_codecs)
    executed: Counter[str] = field(default_factory=Counter)
    """Run id -> how many times the handler ran it."""
    executors: list[Executor] = field(default_factory=list)
    """Every executor made, for `close` to shut down what a failed test left connected."""

    def __post_init__(self) -> None:
        self.settings = KafkaSettings(bootstrap_servers="fake:9092")
        self.kafka = FakeKafka(self.clock)
        for spec in self.settings.layout.specs():
            self.kafka.create_topic(spec.name, spec.partitions)
        self.store_url = sqlite_url(self.root / "shared" / "dedupe.sqlite3")
        self.handlers = Handlers()
        self.handlers.add(HANDLER, self._count)
        self._lock = threading.Lock()
        self._publisher = FakePlainProducer(self.kafka)

    def _count(self, run: RunContext) -> None:
        with self._lock:
            self.executed[run.run_id] += 1

    def topic(self, role: TopicRole) -> str:
        return self.settings.layout.name(role)

    def executor(
        self, instance: str = "e1", **settings: Any
    ) -> tuple[Executor, FakeExecutorClients]:
        """An executor of `python` jobs on the shared store; `settings` override the fast ones."""
        clients = FakeExecutorClients(self.kafka, self.clock)
        chosen: dict[str, Any] = {
            "instance": instance,
            "state_dir": self.root / instance,
            "dedupe_url": self.store_url,
            "kinds": frozenset({"python"}),
            "poll_interval": timedelta(milliseconds=20),
            "offset_commit_interval": timedelta(0),
            "shutdown_grace": timedelta(seconds=2),
        }
        executor_settings = ExecutorSettings(**(chosen | settings))
        executor = Executor(
            self.settings,
            executor_settings,
            self.handlers,
            self.clock,
            self.codecs,
            clients=clients,
        )
        self.executors.append(executor)
        return executor, clients

    def close(self) -> None:
        """Shut down the executors still connected (their worker threads and watchdogs)."""
        for executor in self.executors:
            executor.disconnect()

    def request(self, schedule_id: str, nominal: datetime = NOMINAL) -> dict[str, Any]:
        """A `RunRequested` of the counting handler, as a ticker fires it for `nominal`."""
        return {
            "run_id": run_id(schedule_id, nominal),
            "schedule_id": schedule_id,
            "nominal_at": nominal,
            "due_at": nominal,
            "fired_at": self.clock(),
            "lateness_ms": 0,
            "job": job_record(JobSpec.model_validate({"kind": "python", "handler": HANDLER})),
            "attempt": 1,
            "max_attempts": 3,
            "timeout_ms": 30_000,
            "retry_backoff_ms": 200,
            "overlap": "allow",
            "schedules_partition": 0,
            "schedule_offset": 0,
            "ticker_instance": "test",
            "owner": None,
        }

    def publish(self, *records: dict[str, Any]) -> list[tuple[int, int]]:
        """Publish each record keyed by its run id, as the ticker does; (partition, offset) each."""
        pairs = [(r["run_id"].encode(), self.codecs.run_requested.encode(r)) for r in records]
        return self.publish_raw(*pairs)

    def publish_raw(self, *pairs: tuple[bytes, bytes | None]) -> list[tuple[int, int]]:
        written: list[tuple[int, int]] = []

        def delivered(_: object, message: Any) -> None:
            written.append((message.partition(), message.offset()))

        for key, value in pairs:
            self._publisher.produce(self.topic(TopicRole.RUNS), value, key, on_delivery=delivered)
        self._publisher.flush()
        return written

    def run_events(self) -> list[dict[str, Any]]:
        return self._decoded(TopicRole.RUN_EVENTS, self.codecs.run_event.decode)

    def steps(self, run: str) -> list[str]:
        """The kinds of the run's published events, in order."""
        return [e["kind"] for e in self.run_events() if e["run_id"] == run]

    def dead_letters(self) -> list[dict[str, Any]]:
        return self._decoded(TopicRole.DEAD_LETTERS, self.codecs.dead_letter.decode)

    def committed(self, executor: Executor, partition: int) -> int | None:
        """The group's committed offset of a runs partition, if any."""
        group = self.kafka.groups[executor.settings.group(self.settings)]
        found = group.committed.get((self.topic(TopicRole.RUNS), partition))
        return None if found is None else found.offset

    def _decoded(self, role: TopicRole, decode: Callable[[bytes], Any]) -> list[dict[str, Any]]:
        return [decode(r.value) for r in self.kafka.visible(self.topic(role)) if r.value]


def turn_until(
    executors: list[Executor], done: Callable[[], bool], what: str, limit_s: float = 10.0
) -> None:
    """Turn each executor in order until `done()`; fail saying `what` was awaited after
    `limit_s` of real time (attempts run on real threads)."""
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {limit_s:g}s: {what}")
        for executor in executors:
            executor.turn()
