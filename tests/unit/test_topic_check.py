"""Replication settings and `kairos topics check`'s classification, over described metadata.

Under-replicated and offline partitions need several brokers and a failing one; here they are
described the way the cluster's metadata reports them, so every classification is tested.
"""

from __future__ import annotations

import dataclasses

import pytest
from confluent_kafka import TopicPartition

from kairos.services.ticker.changes import ScheduleChanges, SchedulesTopicGrownError
from kairos.streams.kafka.topic_check import ProblemKind, TopicProblem, check_topics
from kairos.streams.kafka.topics import (
    ClusterView,
    PartitionView,
    Replication,
    ReplicationError,
    TopicLayout,
    TopicRole,
    TopicView,
    resolve_replication,
)
from kairos.streams.wire.codec import make_codecs

LAYOUT = TopicLayout(prefix="p.", schedules_partitions=4)
PRODUCTION = Replication(factor=3, min_insync_replicas=2, brokers=3)


@pytest.mark.parametrize(
    ("brokers", "factor", "min_isr", "warned"),
    [(1, 1, 1, True), (2, 2, 1, True), (3, 3, 2, False), (6, 3, 2, False)],
)
def test_defaults_are_production_shaped_when_the_cluster_allows(
    brokers: int, factor: int, min_isr: int, warned: bool
) -> None:
    replication = resolve_replication(TopicLayout(), brokers)
    assert (replication.factor, replication.min_insync_replicas) == (factor, min_isr)
    assert bool(replication.warnings) == warned
    if warned:
        assert f"the cluster has {brokers} broker" in replication.warnings[0]
        assert "not the production 3 and 2" in replication.warnings[0]


def test_explicit_values_override_the_defaults() -> None:
    layout = TopicLayout(replication_factor=2, min_insync_replicas=2)
    replication = resolve_replication(layout, 5)
    assert (replication.factor, replication.min_insync_replicas) == (2, 2)
    assert replication.warnings == (
        "min.insync.replicas equals the replication factor (2): any one broker down stops every "
        "write, and so every fire",
    )
    assert resolve_replication(TopicLayout(replication_factor=1), 3).warnings == ()


def test_impossible_replication_is_a_clear_error() -> None:
    with pytest.raises(ReplicationError, match="replication factor 3 needs at least 3 brokers"):
        resolve_replication(TopicLayout(replication_factor=3), 1)
    with pytest.raises(ReplicationError, match=r"min\.insync\.replicas 3 exceeds the replication"):
        resolve_replication(TopicLayout(replication_factor=2, min_insync_replicas=3), 3)
    with pytest.raises(ReplicationError, match=r"min\.insync\.replicas 3 exceeds"):
        # The default factor on one broker is 1.
        resolve_replication(TopicLayout(min_insync_replicas=3), 1)
    with pytest.raises(ReplicationError, match="replication_factor is 0: it must be at least 1"):
        TopicLayout(replication_factor=0)


def healthy_view(layout: TopicLayout = LAYOUT) -> ClusterView:
    topics = {}
    for spec in layout.specs():
        partitions = tuple(
            PartitionView(p, leader=1 + p % 3, replicas=(1, 2, 3), in_sync=(1, 2, 3))
            for p in range(spec.partitions)
        )
        config = {**spec.config, "min.insync.replicas": "2", "segment.ms": "604800000"}
        topics[spec.name] = TopicView(spec.name, partitions, config)
    return ClusterView(frozenset({1, 2, 3}), topics)


def with_topic(view: ClusterView, role: TopicRole, **changes: object) -> ClusterView:
    name = LAYOUT.name(role)
    return ClusterView(
        view.brokers, {**view.topics, name: dataclasses.replace(view.topics[name], **changes)}
    )


def with_partitions(view: ClusterView, role: TopicRole, *partitions: PartitionView) -> ClusterView:
    """The topic's partitions with the given ones replacing those of the same number."""
    replaced = {p.partition: p for p in partitions}
    topic = view.topics[LAYOUT.name(role)]
    merged = tuple(replaced.get(p.partition, p) for p in topic.partitions)
    return with_topic(view, role, partitions=merged)


def with_config(view: ClusterView, role: TopicRole, key: str, value: str) -> ClusterView:
    topic = view.topics[LAYOUT.name(role)]
    return with_topic(view, role, config={**topic.config, key: value})


def only(problems: list[TopicProblem]) -> TopicProblem:
    assert len(problems) == 1, [p.line() for p in problems]
    return problems[0]


def test_a_healthy_layout_has_no_problem() -> None:
    assert check_topics(healthy_view(), LAYOUT, PRODUCTION) == []


def test_a_missing_topic_is_reported_with_the_command_that_creates_it() -> None:
    view = healthy_view()
    runs = LAYOUT.name(TopicRole.RUNS)
    topics = {name: topic for name, topic in view.topics.items() if name != runs}
    problem = only(check_topics(ClusterView(view.brokers, topics), LAYOUT, PRODUCTION))
    assert (problem.topic, problem.kind) == (runs, ProblemKind.MISSING)
    assert "kairos topics create" in problem.fix


def test_under_replicated_partitions_name_the_brokers_out_of_sync() -> None:
    lagging = PartitionView(2, leader=1, replicas=(1, 2, 3), in_sync=(1, 2))
    view = with_partitions(healthy_view(), TopicRole.RUNS, lagging)
    problem = only(check_topics(view, LAYOUT, PRODUCTION))
    assert (problem.kind, problem.partitions) == (ProblemKind.UNDER_REPLICATED, (2,))
    assert "out of sync: brokers 3" in problem.message
    assert "every write refused" not in problem.message


def test_a_partition_below_min_isr_is_said_to_stop_firing() -> None:
    stopped = PartitionView(0, leader=1, replicas=(1, 2, 3), in_sync=(1,))
    lagging = PartitionView(3, leader=2, replicas=(1, 2, 3), in_sync=(1, 2))
    view = with_partitions(healthy_view(), TopicRole.CHANGELOG, stopped, lagging)
    problem = only(check_topics(view, LAYOUT, PRODUCTION))
    assert problem.partitions == (0, 3)
    assert problem.message.endswith(
        "every write refused (below min.insync.replicas), so nothing fires, on partition 0"
    )


def test_below_min_isr_counts_the_topics_own_setting() -> None:
    lagging = PartitionView(1, leader=1, replicas=(1, 2, 3), in_sync=(1, 2))
    view = with_partitions(healthy_view(), TopicRole.RUNS, lagging)
    view = with_config(view, TopicRole.RUNS, "min.insync.replicas", "3")
    under = [p for p in check_topics(view, LAYOUT, PRODUCTION) if p.kind == "under-replicated"]
    assert "so nothing fires, on partition 1" in only(under).message


def test_offline_partitions_are_not_also_called_under_replicated() -> None:
    leaderless = PartitionView(1, leader=-1, replicas=(2, 3, 1), in_sync=())
    led_by_a_gone_broker = PartitionView(2, leader=7, replicas=(7, 1, 2), in_sync=(7,))
    view = with_partitions(healthy_view(), TopicRole.SCHEDULES, leaderless, led_by_a_gone_broker)
    problem = only(check_topics(view, LAYOUT, PRODUCTION))
    assert (problem.kind, problem.partitions) == (ProblemKind.OFFLINE, (1, 2))
    assert "brokers holding their replicas (1,2,3,7)" in problem.fix


def test_a_broker_down_still_counts_towards_the_replication_checked() -> None:
    view = healthy_view()
    # Broker 3 is down: the metadata no longer lists it, its replicas still name it.
    outage = ClusterView(frozenset({1, 2}), view.topics)
    assert outage.cluster_size == 3
    replication = resolve_replication(TopicLayout(), outage.cluster_size)
    assert (replication.factor, replication.min_insync_replicas) == (3, 2)


def test_fewer_replicas_than_the_setting() -> None:
    single = tuple(
        PartitionView(p, leader=1, replicas=(1,), in_sync=(1,))
        for p in range(LAYOUT.runs_partitions)
    )
    view = with_topic(healthy_view(), TopicRole.RUN_EVENTS, partitions=single)
    problems = check_topics(view, LAYOUT, PRODUCTION)
    kinds = {p.kind: p for p in problems}
    assert set(kinds) == {ProblemKind.REPLICATION, ProblemKind.MIN_INSYNC_REPLICAS}
    assert (
        "with 1 replica, the setting is replication factor 3"
        in kinds[ProblemKind.REPLICATION].message
    )
    assert "kafka-reassign-partitions" in kinds[ProblemKind.REPLICATION].fix
    # min.insync.replicas 2 on one replica cannot be met as configured.
    assert "more than its 1 replicas" in kinds[ProblemKind.MIN_INSYNC_REPLICAS].message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", "min.insync.replicas is 1, the setting is 2"),
        ("3", "the setting is 2"),
        ("4", "more than its 3 replicas: Kafka 4.1 counts it as 3, so one replica out of sync"),
    ],
)
def test_min_isr_other_than_the_setting(value: str, expected: str) -> None:
    view = with_config(healthy_view(), TopicRole.RUNS, "min.insync.replicas", value)
    problem = only(check_topics(view, LAYOUT, PRODUCTION))
    assert problem.kind == ProblemKind.MIN_INSYNC_REPLICAS
    assert expected in problem.message
    assert problem.fix.endswith(
        f"--entity-name {LAYOUT.name(TopicRole.RUNS)} --add-config min.insync.replicas=2"
    )


@pytest.mark.parametrize(
    ("role", "key", "value", "expected"),
    [
        (
            TopicRole.SCHEDULES,
            "cleanup.policy",
            "delete",
            "cleanup.policy is delete, Kairos needs compact",
        ),
        (TopicRole.CHANGELOG, "cleanup.policy", "compact,delete", "Kairos needs compact"),
        (TopicRole.RUNS, "cleanup.policy", "compact", "Kairos needs delete"),
        (TopicRole.CHANGELOG, "message.timestamp.type", "CreateTime", "Kairos needs LogAppendTime"),
        (TopicRole.RUNS, "message.timestamp.type", "CreateTime", "Kairos needs LogAppendTime"),
        (
            TopicRole.CALENDARS,
            "message.timestamp.type",
            "CreateTime",
            "Kairos needs LogAppendTime",
        ),
        (
            TopicRole.RUNS,
            "retention.ms",
            "86400000",
            "retention.ms is 86400000 (1d), shorter than the 7776000000 (90d)",
        ),
        (
            TopicRole.SCHEDULES,
            "min.compaction.lag.ms",
            "0",
            "min.compaction.lag.ms is 0 (0s), shorter",
        ),
        (
            TopicRole.CHANGELOG,
            "delete.retention.ms",
            "3600000",
            "delete.retention.ms is 3600000 (1h)",
        ),
    ],
)
def test_a_config_kairos_relies_on(role: TopicRole, key: str, value: str, expected: str) -> None:
    problem = only(check_topics(with_config(healthy_view(), role, key, value), LAYOUT, PRODUCTION))
    assert expected in problem.message
    assert f"--entity-name {LAYOUT.name(role)} --add-config {key}=" in problem.fix


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "-1"),
        ("retention.ms", str(400 * 86_400_000)),
        ("min.cleanable.dirty.ratio", "0.5"),
    ],
)
def test_longer_history_and_tuning_are_not_problems(key: str, value: str) -> None:
    role = TopicRole.CHANGELOG if key == "min.cleanable.dirty.ratio" else TopicRole.RUNS
    assert check_topics(with_config(healthy_view(), role, key, value), LAYOUT, PRODUCTION) == []


def test_partition_counts_of_the_keyed_topics() -> None:
    grown = LAYOUT.schedules_partitions + 2
    view = healthy_view(dataclasses.replace(LAYOUT, schedules_partitions=grown, runs_partitions=16))
    problems = {p.topic: p for p in check_topics(view, LAYOUT, PRODUCTION)}
    assert set(problems) == {
        LAYOUT.name(r)
        for r in (TopicRole.SCHEDULES, TopicRole.CHANGELOG, TopicRole.RUNS, TopicRole.RUN_EVENTS)
    }
    schedules = problems[LAYOUT.name(TopicRole.SCHEDULES)]
    assert schedules.message == "6 partitions, the deployment's setting is 4"
    assert "set --schedules-partitions 6" in schedules.fix
    assert "docs/topics.md#growing" in schedules.fix
    assert "co-partitioned" in problems[LAYOUT.name(TopicRole.CHANGELOG)].fix
    assert "16 partitions, Kairos declares 12" in problems[LAYOUT.name(TopicRole.RUNS)].message


def test_a_calendars_topic_of_more_than_one_partition_is_refused() -> None:
    extra = PartitionView(1, leader=2, replicas=(1, 2, 3), in_sync=(1, 2, 3))
    calendars = healthy_view().topics[LAYOUT.name(TopicRole.CALENDARS)]
    view = with_topic(
        healthy_view(), TopicRole.CALENDARS, partitions=(*calendars.partitions, extra)
    )

    problem = only(check_topics(view, LAYOUT, PRODUCTION))

    assert (problem.kind, problem.message) == (
        ProblemKind.PARTITIONS,
        "2 partitions, Kairos declares 1",
    )
    assert "version is its record's offset" in problem.fix


def test_a_ticker_refuses_partitions_beyond_the_count_it_learned() -> None:
    changes = ScheduleChanges(make_codecs(), "ticker:t")
    changes.partitions = 4
    topic = LAYOUT.name(TopicRole.SCHEDULES)
    changes.check_assigned([TopicPartition(topic, 0), TopicPartition(topic, 3)])
    with pytest.raises(SchedulesTopicGrownError, match=r"partitions \[4, 5\] beyond the 4"):
        changes.check_assigned(
            [TopicPartition(topic, 5), TopicPartition(topic, 1), TopicPartition(topic, 4)]
        )
