"""A ticker on the in-memory cluster, with a fake clock: the turn logic without a broker."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kairos.core.schedule import parse_schedule
from kairos.services.ticker.service import Ticker
from kairos.services.ticker.settings import TickerSettings
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codecs, make_codecs
from tests.fakes.kafka import FakeClock, FakeProducer, FakeTickerClients
from tests.fakes.kafka_log import FakeKafka
from tests.helpers import upserted_event

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@dataclass
class World:
    state_root: Path
    partitions: int = 2
    clock: FakeClock = field(default_factory=lambda: FakeClock(START))
    codecs: Codecs = field(default_factory=make_codecs)

    def __post_init__(self) -> None:
        self.settings = KafkaSettings(
            bootstrap_servers="fake:9092", schedules_partitions=self.partitions
        )
        self.kafka = FakeKafka(self.clock)
        for spec in self.settings.layout.specs():
            self.kafka.create_topic(spec.name, spec.partitions)
        self._publisher = FakeProducer(self.kafka, "test-publisher")
        self._publisher.init_transactions()

    def topic(self, role: TopicRole) -> str:
        return self.settings.layout.name(role)

    def ticker(self, instance: str = "t1", **settings: Any) -> tuple[Ticker, FakeTickerClients]:
        clients = FakeTickerClients(self.kafka, self.clock)
        ticker_settings = TickerSettings(
            instance=instance, state_dir=self.state_root / instance, **settings
        )
        return Ticker(self.settings, ticker_settings, self.clock, self.codecs, clients), clients

    def publish(self, *schedules: dict[str, Any]) -> None:
        """Upsert `schedules` on the schedules topic, committed."""
        self._publisher.begin_transaction()
        for raw in schedules:
            schedule = parse_schedule(raw)
            event = upserted_event(schedule, self.clock())
            self._publisher.produce(
                self.topic(TopicRole.SCHEDULES),
                self.codecs.schedule_event.encode(event),
                schedule.id,
                self.partition_of(schedule.id),
            )
        self._publisher.commit_transaction()

    def partition_of(self, schedule_id: str) -> int:
        return partition_for(schedule_id, self.partitions)

    def runs(self) -> list[dict[str, Any]]:
        """Every committed RunRequested, decoded."""
        return [
            self.codecs.run_requested.decode(record.value)
            for record in self.kafka.visible(self.topic(TopicRole.RUNS))
            if record.value is not None
        ]

    def run_ids(self) -> Counter[str]:
        return Counter(run["run_id"] for run in self.runs())


def turns(ticker: Ticker, count: int) -> None:
    for _ in range(count):
        ticker.turn()
