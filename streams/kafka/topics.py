"""Every Kafka topic Kairos uses, declared once with its configuration and replication.

`kairos topics create` creates them idempotently; `kairos topics describe` shows them and flags a
topic whose partition count or configuration drifted from this declaration; `kairos topics check`
(kairos.streams.kafka.topic_check) says what is wrong with them and how to fix it.
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

CALENDARS_PARTITIONS = 1
"""The calendars topic's partitions: offsets are calendar versions only on a single partition."""
TEAMS_PARTITIONS = 1
"""The teams topic's partitions: every ticker reads it whole, in the order it was written."""

PRODUCTION_REPLICATION_FACTOR = 3
PRODUCTION_MIN_INSYNC_REPLICAS = 2
"""Three copies, two of which acknowledge every write (producers use acks=all): one broker may
fail or restart at any time without losing an acknowledged fire or stopping the firing."""


class TopicRole(StrEnum):
    SCHEDULES = "schedules"
    CHANGELOG = "ticker-changelog"
    RUNS = "runs"
    RUN_EVENTS = "run-events"
    DEAD_LETTERS = "dead-letters"
    CALENDARS = "calendars"
    TEAMS = "teams"


@dataclass(frozen=True)
class TopicLayout:
    """The deployment's topic names and sizes.

    `schedules_partitions` fixes the granularity of ownership: a ticker owns whole partitions,
    so it is the upper bound on how many tickers share the firing work. The changelog has the
    same count because it is co-partitioned with the schedules topic.

    `replication_factor` and `min_insync_replicas` left `None` take the production defaults the
    cluster can meet (`resolve_replication`).
    """

    prefix: str = "kairos."
    schedules_partitions: int = 12
    runs_partitions: int = 12
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    # How long the compacted schedules topic keeps every change before compaction may drop
    # superseded versions: the window an audit can replay. See docs/operations.md.
    audit_history_ms: int = 90 * DAY_MS
    runs_retention_ms: int = 90 * DAY_MS

    def __post_init__(self) -> None:
        for setting in ("replication_factor", "min_insync_replicas"):
            value = getattr(self, setting)
            if value is not None and value < 1:
                raise ReplicationError(f"{setting} is {value}: it must be at least 1")

    def name(self, role: TopicRole) -> str:
        return f"{self.prefix}{role.value}"

    def reserves(self, topic: str) -> bool:
        """Whether `topic` is the deployment's own (a role's, or any under a non-empty prefix)
        or Kafka's (`__consumer_offsets`, `__transaction_state`): no job writes those, whoever
        holds the ACL, or one team's job could forge another team's run events."""
        if topic.startswith("__") or topic in {self.name(role) for role in TopicRole}:
            return True
        return bool(self.prefix) and topic.startswith(self.prefix)

    def specs(self) -> list[TopicSpec]:
        compacted_history = {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(self.audit_history_ms),
            # Deletions stay visible to a slow reader for a week after their tombstone is compacted.
            "delete.retention.ms": str(7 * DAY_MS),
        }
        timed = {"cleanup.policy": "delete", "retention.ms": str(self.runs_retention_ms)}
        # Stamped by the broker's clock: the audit tells an early fire from a ticker's own
        # clock without trusting it (docs/audit.md), and a read of a window starts at the
        # records appended since its start (`offsets_for_times`), which a producer's clock, set
        # anywhere, could not say (kairos.streams.readers.history).
        stamped = {**timed, "message.timestamp.type": "LogAppendTime"}
        return [
            TopicSpec(
                self.name(TopicRole.SCHEDULES),
                self.schedules_partitions,
                # Stamped by the broker's clock: a signed change replayed later is refused by
                # its age, which no producer can fake (docs/teams.md).
                {**compacted_history, "message.timestamp.type": "LogAppendTime"},
            ),
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
            TopicSpec(self.name(TopicRole.RUNS), self.runs_partitions, stamped),
            TopicSpec(self.name(TopicRole.RUN_EVENTS), self.runs_partitions, stamped),
            TopicSpec(self.name(TopicRole.DEAD_LETTERS), 1, stamped),
            # One partition: every ticker reads all of it as a table, and a record's offset is
            # the version of the calendar it sets (docs/calendars.md). Stamped by the broker's
            # clock: a version counts from when it was appended, which no publisher can backdate
            # or postdate, and a signed change replayed later is refused by its age.
            TopicSpec(
                self.name(TopicRole.CALENDARS),
                CALENDARS_PARTITIONS,
                {**compacted_history, "message.timestamp.type": "LogAppendTime"},
            ),
            # One partition, written by administrators only: the keys every ticker checks
            # schedule changes against when ownership is enforced (docs/teams.md).
            TopicSpec(self.name(TopicRole.TEAMS), TEAMS_PARTITIONS, compacted_history),
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


class ReplicationError(KairosError):
    """The replication settings cannot be met on this cluster, or contradict each other."""


@dataclass(frozen=True)
class Replication:
    """What the deployment's topics are created with and checked against on this cluster."""

    factor: int
    min_insync_replicas: int
    brokers: int
    warnings: tuple[str, ...] = ()


def resolve_replication(layout: TopicLayout, brokers: int) -> Replication:
    """The layout's replication on a cluster of `brokers`: explicit settings win; unset ones take
    the production defaults (RF 3, min ISR 2) or, on a smaller cluster, what it can hold."""
    if brokers < 1:
        raise ReplicationError("the cluster reports no broker: check --bootstrap-servers")
    factor = layout.replication_factor or min(PRODUCTION_REPLICATION_FACTOR, brokers)
    if factor > brokers:
        raise ReplicationError(
            f"replication factor {factor} needs at least {factor} brokers and the cluster has "
            f"{brokers}: lower --replication-factor (KAIROS_REPLICATION_FACTOR) or add brokers"
        )
    # Two acknowledgements need three replicas to survive a broker loss; fewer replicas take one.
    production_shaped = factor >= PRODUCTION_REPLICATION_FACTOR
    default_min_isr = PRODUCTION_MIN_INSYNC_REPLICAS if production_shaped else 1
    min_isr = layout.min_insync_replicas or default_min_isr
    if min_isr > factor:
        raise ReplicationError(
            f"min.insync.replicas {min_isr} exceeds the replication factor {factor}: no write can "
            "be acknowledged by that many replicas; lower --min-insync-replicas "
            "(KAIROS_MIN_INSYNC_REPLICAS) or raise --replication-factor"
        )
    warnings = []
    if layout.replication_factor is None and brokers < PRODUCTION_REPLICATION_FACTOR:
        warnings.append(
            f"the cluster has {brokers} broker{'s' if brokers > 1 else ''}: topics get "
            f"replication factor {factor} and min.insync.replicas {min_isr}, not the production "
            f"{PRODUCTION_REPLICATION_FACTOR} and {PRODUCTION_MIN_INSYNC_REPLICAS}; losing a "
            "broker loses or stops them (fine for development, not for production)"
        )
    if min_isr == factor > 1:
        warnings.append(
            f"min.insync.replicas equals the replication factor ({factor}): any one broker down "
            "stops every write, and so every fire"
        )
    return Replication(factor, min_isr, brokers, tuple(warnings))


class TopicAdminError(KairosError):
    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"topic {topic}: {reason}")
        self.topic = topic
        self.reason = reason


@dataclass(frozen=True)
class TopicCreation:
    created: list[str]
    """The topics this call created (the others existed)."""
    replication: Replication


def create_topics(
    admin: AdminClient, layout: TopicLayout, timeout_s: float = 10.0
) -> TopicCreation:
    """Create the declared topics that do not exist yet, replicated as `resolve_replication`
    says (the caller shows its warnings); existing topics are left as they are."""
    metadata = admin.list_topics(timeout=timeout_s)
    # A broker that is down is still part of the cluster: creating with fewer replicas during
    # an outage would leave the topics short of them for good. Kafka 4.1 places replicas on the
    # registered but dead broker too; they catch up when it is back (docs/topics.md).
    holders = {
        broker
        for topic in metadata.topics.values()
        for partition in topic.partitions.values()
        for broker in partition.replicas
    }
    replication = resolve_replication(layout, len(set(metadata.brokers) | holders))
    missing = [spec for spec in layout.specs() if spec.name not in metadata.topics]
    if not missing:
        return TopicCreation([], replication)
    futures = admin.create_topics(
        [
            NewTopic(
                spec.name,
                num_partitions=spec.partitions,
                replication_factor=replication.factor,
                config={**spec.config, "min.insync.replicas": str(replication.min_insync_replicas)},
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
    return TopicCreation(created, replication)


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


@dataclass(frozen=True)
class PartitionView:
    """One partition as the cluster's metadata has it (broker ids; leader -1: none)."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    in_sync: tuple[int, ...]


@dataclass(frozen=True)
class TopicView:
    name: str
    partitions: tuple[PartitionView, ...]
    config: dict[str, str]
    """Every configuration value in effect, the broker's defaults included."""


@dataclass(frozen=True)
class ClusterView:
    """What the cluster says about a deployment's topics: the input of every topic check."""

    brokers: frozenset[int]
    """The brokers the cluster's metadata lists: only the live ones."""
    topics: dict[str, TopicView]
    """The declared topics the cluster has; a missing one is absent."""

    @property
    def cluster_size(self) -> int:
        """Live brokers and those holding a replica: a broker that is down still counts, so an
        outage does not lower the replication the topics are checked against."""
        holders = {b for t in self.topics.values() for p in t.partitions for b in p.replicas}
        return len(self.brokers | holders)


def read_cluster(admin: AdminClient, layout: TopicLayout, timeout_s: float = 10.0) -> ClusterView:
    """The brokers, and the metadata and configuration of each declared topic that exists."""
    metadata = admin.list_topics(timeout=timeout_s)
    names = [spec.name for spec in layout.specs() if spec.name in metadata.topics]
    configs: dict[str, dict[str, str]] = {}
    if names:
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        for resource, future in admin.describe_configs(resources).items():
            entries = future.result(timeout=timeout_s)
            configs[resource.name] = {key: entry.value for key, entry in entries.items()}
    topics = {}
    for name in names:
        partitions = tuple(
            PartitionView(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
            for p in sorted(metadata.topics[name].partitions.values(), key=lambda p: p.id)
        )
        topics[name] = TopicView(name, partitions, configs.get(name, {}))
    return ClusterView(frozenset(metadata.brokers), topics)


def describe_topics(
    admin: AdminClient, layout: TopicLayout, timeout_s: float = 10.0
) -> list[TopicState]:
    """Each declared topic with the broker's view of it and any drift from the declaration."""
    view = read_cluster(admin, layout, timeout_s)
    states = []
    for spec in layout.specs():
        topic = view.topics.get(spec.name)
        if topic is None:
            states.append(TopicState(spec, False, None, ["missing: run `kairos topics create`"]))
            continue
        partitions = len(topic.partitions)
        drift = []
        if partitions != spec.partitions:
            drift.append(f"partitions: declared {spec.partitions}, broker has {partitions}")
        for key, wanted in spec.config.items():
            if topic.config.get(key) != wanted:
                drift.append(f"{key}: declared {wanted}, broker has {topic.config.get(key)}")
        states.append(TopicState(spec, True, partitions, drift))
    return states
