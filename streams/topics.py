"""Every Kafka topic Kairos uses, declared once with its configuration.

`kairos topics create` creates them idempotently; `kairos topics describe` shows them and flags a
topic whose partition count or configuration drifted from this declaration.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from enum import StrEnum

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from kairos.core.errors import KairosError

logger = logging.getLogger(__name__)

DAY_MS = 24 * 60 * 60 * 1000
CHANGELOG_DELETE_RETENTION_MS = DAY_MS
"""How long a compacted-away deletion stays readable on the changelog: a ticker store last
written longer ago than this may have missed it, so it restores cold (services/ticker)."""


class TopicRole(StrEnum):
    SCHEDULES = "schedules"
    CHANGELOG = "ticker-changelog"
    RUNS = "runs"
    RUN_EVENTS = "run-events"
    DEAD_LETTERS = "dead-letters"


@dataclass(frozen=True)
class TopicLayout:
    """The deployment's topic names and sizes.

    `schedules_partitions` fixes the granularity of ownership: a ticker owns whole partitions,
    so it is the upper bound on how many tickers share the firing work. The changelog has the
    same count because it is co-partitioned with the schedules topic.
    """

    prefix: str = "kairos."
    schedules_partitions: int = 12
    runs_partitions: int = 12
    replication_factor: int = 1
    # How long the compacted schedules topic keeps every change before compaction may drop
    # superseded versions: the window an audit can replay. See docs/operations.md.
    audit_history_ms: int = 90 * DAY_MS
    runs_retention_ms: int = 90 * DAY_MS

    def name(self, role: TopicRole) -> str:
        return f"{self.prefix}{role.value}"

    def specs(self) -> list[TopicSpec]:
        compacted_history = {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(self.audit_history_ms),
            # Deletions stay visible to a slow reader for a week after their tombstone is compacted.
            "delete.retention.ms": str(7 * DAY_MS),
        }
        timed = {"cleanup.policy": "delete", "retention.ms": str(self.runs_retention_ms)}
        return [
            TopicSpec(self.name(TopicRole.SCHEDULES), self.schedules_partitions, compacted_history),
            TopicSpec(
                self.name(TopicRole.CHANGELOG),
                self.schedules_partitions,
                # The changelog is the ticker's own state: only the latest value per key matters.
                {
                    "cleanup.policy": "compact",
                    "min.cleanable.dirty.ratio": "0.1",
                    "delete.retention.ms": str(CHANGELOG_DELETE_RETENTION_MS),
                    # The broker's clock stamps each record: a ticker compares it with its own
                    # and refuses to fire on a clock that runs ahead (kairos.core.clock).
                    "message.timestamp.type": "LogAppendTime",
                },
            ),
            TopicSpec(
                self.name(TopicRole.RUNS),
                self.runs_partitions,
                # Stamped by the broker's clock: the audit tells an early fire from a ticker's
                # own clock without trusting it (docs/audit.md).
                {**timed, "message.timestamp.type": "LogAppendTime"},
            ),
            TopicSpec(self.name(TopicRole.RUN_EVENTS), self.runs_partitions, timed),
            TopicSpec(self.name(TopicRole.DEAD_LETTERS), 1, timed),
        ]


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicState:
    """A declared topic as the broker has it; `drift` lists every difference."""

    spec: TopicSpec
    exists: bool
    partitions: int | None
    drift: list[str]


class TopicAdminError(KairosError):
    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"topic {topic}: {reason}")
        self.topic = topic
        self.reason = reason


def create_topics(admin: AdminClient, layout: TopicLayout, timeout_s: float = 10.0) -> list[str]:
    """Create the declared topics that do not exist yet; returns the names it created."""
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    missing = [spec for spec in layout.specs() if spec.name not in existing]
    if not missing:
        return []
    futures = admin.create_topics(
        [
            NewTopic(
                spec.name,
                num_partitions=spec.partitions,
                replication_factor=layout.replication_factor,
                config=spec.config,
            )
            for spec in missing
        ],
        operation_timeout=timeout_s,
    )
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as error:
            kafka_error: KafkaError = error.args[0]
            # Another process created it between our listing and our request: that is success.
            if kafka_error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicAdminError(name, kafka_error.str()) from error
        else:
            created.append(name)
            logger.info("created topic %s", name)
    _wait_until_visible(admin, {spec.name: spec.partitions for spec in missing}, timeout_s)
    return created


def _wait_until_visible(admin: AdminClient, partitions: dict[str, int], timeout_s: float) -> None:
    """Return once metadata shows every topic with all its partitions led.

    A client that starts right after the creation could otherwise miss a topic in its first
    metadata answer; a consumer then takes the topic for non-existent and gets no assignment
    until its next full metadata refresh.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        topics = admin.list_topics(timeout=timeout_s).topics
        waiting = [
            name
            for name, count in partitions.items()
            if name not in topics
            or len(topics[name].partitions) < count
            or any(p.leader < 0 for p in topics[name].partitions.values())
        ]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise TopicAdminError(waiting[0], f"not visible in metadata after {timeout_s}s")
        time.sleep(0.05)


def describe_topics(
    admin: AdminClient, layout: TopicLayout, timeout_s: float = 10.0
) -> list[TopicState]:
    """Each declared topic with the broker's view of it and any drift from the declaration."""
    metadata = admin.list_topics(timeout=timeout_s).topics
    specs = layout.specs()
    present = [spec for spec in specs if spec.name in metadata]
    configs: dict[str, dict[str, str]] = {}
    if present:
        resources = [ConfigResource(ResourceType.TOPIC, spec.name) for spec in present]
        for resource, future in admin.describe_configs(resources).items():
            entries = future.result(timeout=timeout_s)
            configs[resource.name] = {key: entry.value for key, entry in entries.items()}
    states = []
    for spec in specs:
        if spec.name not in metadata:
            states.append(TopicState(spec, False, None, ["missing: run `kairos topics create`"]))
            continue
        partitions = len(metadata[spec.name].partitions)
        drift = []
        if partitions != spec.partitions:
            drift.append(f"partitions: declared {spec.partitions}, broker has {partitions}")
        actual = configs.get(spec.name, {})
        for key, wanted in spec.config.items():
            if actual.get(key) != wanted:
                drift.append(f"{key}: declared {wanted}, broker has {actual.get(key)}")
        states.append(TopicState(spec, True, partitions, drift))
    return states
