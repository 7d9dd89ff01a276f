"""What is wrong with a deployment's topics, and how to fix each thing: `kairos topics check`.

Pure: `check_topics` classifies a `ClusterView` (read by `kairos.streams.kafka.topics.read_cluster`)
against the layout and its resolved replication, so every case, including the ones a single
local broker cannot produce (under-replicated and offline partitions), is tested over described
metadata. docs/topics.md explains each problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from kairos.core.durations import format_duration
from kairos.streams.kafka.topics import (
    CALENDARS_PARTITIONS,
    TEAMS_PARTITIONS,
    ClusterView,
    PartitionView,
    Replication,
    TopicLayout,
    TopicRole,
    TopicSpec,
    TopicView,
)

KAFKA_CONFIGS = "kafka-configs.sh --bootstrap-server $BROKERS --alter --entity-type topics"

_EXACT_CONFIGS = ("cleanup.policy", "message.timestamp.type")
"""Kairos relies on these values as declared: compaction keeps the schedules and the tickers'
state; the broker's clock stamps the changelog, the runs, run events and dead letters (clock
check, audit, reads of a window by time)."""
_MINIMUM_CONFIGS = ("retention.ms", "min.compaction.lag.ms", "delete.retention.ms")
"""Longer than declared only keeps more history; shorter loses what the audit replays, or a
deletion a ticker's restore relies on seeing."""
_KEYED_LOOKUP = (TopicRole.RUNS, TopicRole.RUN_EVENTS)
"""Besides the schedules and changelog: topics read by hashing a key onto a partition."""


class ProblemKind(StrEnum):
    MISSING = "missing"
    PARTITIONS = "partitions"
    REPLICATION = "replication"
    UNDER_REPLICATED = "under-replicated"
    OFFLINE = "offline"
    MIN_INSYNC_REPLICAS = "min-insync-replicas"
    CONFIG = "config"
    RETENTION = "retention"


@dataclass(frozen=True)
class TopicProblem:
    topic: str
    kind: ProblemKind
    message: str
    fix: str
    partitions: tuple[int, ...] = ()

    def line(self) -> str:
        return f"{self.topic}: {self.message}; fix: {self.fix}"


def schedules_partition_problem(layout: TopicLayout, count: int) -> TopicProblem | None:
    """Why a schedules topic of `count` partitions is unusable, or None when it matches.

    The count decides on which partition each schedule id lives (murmur2 of the id modulo the
    count): a topic grown after schedules were published has them on partitions their ids no
    longer hash to, and their state in the changelog's old partitions. Kairos cannot migrate
    that, so it refuses; docs/topics.md#growing says what to do instead.
    """
    return _partition_count_problem(
        layout.name(TopicRole.SCHEDULES),
        count,
        layout.schedules_partitions,
        "the deployment's setting is",
        f"if the topic was created with {count}, set --schedules-partitions {count} "
        "(KAIROS_SCHEDULES_PARTITIONS) on every command; if it was grown with kafka-topics "
        "--alter, schedule ids now hash onto other partitions than their history and state, "
        "which Kairos cannot use: see docs/topics.md#growing",
    )


def changelog_partition_problem(layout: TopicLayout, count: int) -> TopicProblem | None:
    """Why a ticker changelog of `count` partitions is unusable, or None when it matches."""
    return _partition_count_problem(
        layout.name(TopicRole.CHANGELOG),
        count,
        layout.schedules_partitions,
        "the deployment's setting is",
        "the changelog is co-partitioned with the schedules topic (partition p holds the state "
        "of schedules partition p), so both need the setting's count: see docs/topics.md#growing",
    )


def calendars_partition_problem(layout: TopicLayout, count: int) -> TopicProblem | None:
    """Why a calendars topic of `count` partitions is unusable, or None when it has one."""
    return _partition_count_problem(
        layout.name(TopicRole.CALENDARS),
        count,
        CALENDARS_PARTITIONS,
        "Kairos declares",
        "a calendar's version is its record's offset, which orders changes only within one "
        "partition; delete the topic and run `kairos topics create`, then apply the calendars "
        "files again (docs/calendars.md)",
    )


def teams_partition_problem(layout: TopicLayout, count: int) -> TopicProblem | None:
    """Why a teams topic of `count` partitions is unusable, or None when it has one."""
    return _partition_count_problem(
        layout.name(TopicRole.TEAMS),
        count,
        TEAMS_PARTITIONS,
        "Kairos declares",
        "a team's registration must be read in the order it was written; delete the topic, run "
        "`kairos topics create`, then register the teams again (docs/teams.md)",
    )


def _partition_count_problem(
    topic: str, count: int, expected: int, expected_by: str, fix: str
) -> TopicProblem | None:
    """The problem of a topic with `count` partitions where `expected_by` (who says so, "Kairos
    declares") wants `expected`, or None when the counts match."""
    if count == expected:
        return None
    return TopicProblem(
        topic, ProblemKind.PARTITIONS, f"{count} partitions, {expected_by} {expected}", fix
    )


def check_topics(
    view: ClusterView, layout: TopicLayout, replication: Replication
) -> list[TopicProblem]:
    """Every problem with the layout's topics on the cluster, in declaration order."""
    problems: list[TopicProblem] = []
    for spec in layout.specs():
        topic = view.topics.get(spec.name)
        if topic is None:
            problems.append(
                TopicProblem(
                    spec.name,
                    ProblemKind.MISSING,
                    "the topic does not exist",
                    "run `kairos topics create` with this deployment's --topic-prefix and "
                    "--schedules-partitions",
                )
            )
            continue
        problems += _partition_count(spec, topic, layout)
        problems += _replicas(topic, view.brokers, replication)
        problems += _min_insync_replicas(topic, replication)
        problems += _declared_configs(spec, topic)
    return problems


_FIXED_COUNT = {
    TopicRole.SCHEDULES: schedules_partition_problem,
    TopicRole.CHANGELOG: changelog_partition_problem,
    TopicRole.CALENDARS: calendars_partition_problem,
    TopicRole.TEAMS: teams_partition_problem,
}
"""The topics whose partition count Kairos cannot work around, each with its own fix."""


def _partition_count(spec: TopicSpec, topic: TopicView, layout: TopicLayout) -> list[TopicProblem]:
    count = len(topic.partitions)
    fixed = {layout.name(role): check for role, check in _FIXED_COUNT.items()}.get(spec.name)
    if fixed is not None:
        problem = fixed(layout, count)
    elif spec.name in {layout.name(role) for role in _KEYED_LOOKUP}:
        problem = _partition_count_problem(
            spec.name,
            count,
            spec.partitions,
            "Kairos declares",
            "`kairos runs get` looks for a run on the partition its id hashes to, so the runs "
            "written before the count changed are not found by id (the audit still reads them "
            "all); only a new deployment gets the declared count back",
        )
    else:
        problem = None
    return [] if problem is None else [problem]


def _replicas(
    topic: TopicView, brokers: frozenset[int], replication: Replication
) -> list[TopicProblem]:
    problems = []
    short = [p for p in topic.partitions if len(p.replicas) < replication.factor]
    if short:
        fewest = min(len(p.replicas) for p in short)
        problems.append(
            TopicProblem(
                topic.name,
                ProblemKind.REPLICATION,
                f"{_count(short)} with {fewest} replica{'s' if fewest > 1 else ''}, the setting "
                f"is replication factor {replication.factor}",
                "add replicas with kafka-reassign-partitions.sh --execute (a plan listing "
                f"{replication.factor} brokers for each partition)",
                tuple(p.partition for p in short),
            )
        )
    offline = [p for p in topic.partitions if p.leader < 0 or p.leader not in brokers]
    if offline:
        problems.append(
            TopicProblem(
                topic.name,
                ProblemKind.OFFLINE,
                f"{_count(offline)} offline (no leader): nothing on them is read or written, so "
                "their schedules do not fire",
                f"bring back the brokers holding their replicas ({_brokers(offline)})",
                tuple(p.partition for p in offline),
            )
        )
    lagging = [p for p in topic.partitions if p not in offline and len(p.in_sync) < len(p.replicas)]
    if lagging:
        configured = topic.config.get("min.insync.replicas", "")
        min_isr = int(configured) if configured.isdigit() else replication.min_insync_replicas
        # Kafka 4 bounds min ISR by the replica count (measured on 4.1.1; docs/topics.md).
        stopped = [p for p in lagging if len(p.in_sync) < min(min_isr, len(p.replicas))]
        effect = (
            f"; every write refused (below min.insync.replicas), so nothing fires, on "
            f"{_count(stopped)}"
            if stopped
            else ""
        )
        problems.append(
            TopicProblem(
                topic.name,
                ProblemKind.UNDER_REPLICATED,
                f"{_count(lagging)} under-replicated (in-sync replicas fewer than replicas; "
                f"out of sync: brokers {_out_of_sync(lagging)}){effect}",
                "bring the out-of-sync brokers back or let them catch up; "
                "kafka-topics.sh --describe --under-replicated-partitions shows them",
                tuple(p.partition for p in lagging),
            )
        )
    return problems


def _min_insync_replicas(topic: TopicView, replication: Replication) -> list[TopicProblem]:
    actual = topic.config.get("min.insync.replicas")
    wanted = replication.min_insync_replicas
    replicas = min((len(p.replicas) for p in topic.partitions), default=0)
    fix = f"{KAFKA_CONFIGS} --entity-name {topic.name} --add-config min.insync.replicas={wanted}"
    if actual is not None and actual.isdigit() and int(actual) > replicas:
        message = (
            f"min.insync.replicas is {actual}, more than its {replicas} replicas: Kafka 4.1 counts "
            f"it as {replicas}, so one replica out of sync stops every write (and every fire); "
            "brokers before 4.0 refuse every acks=all write"
        )
        return [TopicProblem(topic.name, ProblemKind.MIN_INSYNC_REPLICAS, message, fix)]
    if actual != str(wanted):
        message = f"min.insync.replicas is {actual}, the setting is {wanted}"
        return [TopicProblem(topic.name, ProblemKind.MIN_INSYNC_REPLICAS, message, fix)]
    return []


def _declared_configs(spec: TopicSpec, topic: TopicView) -> list[TopicProblem]:
    problems = []
    for key, wanted in spec.config.items():
        actual = topic.config.get(key)
        fix = f"{KAFKA_CONFIGS} --entity-name {topic.name} --add-config {key}={wanted}"
        if key in _EXACT_CONFIGS and actual != wanted:
            message = f"{key} is {actual}, Kairos needs {wanted}"
            problems.append(TopicProblem(topic.name, ProblemKind.CONFIG, message, fix))
        elif key in _MINIMUM_CONFIGS and _shorter(actual, int(wanted)):
            message = (
                f"{key} is {_readable_ms(actual)}, shorter than the {_readable_ms(wanted)} Kairos "
                "declares"
            )
            problems.append(TopicProblem(topic.name, ProblemKind.RETENTION, message, fix))
    return problems


def _shorter(actual: str | None, wanted_ms: int) -> bool:
    """-1 is Kafka's 'forever'; a value that is not a number counts as wrong."""
    if actual is None or not actual.lstrip("-").isdigit():
        return True
    value = int(actual)
    return value != -1 and value < wanted_ms


def _readable_ms(value: str | None) -> str:
    if value is None or not value.isdigit():
        return str(value)
    return f"{value} ({format_duration(timedelta(milliseconds=int(value)))})"


def _count(partitions: list[PartitionView]) -> str:
    numbers = ",".join(str(p.partition) for p in partitions)
    return f"partition{'s' if len(partitions) > 1 else ''} {numbers}"


def _brokers(partitions: list[PartitionView]) -> str:
    return ",".join(str(b) for b in sorted({b for p in partitions for b in p.replicas})) or "none"


def _out_of_sync(partitions: list[PartitionView]) -> str:
    missing = {b for p in partitions for b in p.replicas if b not in p.in_sync}
    return ",".join(str(b) for b in sorted(missing))
